"""bench/lib: the CPUs a knee gives the server and the generator, the one small client, the run directory
every verb writes with the machine it ran on."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.lib.client import Client
from bench.lib.output import Printed, machine, machine_line, write_results
from bench.lib.servers import core_plan, pin
from namesrv.protocol import RemotingCommand, RequestCode, ResponseCode

#: A child with a few threads, started before it is pinned: every one of them must move.
THREADS = "import threading, time\n[threading.Thread(target=time.sleep, args=(30,), daemon=True).start() " \
          "for _ in range(3)]\nprint('ready', flush=True)\ntime.sleep(30)"


def test_a_core_plan_splits_the_usable_cpus_or_says_there_is_nothing_to_split(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    plan = core_plan("auto")
    assert (plan.server, plan.generator) == ((1,), (0,))
    assert plan.line() == ("cores: the server under test on CPU 1, the generator on CPU 0 (the same for every "
                           "target)")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4})
    assert (core_plan("auto").server, core_plan("auto").generator) == ((3, 4), (0, 1, 2))  # more: more for each
    assert core_plan("off") is None
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert core_plan("auto") is None


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one usable CPU: nothing to pin apart")
def test_pin_moves_every_thread_of_a_running_process():
    child = subprocess.Popen([sys.executable, "-c", THREADS], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        cpu = max(os.sched_getaffinity(0))
        pin(child.pid, {cpu})
        tasks = list(Path(f"/proc/{child.pid}/task").iterdir())
        assert len(tasks) >= 4 and all(os.sched_getaffinity(int(task.name)) == {cpu} for task in tasks)
    finally:
        child.kill()
        child.wait()


def test_the_client_calls_and_moves_raw_frames(namesrv_factory):
    server = namesrv_factory()
    with Client(server.address) as client:
        answer = client.call(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "none"}, opaque=7))
        assert answer.is_response and answer.opaque == 7 and answer.code == ResponseCode.TOPIC_NOT_EXIST
        frames = b"".join(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=i).encode()
                          for i in (1, 2, 3))
        client.send(frames)
        got: list[bytes] = []
        deadline = time.monotonic() + 10
        while len(got) < 3 and time.monotonic() < deadline:
            got += client.receive()
        assert [RemotingCommand.decode(frame).opaque for frame in got] == [1, 2, 3]


def test_every_verb_writes_its_run_directory_with_the_machine(tmp_path, capsys):
    say = Printed()
    say("route  400,000/s")
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("machine: ") and printed[1] == "route  400,000/s" and list(say) == printed
    host = machine()
    assert host["cpu_count"] >= host["cpus_usable"] >= 1 and host["python"] and "fastpath" in host
    assert "Python" in machine_line(host) and host["python"] in machine_line(host)
    written = write_results(tmp_path / "run", "throughput", [{"workload": "route", "per_s": 1.0}], say, rounds=2)
    meta = json.loads((written / "meta.json").read_text())
    assert (meta["verb"], meta["tool"], meta["run_id"], meta["rounds"]) == ("throughput", "python -m bench throughput",
                                                                          "run", 2)
    assert meta["results"] == [{"workload": "route", "per_s": 1.0}] and meta["lines"] == printed
    with pytest.raises(FileExistsError):
        write_results(tmp_path / "run", "throughput", [], [])
