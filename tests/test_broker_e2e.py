"""The broker side end to end, against two real namesrv processes on 127.0.0.1: registration with
both, a dead or frozen NameServer, expiry of a silent broker, a SIGKILLed broker process, a slave
learning its master, need-register, unregistration, and a 100k-topic broker."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from process_control import frozen
from namesrv.client import (
    AsyncBrokerOuterAPI,
    AsyncBrokerService,
    AsyncRemotingClient,
    BrokerIdentity,
    BrokerService,
    BrokerTopicTable,
    RemotingClient,
)
from namesrv.protocol import TopicConfig
from namesrv.protocol.codes import PERM_READ

FAST_SCAN = {"scanNotActiveBrokerInterval": "200"}




def run(coroutine: object, limit: float = 120) -> object:
    return asyncio.run(asyncio.wait_for(coroutine, limit))  # type: ignore[arg-type]


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll until `condition()`; returns the seconds it took."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)
    return time.monotonic() - started


def brokers_on(client: RemotingClient, address: str) -> dict[str, dict[int, str]]:
    info = client.get_broker_cluster_info(address)
    return {name: dict(data.broker_addrs) for name, data in info.broker_addr_table.items()}


def identity(name: str = "broker-a", broker_id: int = 0, port: int = 10911, **extra: object) -> BrokerIdentity:
    return BrokerIdentity("TestCluster", name, f"127.0.0.1:{port + broker_id}", broker_id,
                          f"127.0.0.1:{port + 1000 + broker_id}", **extra)  # type: ignore[arg-type]


def topics(count: int, prefix: str = "Topic") -> BrokerTopicTable:
    return BrokerTopicTable(TopicConfig(f"{prefix}{i}", 4, 4) for i in range(count))


@pytest.fixture
def two_namesrvs(namesrv_factory):
    return namesrv_factory(**FAST_SCAN), namesrv_factory(**FAST_SCAN)


@pytest.fixture
def admin() -> Iterator[RemotingClient]:
    with RemotingClient(timeout=5) as client:
        yield client


def test_broker_service_registers_with_both_and_unregisters_on_stop(two_namesrvs, admin) -> None:
    first, second = two_namesrvs
    service = BrokerService(identity(), [first.address, second.address], topics(5), period_override_ms=300)
    results = service.start()
    assert list(results) == [first.address, second.address]
    for namesrv in (first, second):
        assert brokers_on(admin, namesrv.address) == {"broker-a": {0: "127.0.0.1:10911"}}
        route = admin.get_route_info_by_topic(namesrv.address, "Topic3")
        assert [(q.broker_name, q.write_queue_nums) for q in route.queue_datas] == [("broker-a", 4)]
    wait_until(lambda: service.service.registrations >= 3, 5, "periodic registrations")
    service.close()
    for namesrv in (first, second):
        wait_until(lambda: brokers_on(admin, namesrv.address) == {}, 5, "unregistered on stop")
        assert admin.get_all_topic_list(namesrv.address).topic_list == []


def test_a_killed_namesrv_does_not_stop_registration_with_the_other(two_namesrvs, admin) -> None:
    first, second = two_namesrvs
    service = BrokerService(identity(), [first.address, second.address], topics(2), period_override_ms=200,
                            register_timeout=1.0)
    assert len(service.start()) == 2
    first.kill()
    count = service.service.registrations
    wait_until(lambda: service.service.registrations >= count + 3, 6, "registrations continue")
    assert list(service.service.last_results) == [second.address]
    service.close()


def test_a_frozen_namesrv_delays_the_others_by_no_more_than_the_timeout(two_namesrvs) -> None:
    first, second = two_namesrvs

    async def scenario() -> None:
        api = AsyncBrokerOuterAPI([first.address, second.address], timeout=1.0)
        table = topics(3)
        assert len(await api.register_broker_all(identity(), table.snapshot())) == 2
        with frozen(first.pid):
            started = time.monotonic()
            results = await api.register_broker_all(identity(), table.snapshot())
            elapsed = time.monotonic() - started
            assert list(results) == [second.address]
            assert 0.9 < elapsed < 2.5
            started = time.monotonic()
            assert await api.need_register(identity(), table.data_version)  # no answer counts as "register"
            assert time.monotonic() - started < 2.0
        assert len(await api.register_broker_all(identity(), table.snapshot())) == 2  # thawed, it answers again
        await api.close()
    run(scenario())


def test_a_broker_that_stops_heartbeating_expires(namesrv_factory, admin) -> None:
    namesrv = namesrv_factory(**FAST_SCAN)

    async def scenario() -> float:
        api = AsyncBrokerOuterAPI([namesrv.address], timeout=3)
        silent = identity(heartbeat_timeout_ms=1500)
        await api.register_broker_all(silent, topics(2).snapshot())
        registered = time.monotonic()
        # The broker's connection stays open, so only the expiry scan can remove the broker. The
        # server then closes that connection (as RocketMQ does), so the polling uses another one.
        observer = AsyncRemotingClient()
        while "broker-a" in (await observer.get_broker_cluster_info(namesrv.address)).broker_addr_table:
            assert time.monotonic() - registered < 30, "silent broker never expired"
            await asyncio.sleep(0.05)
        gone_after = time.monotonic() - registered
        await observer.close()
        await api.close()
        return gone_after
    gone_after = run(scenario())
    assert 1.3 < gone_after < 15  # its timeout (1.5 s), not before; then the scan, unless the machine stalls
    with pytest.raises(Exception, match="No topic route info"):
        admin.get_route_info_by_topic(namesrv.address, "Topic0")


def test_heartbeats_keep_a_broker_with_a_short_expiry_alive(namesrv_factory, admin) -> None:
    """broker-a registers once, then only sends BROKER_HEARTBEATs; broker-c registers after it with the
    same timeout and stays silent (its connection open). Once broker-c has expired, broker-a's timeout
    has passed since its only registration: its heartbeats kept it."""
    namesrv = namesrv_factory(**FAST_SCAN)
    service = BrokerService(identity(heartbeat_timeout_ms=2000), [namesrv.address], topics(2),
                            period_override_ms=60_000, heartbeat_interval_ms=200)
    service.start()

    async def scenario() -> None:
        api = AsyncBrokerOuterAPI([namesrv.address], timeout=5)
        await api.register_broker_all(identity("broker-c", port=10931, heartbeat_timeout_ms=2000),
                                      topics(2, "Control").snapshot())
        observer = AsyncRemotingClient()
        started = time.monotonic()
        while True:
            table = (await observer.get_broker_cluster_info(namesrv.address)).broker_addr_table
            assert "broker-a" in table, f"broker-a expired {time.monotonic() - started:.2f} s after broker-c came"
            if "broker-c" not in table:
                break
            assert time.monotonic() - started < 30, "broker-c never expired"
            await asyncio.sleep(0.05)
        await observer.close()
        await api.close()
    try:
        run(scenario())
        assert service.service.registrations == 1
    finally:
        service.close()


def broker_process(namesrv_addrs: str, *extra: str) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-m", "namesrv.client.broker_process", "-n", namesrv_addrs, "--cluster", "TestCluster",
         "--broker-name", "broker-p", "--broker-addr", "127.0.0.1:20911", "--topics", "3",
         "--period-override-ms", "500", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=os.path.dirname(os.path.dirname(__file__)))
    line = process.stdout.readline()
    if not line:
        process.kill()
        raise AssertionError(f"broker process failed: {process.stderr.read()}")
    event = json.loads(line)
    assert event["event"] == "registered"
    return process


def test_a_sigkilled_broker_process_disappears_at_once(two_namesrvs, admin) -> None:
    first, second = two_namesrvs
    process = broker_process(f"{first.address};{second.address}")
    try:
        for namesrv in (first, second):
            assert "broker-p" in brokers_on(admin, namesrv.address)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        for namesrv in (first, second):  # default expiry is 120 s: only the dropped connection explains this
            took = wait_until(lambda: "broker-p" not in brokers_on(admin, namesrv.address), 3, "removed on close")
            assert took < 3
            assert "SimTopic0" not in admin.get_all_topic_list(namesrv.address).topic_list
    finally:
        process.kill()
        process.wait(10)
        process.stdout.close()
        process.stderr.close()


def test_a_terminated_broker_process_unregisters(namesrv_factory, admin) -> None:
    namesrv = namesrv_factory()
    process = broker_process(namesrv.address)
    try:
        assert "broker-p" in brokers_on(admin, namesrv.address)
        process.send_signal(signal.SIGTERM)
        assert process.wait(10) == 0
        assert "broker-p" not in brokers_on(admin, namesrv.address)
    finally:
        process.kill()
        process.wait(10)
        process.stdout.close()
        process.stderr.close()


def test_a_slave_learns_its_master(two_namesrvs, admin) -> None:
    first, second = two_namesrvs
    addrs = [first.address, second.address]
    runner_master = BrokerService(identity(broker_id=0), addrs, topics(2), period_override_ms=300)
    runner_master.start()
    slave = BrokerService(identity(broker_id=1), addrs, topics(2), runner=runner_master.runner,
                          period_override_ms=300)
    results = slave.start()
    assert {r.master_addr for r in results.values()} == {"127.0.0.1:10911"}
    assert slave.service.master_addr == "127.0.0.1:10911"
    assert slave.service.ha_master_addr == "127.0.0.1:11911"
    assert brokers_on(admin, first.address) == {"broker-a": {0: "127.0.0.1:10911", 1: "127.0.0.1:10912"}}
    slave.close()
    runner_master.close()


def test_need_register_only_when_a_namesrv_lacks_the_current_version(two_namesrvs, admin) -> None:
    first, second = two_namesrvs

    async def scenario() -> None:
        table = topics(3)
        service = AsyncBrokerService(identity(), [first.address, second.address], table, force_register=False,
                                     period_override_ms=60_000)
        assert len(await service.start()) == 2
        assert await service.register() == {}  # both have this DataVersion: nothing sent
        table.put(TopicConfig("Added", 2, 2))
        assert len(await service.register()) == 2
        routes = await asyncio.gather(*(service.api.remoting.get_route_info_by_topic(a, "Added")
                                        for a in (first.address, second.address)))
        assert all(r.queue_datas[0].write_queue_nums == 2 for r in routes)
        await service.stop()
    run(scenario())


def test_compressed_registration(namesrv_factory, admin) -> None:
    namesrv = namesrv_factory()

    async def scenario() -> None:
        service = AsyncBrokerService(identity(), [namesrv.address], topics(50), compressed=True,
                                     period_override_ms=60_000)
        assert list(await service.start()) == [namesrv.address]
        listed = await service.api.remoting.get_all_topic_list(namesrv.address)
        assert sorted(listed.topic_list) == sorted(f"Topic{i}" for i in range(50))
        route = await service.api.remoting.get_route_info_by_topic(namesrv.address, "Topic49")
        assert (route.queue_datas[0].read_queue_nums, route.queue_datas[0].write_queue_nums) == (4, 4)
        await service.stop()
    run(scenario())


def test_a_changed_config_reaches_every_chunk_of_a_split_registration(namesrv_factory, admin) -> None:
    namesrv = namesrv_factory()

    async def scenario() -> None:
        table = topics(3000)
        api = AsyncBrokerOuterAPI([namesrv.address], timeout=20, max_body_bytes=100_000)
        assert len(api.plan(table.snapshot()).chunks) > 3
        assert list(await api.register_broker_all(identity(), table.snapshot())) == [namesrv.address]
        table.put(*(TopicConfig(f"Topic{i}", 4, 4, PERM_READ) for i in range(3000)))
        await api.register_broker_all(identity(), table.snapshot())
        perms = await asyncio.gather(*(api.remoting.get_route_info_by_topic(namesrv.address, f"Topic{i}")
                                       for i in range(0, 3000, 97)))
        assert {route.queue_datas[0].perm for route in perms} == {PERM_READ}
        await api.close()
    run(scenario())


@pytest.mark.slow
def test_a_broker_with_100k_topics_registers_and_every_topic_is_routable(namesrv_factory, admin) -> None:
    namesrv = namesrv_factory()
    count = 100_000

    async def scenario() -> None:
        table = topics(count, "BigTopic")
        api = AsyncBrokerOuterAPI([namesrv.address], timeout=120)
        plan = api.plan(table.snapshot())
        assert len(plan.chunks) > 1  # one body would pass RocketMQ's 16 MiB frame limit's comfort zone
        assert all(len(body) <= api.max_body_bytes for body in plan.bodies(True))
        results = await api.register_broker_all(identity(), table.snapshot())
        assert list(results) == [namesrv.address]
        listed = await api.remoting.get_all_topic_list(namesrv.address, timeout=60)
        assert set(listed.topic_list) == {f"BigTopic{i}" for i in range(count)}
        sample = [f"BigTopic{i}" for i in range(0, count, 997)] + [f"BigTopic{count - 1}"]
        routes = await asyncio.gather(*(api.remoting.get_route_info_by_topic(namesrv.address, t) for t in sample))
        assert all(route.broker_datas[0].broker_name == "broker-a" for route in routes)
        await api.close()
    run(scenario(), limit=300)

