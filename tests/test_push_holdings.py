"""What route-change subscribers hold unsent (namesrv.processor.push_holdings) and how the route
publisher keeps it within the memory budget (namesrv.route_publisher), driven directly: a real
route table, subscriptions and outbox, a reactor that reports what each connection holds."""
from __future__ import annotations

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.processor.push_holdings import PushHoldings
from namesrv.processor.route_push import RouteSubscriptions
from namesrv.protocol import DataVersion, RemotingCommand, TopicConfig, TopicConfigSerializeWrapper
from namesrv.remoting import Outbox
from namesrv.remoting.budget import RequestBudget
from namesrv.remoting.outbox import Close
from namesrv.route_publisher import PUSH_SHARE, RoutePublisher
from namesrv.routeinfo import Registrant, RouteInfoManager

A, B, C = (Channel("tcp", bytes([i]), f"10.0.0.{i}:1") for i in (1, 2, 3))
BIG = 100  # payloads larger than this are shared in these tests


def payload(size: int, tag: int = 0) -> bytes:
    return bytes([tag]) * size


def test_a_shared_payload_counts_once_and_small_ones_once_per_subscriber() -> None:
    holdings = PushHoldings(BIG)
    shared, small = payload(1000), payload(10)
    holdings.post([(A, shared), (B, shared), (C, shared), (A, small), (B, small)])
    assert holdings.total == 1000 + 2 * 10 and len(holdings) == 3
    assert holdings.holder(A).unsent == 1010 and holdings.holder(A).last_round == 1010
    holdings.measured(C, 0)  # C took it all in
    assert C not in holdings and holdings.total == 1020
    holdings.measured(A, None)  # A's connection is gone
    holdings.measured(B, 5)  # B still holds 5 bytes: the newest, a shared payload's tail
    assert holdings.total == 1000 and holdings.holder(B).own == 0


def test_the_unsent_bytes_are_the_newest_so_older_payloads_are_released() -> None:
    holdings = PushHoldings(BIG)
    first, second, third = payload(1000, 1), payload(2000, 2), payload(3000, 3)
    for round_payload in (first, second, third):
        holdings.post([(A, round_payload), (B, round_payload)])
    assert holdings.total == 6000
    holdings.measured(A, 3500)  # A's unsent bytes are within the last two rounds
    holdings.measured(B, 2500)  # B's within the last one
    assert holdings.total == 5000  # the first payload: nobody holds it any more
    holdings.measured(A, 2000)
    assert holdings.total == 3000
    holdings.measured(B, 3200)  # more than its payloads: the rest is its own (replies)
    assert holdings.total == 3200 and holdings.holder(B).own == 200


def test_those_holding_the_oldest_payload_come_first() -> None:
    holdings = PushHoldings(BIG)
    holdings.post([(A, payload(500, 1))])
    holdings.post([(B, payload(500, 2)), (C, payload(50))])
    holdings.post([(C, payload(500, 3))])
    assert holdings.oldest_first() == [A, B, C]
    holdings.forget(A)
    assert holdings.oldest_first() == [B, C] and holdings.total == 1050


class Reactor:
    """What the publisher asks the reactor: the bytes a connection holds unsent (None: closed)."""

    def __init__(self) -> None:
        self.unsent: dict[Channel, int | None] = {}

    def unsent_of(self, channel: Channel) -> int | None:
        return self.unsent.get(channel, 0)


def publisher(budget_bytes: int, max_output: int = 64 << 20):
    config = NamesrvConfig()
    routes = RouteInfoManager(config)
    routes.track_changes()
    subscriptions = RouteSubscriptions(1000)
    budget = RequestBudget(budget_bytes)
    outbox = Outbox(budget)
    reactor = Reactor()
    body = b'{"queueDatas":[' + b'{"brokerName":"x"},' * 2000 + b'{}]}'  # ~40 KB a topic
    route_publisher = RoutePublisher(routes, subscriptions, lambda topic, standard, zone: body, outbox, reactor,
                                     budget, max_output)
    return routes, subscriptions, budget, outbox, reactor, route_publisher


def change(routes: RouteInfoManager, version: int, topics: int = 5) -> None:
    """A broker's registration changing `topics` topics' routes."""
    table = {f"T{i}": TopicConfig(f"T{i}", 4, 4 + version % 2) for i in range(topics)}
    routes.register(Registrant("C", "10.0.0.9:10911", "b", 0), TopicConfigSerializeWrapper(table, DataVersion(version, 1, 0)),
                    [], None)


def taken(outbox: Outbox) -> list:
    """What the reactor would take from the outbox now (and it counts as sent)."""
    items = outbox.drain()
    outbox.sent()
    return items


def test_a_subscriber_past_its_share_is_dropped_and_told_and_one_that_reads_is_not() -> None:
    routes, subscriptions, budget, outbox, reactor, route_publisher = publisher(1 << 20)  # shares of 256 KiB
    for channel in (A, B):
        subscriptions.subscribe(channel, [], everything=True, standard=True)
    change(routes, 1)
    assert route_publisher.publish_once() == 2
    first_round = len(taken(outbox)[0][1])
    assert budget.pushes == first_round  # one payload, shared
    reactor.unsent[A], reactor.unsent[B] = 0, first_round  # A read it; B did not
    change(routes, 2)
    route_publisher.publish_once()  # B holds one round: within its share (never less than a round)
    taken(outbox)
    reactor.unsent[B] = 2 * first_round
    change(routes, 3)
    route_publisher.publish_once()
    items = taken(outbox)
    notice = [RemotingCommand.decode(frame[4:]) for channel, frame in items if channel == B]
    assert len(notice) == 1 and "dropped to polling" in notice[0].ext_fields["dropped"]
    assert [channel for channel, _ in items].count(A) == 1 and not subscriptions.is_subscribed(B)
    assert subscriptions.dropped == 1 and budget.pushes >= 2 * first_round  # B's pushes still count


def test_past_the_push_budget_the_connections_holding_the_oldest_pushes_are_reset() -> None:
    budget_bytes = 2 << 20
    routes, subscriptions, budget, outbox, reactor, route_publisher = publisher(budget_bytes)
    assert route_publisher.push_limit == int(budget_bytes * PUSH_SHARE)
    channels = [Channel("tcp", bytes([i]), f"10.0.1.{i}:1") for i in range(6)]
    for version, channel in enumerate(channels, 1):  # each subscribes in turn and never reads
        subscriptions.subscribe(channel, [], everything=True, standard=True)
        change(routes, version)
        route_publisher.publish_once()
        for item in taken(outbox):
            if not isinstance(item[1], Close):
                reactor.unsent[item[0]] = reactor.unsent.get(item[0], 0) + len(item[1])
    route_publisher.check()
    closes = [(channel, item) for channel, item in taken(outbox) if isinstance(item, Close)]
    assert closes and all(close.reset and close.cause == "slow_reader" for _, close in closes)
    assert [channel for channel, _ in closes] == channels[:len(closes)]  # the oldest pushes first
    assert budget.pushes <= route_publisher.push_limit and route_publisher.closed == len(closes)


def test_what_is_still_in_the_outbox_is_not_measured_as_taken() -> None:
    routes, subscriptions, budget, outbox, reactor, route_publisher = publisher(256 << 20)
    subscriptions.subscribe(A, [], everything=True, standard=True)
    change(routes, 1)
    route_publisher.publish_once()
    held = budget.pushes
    route_publisher.check()  # the reactor has not taken the round: A's 0 unsent bytes say nothing yet
    assert budget.pushes == held
    taken(outbox)
    route_publisher.check()
    assert budget.pushes == 0 and A not in route_publisher._holdings
