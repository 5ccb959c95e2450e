"""KVConfigManager: namespaces, RocketMQ's file format (reference 3.14, 5), crash-safe persistence."""
from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import orjson
import pytest

from namesrv.kvconfig import ORDER_TOPIC_CONFIG, KVConfigManager


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "namesrv" / "kvConfig.json"


def test_put_get_delete_and_list_by_namespace(path):
    kv = KVConfigManager(path)
    kv.load()
    assert kv.get("NS", "k") is None and kv.get_namespace("NS") is None
    kv.put("NS", "k", "v1")
    kv.put("NS", "k", "v2")
    kv.put("NS", "other", "x")
    kv.put(ORDER_TOPIC_CONFIG, "T1", "bk1:4")
    assert kv.get("NS", "k") == "v2"
    assert kv.get_namespace("NS") == {"k": "v2", "other": "x"}
    kv.delete("NS", "k")
    kv.delete("NS", "never-there")
    kv.delete("NoSuchNamespace", "k")
    assert kv.get("NS", "k") is None
    assert kv.get_namespace("NS") == {"other": "x"}
    assert kv.get_namespace(ORDER_TOPIC_CONFIG) == {"T1": "bk1:4"}


def test_file_format_is_rocketmqs(path):
    kv = KVConfigManager(path)
    kv.put(ORDER_TOPIC_CONFIG, "CZ1", "bkz:3")
    kv.put(ORDER_TOPIC_CONFIG, "T1", "bk1:4")
    kv.put("NS1", "k", None)  # a null value: kept in memory, dropped on write; the namespace stays
    assert orjson.loads(path.read_bytes()) == \
        {"configTable": {"ORDER_TOPIC_CONFIG": {"CZ1": "bkz:3", "T1": "bk1:4"}, "NS1": {}}}
    assert kv.get_namespace("NS1") == {}


def test_table_survives_a_restart_of_the_manager(path):
    kv = KVConfigManager(path)
    kv.put("NS", "a", "1")
    kv.put(ORDER_TOPIC_CONFIG, "T1", "bk1:4")
    kv.delete("NS", "a")
    kv.put("NS", "b", "2")
    again = KVConfigManager(path)
    again.load()
    assert again.get_namespace("NS") == {"b": "2"}
    assert again.get(ORDER_TOPIC_CONFIG, "T1") == "bk1:4"


def test_loads_a_file_written_by_java(path):
    path.parent.mkdir(parents=True)
    path.write_text('{"configTable":{"ORDER_TOPIC_CONFIG":{"CZ1":"bkz:3","T1":"bk1:4"},"NS1":{}}}')
    kv = KVConfigManager(path)
    kv.load()
    assert kv.get(ORDER_TOPIC_CONFIG, "CZ1") == "bkz:3"
    assert kv.get_namespace("NS1") == {}


def test_missing_file_starts_empty(path):
    kv = KVConfigManager(path)
    kv.load()
    assert kv.get_namespace(ORDER_TOPIC_CONFIG) is None
    assert not path.exists()


@pytest.mark.parametrize("content", [b"", b"{\"configTable\":{\"NS\":{\"k\":", b"[1,2]",
                                     b'{"configTable":{"NS":{"k":{"nested":1}}}}'])
def test_unreadable_file_is_moved_aside_not_overwritten(path, content, caplog):
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    kv = KVConfigManager(path)
    with caplog.at_level(logging.ERROR):
        kv.load()
    assert "unreadable" in caplog.text
    aside = [p for p in path.parent.iterdir() if p.name.startswith("kvConfig.json.corrupt-")]
    assert len(aside) == 1 and aside[0].read_bytes() == content
    kv.put("NS", "k", "v")
    assert aside[0].read_bytes() == content


def test_log_table_logs_every_entry(path, caplog):
    kv = KVConfigManager(path)
    kv.put("NS", "k", "v")
    kv.put(ORDER_TOPIC_CONFIG, "T1", "bk1:4")
    with caplog.at_level(logging.INFO, logger="namesrv.kvconfig"):
        kv.log_table()
    assert "configTable SIZE: 2" in caplog.text
    assert "configTable NS: NS Key: k Value: v" in caplog.text
    assert "configTable NS: ORDER_TOPIC_CONFIG Key: T1 Value: bk1:4" in caplog.text


def test_concurrent_writers_leave_every_write_on_disk(path):
    kv = KVConfigManager(path)

    def writer(n: int) -> None:
        for i in range(20):
            kv.put("NS", f"w{n}-{i}", str(i))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(orjson.loads(path.read_bytes())["configTable"]["NS"]) == 80


WRITER = textwrap.dedent("""
    import sys
    from namesrv.kvconfig import KVConfigManager
    kv = KVConfigManager(sys.argv[1])
    kv.load()
    done = kv.get_namespace("NS") or {}
    seq = max((int(v.split(":")[0]) for v in done.values()), default=-1) + 1  # one stream across processes
    while True:
        kv.put("NS", f"k{seq % 10}", f"{seq}:" + "x" * 40000)
        print(seq, flush=True)
        seq += 1
""")


def test_a_killed_writer_leaves_a_complete_old_or_new_file(path):
    """SIGKILL a process in the middle of a stream of writes: the file is always a whole version
    that holds at least every write the process had acknowledged."""
    rng = random.Random(4245)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    for _ in range(8):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, env=env)
        try:
            acked = -1
            first = proc.stdout.readline()  # at least one write is done
            assert first, "writer process died"
            acked = int(first)
            time.sleep(rng.uniform(0.0, 0.3))
            proc.send_signal(signal.SIGKILL)
            for line in proc.stdout.read().splitlines():
                acked = int(line)
        finally:
            proc.kill()
            proc.wait(30)
            proc.stdout.close()
        table = orjson.loads(path.read_bytes())["configTable"]["NS"]  # parses: never torn, never empty
        seqs = {key: int(value.split(":")[0]) for key, value in table.items()}
        newest = max(seqs.values())
        assert newest >= acked
        # Exactly the state after write `newest`: each key holds its latest write up to then.
        assert seqs == {f"k{m}": max(i for i in range(newest + 1) if i % 10 == m) for m in range(min(10, newest + 1))}
        for value in table.values():
            assert value.endswith("x" * 40000)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_kv_folder_gone_after_the_start_is_one_line_to_the_client_and_in_the_log(namesrv_factory, tmp_path,
                                                                                 workers: int) -> None:
    """Startup checks the folder (namesrv.state_files); if it goes later, a write is refused with the
    file and the reason, logged in one line, and the server goes on."""
    from namesrv.client import MQResponseError, NamesrvClient
    from namesrv.protocol import ResponseCode
    folder = tmp_path / "kv"
    server = namesrv_factory(kvConfigPath=folder / "kvConfig.json", serverWorkerProcesses=workers)
    folder.rmdir()
    folder.write_text("a file where the folder was")
    with NamesrvClient(server.address, timeout=5) as client:
        (refused,) = client.put_kv_config("NS", "k", "v")
        assert isinstance(refused.error, MQResponseError), refused
        assert (refused.error.code, refused.error.remark) == (ResponseCode.SYSTEM_ERROR,
                                                              f"cannot write {folder}: File exists")
        folder.unlink()
        assert [result.ok for result in client.put_kv_config("NS", "k", "v")] == [True]  # back: it goes on
    server.wait_for_log(rf"request code 100 from .* failed: cannot write {folder}: File exists"
                        if workers == 1 else rf"applying a change of request code 100 .* failed: cannot write {folder}")
    assert "Traceback" not in server.log_text()
