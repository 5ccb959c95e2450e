"""NOTIFY_MIN_BROKER_ID_CHANGE (notifyMinBrokerIdChanged, RocketMQ 5.x): the route table's reports driven
directly (sans-IO), the notifier against real TCP listeners, and a real server telling brokers that are
little listeners of the test's own."""
from __future__ import annotations

import logging
import socket
import threading
import time
import zlib

import pytest

from namesrv.broker_notifier import MAX_TARGETS_PER_CHANGE, BrokerNotifier, broker_address
from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.protocol import (ClusterInfo, DataVersion, FrameDecoder, RegisterBrokerBody, RemotingCommand,
                              RequestCode, ResponseCode, TopicConfig, TopicConfigSerializeWrapper)
from namesrv.protocol.codes import Version
from namesrv.routeinfo import MinBrokerIdChange, Registrant, RouteInfoManager

START = 1_700_000_000_000
MASTER, SLAVE1, SLAVE2 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> int:
        return self.now


class Group:
    """A route table whose min-broker-id changes are collected, and a group "g" to drive."""

    def __init__(self, notify: bool = True) -> None:
        self.clock = Clock()
        self.config = NamesrvConfig(notify_min_broker_id_changed=notify)
        self.routes = RouteInfoManager(self.config, clock=self.clock)
        self.changes: list[MinBrokerIdChange] = []
        self.routes.min_broker_id_listener = self.changes.append

    def register(self, addr: str, broker_id: int, acting: bool | None = True, topics: tuple = ("T1", "T2"),
                 state: int = 0, timeout: int | None = None):
        wrapper = TopicConfigSerializeWrapper({t: TopicConfig(t, 4, 4) for t in topics}, DataVersion(1, START, state))
        return self.routes.register(Registrant("c", addr, "g", broker_id, addr.replace("10911", "10912"), timeout, acting), wrapper, [], channel(addr))

    def taken(self) -> list[MinBrokerIdChange]:
        changes = list(self.changes)
        self.changes.clear()
        return changes


def channel(addr: str) -> Channel:
    return Channel("tcp", addr.encode(), addr)


def change(min_id: int, min_addr: str, notify: tuple[str, ...], offline: str | None = None,
           ha: str | None = None) -> MinBrokerIdChange:
    return MinBrokerIdChange("g", min_id, min_addr, offline, ha, notify)


@pytest.fixture
def group() -> Group:
    g = Group()
    g.register(MASTER, 0)
    g.register(SLAVE1, 1)
    assert g.taken() == []  # joining with a higher id changes no minimum
    return g


# ---------------------------------------------------------------- what the route table reports


def test_the_master_leaving_a_pair_tells_the_slave():
    g = Group()
    g.register(MASTER, 0)
    g.register(SLAVE1, 1)
    g.routes.unregister_broker("c", MASTER, "g", 0)
    assert g.taken() == [change(1, SLAVE1, (SLAVE1,), offline=MASTER)]


def test_the_master_leaving_three_tells_the_rest_and_coming_back_tells_those_it_outranks(group):
    group.register(SLAVE2, 2)
    group.routes.unregister_broker("c", MASTER, "g", 0)
    (left,) = group.taken()
    assert left == change(1, SLAVE1, (SLAVE1, SLAVE2), offline=MASTER)
    assert left.ext_fields() == {"minBrokerId": "1", "brokerName": "g", "minBrokerAddr": SLAVE1,
                                 "offlineBrokerAddr": MASTER}
    group.register(MASTER, 0)
    (back,) = group.taken()
    assert back == change(0, MASTER, (SLAVE1, SLAVE2), ha="10.0.0.1:10912")
    assert back.ext_fields() == {"minBrokerId": "0", "brokerName": "g", "minBrokerAddr": MASTER,
                                 "haBrokerAddr": "10.0.0.1:10912"}
    group.register(MASTER, 0)  # its next registrations change nothing
    assert group.taken() == []


