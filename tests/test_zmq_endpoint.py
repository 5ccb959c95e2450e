"""The ZeroMQ ROUTER endpoint end to end: a DEALER peer sends msgpack command frames (several per
message) to a real namesrv process and gets one reply frame per answered command."""
from __future__ import annotations

import time

import msgpack
import pytest
import zmq

from namesrv.protocol import (
    DataVersion,
    RegisterBrokerBody,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from namesrv.protocol.codes import FLAG_RESPONSE, SERVER_VERSION
from namesrv.protocol.msgpack_codec import SERIALIZE_MSGPACK, decode_msgpack, encode_msgpack


class Dealer:
    """A DEALER socket connected to the server's ROUTER endpoint."""

    def __init__(self, zmq_context: zmq.Context, endpoint: str) -> None:
        self.socket = zmq_context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(endpoint)
        self._opaque = 0

    def request(self, code: int, ext: dict[str, object] | None = None, body: bytes | None = None,
                oneway: bool = False) -> RemotingCommand:
        self._opaque += 1
        return RemotingCommand.request(code, ext, body, opaque=self._opaque, oneway=oneway)

    def send(self, *commands: RemotingCommand) -> None:
        self.socket.send_multipart([encode_msgpack(command) for command in commands])

    def recv(self, count: int, timeout: float = 5.0) -> list[RemotingCommand]:
        """The next `count` reply frames, however the server grouped them into messages."""
        replies: list[RemotingCommand] = []
        deadline = time.monotonic() + timeout
        while len(replies) < count:
            if not self.socket.poll(max(0, int((deadline - time.monotonic()) * 1000))):
                raise TimeoutError(f"{len(replies)} of {count} replies")
            replies += [decode_msgpack(frame) for frame in self.socket.recv_multipart()]
        return replies

    def call(self, command: RemotingCommand) -> RemotingCommand:
        self.send(command)
        (reply,) = self.recv(1)
        assert reply.opaque == command.opaque
        return reply

    def silent(self, seconds: float) -> bool:
        return not self.socket.poll(int(seconds * 1000))


@pytest.fixture
def namesrv(namesrv_factory):
    return namesrv_factory()


def registration(dealer: Dealer) -> RemotingCommand:
    topics = {name: TopicConfig(name, 4, 4) for name in ("ZmqTopic", "Other")}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(topics, DataVersion(1, 1_700_000_000_000, 0))).encode()
    return dealer.request(RequestCode.REGISTER_BROKER, {"brokerName": "zb", "brokerAddr": "127.0.0.1:40911",
                                                        "clusterName": "ZC", "haServerAddr": "", "brokerId": 0}, body)


def test_a_message_of_several_commands_gets_one_reply_frame_each(namesrv, zmq_context) -> None:
    dealer = Dealer(zmq_context, namesrv.zmq_address)
    register = registration(dealer)
    assert dealer.call(register).code == ResponseCode.SUCCESS
    requests = [dealer.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "ZmqTopic"}) for _ in range(50)]
    requests.append(dealer.request(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "none"}))
    dealer.send(*requests)
    replies = {reply.opaque: reply for reply in dealer.recv(len(requests))}
    assert sorted(replies) == [r.opaque for r in requests]
    for request in requests[:-1]:
        reply = replies[request.opaque]
        assert (reply.code, reply.flag, reply.version, reply.serialize_type) == (
            ResponseCode.SUCCESS, FLAG_RESPONSE, SERVER_VERSION, SERIALIZE_MSGPACK)
        route = TopicRouteData.decode(reply.body)
        assert route.broker_datas[0].broker_addrs == {0: "127.0.0.1:40911"}
    missing = replies[requests[-1].opaque]
    assert (missing.code, missing.ext_fields) == (ResponseCode.QUERY_NOT_FOUND, {})
    assert dealer.silent(0.2)  # nothing beyond one reply per command


