"""The thread that pushes route changes to their subscribers (namesrv.processor.route_push).

It waits for the route table to record a change of a tracked topic, takes every change recorded
since its last round (so a burst coalesces into one round), lets the subscriptions make the
round's pushes and posts them to the reactor through the outbox, in parts of REPLY_BATCH_BYTES
that wait for room in the in-flight budget like any executor's replies. A subscriber whose
connection holds more than half of what the reactor lets it hold unsent (the part of
maxConnectionOutputBytes beside ZeroMQ's pipe, past which the connection is closed) is dropped to
polling first.
"""
from __future__ import annotations

import logging
import threading

from namesrv.channel import Channel
from namesrv.processor.route_push import RouteBody, RouteSubscriptions
from namesrv.remoting import Outbox, Reactor
from namesrv.remoting.codecs import encode_reply
from namesrv.remoting.dispatch import REPLY_BATCH_BYTES
from namesrv.routeinfo import RouteInfoManager

log = logging.getLogger(__name__)

#: How often the thread looks whether it should stop, seconds.
STOP_POLL_SECONDS = 0.1


class RoutePublisher:
    """`start()`, then it runs until `stop()`."""

    def __init__(self, routes: RouteInfoManager, subscriptions: RouteSubscriptions, route_body: RouteBody,
                 outbox: Outbox, reactor: Reactor) -> None:
        """`route_body`: a topic's route as route queries are answered (RequestProcessor.route_body)."""
        self._routes = routes
        self._subscriptions = subscriptions
        self._route_body = route_body
        self._outbox = outbox
        self._reactor = reactor
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
        changed = routes.take_changes()
        if not changed or not len(self._subscriptions):
            return 0
        deliveries = self._subscriptions.publish(changed, self._route_body, routes.has_topic, encode_reply,
                                                 self._too_slow)
        part: list[tuple[Channel, bytes]] = []
        size = 0
        for delivery in deliveries:
            part.append(delivery)
            size += len(delivery[1])
            if size >= REPLY_BATCH_BYTES:
                self._outbox.put(part, wait=True)
                part, size = [], 0
        if part:
            self._outbox.put(part, wait=True)
        return len(deliveries)

    def _too_slow(self, channel: Channel) -> bool:
        return self._reactor.backlog_of(channel) > self._reactor.backlog_limit // 2

    def _run(self) -> None:
        ready = self._routes.changes_ready
        while not self._stopping:
            if not ready.wait(STOP_POLL_SECONDS):
                continue
            try:
                self.publish_once()
            except Exception:  # noqa: BLE001 - a failed round must not end the pushes
                log.exception("pushing route changes failed")
