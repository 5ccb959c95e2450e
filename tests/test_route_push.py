"""Route-change push (namesrv.processor.route_push): the subscriptions driven directly, and a real server
pushing over TCP and ZeroMQ on every kind of change."""
from __future__ import annotations

import json
import socket
import sys
import time
import zlib
from urllib.request import urlopen

import zmq

from namesrv.channel import Channel
from namesrv.protocol import (DataVersion, RegisterBrokerBody, RemotingCommand, RequestCode, ResponseCode,
                              TopicConfig, TopicConfigSerializeWrapper)
from namesrv.protocol.msgpack_codec import decode_msgpack, encode_msgpack
from namesrv.processor.route_push import PUSH_BODY_BYTES, RouteSubscriptions, SubscriptionRefused

A = Channel("tcp", b"a", "127.0.0.1:1")
B = Channel("tcp", b"b", "127.0.0.1:2")
C = Channel("zmq", b"c", "127.0.0.1:3")


def encode(channel: Channel, command: RemotingCommand) -> bytes:
    return encode_msgpack(command) if channel.transport == "zmq" else command.encode()


def changes(frame: bytes) -> list[dict]:
    return json.loads(RemotingCommand.decode(frame[4:]).body)["changes"]


def test_each_subscriber_gets_its_topics_changes_with_versions_and_alike_subscribers_share_frames() -> None:
    subs = RouteSubscriptions(max_topics=100)
    subs.subscribe(A, ["T1", "T2"], everything=False, standard=True)
    subs.subscribe(B, ["T1", "T2"], everything=False, standard=True)
    subs.subscribe(C, [], everything=True, standard=False)
    routes = {"T1": b'{"r":1}', "T3": b'{"r":3}'}
    pushed = subs.publish({"T1", "T3"}, lambda topic, standard, zone: routes.get(topic), routes.__contains__, encode)
    by_channel = {channel: frame for channel, frame in pushed}
    assert set(by_channel) == {A, B, C}
    assert by_channel[A] == by_channel[B]  # one encoding for subscribers alike
    assert changes(by_channel[A]) == [{"topic": "T1", "version": 1, "route": {"r": 1}}]
    everything = json.loads(decode_msgpack(by_channel[C]).body)["changes"]
    assert [(c["topic"], c["version"]) for c in everything] == [("T1", 1), ("T3", 1)]
    del routes["T1"]  # deleted: told so, and its count goes on
    pushed = dict(subs.publish({"T1"}, lambda topic, standard, zone: routes.get(topic), routes.__contains__, encode))
    assert changes(pushed[A]) == [{"topic": "T1", "version": 2, "route": None}] and subs.version("T1") == 2
    assert decode_msgpack(pushed[C]).code == RequestCode.ROUTE_CHANGED


def test_a_large_round_is_split_and_a_subscriber_that_does_not_read_is_dropped_to_polling() -> None:
    subs = RouteSubscriptions(max_topics=10)
    subs.subscribe(A, [], everything=True, standard=True)
    subs.subscribe(B, [], everything=True, standard=True)
    topics = {f"T{i}" for i in range(3000)}
    body = b'{"brokerDatas":[],"queueDatas":[' + b'{"brokerName":"x"},' * 20 + b'{}]}'
    _, notice = subs.drop(B, encode)
    assert subs.drop(B, encode) is None  # no longer subscribed
    pushed = subs.publish(topics, lambda topic, standard, zone: body, lambda topic: True, encode)
    frames = [frame for channel, frame in pushed if channel == A]
    assert len(frames) > 1 and all(len(frame) < PUSH_BODY_BYTES + 64 * 1024 for frame in frames)
    assert sorted(c["topic"] for frame in frames for c in changes(frame)) == sorted(topics)
    assert not [frame for channel, frame in pushed if channel == B]
    notice = RemotingCommand.decode(notice[4:])
    assert notice.code == RequestCode.ROUTE_CHANGED and notice.is_oneway
    assert "dropped to polling" in notice.ext_fields["dropped"] and len(subs) == 1 and subs.dropped == 1


def test_subscriptions_are_bounded_in_named_topics() -> None:
    subs = RouteSubscriptions(max_topics=3)
    subs.subscribe(A, ["T1", "T2"], everything=False, standard=True)
    subs.subscribe(A, ["T1"], everything=False, standard=True)  # already counted
    try:
        subs.subscribe(B, ["T3", "T4"], everything=False, standard=True)
        raise AssertionError("not refused")
    except SubscriptionRefused as exc:
        assert "maxRouteSubscriptionTopics" in str(exc)
    assert subs.unsubscribe(A) and not subs.unsubscribe(A)
    subs.subscribe(B, ["T3", "T4", "T5"], everything=False, standard=True)


def refused(subs: RouteSubscriptions, channel: Channel, topics: list[str], **kwargs) -> str:
    try:
        subs.subscribe(channel, topics, everything=False, standard=True, **kwargs)
    except SubscriptionRefused as exc:
        return str(exc)
    raise AssertionError("not refused")