def test_a_slave_promoted_in_place_is_told_itself(group):
    """5.x chooseBrokerAddrsToNotify: a group of one broker tells that broker."""
    group.routes.unregister_broker("c", MASTER, "g", 0)
    group.taken()
    group.register(SLAVE1, 0)  # the same address under id 0: the only member
    assert group.taken() == [change(0, SLAVE1, (SLAVE1,), ha="10.0.0.2:10912")]


def test_a_slave_leaving_and_the_last_broker_leaving_change_nothing(group):
    group.register(SLAVE2, 2)
    group.routes.unregister_broker("c", SLAVE1, "g", 1)
    group.routes.unregister_broker("c", SLAVE2, "g", 2)
    group.routes.unregister_broker("c", MASTER, "g", 0)  # the group is gone: nobody to tell
    assert group.taken() == []


def test_nothing_is_reported_while_the_switch_is_off_or_nobody_listens():
    g = Group(notify=False)
    g.register(SLAVE1, 1)
    g.register(MASTER, 0)
    g.routes.unregister_broker("c", MASTER, "g", 0)
    assert g.taken() == []
    g.config.notify_min_broker_id_changed = True  # remote-updatable: read at each change
    g.register(MASTER, 0)
    assert len(g.taken()) == 1
    g.routes.min_broker_id_listener = None
    g.routes.unregister_broker("c", MASTER, "g", 0)
    assert g.taken() == []


@pytest.mark.parametrize("acting", [False, None])  # None: a broker older than 5.x
def test_a_group_without_acting_master_is_told_when_its_master_returns_but_not_when_it_leaves(acting):
    """As 5.x: unRegisterBroker checks the group's enableActingMaster, registerBroker does not."""
    g = Group()
    g.register(SLAVE1, 1, acting=acting)
    g.register(MASTER, 0, acting=acting)
    assert g.taken() == [change(0, MASTER, (SLAVE1,), ha="10.0.0.1:10912")]
    g.routes.unregister_broker("c", MASTER, "g", 0)
    assert g.taken() == []


def test_the_leaving_broker_is_found_by_its_address_not_the_id_it_names(group):
    """5.x compares UNREGISTER_BROKER's brokerId with the group's lowest and reports a change whenever
    they are equal, even when that id's broker stays."""
    group.register(SLAVE2, 2)
    group.routes.unregister_broker("c", SLAVE1, "g", 0)  # a slave, claiming id 0
    assert group.taken() == []
    group.routes.unregister_broker("c", MASTER, "g", None)  # the master, no id given
    assert group.taken() == [change(2, SLAVE2, (SLAVE2,), offline=MASTER)]


def test_the_master_expiring_or_its_connection_closing_is_reported(group):
    group.register(SLAVE2, 2)
    group.clock.now += 200_000
    group.register(SLAVE1, 1)
    group.register(SLAVE2, 2)  # the slaves stay fresh; the master went silent
    removed = group.routes.scan_not_active_brokers()
    assert [r.broker_addr for r in removed] == [MASTER]
    assert group.taken() == [change(1, SLAVE1, (SLAVE1, SLAVE2), offline=MASTER)]
    group.routes.on_channel_destroy(channel(SLAVE1))
    assert group.taken() == [change(2, SLAVE2, (SLAVE2,), offline=SLAVE1)]


def test_an_expiry_applied_from_the_write_log_is_reported(group):
    """Worker processes expire through `expire_if_unchanged`, in the write log's order."""
    group.clock.now += 200_000
    group.register(SLAVE1, 1)
    ((key, stamp),) = group.routes.expiry_candidates(group.clock.now)
    assert group.routes.expire_if_unchanged(key, stamp) is not None
    assert group.taken() == [change(1, SLAVE1, (SLAVE1,), offline=MASTER)]


