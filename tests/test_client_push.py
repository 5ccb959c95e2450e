"""NamesrvClient with route-change push: against namesrv its cache follows changes in milliseconds
without polling; against the real Java NameServer 4.9.8, which has no push, it falls back to polling."""
from __future__ import annotations

import asyncio
import os
import subprocess
import time

import pytest

from namesrv.client import AsyncBrokerOuterAPI, AsyncNamesrvClient, AsyncRemotingClient, BrokerIdentity
from namesrv.protocol import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from namesrv.protocol.codes import PERM_READ
from test_operator_http import RMQ, free_broker_port, java_reference_skip_reason

IDENTITY = BrokerIdentity("PushCluster", "broker-push", "127.0.0.1:31911", 0, "127.0.0.1:31912")


def run(coroutine: object) -> object:
    return asyncio.run(asyncio.wait_for(coroutine, 90))  # type: ignore[arg-type]


async def until(condition, timeout: float, what: str) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.005)
    return time.monotonic() - started


def test_the_route_cache_follows_pushed_changes_without_polling(namesrv_factory) -> None:
    server = namesrv_factory()

    async def scenario() -> None:
        client = AsyncNamesrvClient([server.address], poll_interval=3600)  # polling would take an hour
        api = AsyncBrokerOuterAPI([server.address], timeout=5)
        admin = AsyncRemotingClient(timeout=5)
        table = {topic: TopicConfig(topic, 4, 4) for topic in ("PushA", "PushB")}
        await api.register_broker_all(IDENTITY, TopicConfigSerializeWrapper(table, DataVersion(1, 1, 0)))
        assert (await client.route("PushA")).queue_datas[0].perm == 6
        assert client.push_active
        await client.start()
        await admin.wipe_write_perm_of_broker(server.address, "broker-push")
        took = await until(lambda: client._routes["PushA"].route.queue_datas[0].perm == PERM_READ, 2,
                           "the wiped permission reached the cache")
        assert took < 1.0 and client.pushes_applied == 1
        # a missed version makes the client fetch the route again rather than trust the push
        client._versions["PushA"] -= 1
        await admin.add_write_perm_of_broker(server.address, "broker-push")
        await until(lambda: client._routes["PushA"].route.queue_datas[0].perm == 6, 2, "refetched after a gap")
        assert client.pushes_applied == 1
        await api.unregister_broker_all(IDENTITY)
        await until(lambda: "PushA" not in client._routes, 2, "the deleted route left the cache")
        await client.close()
        await api.close()
        await admin.close()

    run(scenario())


@pytest.mark.timeout(240)
@pytest.mark.skipif(java_reference_skip_reason() is not None, reason=str(java_reference_skip_reason()))
def test_against_the_java_namesrv_the_client_falls_back_to_polling(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
    env["ROCKETMQ_REF_RUN"] = str(tmp_path / "rmq")
    port = free_broker_port()
    subprocess.run([RMQ / "bin" / "namesrv", str(port)], env=env, check=True, capture_output=True, text=True,
                   timeout=120)
    address = f"127.0.0.1:{port}"
    try:
        async def scenario() -> None:
            client = AsyncNamesrvClient([address], poll_interval=0.5, timeout=5)
            api = AsyncBrokerOuterAPI([address], timeout=5)
            table = {topic: TopicConfig(topic, 4, 4) for topic in ("JavaA", "JavaB")}
            await api.register_broker_all(IDENTITY, TopicConfigSerializeWrapper(table, DataVersion(1, 1, 0)))
            started = time.monotonic()
            assert (await client.route("JavaA")).queue_datas[0].write_queue_nums == 4
            assert address in client.without_push and not client.push_active
            assert time.monotonic() - started < 10  # one subscription timeout, then on with polling
            await client.start()
            table["JavaA"] = TopicConfig("JavaA", 8, 8)
            await api.register_broker_all(IDENTITY, TopicConfigSerializeWrapper(table, DataVersion(2, 2, 0)))
            await until(lambda: client._routes["JavaA"].route.queue_datas[0].write_queue_nums == 8, 10,
                        "polling picked up the change")
            assert client.pushes_applied == 0
            await client.close()
            await api.close()

        run(scenario())
    finally:
        subprocess.run([RMQ / "bin" / "stop", f"namesrv-{port}"], env=env, capture_output=True, timeout=60)