def test_shares_per_connection_and_per_host_keep_one_peer_from_locking_others_out() -> None:
    subs = RouteSubscriptions(max_topics=10, max_per_connection=3, max_per_host=5)
    first, second, third = (Channel("tcp", bytes([i]), f"10.0.0.1:{i}") for i in (1, 2, 3))
    other_host = Channel("tcp", b"o", "10.0.0.2:1")
    subs.subscribe(first, ["T1", "T2", "T3"], everything=False, standard=True)
    assert "maxRouteSubscriptionTopicsPerConnection (3; 3 subscribed)" in refused(subs, first, ["T4"])
    subs.subscribe(second, ["T1", "T2"], everything=False, standard=True)
    assert "maxRouteSubscriptionTopicsPerHost of 10.0.0.1 (5; 5 subscribed)" in refused(subs, third, ["T9"])
    subs.subscribe(other_host, ["Good"], everything=False, standard=True)  # another peer is not locked out
    assert subs.unsubscribe(first)  # its share is free again
    subs.subscribe(third, ["T9"], everything=False, standard=True)
    ipv6 = Channel("tcp", b"6", "fe80::1:10911")
    subs.subscribe(ipv6, ["A", "B", "C"], everything=False, standard=True)
    assert "of fe80::1 " in refused(RouteSubscriptions(10, 10, 3), ipv6, ["A", "B", "C", "D"])


def test_topics_the_route_table_does_not_hold_are_few_per_connection_and_known_ones_share_its_names() -> None:
    from namesrv.processor.route_push import MAX_UNKNOWN_TOPICS
    subs = RouteSubscriptions(max_topics=10 * MAX_UNKNOWN_TOPICS)
    table = {sys.intern("Known" + "x" * 100)}  # as the route table holds its topics
    known_name = next(iter(table))
    invented = [f"Invented{i}" for i in range(MAX_UNKNOWN_TOPICS)]
    subs.subscribe(A, invented, everything=False, standard=True, exists=table.__contains__)
    assert "route table does not hold would pass 1000" in refused(subs, A, ["OneMore"], exists=table.__contains__)
    copy = "".join(["Known", "x" * 100])  # an equal string, not the table's
    subs.subscribe(A, [copy], everything=False, standard=True, exists=table.__contains__)
    (held,) = [topic for topic in subs._subscriptions[A].topics if topic.startswith("Known")]
    assert held is known_name and held is not copy


# ---- a real server


def registration(conn, name: str = "broker-p", topics: int = 2, timeout_ms: int | None = None) -> RemotingCommand:
    table = {f"P{i}": TopicConfig(f"P{i}", 4, 4) for i in range(topics)}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(1, 1_700_000_000_000, 0))).encode()
    header = {"brokerName": name, "brokerAddr": f"127.0.0.1:{10911 + len(name)}", "clusterName": "P", "brokerId": 0,
              "haServerAddr": "127.0.0.1:1", "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}
    if timeout_ms is not None:
        header["heartbeatTimeoutMillis"] = timeout_ms
    return conn.request(RequestCode.REGISTER_BROKER, header, body)


def pushed(conn) -> dict[str, dict]:
    """The next ROUTE_CHANGED: topic -> its change."""
    command = conn.recv()
    assert command.code == RequestCode.ROUTE_CHANGED and command.is_oneway, command
    return {change["topic"]: change for change in json.loads(command.body)["changes"]}


def test_every_kind_of_change_reaches_a_subscriber_at_once(namesrv_factory, raw_connect) -> None:
    server = namesrv_factory(scanNotActiveBrokerInterval=100)
    subscriber = raw_connect(server.address)
    answer = subscriber.call(subscriber.request(RequestCode.SUBSCRIBE_ROUTE_CHANGES, {"topics": "P0;P1"}))
    assert answer.code == ResponseCode.SUCCESS
    assert json.loads(answer.body) == {"routes": [{"topic": "P0", "version": 0, "route": None},
                                                  {"topic": "P1", "version": 0, "route": None}]}
    broker = raw_connect(server.address)
    assert broker.call(registration(broker)).code == ResponseCode.SUCCESS
    change = pushed(subscriber)
    assert set(change) == {"P0", "P1"} and change["P0"]["version"] == 1
    assert change["P0"]["route"]["brokerDatas"][0]["brokerName"] == "broker-p"
    admin = raw_connect(server.address)
    assert admin.call(admin.request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-p"})).code == 0
    change = pushed(subscriber)
    assert change["P1"]["version"] == 2 and change["P1"]["route"]["queueDatas"][0]["perm"] == 4
    assert admin.call(admin.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "P1"})).code == 0
    assert pushed(subscriber) == {"P1": {"topic": "P1", "version": 3, "route": None}}
    started = time.monotonic()
    broker.close()  # the connection closes: its broker's routes go
    assert pushed(subscriber) == {"P0": {"topic": "P0", "version": 3, "route": None}}
    assert time.monotonic() - started < 1.0
    # a broker that goes silent expires, and that is pushed too
    silent = raw_connect(server.address)
    assert silent.call(registration(silent, "broker-s", timeout_ms=500)).code == ResponseCode.SUCCESS
    assert pushed(subscriber)["P0"]["route"] is not None
    change = pushed(subscriber)
    assert change["P0"]["route"] is None and time.monotonic() - started < 5
    samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in urlopen(
        server.http_url + "/metrics").read().decode().splitlines() if line and not line.startswith("#")}
    assert samples["namesrv_route_subscribers"] == 1 and samples["namesrv_route_pushes_total"] == 6
    rounds = samples["namesrv_route_push_round_seconds_count"]  # each round that pushed, timed
    assert 1 <= rounds <= 6 and 0 < samples["namesrv_route_push_round_seconds_sum"] < rounds
    assert samples['namesrv_route_push_round_seconds_bucket{le="+Inf"}'] == rounds
    # unsubscribed: nothing more
    assert subscriber.call(subscriber.request(RequestCode.UNSUBSCRIBE_ROUTE_CHANGES)).code == 0
    assert broker_again(raw_connect(server.address))
    try:
        extra = subscriber.recv(timeout=0.5)
        raise AssertionError(f"pushed after unsubscribing: {extra}")
    except TimeoutError:
        pass