def test_a_refused_registration_reports_nothing():
    g = Group()
    g.register(SLAVE1, 1)
    assert g.register(MASTER, 0, topics=("T1",)) is None  # the single-topic guard: changes nothing
    g.register("10.0.0.9:10911", 0, state=5)
    g.register(MASTER, 0, state=1)  # id 0 is held with a newer stateVersion: refused
    assert g.taken() == [change(0, "10.0.0.9:10911", (SLAVE1,), ha="10.0.0.9:10912")]


# ---------------------------------------------------------------- the notifier, against real listeners


class Listener:
    """A broker's port: accepts connections and collects the frames sent on them."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.frames: list[RemotingCommand] = []
        self.accepted = 0
        self.ended = 0
        self._cond = threading.Condition()
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._cond:
                self.accepted += 1
                self._conns.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        decoder = FrameDecoder()
        while True:
            try:
                chunk = conn.recv(65536)
            except OSError:
                chunk = b""
            with self._cond:
                if not chunk:
                    self.ended += 1
                    self._cond.notify_all()
                    return
                self.frames += [RemotingCommand.decode(frame) for frame in decoder.feed(chunk)]
                self._cond.notify_all()

    def wait(self, frames: int, timeout: float = 5.0) -> list[RemotingCommand]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.frames) >= frames, timeout), self.frames
            return list(self.frames)

    def wait_ended(self, connections: int, timeout: float = 5.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.ended >= connections, timeout)

    def drop_connections(self) -> None:
        """The broker closes its end of every connection (as Netty does with an idle one)."""
        with self._cond:
            for conn in self._conns:
                conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            self._conns.clear()

    def close(self) -> None:
        self.sock.close()
        self.drop_connections()


@pytest.fixture
def listeners():
    made: list[Listener] = []

    def make(count: int) -> list[Listener]:
        made.extend(Listener() for _ in range(count))
        return made[-count:]

    yield make
    for listener in made:
        listener.close()


def notification(frame: RemotingCommand) -> dict[str, str]:
    assert frame.code == RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE and frame.is_oneway and not frame.is_response
    return frame.ext_fields


def test_a_change_is_sent_as_a_oneway_request_to_each_broker_on_one_kept_connection(listeners, caplog):
    one, two = listeners(2)
    notifier = BrokerNotifier(RouteInfoManager(NamesrvConfig()))
    first = MinBrokerIdChange("g", 1, one.address, "10.0.0.1:10911", None, (one.address, two.address))
    with caplog.at_level(logging.INFO, logger="namesrv.broker_notifier"):
        notifier.send(first)
        notifier.send(MinBrokerIdChange("g", 0, "10.0.0.1:10911", None, "10.0.0.1:10912", (one.address,)))
    frames = one.wait(2)
    assert [notification(f) for f in frames] == [first.ext_fields(), {
        "minBrokerId": "0", "brokerName": "g", "minBrokerAddr": "10.0.0.1:10911", "haBrokerAddr": "10.0.0.1:10912"}]
    assert notification(two.wait(1)[0]) == first.ext_fields()
    assert frames[0].opaque != frames[1].opaque and one.accepted == 1  # one connection, kept
    assert (notifier.sent, notifier.failed) == (3, 0)
    assert (f"min broker id changed to 1, notify ['{one.address}', '{two.address}'], offline broker addr "
            "10.0.0.1:10911") in caplog.text
    notifier.close_all()
    one.wait_ended(1)


def test_a_connection_the_broker_closed_is_opened_again(listeners):
    (one,) = listeners(1)
    notifier = BrokerNotifier(RouteInfoManager(NamesrvConfig()))
    notice = MinBrokerIdChange("g", 1, one.address, None, None, (one.address,))
    notifier.send(notice)
    one.wait(1)
    one.drop_connections()
    time.sleep(0.3)  # the broker's FIN arrives
    notifier.send(notice)
    assert len(one.wait(2)) == 2 and one.accepted == 2 and notifier.failed == 0
    notifier.close_all()


def test_an_unreachable_broker_is_skipped_quickly_and_the_others_are_told(listeners, caplog):
    (one,) = listeners(1)
    gone = socket.create_server(("127.0.0.1", 0))
    closed_port = "127.0.0.1:%d" % gone.getsockname()[1]
    gone.close()
    notifier = BrokerNotifier(RouteInfoManager(NamesrvConfig()))
    started = time.monotonic()
    notifier.send(MinBrokerIdChange("g", 1, one.address, None, None, (closed_port, "not-an-address", one.address)))
    assert len(one.wait(1)) == 1 and time.monotonic() - started < 1.0
    assert (notifier.sent, notifier.failed) == (1, 2)
    assert f"NOTIFY_MIN_BROKER_ID_CHANGE to {closed_port} failed" in caplog.text
    notifier.close_all()


def test_connections_are_bounded_those_kept_are_reused_and_idle_ones_closed(listeners):
    brokers = listeners(3)
    notifier = BrokerNotifier(RouteInfoManager(NamesrvConfig()), max_connections=2, idle_seconds=30)
    for _ in range(3):  # the same three in turn: an LRU of two would open a connection for every one
        for broker in brokers:
            notifier.send(MinBrokerIdChange("g", 1, broker.address, None, None, (broker.address,)))
    for broker in brokers:
        broker.wait(3)
    assert notifier.connected() == [brokers[0].address, brokers[1].address]
    assert [broker.accepted for broker in brokers] == [1, 1, 3]  # the kept two reused; the third one-off
    assert notifier.opened == 5
    notifier.close_idle(time.monotonic() + 10)
    assert len(notifier.connected()) == 2
    notifier.close_idle(time.monotonic() + 31)
    assert notifier.connected() == []
    brokers[1].wait_ended(1)


def test_a_change_tells_at_most_a_few_brokers_and_notifications_keep_to_the_rate(listeners, caplog):
    brokers = listeners(MAX_TARGETS_PER_CHANGE + 4)
    notifier = BrokerNotifier(RouteInfoManager(NamesrvConfig()), rate=20.0, burst=MAX_TARGETS_PER_CHANGE)
    change = MinBrokerIdChange("g", 1, brokers[0].address, None, None, tuple(b.address for b in brokers))
    started = time.monotonic()
    notifier.send(change)
    assert time.monotonic() - started < 0.5  # the burst
    assert (notifier.sent, notifier.skipped) == (MAX_TARGETS_PER_CHANGE, 4)
    assert f"names {MAX_TARGETS_PER_CHANGE + 4} brokers to notify: only the first {MAX_TARGETS_PER_CHANGE}" \
        in caplog.text
    for broker in brokers[:MAX_TARGETS_PER_CHANGE]:
        broker.wait(1)
    assert [b.accepted for b in brokers] == [1] * MAX_TARGETS_PER_CHANGE + [0] * 4
    notifier.send(change)  # the burst is spent: 20 a second
    took = time.monotonic() - started
    assert notifier.sent == 2 * MAX_TARGETS_PER_CHANGE and (MAX_TARGETS_PER_CHANGE - 1) / 20 <= took < 2.0
    notifier.close_all()


def test_an_unanswering_broker_backs_off_doubling_and_is_told_again_once_it_answers(listeners):
    silent = socket.create_server(("127.0.0.1", 0), backlog=0)  # never accepts: once its queue is full,
    address = "127.0.0.1:%d" % silent.getsockname()[1]          # connecting times out
    filler = []
    try:
        for _ in range(4):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(silent.getsockname())
            filler.append(sock)
        time.sleep(0.2)
        clock = [1000.0]
        notifier = BrokerNotifier(RouteInfoManager(NamesrvConfig()), clock=lambda: clock[0])
        change = MinBrokerIdChange("g", 1, address, None, None, (address,))
        started = time.perf_counter()
        notifier.send(change)
        assert notifier.failed == 1 and time.perf_counter() - started < 1.0  # the connect timed out (0.3 s)
        for advance, failed, skipped in ((0.5, 1, 1), (0.6, 2, 1), (1.9, 2, 2), (0.2, 3, 2), (3.9, 3, 3)):
            clock[0] += advance
            notifier.send(change)
            assert (notifier.failed, notifier.skipped) == (failed, skipped), advance
    finally:
        silent.close()
        for sock in filler:
            sock.close()
    (one,) = listeners(1)
    clock[0] += 4.1
    recovered = MinBrokerIdChange("g", 1, one.address, None, None, (one.address,))
    notifier._back_off(one.address, None)  # as if it had failed once
    notifier.send(recovered)
    assert notifier.skipped == 4
    clock[0] += 1.0
    notifier.send(recovered)
    assert notifier.sent == 1 and one.address not in notifier._backoffs
    notifier.close_all()


def test_a_host_name_lookup_that_hangs_holds_the_notifier_at_most_the_timeout(listeners, monkeypatch):
    from namesrv import broker_notifier
    (one,) = listeners(1)
    real = socket.getaddrinfo
    hanging = threading.Event()

    def getaddrinfo(host, *args, **kwargs):
        if host == "slow.broker.invalid" and not kwargs.get("flags", 0) & socket.AI_NUMERICHOST:
            hanging.wait(5)  # a resolver that does not answer
        return real(host, *args, **kwargs)

    monkeypatch.setattr(broker_notifier.socket, "getaddrinfo", getaddrinfo)
    notifier = BrokerNotifier(RouteInfoManager(NamesrvConfig()))
    try:
        started = time.monotonic()
        notifier.send(MinBrokerIdChange("g", 1, one.address, None, None, ("slow.broker.invalid:10911", one.address)))
        assert time.monotonic() - started < 1.0 and (notifier.failed, notifier.sent) == (1, 1)
        hanging.set()  # the resolver answers again
        notifier.send(MinBrokerIdChange("g", 1, one.address, None, None, (f"localhost:{one.address.split(':')[1]}",)))
        assert notifier.sent == 2  # a name that resolves is used
    finally:
        hanging.set()
        notifier.stop()


def test_a_full_queue_drops_and_logs_without_blocking(caplog):
    notifier = BrokerNotifier(RouteInfoManager(NamesrvConfig()), queue_size=2)  # not started: nothing is taken
    notice = MinBrokerIdChange("g", 1, "10.0.0.2:10911", None, None, ("10.0.0.2:10911",))
    for _ in range(3):
        notifier.submit(notice)
    assert notifier.dropped == 1
    assert "2 notifications wait to be sent: not notifying ['10.0.0.2:10911']" in caplog.text


def test_the_started_notifier_sends_what_the_route_table_reports(listeners):
    master, slave = listeners(2)
    g = Group()
    notifier = BrokerNotifier(g.routes)
    notifier.start()
    try:
        assert g.routes.min_broker_id_listener == notifier.submit
        g.register(master.address, 0)
        g.register(slave.address, 1)
        g.routes.unregister_broker("c", master.address, "g", 0)
        assert notification(slave.wait(1)[0]) == {"minBrokerId": "1", "brokerName": "g",
                                                   "minBrokerAddr": slave.address,
                                                   "offlineBrokerAddr": master.address}
        assert master.frames == []
    finally:
        notifier.stop()
    assert g.routes.min_broker_id_listener is None
    slave.wait_ended(1)  # stopping closes the kept connections


@pytest.mark.parametrize(("addr", "expected"), [("10.0.0.1:10911", ("10.0.0.1", 10911)),
                                                ("[::1]:10911", ("::1", 10911)), ("fe80::1:10911", ("fe80::1", 10911))])
def test_broker_addresses(addr, expected):
    assert broker_address(addr) == expected


@pytest.mark.parametrize("addr", ["10.0.0.1", ":10911", "h:port", "h:70000", ""])
def test_what_is_not_a_broker_address(addr):
    with pytest.raises(ValueError):
        broker_address(addr)


# ---------------------------------------------------------------- a real server


def register_request(conn, addr: str, broker_id: int) -> RemotingCommand:
    body = RegisterBrokerBody(TopicConfigSerializeWrapper({t: TopicConfig(t, 4, 4) for t in ("N1", "N2")},
                                                          DataVersion(1, START))).encode()
    header = {"brokerName": "ng", "brokerAddr": addr, "clusterName": "N", "brokerId": broker_id,
              "haServerAddr": addr + "-ha", "enableActingMaster": "true", "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}
    return conn.request(RequestCode.REGISTER_BROKER, header, body, version=Version.V5_3_3)


def fleet(server, raw_connect, listeners) -> list[tuple[Listener, object]]:
    """Three brokers of group "ng" (ids 0, 1, 2), each on its own connection, their addresses the listeners'."""
    members = []
    for broker_id, listener in enumerate(listeners(3)):
        conn = raw_connect(server.address)
        assert conn.call(register_request(conn, listener.address, broker_id)).code == ResponseCode.SUCCESS
        members.append((listener, conn))
    return members


