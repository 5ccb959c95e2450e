"""A broker that re-registers on a new connection keeps that registration, whatever happens to the
old connection or an expiry decided before it: apache/rocketmq #11043, where RocketMQ 5.x decides an
unregistration (a heartbeat expiry, a channel's close) by cluster and address and executes it later
(BatchUnregistrationService), so a stale one wipes the broker's fresh re-registration and it
vanishes from every route until its next registration, 30 s later.

namesrv removes on a channel's close only the brokers whose *current* registration came over that
channel, and on an expiry only a broker not refreshed since it was found silent (with worker
processes the expiry travels through the write log as that finding, `expire_if_unchanged`). The
real-server cases run with one process and with two workers: the old and the new connection of
the broker land on the same worker or on different ones (SO_REUSEPORT spreads them by source
port), and every round must end with the broker in every worker's routes.

Checked against the bug itself: with the route table removing by cluster and address on a
channel's close (its channel check and index undone), both close-race cases fail in every run;
with `expire_if_unchanged` ignoring the refresh time, the unit case fails. The real-server expiry
case cannot force the order (a stale expiry needs the re-registration applied in the millisecond
between a scan's finding and its entry in the write log) and caught that mutation in neither of
its two runs of 30 rounds (one process, two workers): it stands for the old connection's close
by the expiry racing the new registration.
"""
from __future__ import annotations

import random
import time
import zlib

import pytest

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.protocol import (DataVersion, RegisterBrokerBody, RequestCode, ResponseCode, TopicConfig,
                              TopicConfigSerializeWrapper)
from namesrv.routeinfo import Registrant, RouteInfoManager

NOW = 1_700_000_000_000
ADDR = "10.0.0.7:10911"


def register(routes: RouteInfoManager, channel: Channel, counter: int = 1, timeout: int | None = None) -> None:
    table = {t: TopicConfig(t, 4, 4) for t in ("Race1", "Race2")}
    routes.register(Registrant("C", ADDR, "racer", 0, None, timeout),
                    TopicConfigSerializeWrapper(table, DataVersion(counter, NOW)), [], channel)


def test_a_stale_expiry_found_before_a_re_registration_leaves_it() -> None:
    now = [NOW]
    routes = RouteInfoManager(NamesrvConfig(), clock=lambda: now[0])
    register(routes, Channel("tcp", b"old"), timeout=1000)
    now[0] += 1500
    ((key, found_at),) = routes.expiry_candidates(now[0])  # decided: silent past its timeout
    register(routes, Channel("tcp", b"new"), counter=2)  # the broker is back, on a new connection
    assert routes.expire_if_unchanged(key, found_at) is None  # the stale decision changes nothing
    assert routes.on_channel_destroy(Channel("tcp", b"old")) == []  # nor does the old connection's close
    assert routes.pickup_topic_route("Race1") is not None and routes.removals.get("expired", 0) == 0


def test_an_unchanged_re_registration_on_a_new_connection_moves_the_broker_to_it() -> None:
    routes = RouteInfoManager(NamesrvConfig(), clock=lambda: NOW)
    register(routes, Channel("tcp", b"old"))
    assert routes.refresh(Registrant("C", ADDR, "racer", 0), None,
                          Channel("tcp", b"new")) is None  # no fingerprint: a full one
    register(routes, Channel("tcp", b"new"))
    assert routes.on_channel_destroy(Channel("tcp", b"old")) == []
    assert routes.snapshot().broker_live_table["C", ADDR].channel == Channel("tcp", b"new")


# ---- real servers


def registration(conn, counter: int, timeout_ms: int | None = None):
    table = {t: TopicConfig(t, 4, 4) for t in ("Race1", "Race2")}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(counter, NOW))).encode()
    header = {"brokerName": "racer", "brokerAddr": ADDR, "clusterName": "C", "brokerId": 0,
              "haServerAddr": "10.0.0.7:10912", "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}
    if timeout_ms is not None:
        header["heartbeatTimeoutMillis"] = timeout_ms
    return conn.request(RequestCode.REGISTER_BROKER, header, body)


def served_everywhere(server, raw_connect, probes: int = 6) -> bool:
    """Do route queries on several new connections (spread over the workers) all find the broker?"""
    for _ in range(probes):
        conn = raw_connect(server.address)
        answer = conn.call(conn.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Race1"}))
        conn.close()
        if answer.code != ResponseCode.SUCCESS:
            return False
    return True


def soon_served_everywhere(server, raw_connect, within: float = 1.0) -> bool:
    """The same within `within` seconds (a sibling worker applies a write about a millisecond after
    its answer); a stale removal would last until the broker's next registration."""
    deadline = time.monotonic() + within
    while not served_everywhere(server, raw_connect):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("workers", [1, 2])
def test_the_old_connection_closing_while_the_broker_re_registers_leaves_the_fresh_registration(
        namesrv_factory, raw_connect, workers: int) -> None:
    server = namesrv_factory(serverWorkerProcesses=workers)
    old = raw_connect(server.address)
    assert old.call(registration(old, 1)).code == ResponseCode.SUCCESS
    rng = random.Random(11043)
    for round_ in range(20):
        new = raw_connect(server.address)
        counter = 1 if round_ % 2 else round_ + 2  # an unchanged body (the decode-free refresh) or a new one
        new.send(registration(new, counter))
        if rng.random() < 0.5:
            old.close()  # the close races the re-registration on the wire
            assert new.recv().code == ResponseCode.SUCCESS
        else:
            assert new.recv().code == ResponseCode.SUCCESS
            old.close()  # the close comes after the re-registration was applied
        time.sleep(0.05)  # the close is applied by now
        assert soon_served_everywhere(server, raw_connect), f"round {round_}: the broker vanished"
        old = new
    assert served_everywhere(server, raw_connect)


@pytest.mark.parametrize("workers", [1, 2])
def test_an_expiry_decided_before_a_re_registration_on_a_new_connection_leaves_it(
        namesrv_factory, raw_connect, workers: int) -> None:
    server = namesrv_factory(serverWorkerProcesses=workers, scanNotActiveBrokerInterval=20)
    rng = random.Random(43)
    for round_ in range(12):
        old = raw_connect(server.address)
        assert old.call(registration(old, 1, timeout_ms=300)).code == ResponseCode.SUCCESS
        # silent until about its expiry (found by a scan every 20 ms), then back on a new connection
        # with a long timeout: whatever was decided about the old registration must not touch it
        silent = 0.28 + rng.random() * 0.06
        time.sleep(silent)
        new = raw_connect(server.address)
        assert new.call(registration(new, round_ + 2, timeout_ms=60_000)).code == ResponseCode.SUCCESS
        time.sleep(0.2)  # any expiry or close in flight is applied by now
        assert soon_served_everywhere(server, raw_connect), f"round {round_} (silent {silent:.3f} s): broker vanished"
        new.close()
        old.close()
        time.sleep(0.1)  # the new connection's close removes it: the next round starts clean

