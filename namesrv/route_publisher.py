"""The thread that pushes route changes to their subscribers (namesrv.processor.route_push).

It waits for the route table to record a change of a tracked topic, takes every change recorded
since its last round (so a burst coalesces into one round), lets the subscriptions make the
round's pushes and posts them to the reactor through the outbox, in parts of REPLY_BATCH_BYTES
that wait for room in the in-flight budget like any executor's replies.

What subscribers hold unsent counts in the memory budget (maxInFlightRequestBytes, as `pushes`),
as this process holds it (namesrv.processor.push_holdings): the reactor's backlog for each and
what ZeroMQ's pipe holds for it, measured (namesrv.remoting.reactor.Reactor.unsent_of) before
each round, once the previous round has left the outbox, and every CHECK_SECONDS while anyone
holds anything. Two rules keep it bounded:

* A subscriber's share: PUSH_SHARE of the budget split between the subscribers, but never less
  than the last round it was sent (a subscriber that took the previous round in is sent the
  next, however large) and never more than half of maxConnectionOutputBytes. A subscriber
  holding more than its share when a round comes is dropped to polling: told so (ROUTE_CHANGED
  with `dropped`) and sent nothing more.
* The subscribers together, dropped ones included, may hold PUSH_SHARE of the budget: past it
  the connections holding the oldest pushes are reset (their unsent output goes with them) until
  what is left fits. So peers that do not read cannot take the budget from requests.
"""
from __future__ import annotations

import logging
import threading
import time

from namesrv.channel import Channel
from namesrv.processor.push_holdings import PushHoldings
from namesrv.processor.route_push import RouteBody, RouteSubscriptions
from namesrv.remoting import Outbox, Reactor
from namesrv.remoting.budget import RequestBudget
from namesrv.remoting.codecs import encode_reply
from namesrv.remoting.dispatch import REPLY_BATCH_BYTES
from namesrv.remoting.endpoints import MAX_MESSAGE_BYTES
from namesrv.routeinfo import RouteInfoManager

log = logging.getLogger(__name__)

#: How often the thread looks whether it should stop, seconds.
STOP_POLL_SECONDS = 0.1
#: How often what subscribers hold is measured between rounds, while anyone holds anything.
CHECK_SECONDS = 0.5
#: The part of maxInFlightRequestBytes route-change pushes may hold.
PUSH_SHARE = 0.5


class RoutePublisher:
    """`start()`, then it runs until `stop()`."""

    def __init__(self, routes: RouteInfoManager, subscriptions: RouteSubscriptions, route_body: RouteBody,
                 outbox: Outbox, reactor: Reactor, budget: RequestBudget, max_connection_output_bytes: int) -> None:
        """`route_body`: a topic's route as route queries are answered (RequestProcessor.route_body)."""
        self._routes = routes
        self._subscriptions = subscriptions
        self._route_body = route_body
        self._outbox = outbox
        self._reactor = reactor
        self._budget = budget
        self._holdings = PushHoldings(MAX_MESSAGE_BYTES)
        #: What all subscribers may hold, and one at most.
        self.push_limit = int(budget.limit * PUSH_SHARE)
        self._connection_cap = max_connection_output_bytes // 2
        #: The outbox batch of the last pushes posted: measured once the reactor has taken it.
        self._last_posted = 0
        self._next_check = 0.0
        #: Connections reset for what they held past the push budget, since start.
        self.closed = 0
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="NamesrvRoutePublisher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        if self._thread.ident is not None:
            self._thread.join(5)

    def publish_once(self) -> int:
        """One round: push what changed since the last one; returns the deliveries posted."""
        routes = self._routes
        routes.changes_ready.clear()
        started = time.monotonic()
        changed = routes.take_changes()
        if not changed or not len(self._subscriptions):
            return 0
        self._measure()
        deliveries = self._drop_past_share()
        self._close_past_budget()
        deliveries += self._subscriptions.publish(changed, self._route_body, routes.has_topic, encode_reply)
        self._holdings.post(deliveries)
        self._budget.pushes = self._holdings.total
        part: list[tuple[Channel, bytes]] = []
        size = 0
        for delivery in deliveries:
            part.append(delivery)
            size += len(delivery[1])
            if size >= REPLY_BATCH_BYTES:
                self._last_posted = self._outbox.put(part, wait=True)
                part, size = [], 0
        if part:
            self._last_posted = self._outbox.put(part, wait=True)
        self._subscriptions.record_round(time.monotonic() - started)
        return len(deliveries)

    def check(self) -> None:
        """Between rounds: measure what subscribers hold and keep it within the push budget."""
        self._measure()
        self._close_past_budget()
        self._budget.pushes = self._holdings.total

    def _measure(self) -> None:
        """What each subscriber that was sent pushes holds now, unless the last ones posted are
        still in the outbox (they would not be counted yet)."""
        if self._outbox.delivered_through < self._last_posted:
            return
        holdings, reactor = self._holdings, self._reactor
        for channel in holdings.channels():
            holdings.measured(channel, reactor.unsent_of(channel))

    def _drop_past_share(self) -> list[tuple[Channel, bytes]]:
        """Drop to polling the subscribers holding more than their share; the notices to send them."""
        subscriptions = self._subscriptions
        fair = self.push_limit // max(1, len(subscriptions))
        notices = []
        example = ""
        for channel in self._holdings.channels():
            holder = self._holdings.holder(channel)
            share = min(self._connection_cap, max(holder.last_round, fair))
            if holder.unsent > share:
                notice = subscriptions.drop(channel, encode_reply)
                if notice is not None:
                    notices.append(notice)
                    example = example or f"{channel} holds {holder.unsent} unsent bytes, its share is {share}"
        if notices:
            log.warning("%d route-change subscribers dropped to polling for holding more than their share (%s)",
                        len(notices), example)
        return notices

    def _close_past_budget(self) -> None:
        """Reset the connections holding the oldest pushes while the subscribers hold more than the push budget."""
        holdings = self._holdings
        if holdings.total <= self.push_limit:
            return
        closed = 0
        for channel in holdings.oldest_first():
            if holdings.total <= self.push_limit:
                break
            self._subscriptions.unsubscribe(channel)
            holdings.forget(channel)
            self._outbox.close_channel(channel, "it holds the oldest route-change pushes unsent while subscribers "
                                       f"hold more than their part of maxInFlightRequestBytes ({self.push_limit})",
                                       cause="slow_reader", reset=True)
            closed += 1
        self.closed += closed
        log.warning("reset %d route-change subscribers holding the oldest pushes: subscribers held more than %d "
                    "bytes (%d reset so far)", closed, self.push_limit, self.closed)

    def _run(self) -> None:
        ready = self._routes.changes_ready
        while not self._stopping:
            try:
                if ready.wait(STOP_POLL_SECONDS):
                    self.publish_once()
                now = time.monotonic()
                if len(self._holdings) and now >= self._next_check:
                    self._next_check = now + CHECK_SECONDS
                    self.check()
            except Exception:  # noqa: BLE001 - a failed round must not end the pushes
                log.exception("pushing route changes failed")
