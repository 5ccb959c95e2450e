"""The server process's life: the boot line, ports chosen by the kernel reported back, graceful
shutdown on SIGTERM/SIGINT (accepted requests finish, are answered and persisted; exit 0)."""
from __future__ import annotations

import json
import os
import re
import signal

import pytest

from namesrv.config import parse_properties
from namesrv.protocol import RequestCode, ResponseCode


def test_boot_line_names_every_bound_endpoint(namesrv_factory) -> None:
    server = namesrv_factory()
    match = server.wait_for_log(r"The Name Server boot success\. serializeType=JSON, address (\S+), zmq (\S+), "
                                r"http (\S+)")
    assert match.group(1) == server.address
    assert match.group(2) == server.zmq_address
    assert re.fullmatch(r"tcp://127\.0\.0\.1:\d+", server.zmq_address)
    assert "http://" + match.group(3) == server.http_url
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", server.http_url)


def test_a_port_picked_by_the_kernel_is_the_configured_port(namesrv_factory, raw_connect) -> None:
    server = namesrv_factory()  # the launcher asks for listenPort=0 and zmq port "*"
    conn = raw_connect(server.address)
    answer = conn.call(conn.request(RequestCode.GET_NAMESRV_CONFIG))
    config = parse_properties(answer.body.decode())
    assert config["listenPort"] == str(server.port)
    assert config["zmqListenAddress"] == server.zmq_address


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_finishes_accepted_requests_then_exits_zero(namesrv_factory, raw_connect, signum: int) -> None:
    server = namesrv_factory(defaultThreadPoolNums=1)  # one worker: the puts (each fsynced) take a while
    conn = raw_connect(server.address)
    puts = [conn.request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": f"k{i}", "value": str(i)})
            for i in range(150)]
    conn.send(*puts)
    answers = [conn.recv()]  # the first is done: the rest are read and queued or running
    os.kill(server.pid, signum)
    while True:
        try:
            answers.append(conn.recv(10))
        except ConnectionError:
            break  # closed by the exiting server after its last reply
    assert server.wait() == 0
    assert {a.code for a in answers} == {ResponseCode.SUCCESS}
    assert sorted(a.opaque for a in answers) == sorted({a.opaque for a in answers})
    stored = json.loads((server.workdir / "kvConfig.json").read_text())["configTable"]["NS"]
    assert len(stored) == len(answers)  # every answered put is on disk, and nothing was applied unanswered
    log = server.log_text()
    assert f"{signal.Signals(signum).name} received" in log
    assert "shutting down: no new requests; finishing the accepted ones (open connections: 1 tcp, 0 zmq)" in log
    assert log.rstrip().endswith("The Name Server shut down")