def test_a_real_server_tells_the_brokers_when_the_master_goes_and_comes_back(namesrv_factory, raw_connect, listeners):
    server = namesrv_factory(notifyMinBrokerIdChanged="true")
    (master, master_conn), (slave1, _), (slave2, _) = fleet(server, raw_connect, listeners)
    master_conn.close()  # the master's registration connection closes
    expected = {"minBrokerId": "1", "brokerName": "ng", "minBrokerAddr": slave1.address,
                "offlineBrokerAddr": master.address}
    assert notification(slave1.wait(1)[0]) == expected and notification(slave2.wait(1)[0]) == expected
    again = raw_connect(server.address)
    assert again.call(register_request(again, master.address, 0)).code == ResponseCode.SUCCESS
    expected = {"minBrokerId": "0", "brokerName": "ng", "minBrokerAddr": master.address,
                "haBrokerAddr": master.address + "-ha"}
    assert notification(slave1.wait(2)[1]) == expected and notification(slave2.wait(2)[1]) == expected
    assert again.call(again.request(RequestCode.UNREGISTER_BROKER, {  # an explicit unregistration too
        "brokerName": "ng", "brokerAddr": master.address, "clusterName": "N", "brokerId": 0})).code == 0
    assert notification(slave2.wait(3)[2])["offlineBrokerAddr"] == master.address
    assert master.frames == [] and master.accepted == 0
    server.wait_for_log(r"min broker id changed to 1, notify \[")


