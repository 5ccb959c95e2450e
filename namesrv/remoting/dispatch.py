"""RocketMQ's executors: the pool the request table names for each code, and what overload means.

Route queries get their own pool ("client") so a registration storm cannot starve clients
(RIP-29); the other declared codes share the "default" pool (namesrv.processor.requests);
anything else goes to the public executor, where the processor answers REQUEST_CODE_NOT_SUPPORTED. A full queue answers SYSTEM_BUSY at once from
the reactor; oneway requests are bounded in flight and never answered.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.command import RemotingCommand
from namesrv.remoting.codecs import encode_reply
from namesrv.remoting.endpoints import Job
from namesrv.remoting.executors import BoundedExecutor
from namesrv.remoting.outbox import Delivery, Outbox

log = logging.getLogger(__name__)

OVERLOAD_REMARK = "[OVERLOAD]system busy, start flow control for a while"


#: How a worker process takes a write request: prepared, it goes into the write log and is answered
#: once applied (None), or it is answered at once (namesrv.writelog.replication.WorkerBus.forward).
ForwardWrite = Callable[[RemotingCommand, Channel], RemotingCommand | None]


class Processor(Protocol):
    """The request layer as the server sees it (namesrv.processor.RequestProcessor)."""

    def process(self, request: RemotingCommand, channel: Channel) -> RemotingCommand: ...


class RequestDispatcher:
    """Routes decoded requests to executors; workers run the processor and post encoded replies."""

    def __init__(self, config: NamesrvConfig, processor: Processor, outbox: Outbox, *, pool_of: Mapping[int, str],
                 forward_write: ForwardWrite | None = None, write_codes: Iterable[int] = ()) -> None:
        self._processor = processor
        #: Where `write_codes` requests go instead of the processor, in a worker process.
        self._forward_write = forward_write
        self._write_codes = frozenset(write_codes)
        self._outbox = outbox
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
        self._oneway_dropped_logged = 0.0

    def start(self) -> None:
        for executor in self._executors:
            executor.start()

    def shutdown(self, timeout: float) -> bool:
        """Finish every accepted request; False if some pool did not within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        return all([executor.shutdown(max(0.0, deadline - time.monotonic())) for executor in self._executors])

    def dispatch(self, jobs: list[Job]) -> list[Delivery]:
        """Hand one poll round's requests to their executors, one batch per executor.

        Returns the replies to send at once: SYSTEM_BUSY for requests a full queue refused.
        Reactor thread only.
        """
        batches: dict[BoundedExecutor[Job], list[Job]] = {}
        public = self.public_executor
        for job in jobs:
            request = job[1]
            if request.is_response:
                log.debug("dropped a response (code %d, opaque %d) from %s: namesrv sends no requests",
                          request.code, request.opaque, job[0])
                continue
            if request.is_oneway and not self._oneway.acquire(blocking=False):
                self._count_dropped_oneway()
                continue
            executor = self._by_code.get(request.code, public)
            batch = batches.get(executor)
            if batch is None:
                batches[executor] = [job]
            else:
                batch.append(job)
        busy: list[Delivery] = []
        for executor, batch in batches.items():
            accepted = executor.submit(batch)
            for channel, request in batch[accepted:]:
                if request.is_oneway:
                    self._oneway.release()
                else:
                    busy.append((channel, encode_reply(channel, request.make_response(ResponseCode.SYSTEM_BUSY,
                                                                                        OVERLOAD_REMARK))))
            if accepted < len(batch):
                log.warning("%s queue full (%d): %d requests refused with SYSTEM_BUSY", executor.name,
                            executor.capacity, len(batch) - accepted)
        return busy

    def _run_batch(self, jobs: list[Job]) -> None:
        replies: list[Delivery] = []
        process = self._processor.process
        forward = self._forward_write
        for channel, request in jobs:
            try:
                if forward is not None and request.code in self._write_codes:
                    response = forward(request, channel)
                else:
                    response = process(request, channel)
                reply = None if request.is_oneway or response is None else encode_reply(channel, response)
            except Exception as exc:  # noqa: BLE001 - one bad request must not cost the batch its answers
                log.exception("request code %d from %s failed", request.code, channel)
                reply = None if request.is_oneway else encode_reply(
                    channel, request.make_response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}"))
            if request.is_oneway:
                self._oneway.release()
            elif reply is not None:
                replies.append((channel, reply))
        if replies:
            self._outbox.put(replies)

    def _count_dropped_oneway(self) -> None:
        self._oneway_dropped += 1
        now = time.monotonic()
        if now - self._oneway_dropped_logged >= 1.0:
            log.warning("oneway requests over the in-flight bound: %d dropped so far", self._oneway_dropped)
            self._oneway_dropped_logged = now
