"""What every request handler works with, and the shape of a write handler."""
from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.kvconfig import KVConfigManager
from namesrv.protocol.codes import ResponseCode
from namesrv.processor.route_push import RouteSubscriptions
from namesrv.protocol.command import RemotingCommand
from namesrv.routeinfo import RouteInfoManager


@dataclass
class HandlerContext:
    config: NamesrvConfig
    routes: RouteInfoManager
    kv: KVConfigManager
    clock: Callable[[], int]
    #: When the processor was created (ms): needWaitForService counts from here, as RocketMQ does.
    started_ms: int
    #: False in a worker process applying the write log: the supervisor's sequencer wrote the files.
    persist: bool = True
    #: Serialises UPDATE_NAMESRV_CONFIG so two updates cannot interleave their file writes.
    config_lock: threading.Lock = field(default_factory=threading.Lock)
    #: The routes were restored at start (namesrv.routeinfo.persist): nothing to wait for.
    routes_restored: bool = False
    #: Route-change subscriptions of this process's connections (None: made from the config).
    subscriptions: RouteSubscriptions = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.subscriptions is None:
            config = self.config
            self.subscriptions = RouteSubscriptions(config.max_route_subscription_topics,
                                                    config.max_route_subscription_topics_per_connection,
                                                    config.max_route_subscription_topics_per_host)

    def waiting_for_service(self) -> bool:
        """Inside the needWaitForService window: route queries are refused ("name server not ready").
        The window is for brokers to re-register after a start; restored routes need none."""
        config = self.config
        return (config.need_wait_for_service and not self.routes_restored
                and self.clock() - self.started_ms < config.wait_seconds_for_service * 1000)


#: A request handler: decoded request (and the connection it came on) -> response.
Handler = Callable[[HandlerContext, RemotingCommand, Channel], RemotingCommand]

#: What a write handler's `prepare` makes of a request for its `apply`: plain data (None, bool, int,
#: str, bytes, lists or tuples, dicts with str keys), so that worker processes can ship it in their
#: write log as msgpack; `apply` must give the same result for it after that round trip (lists for tuples).
Change = Any


class Refusal(NamedTuple):
    """An outcome that answers with an error code: nothing was changed."""

    code: int
    remark: str | None


class Hints(enum.IntEnum):
    """What a write's `prepare` may lean on (false for NONE, so a handler that only asks "may I use
    hints?" reads it as a bool)."""

    #: Prepare from the request alone (again, after `apply` found a hint broken: RETRY).
    NONE = 0
    #: Read the route table to leave work out (a re-registration's unchanged body or topic entries).
    TABLE = 1
    #: As TABLE, on the reactor thread: whatever is expensive is an executor's, and `prepare`
    #: answers EXECUTOR for it (a registration body to decode past inlineRegistrationMaxBodyBytes).
    INLINE = 2


class _Retry:
    """`apply`'s outcome when the change was prepared against hints from the route table that no
    longer hold where it lands: nothing was changed, the request must be prepared again without them."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "RETRY"


RETRY = _Retry()


class _Executor:
    """`prepare`'s answer on the reactor thread (`Hints.INLINE`) to a request that is an executor's
    work: nothing was changed, an executor processes it whole."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "EXECUTOR"


EXECUTOR = _Executor()


def answer_success(ctx: HandlerContext, request: RemotingCommand, outcome: object) -> RemotingCommand:
    """The answer of most writes."""
    return request.make_response(ResponseCode.SUCCESS)


@dataclass(frozen=True, slots=True)
class WriteHandler:
    """A write request in three steps, so that worker processes can run each where it belongs.

    `prepare(ctx, request, channel, hints)` reads and checks the request and changes nothing: the
    worker that received it runs it once. It returns the `Change`, or a response when there is
    nothing to apply (bad input, a refusal), or (only with `Hints.INLINE`) EXECUTOR when the
    request is not for the reactor. With `hints`, it may read the route table to leave work out (a
    re-registration's unchanged body, its unchanged topic entries); `apply` then checks the hint
    and answers `RETRY` if it no longer holds. `apply(ctx, change, channel)` changes state and
    returns an outcome: every worker runs it, in the write log's order, without the request. A
    `Refusal` outcome changes nothing and answers with its code. `answer(ctx, request, outcome)`
    makes the response to any other outcome (only where the request was received). One process
    simply runs the three in a row (`__call__`).

    `replayable`: `prepare` reads nothing but the request's header and body (no table, no
    channel), and `answer` nothing but the request and the outcome. The reactor may then keep a
    request's change and answer and, for the next request with the same header and body, run
    `apply` on the kept change and, if the outcome is the same, send the kept answer with the new
    opaque (namesrv.processor.write_fast_path): a broker's heartbeats repeat one header.
    """

    prepare: Callable[[HandlerContext, RemotingCommand, Channel, Hints], Change | RemotingCommand]
    apply: Callable[[HandlerContext, Change, Channel], object]
    answer: Callable[[HandlerContext, RemotingCommand, object], RemotingCommand] = answer_success
    replayable: bool = False

    def __call__(self, ctx: HandlerContext, request: RemotingCommand, channel: Channel,
                 inline: bool = False) -> RemotingCommand | None:
        """The three steps in a row. `inline` (the reactor's thread): None for what is an
        executor's work, the expensive requests and a hinted change that does not apply (which an
        executor prepares again without hints)."""
        change = self.prepare(ctx, request, channel, Hints.INLINE if inline else Hints.TABLE)
        if change is EXECUTOR:
            return None
        if type(change) is RemotingCommand:
            return change
        outcome = self.apply(ctx, change, channel)
        if outcome is RETRY:
            if inline:
                return None
            change = self.prepare(ctx, request, channel, Hints.NONE)
            if type(change) is RemotingCommand:
                return change
            outcome = self.apply(ctx, change, channel)
        return self.respond(ctx, request, outcome)

    def respond(self, ctx: HandlerContext, request: RemotingCommand, outcome: object) -> RemotingCommand:
        if type(outcome) is Refusal:
            return request.make_response(outcome.code, outcome.remark)
        return self.answer(ctx, request, outcome)