def test_a_real_server_is_silent_while_the_switch_is_off(namesrv_factory, raw_connect, listeners):
    """The master's connection closes and the server drops it (its group is left with ids 1 and 2, as
    when the switch is on), yet no broker is told: a second later, no connection to any of them."""
    server = namesrv_factory()
    (master, master_conn), (slave1, _), (slave2, _) = fleet(server, raw_connect, listeners)
    observer = raw_connect(server.address)

    def group_ids() -> list[int]:
        info = ClusterInfo.decode(observer.call(observer.request(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
        return sorted(info.broker_addr_table["ng"].broker_addrs)

    assert group_ids() == [0, 1, 2]
    master_conn.close()
    deadline = time.monotonic() + 10
    while group_ids() != [1, 2]:
        assert time.monotonic() < deadline, "the server never saw the master leave"
        time.sleep(0.02)
    time.sleep(1.0)  # the notifier sends within milliseconds when the switch is on
    assert (master.accepted, slave1.accepted, slave2.accepted) == (0, 0, 0)


def test_worker_processes_send_each_notification_once(namesrv_factory, raw_connect, listeners):
    server = namesrv_factory(notifyMinBrokerIdChanged="true", serverWorkerProcesses=2)
    (_, master_conn), (slave1, _), (slave2, _) = fleet(server, raw_connect, listeners)
    master_conn.close()
    slave1.wait(1)
    slave2.wait(1)
    time.sleep(1.0)  # a second sender would have sent by now
    assert len(slave1.frames) == 1 and len(slave2.frames) == 1
