"""The descriptor limit against maxConnections (namesrv.descriptors): a flood past what the limit
fits is refused by the endpoint, not met by ZeroMQ's listener spinning on EMFILE.

The server runs under `prlimit --nofile=256:256`: it cannot raise its limit, so it clamps
maxConnections (10000 by default) to what fits beside the reserved descriptors, and says so (INFO:
nothing is wrong, so no warning at every default start on a host with a 20,000-descriptor limit).
"""
from __future__ import annotations

import shutil
import socket
import time

import psutil
import pytest
from conftest import RawConnection
from test_limits import served

from namesrv.descriptors import RESERVED
from namesrv.launcher import NamesrvProcess

LIMIT = 256


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="prlimit (util-linux) is not installed")
def test_a_flood_past_the_descriptor_limit_is_refused_without_spinning(tmp_path):
    server = NamesrvProcess({"zmqListenAddress": ""}, workdir=tmp_path)
    server.command = ["prlimit", f"--nofile={LIMIT}:{LIMIT}", "--", *server.command]
    server.start()
    flood: list[socket.socket] = []
    try:
        fits = LIMIT - RESERVED
        server.wait_for_log(rf" INFO \[MainThread\] namesrv\.controller - .*maxConnections 10000 clamped to {fits}")
        for _ in range(2 * LIMIT):  # twice what the process could hold
            flood.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        time.sleep(1.0)
        process = psutil.Process(server.pid)
        before = sum(process.cpu_times()[:2])
        time.sleep(2.0)
        busy = (sum(process.cpu_times()[:2]) - before) / 2.0
        assert busy < 0.5, f"the server used {busy:.0%} of a core with the flood held open"
        server.wait_for_log(r"refused tcp connection .*maxConnections \(\d+\) are open")
        assert len(process.net_connections("tcp")) <= LIMIT
        for sock in flood:
            sock.close()
        flood.clear()
        conn = RawConnection(server.address, 5.0)
        try:
            assert served(conn)
        finally:
            conn.close()
    finally:
        for sock in flood:
            sock.close()
        server.stop()