def test_a_broker_registered_over_zmq_is_routable_over_tcp(namesrv, zmq_context, raw_connect) -> None:
    dealer = Dealer(zmq_context, namesrv.zmq_address)
    assert dealer.call(registration(dealer)).code == ResponseCode.SUCCESS
    conn = raw_connect(namesrv.address)
    answer = conn.call(conn.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "ZmqTopic"}))
    assert answer.code == ResponseCode.SUCCESS
    assert TopicRouteData.decode(answer.body).queue_datas[0].broker_name == "zb"
    namesrv.wait_for_log(r"new broker registered: zb\[0\] 127\.0\.0\.1:40911")


def test_oneway_commands_get_no_reply_frame(namesrv, zmq_context) -> None:
    dealer = Dealer(zmq_context, namesrv.zmq_address)
    put = dealer.request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "v"}, oneway=True)
    get = dealer.request(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "k"})
    dealer.send(put)
    deadline = time.monotonic() + 5
    while (reply := dealer.call(get)).code != ResponseCode.SUCCESS:  # call() checks each reply answers the get
        assert time.monotonic() < deadline
        get = dealer.request(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "k"})
    assert reply.ext_fields == {"value": "v"}


def test_a_malformed_frame_drops_that_peer_only_and_is_logged(namesrv, zmq_context) -> None:
    bystander, bad = Dealer(zmq_context, namesrv.zmq_address), Dealer(zmq_context, namesrv.zmq_address)
    assert bystander.call(bystander.request(RequestCode.GET_BROKER_CLUSTER_INFO)).code == ResponseCode.SUCCESS
    bad.socket.send_multipart([encode_msgpack(bad.request(RequestCode.GET_BROKER_CLUSTER_INFO)), b"\xc1garbage"])
    bad.socket.send_multipart([msgpack.packb([1, 2, 3])])
    assert bad.silent(0.3)  # a message with a bad frame is not served at all
    namesrv.wait_for_log(r"WARNING .*closed zmq connection 127\.0\.0\.1:\d+: bad frame: msgpack command is not valid")
    namesrv.wait_for_log(r"closed zmq connection 127\.0\.0\.1:\d+: bad frame: msgpack command must be an array of 8")
    assert bystander.call(bystander.request(RequestCode.GET_BROKER_CLUSTER_INFO)).code == ResponseCode.SUCCESS
    # a DEALER cannot be disconnected by a ROUTER: the peer is forgotten and a later good message starts afresh
    assert bad.call(bad.request(RequestCode.GET_BROKER_CLUSTER_INFO)).code == ResponseCode.SUCCESS


def test_an_unknown_code_over_zmq_is_not_supported(namesrv, zmq_context) -> None:
    dealer = Dealer(zmq_context, namesrv.zmq_address)
    reply = dealer.call(dealer.request(999))
    assert (reply.code, reply.remark) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, " request type 999 not supported")


def test_an_empty_zmq_listen_address_disables_the_endpoint(namesrv_factory, raw_connect) -> None:
    namesrv = namesrv_factory(zmqListenAddress="")
    assert namesrv.zmq_address is None
    namesrv.wait_for_log(r"zmq disabled")
    conn = raw_connect(namesrv.address)
    assert conn.call(conn.request(RequestCode.GET_BROKER_CLUSTER_INFO)).code == ResponseCode.SUCCESS


def test_the_zmq_endpoint_is_loopback_by_default_and_an_exposed_one_without_curve_is_warned_of(namesrv_factory):
    from namesrv.config import NamesrvConfig
    from namesrv.remoting.curve import exposed_without_curve
    assert not exposed_without_curve(NamesrvConfig().zmq_listen_address)
    exposed = namesrv_factory(zmqListenAddress="tcp://0.0.0.0:*")
    exposed.wait_for_log(r"the ZeroMQ endpoint tcp://0\.0\.0\.0:\d+ accepts unauthenticated peers from the network")
    loopback = namesrv_factory()
    loopback.wait_for_log(r"The Name Server boot success")
    assert "unauthenticated" not in loopback.log_text()
