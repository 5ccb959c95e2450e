"""RocketMQ's executors: the pool the request table names for each code, and what overload means.

Route queries get their own pool ("client") so a registration storm cannot starve clients
(RIP-29); the other declared codes share the "default" pool (namesrv.processor.requests);
anything else goes to the public executor, where the processor answers REQUEST_CODE_NOT_SUPPORTED. A full queue,
or a request whose bytes would pass maxInFlightRequestBytes (namesrv.remoting.budget), answers
SYSTEM_BUSY at once from the reactor; oneway requests are bounded in flight and never answered.
Shutting down, requests of clients that understand GO_AWAY are answered that instead.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.protocol.codes import ResponseCode, Version
from namesrv.protocol.command import RemotingCommand
from namesrv.remoting.budget import RequestBudget
from namesrv.remoting.codecs import encode_reply
from namesrv.remoting.endpoints import Job
from namesrv.remoting.executors import BoundedExecutor
from namesrv.remoting.outbox import Delivery, Outbox
from namesrv.request_stats import EXECUTOR, NO_RESPONSE, REFUSED, RequestStats, RequestTally

log = logging.getLogger(__name__)

OVERLOAD_REMARK = "[OVERLOAD]system busy, start flow control for a while"
GO_AWAY_REMARK = "please go away"
#: An executor posts the replies of a batch once they reach this many bytes, not only at its end.
REPLY_BATCH_BYTES = 256 * 1024
#: SYSTEM_BUSY's remark when the request bytes in flight, not the queue, are at their bound.
BUDGET_REMARK = OVERLOAD_REMARK + " (maxInFlightRequestBytes)"


#: How a worker process takes a write request (with its arrival time): prepared, it goes into the
#: write log and is answered once applied (None), or it is answered at once
#: (namesrv.writelog.replication.WorkerBus.forward).
ForwardWrite = Callable[[RemotingCommand, Channel, float], RemotingCommand | None]


class Processor(Protocol):
    """The request layer as the server sees it (namesrv.processor.RequestProcessor)."""

    def process(self, request: RemotingCommand, channel: Channel) -> RemotingCommand: ...


class RequestDispatcher:
    """Routes decoded requests to executors; workers run the processor and post encoded replies."""

    def __init__(self, config: NamesrvConfig, processor: Processor, outbox: Outbox, *, pool_of: Mapping[int, str],
                 forward_write: ForwardWrite | None = None, write_codes: Iterable[int] = (),
                 budget: RequestBudget | None = None, stats: RequestStats | None = None) -> None:
        """`budget`: the process's in-flight budget, shared with `outbox` (default: a new one from config);
        `stats`: where the answers given here are counted (default: a new one)."""
        self._processor = processor
        #: Where `write_codes` requests go instead of the processor, in a worker process.
        self._forward_write = forward_write
        self._write_codes = frozenset(write_codes)
        self._outbox = outbox
        #: Request bytes waiting for or in an executor, with the reactor's incomplete frames.
        self.budget = budget or RequestBudget.from_config(config)
        self.stats = stats or RequestStats()
        run = self._run_batch
        self.client_executor = BoundedExecutor("ClientRequestExecutorThread", config.client_request_thread_pool_nums,
                                               config.client_request_thread_pool_queue_capacity, run)
        self.default_executor = BoundedExecutor("RemotingExecutorThread", config.default_thread_pool_nums,
                                                config.default_thread_pool_queue_capacity, run)
        # RocketMQ's public executor has no bound; a flood of unknown codes must not grow memory, so
        # it shares the default pool's bound.
        self.public_executor = BoundedExecutor("NettyServerPublicExecutor", config.server_callback_executor_threads or 4,
                                               config.default_thread_pool_queue_capacity, run)
        self._executors = (self.client_executor, self.default_executor, self.public_executor)
        pools = {"client": self.client_executor, "default": self.default_executor}
        self._by_code = {code: pools[pool] for code, pool in pool_of.items()}
        self._oneway = threading.BoundedSemaphore(config.server_oneway_semaphore_value)
        self._oneway_dropped = 0
        #: Requests refused because their executor's queue was full, since start.
        self.queue_full = 0
        #: Shutting down: requests from clients that understand it are answered GO_AWAY (reactor thread).
        self.going_away = False
        #: While going away: the connections told GO_AWAY, and those of older clients, which are served.
        self.told_go_away: set[Channel] = set()
        self.served_old: set[Channel] = set()
        self.go_away_answers = 0
        self._oneway_dropped_logged = 0.0

    @property
    def executors(self) -> tuple[BoundedExecutor[Job], ...]:
        return self._executors

    def start(self) -> None:
        for executor in self._executors:
            executor.start()

    def shutdown(self, timeout: float) -> bool:
        """Finish every accepted request; False if some pool did not within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        return all([executor.shutdown(max(0.0, deadline - time.monotonic())) for executor in self._executors])

    def dispatch(self, jobs: list[Job]) -> list[Delivery]:
        """Hand one poll round's requests to their executors, one batch per executor.

        Returns the replies to send at once: SYSTEM_BUSY for requests refused by a full queue or by
        the in-flight budget. Reactor thread only.
        """
        batches: dict[BoundedExecutor[Job], list[Job]] = {}
        public = self.public_executor
        budget = self.budget
        busy: list[Delivery] = []
        over_budget = 0
        going_away = self.going_away
        for job in jobs:
            request = job[1]
            if request.is_response:
                log.debug("dropped a response (code %d, opaque %d) from %s: namesrv sends no requests",
                          request.code, request.opaque, job[0])
                continue
            if going_away and not request.is_oneway and self._go_away(job, busy):
                continue
            if not budget.charge(request.wire_size):
                over_budget += 1
                if not request.is_oneway:
                    busy.append(self._busy(job, BUDGET_REMARK))
                continue
            if request.is_oneway and not self._oneway.acquire(blocking=False):
                budget.release(request.wire_size)
                self._count_dropped_oneway()
                continue
            executor = self._by_code.get(request.code, public)
            batch = batches.get(executor)
            if batch is None:
                batches[executor] = [job]
            else:
                batch.append(job)
        if over_budget:
            budget.report(f"{over_budget} requests refused with SYSTEM_BUSY (oneway: dropped)")
        for executor, batch in batches.items():
            accepted = executor.submit(batch)
            for job in batch[accepted:]:
                request = job[1]
                budget.release(request.wire_size)
                if request.is_oneway:
                    self._oneway.release()
                else:
                    busy.append(self._busy(job, OVERLOAD_REMARK))
            if accepted < len(batch):
                self.queue_full += len(batch) - accepted
                log.warning("%s queue full (%d): %d requests refused with SYSTEM_BUSY", executor.name,
                            executor.capacity, len(batch) - accepted)
        return busy

    def _go_away(self, job: Job, replies: list[Delivery]) -> bool:
        """While shutting down, as RocketMQ 5.x: a request from a client newer than 5.3.1, which
        reconnects and retries elsewhere, is answered GO_AWAY (True); an older client's is served, since
        it would take GO_AWAY for an error. A oneway request has nothing to answer and is served too."""
        channel, request, arrived = job
        if request.version <= Version.V5_3_1:
            self.served_old.add(channel)
            return False
        self.told_go_away.add(channel)
        self.go_away_answers += 1
        replies.append((channel, encode_reply(channel, request.make_response(ResponseCode.GO_AWAY, GO_AWAY_REMARK))))
        self.stats.tally().add(request.code, ResponseCode.GO_AWAY, REFUSED, time.monotonic() - arrived)
        return True

    def _busy(self, job: Job, remark: str) -> Delivery:
        channel, request, arrived = job
        reply = encode_reply(channel, request.make_response(ResponseCode.SYSTEM_BUSY, remark))
        self.stats.tally().add(request.code, ResponseCode.SYSTEM_BUSY, REFUSED, time.monotonic() - arrived)
        return channel, reply

    def _run_batch(self, jobs: list[Job]) -> None:
        """Run a batch in order, posting its replies together, or every REPLY_BATCH_BYTES: a batch
        of 64 topic lists of 1.3 MB must not be held whole by each of sixteen threads."""
        replies: list[Delivery] = []
        #: (request code, response code, arrival) of each of `replies`, counted once they are posted.
        answered: list[tuple[int, int, float]] = []
        reply_bytes = 0
        process = self._processor.process
        forward = self._forward_write
        tally = self.stats.tally()
        held = 0
        for channel, request, arrived in jobs:
            held += request.wire_size
            try:
                if forward is not None and request.code in self._write_codes:
                    response = forward(request, channel, arrived)
                else:
                    response = process(request, channel)
                reply = None if request.is_oneway or response is None else encode_reply(channel, response)
            except Exception as exc:  # noqa: BLE001 - one bad request must not cost the batch its answers
                log.exception("request code %d from %s failed", request.code, channel)
                response = request.make_response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
                reply = None if request.is_oneway else encode_reply(channel, response)
            if request.is_oneway:
                self._oneway.release()
                tally.add(request.code, NO_RESPONSE, EXECUTOR, time.monotonic() - arrived)
            elif reply is not None:
                replies.append((channel, reply))
                answered.append((request.code, response.code, arrived))
                reply_bytes += len(reply)
                if reply_bytes >= REPLY_BATCH_BYTES:
                    self._post(replies, answered, tally)
                    replies, answered, reply_bytes = [], [], 0
        self.budget.release(held)
        if replies:
            self._post(replies, answered, tally)

    def _post(self, replies: list[Delivery], answered: list[tuple[int, int, float]], tally: RequestTally) -> None:
        """Hand replies to the reactor; their answers are queued from now on."""
        self._outbox.put(replies, wait=True)
        now = time.monotonic()
        for code, response, arrived in answered:
            tally.add(code, response, EXECUTOR, now - arrived)

    def _count_dropped_oneway(self) -> None:
        self._oneway_dropped += 1
        now = time.monotonic()
        if now - self._oneway_dropped_logged >= 1.0:
            log.warning("oneway requests over the in-flight bound: %d dropped so far", self._oneway_dropped)
            self._oneway_dropped_logged = now
