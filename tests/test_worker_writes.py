"""Worker processes cannot diverge: KV storms through 2 and 3 workers, with kill -9 mid-storm.

Client threads put and delete their own keys through connections spread over the workers
(reconnecting when a killed worker drops them) while a reader keeps parsing the KV file. Then:
no answer was an error, the file was never torn, no acknowledged write is lost (in the file and
in every worker), and every worker answers the same table. A key whose last
write was in flight when its connection died may hold either value: only acknowledged writes
are held to account.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest
from test_worker_processes import VISIBLE_SECONDS, one_per_worker, wait_until, workers_of

from namesrv.launcher import NamesrvProcess
from namesrv.protocol import KVTable, RequestCode, ResponseCode

NAMESPACE = "STORM"
CLIENTS = 6
STORM_SECONDS = 3.0


class StormClient(threading.Thread):
    """Puts (and every third time deletes) its own keys; remembers the last acknowledged state of each."""

    def __init__(self, index: int, server: NamesrvProcess, raw_connect, stop: threading.Event) -> None:
        super().__init__(name=f"storm-{index}", daemon=True)
        self.index, self.server, self.raw_connect, self.stop = index, server, raw_connect, stop
        #: key -> value acknowledged last (None: deleted), and keys whose last write was never answered.
        self.acked: dict[str, str | None] = {}
        self.uncertain: set[str] = set()
        self.errors: list[str] = []
        self.writes = 0

    def run(self) -> None:
        conn = None
        step = 0
        while not self.stop.is_set():
            key = f"c{self.index}-k{step % 40}"
            deleting = step % 3 == 2 and key in self.acked
            value = f"v{step}"
            try:
                if conn is None:
                    conn = self.raw_connect(self.server.address)
                if deleting:
                    request = conn.request(RequestCode.DELETE_KV_CONFIG, {"namespace": NAMESPACE, "key": key})
                else:
                    request = conn.request(RequestCode.PUT_KV_CONFIG,
                                           {"namespace": NAMESPACE, "key": key, "value": value})
                self.uncertain.add(key)
                answer = conn.call(request, timeout=10)
            except (OSError, ConnectionError):
                conn = None  # its worker was killed: the write may or may not have been applied
                time.sleep(0.05)
                continue
            if answer.code != ResponseCode.SUCCESS:
                self.errors.append(f"{key}: {answer.code} {answer.remark}")
            else:
                self.uncertain.discard(key)
                self.acked[key] = None if deleting else value
                self.writes += 1
            step += 1


class FileReader(threading.Thread):
    """Parses the KV file as fast as it can: a torn or half-written file fails the storm."""

    def __init__(self, path: Path, stop: threading.Event) -> None:
        super().__init__(name="kv-reader", daemon=True)
        self.path, self.stop = path, stop
        self.reads = 0
        self.torn: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                text = self.path.read_text()
            except FileNotFoundError:
                continue
            try:
                json.loads(text)
                self.reads += 1
            except ValueError as exc:
                self.torn.append(f"{exc}: {text[:80]!r}")


def table_of(conn) -> dict[str, str]:
    answer = conn.call(conn.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": NAMESPACE}))
    if answer.code == ResponseCode.QUERY_NOT_FOUND:
        return {}
    assert answer.code == ResponseCode.SUCCESS, answer
    return KVTable.decode(answer.body).table


def check_acknowledged(table: dict[str, str], clients: list[StormClient], where: str) -> None:
    for client in clients:
        for key, value in client.acked.items():
            if key in client.uncertain:
                continue
            assert table.get(key) == value, f"{where}: acknowledged {key}={value!r}, found {table.get(key)!r}"


def storm(server: NamesrvProcess, raw_connect, kill: int | None) -> tuple[list[StormClient], FileReader]:
    """Run the storm; `kill`: a pid to SIGKILL once a second passed and 100 writes were answered (a busy
    machine may take longer for them); the storm goes on STORM_SECONDS - 1 s after that."""
    stop = threading.Event()
    clients = [StormClient(i, server, raw_connect, stop) for i in range(CLIENTS)]
    reader = FileReader(server.workdir / "kvConfig.json", stop)
    for thread in (*clients, reader):
        thread.start()
    time.sleep(1.0)
    deadline = time.monotonic() + 30
    while sum(c.writes for c in clients) <= 100:  # sleeping, not spinning: the clients are threads of this process
        assert time.monotonic() < deadline and not [c.errors for c in clients if c.errors], "100 writes not answered"
        time.sleep(0.02)
    if kill is not None:
        os.kill(kill, signal.SIGKILL)
    time.sleep(STORM_SECONDS - 1.0)
    stop.set()
    for thread in (*clients, reader):
        thread.join(15)
    assert not [c.errors for c in clients if c.errors], "error answers during the storm"
    assert not reader.torn, f"the KV file was torn: {reader.torn[:3]}"
    assert sum(c.writes for c in clients) > 100 and reader.reads > 10
    return clients, reader


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("kill", ["none", "worker"])
def test_kv_storm_keeps_every_worker_and_the_file_equal(namesrv_factory, raw_connect, workers: int,
                                                        kill: str) -> None:
    server = namesrv_factory(serverWorkerProcesses=workers)
    victim = workers_of(server)[0].pid if kill == "worker" else None
    clients, _ = storm(server, raw_connect, victim)
    if victim is not None:
        server.wait_for_log(r"worker \d \(pid \d+\) restarted and serving", timeout=20)
    connections = one_per_worker(server, raw_connect)
    assert len(connections) == workers
    tables = {}

    def equal() -> bool:
        tables.update((pid, table_of(conn)) for pid, conn in connections.items())
        return len({json.dumps(t, sort_keys=True) for t in tables.values()}) == 1

    wait_until(equal, VISIBLE_SECONDS, "every worker answers the same KV table")
    table = next(iter(tables.values()))
    check_acknowledged(table, clients, "workers")
    on_disk = json.loads((server.workdir / "kvConfig.json").read_text())["configTable"].get(NAMESPACE, {})
    assert on_disk == table, "the file differs from what the workers answer"


def bus_sockets(supervisor: int) -> list[str]:
    """The sockets of the worker processes' bus of the server whose supervisor has pid `supervisor` (the
    write log's, the metrics peers'): in Linux's abstract namespace (namesrv.writelog.sequencer.new_bus_name),
    listed by /proc/net/unix."""
    prefix = f"@namesrv-{supervisor}-"
    rows = (line.split() for line in Path("/proc/net/unix").read_text().splitlines()[1:])
    return [row[7] for row in rows if len(row) > 7 and row[7].startswith(prefix)]


def test_a_killed_supervisor_loses_no_acknowledged_write_and_leaves_no_file(namesrv_factory, raw_connect,
                                                                             tmp_path, monkeypatch) -> None:
    """Nothing left behind: the write log's sockets are abstract (gone with the process that bound them,
    never a file), and whatever the server puts in its TMPDIR, a folder of this test's own here, is gone
    too. Only this server's own things are looked at: a run beside this one cannot make it fail."""
    own_tmp = tmp_path / "tmp"
    own_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(own_tmp))  # the launcher passes the environment on
    server = namesrv_factory(serverWorkerProcesses=2)
    workers = workers_of(server)
    assert {"log", "propose"} <= {name.rsplit("/", 1)[1] for name in bus_sockets(server.pid)}
    clients, _ = storm(server, raw_connect, server.pid)
    gone, alive = psutil.wait_procs(workers, timeout=20)
    assert not alive, "workers outlived their supervisor"
    assert bus_sockets(server.pid) == []
    assert list(own_tmp.iterdir()) == [], "left behind in the server's TMPDIR"
    on_disk = json.loads((server.workdir / "kvConfig.json").read_text())["configTable"].get(NAMESPACE, {})
    check_acknowledged(on_disk, clients, "the KV file after kill -9 of the supervisor")
    restarted = namesrv_factory(serverWorkerProcesses=2, kvConfigPath=str(server.workdir / "kvConfig.json"))
    for conn in one_per_worker(restarted, raw_connect).values():
        check_acknowledged(table_of(conn), clients, "a restarted server")


def test_the_write_cost_bench_measures_every_process(capsys, tmp_path):
    """`python -m bench worker-writes` (the sibling share quoted in the README) runs and prints a share per workload."""
    from bench import worker_writes
    assert worker_writes.main(["--seconds", "0.3", "--out", str(tmp_path / "run")]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[3:]]
    assert [row[0] for row in rows] == list(worker_writes.WORKLOADS)
    for row in rows:
        origin, sibling, share = float(row[2]), float(row[3]), float(row[5])
        assert origin > 0 and sibling > 0 and abs(share - sibling / origin) < 0.01