def broker_again(conn) -> bool:
    return conn.call(registration(conn)).code == ResponseCode.SUCCESS


def test_a_broker_leaving_is_one_batch_for_a_subscriber_to_all_topics(namesrv_factory, raw_connect) -> None:
    server = namesrv_factory()
    subscriber = raw_connect(server.address)
    assert subscriber.call(subscriber.request(RequestCode.SUBSCRIBE_ROUTE_CHANGES, {"all": "true"})).code == 0
    broker = raw_connect(server.address)
    assert broker.call(registration(broker, topics=2000)).code == ResponseCode.SUCCESS
    change, commands = pushed_until(subscriber, 2000)
    assert commands <= 3  # one round, in bodies of at most about 1 MiB
    broker.close()
    change, commands = pushed_until(subscriber, 2000)
    assert commands <= 3 and all(c["route"] is None and c["version"] == 2 for c in change.values())


def pushed_until(conn, topics: int) -> tuple[dict[str, dict], int]:
    """ROUTE_CHANGED commands until `topics` topics changed: (topic -> change, commands)."""
    change: dict[str, dict] = {}
    commands = 0
    while len(change) < topics:
        more = pushed(conn)
        assert not set(more) & set(change), "a topic twice in one round"
        change.update(more)
        commands += 1
    return change, commands


def test_the_zeromq_endpoint_subscribes_and_is_pushed_to(namesrv_factory, raw_connect, zmq_context) -> None:
    server = namesrv_factory()
    dealer = zmq_context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(server.zmq_address)
    dealer.send(encode_msgpack(RemotingCommand.request(RequestCode.SUBSCRIBE_ROUTE_CHANGES, {"topics": "P0"},
                                                       opaque=7)))
    assert dealer.poll(5000)
    answer = decode_msgpack(dealer.recv())
    assert (answer.opaque, answer.code) == (7, ResponseCode.SUCCESS)
    broker = raw_connect(server.address)
    assert broker.call(registration(broker)).code == ResponseCode.SUCCESS
    assert dealer.poll(5000)
    push = decode_msgpack(dealer.recv())
    assert push.code == RequestCode.ROUTE_CHANGED
    assert [c["topic"] for c in json.loads(push.body)["changes"]] == ["P0"]


def test_a_subscriber_that_does_not_read_is_dropped_to_polling_and_told_so(namesrv_factory, raw_connect) -> None:
    server = namesrv_factory(maxConnectionOutputBytes=2 * 1024 * 1024)
    subscriber = raw_connect(server.address)
    subscriber.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)  # the kernel holds little for it
    assert subscriber.call(subscriber.request(RequestCode.SUBSCRIBE_ROUTE_CHANGES, {"all": "true"})).code == 0
    broker = raw_connect(server.address)
    metrics = server.http_url + "/metrics"
    for _ in range(300):  # each round pushes ~170 KB the subscriber never reads
        assert broker.call(registration(broker, topics=200)).code == ResponseCode.SUCCESS
        assert broker.call(broker.request(RequestCode.UNREGISTER_BROKER, {
            "brokerName": "broker-p", "brokerAddr": "127.0.0.1:10919", "clusterName": "P", "brokerId": 0})).code == 0
        if "namesrv_route_subscribers_dropped_total 1.0" in urlopen(metrics).read().decode():
            break
    else:
        raise AssertionError("the subscriber was never dropped")
    assert "namesrv_route_subscribers 0.0" in urlopen(metrics).read().decode()
    last = None
    while True:  # what it was sent ends with the notice; the connection stays open for requests
        command = subscriber.recv(timeout=5)
        last = command
        if "dropped" in command.ext_fields:
            break
    assert "dropped to polling" in last.ext_fields["dropped"]
    assert subscriber.call(subscriber.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nowhere"})).code == 17
