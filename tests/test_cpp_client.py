"""The real rocketmq-client-cpp (PyPI rocketmq==0.4.4, bundled librocketmq.so) against namesrv.

The C++ client sends JSON headers with version 333 (V4_6_0), so it gets the legacy route JSON
with bare integer broker-id keys: this proves that flavour parses in a real client. Its pull
consumer's FetchSubscriptionMessageQueues asks the NameServer for the topic's route and turns the
readable QueueData into message queues; no broker is needed for that step. The client runs in a
subprocess so a crash inside the native library cannot take the test run down.
"""
from __future__ import annotations

import json
import subprocess
import sys
import zlib

import pytest

from namesrv.protocol import (
    DataVersion,
    RegisterBrokerBody,
    RequestCode,
    ResponseCode,
    TopicConfig,
    TopicConfigSerializeWrapper,
)

pytest.importorskip("rocketmq.client", reason="rocketmq==0.4.4 (rocketmq-client-cpp) is in requirements-dev.txt")

FETCH_QUEUES = r"""
import ctypes, json, os, sys
from rocketmq.client import PullConsumer
from rocketmq.ffi import _CMessageQueue, dll

namesrv, topic, log_dir = sys.argv[1:4]
consumer = PullConsumer("namesrv-cpp-test")
consumer.set_namesrv_addr(namesrv)
dll.SetPullConsumerLogPath(consumer._handle, log_dir.encode())
consumer.start()
queues = ctypes.POINTER(_CMessageQueue)()
size = ctypes.c_int()
status = dll.FetchSubscriptionMessageQueues(consumer._handle, topic.encode(), ctypes.byref(queues),
                                            ctypes.byref(size))
found = [[queues[i].topic.decode(), queues[i].brokerName.decode(), queues[i].queueId] for i in range(size.value)]
if size.value:
    dll.ReleaseSubscriptionMessageQueue(queues)
print(json.dumps({"status": int(status), "queues": sorted(found)}), flush=True)
consumer.shutdown()
os._exit(0)  # the library's background threads must not delay the exit
"""


def fetch_subscription_queues(address: str, topic: str, home) -> dict:
    result = subprocess.run([sys.executable, "-c", FETCH_QUEUES, address, topic, str(home / "logs")],
                            capture_output=True, text=True, timeout=60, env={"HOME": str(home), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def register(conn, name: str, broker_id: int, addr: str, topics: dict[str, int]) -> None:
    table = {topic: TopicConfig(topic, queues, queues) for topic, queues in topics.items()}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(1, 1_700_000_000_000, 0))).encode()
    answer = conn.call(conn.request(RequestCode.REGISTER_BROKER, {
        "brokerName": name, "brokerAddr": addr, "clusterName": "CppCluster", "haServerAddr": "",
        "brokerId": broker_id, "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}, body))
    assert answer.code == ResponseCode.SUCCESS


def test_pull_consumer_fetches_exactly_the_registered_brokers_queues(namesrv_factory, raw_connect, tmp_path) -> None:
    namesrv = namesrv_factory()
    master = raw_connect(namesrv.address)
    register(master, "broker-a", 0, "127.0.0.1:10911", {"CppTopic": 3, "SharedTopic": 2})
    slave = raw_connect(namesrv.address)
    register(slave, "broker-a", 1, "127.0.0.1:10921", {"CppTopic": 3, "SharedTopic": 2})
    register(raw_connect(namesrv.address), "broker-b", 0, "127.0.0.1:20911", {"SharedTopic": 5, "OnlyB": 1})

    fetched = fetch_subscription_queues(namesrv.address, "CppTopic", tmp_path)
    assert fetched == {"status": 0, "queues": [["CppTopic", "broker-a", i] for i in range(3)]}
    shared = fetch_subscription_queues(namesrv.address, "SharedTopic", tmp_path)
    assert shared["queues"] == ([["SharedTopic", "broker-a", i] for i in range(2)]
                                + [["SharedTopic", "broker-b", i] for i in range(5)])

    master.close()  # broker-a's connections close: the whole group leaves the routes at once
    slave.close()
    namesrv.wait_for_log(r"channel closed: broker broker-a\[1\]")
    after = fetch_subscription_queues(namesrv.address, "SharedTopic", tmp_path)
    assert after == {"status": 0, "queues": [["SharedTopic", "broker-b", i] for i in range(5)]}
    assert fetch_subscription_queues(namesrv.address, "CppTopic", tmp_path) == {"status": 0, "queues": []}
