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


#: Hints.INLINE read off the enum once, as namesrv.protocol.codes.V3_0_11 is: the reactor prepares every
#: registration it answers with it.
HINTS_INLINE = Hints.INLINE


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


def every_change(change: Change) -> bool:
    """`WriteHandler.replayable` of a write whose `prepare` reads nothing but the request's header
    and body: any change it makes holds for the same header and body again."""
    return True


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

    `replayable(change)`: may `change` be applied again for a later request with the same header
    and body (None: no change may)? The reactor then keeps the change and its answer and, for such
    a request, runs `apply` on the kept change and, if the outcome is the same (and what
    `answer_reads(ctx)` returns, when given: what `answer` reads besides the request and the
    outcome), sends the kept answer with the new opaque (namesrv.processor.write_fast_path): a
    broker's heartbeats repeat one header and body. A change `prepare` made from the request alone
    qualifies (`every_change`), and so does one leaning on the route table when `apply` checks the
    hint again (a registration's refresh: RETRY when the broker's last body is no longer this one).

    `revive(change)`: the change as `prepare` made it, from what the write log carried (msgpack
    gives tuples back as lists); applied once where the log is read, so `apply` sees one form
    (None: `apply` takes the log's form as it is).
    """

    prepare: Callable[[HandlerContext, RemotingCommand, Channel, Hints], Change | RemotingCommand]
    apply: Callable[[HandlerContext, Change, Channel], object]
    answer: Callable[[HandlerContext, RemotingCommand, object], RemotingCommand] = answer_success
    replayable: Callable[[Change], bool] | None = None
    answer_reads: Callable[[HandlerContext], object] | None = None
    revive: Callable[[Change], Change] | None = None

    def __call__(self, ctx: HandlerContext, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """The three steps in a row (the reactor runs them one by one: WriteFastPath)."""
        change = self.prepare(ctx, request, channel, Hints.TABLE)
        if type(change) is RemotingCommand:
            return change
        outcome = self.apply(ctx, change, channel)
        if outcome is RETRY:
            change = self.prepare(ctx, request, channel, Hints.NONE)
            if type(change) is RemotingCommand:
                return change
            outcome = self.apply(ctx, change, channel)
        return self.respond(ctx, request, outcome)

    def respond(self, ctx: HandlerContext, request: RemotingCommand, outcome: object) -> RemotingCommand:
        if type(outcome) is Refusal:
            return request.make_response(outcome.code, outcome.remark)
        return self.answer(ctx, request, outcome)
