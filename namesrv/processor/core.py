"""RequestProcessor: one handler per NameServer request code, and the rules every response follows."""
from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.kvconfig import KVConfigManager
from namesrv.processor import route_handlers
from namesrv.processor.context import Change, HandlerContext, Hints, Refusal
from namesrv.processor.header import BadRequest
from namesrv.processor.inline import InlineAnswers
from namesrv.processor.requests import BY_CODE, RequestSpec
from namesrv.processor.route_push import RouteSubscriptions
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.command import RemotingCommand
from namesrv.errors import ProtocolError
from namesrv.routeinfo import RouteInfoManager, now_ms
from namesrv.routeinfo.history import RouteHistory
from namesrv.security import AdminGuard

log = logging.getLogger(__name__)


def file_error(exc: OSError) -> str:
    """A file the server could not write (its folder gone, a full disk: not a bug), in one line, with
    no traceback: startup checked the paths (namesrv.state_files), so this is what changed since."""
    target = exc.filename2 or exc.filename  # a rename's target, not the temporary file it moves
    return f"cannot write{f' {target}' if target else ''}: {exc.strerror or exc}"


class RequestProcessor:
    """Decoded request in, response out; sans-IO and safe to call from many threads.

    `process` never raises: bad input becomes SYSTEM_ERROR with a remark naming the problem, an
    unknown code REQUEST_CODE_NOT_SUPPORTED, an admin request the `AdminGuard` refuses
    NO_PERMISSION, and any other failure SYSTEM_ERROR with its text.
    """

    def __init__(self, config: NamesrvConfig, routes: RouteInfoManager, kv: KVConfigManager,
                 clock: Callable[[], int] = now_ms, *, persist: bool = True, inline_writes: bool = True) -> None:
        """`persist=False`: a worker process applying the write log changes memory only (the
        supervisor's sequencer wrote the KV and config files). `inline_writes=False`: the reactor's
        inline answers never apply a registration (a worker process applies writes in log order)."""
        self._ctx = HandlerContext(config, routes, kv if persist else kv.memory_only(), clock, clock(),
                                   persist=persist)
        if routes.route_events is None and config.route_history_max_bytes:
            routes.watch_routes(RouteHistory.from_config(config))  # what EXPLAIN_ROUTE answers from
        # Read once: the security keys are locked, no request can change them.
        self._admin_guard = AdminGuard.from_settings(config.admin_allowed_networks, config.admin_token)
        #: Requests answered from raw frames (the reactor's shortcut past `process`).
        self.inline = InlineAnswers(self._ctx, self, registrations=inline_writes)

    def route_body(self, topic: str, standard: bool, zone: str | None = None) -> bytes | None:
        """A topic's encoded route as route queries are answered (route-change pushes send the same)."""
        return route_handlers.route_body(self._ctx, topic, standard, zone)

    @property
    def subscriptions(self) -> RouteSubscriptions:
        """The route-change subscriptions (the publisher pushes to them, a closed connection leaves them)."""
        return self._ctx.subscriptions

    def serving_routes(self) -> bool:
        """Are route queries answered (past the needWaitForService window)?"""
        return not self._ctx.waiting_for_service()

    def serve_restored_routes(self) -> None:
        """The route tables were restored (a warm restart): route queries need not wait for brokers."""
        self._ctx.routes_restored = True

    def process(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """The response to `request` (also for oneway requests: the server drops it)."""
        spec = BY_CODE.get(request.code)
        if spec is None:
            log.warning("request code %s from %s not supported", request.code, channel)
            return request.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                         f" request type {request.code} not supported")
        return self._guarded(spec, request, channel)

    def prepare(self, request: RemotingCommand, channel: Channel,
                hints: Hints = Hints.TABLE) -> Change | RemotingCommand:
        """A write's first step where it was received (the admin guard included): its `Change`, or
        the response when there is nothing to apply. `request.code` must be a write code."""
        spec = BY_CODE[request.code]
        return self._guarded(spec, request, channel, hints=hints)

    def apply(self, code: int, change: Change, channel: Channel, logged: bool = False) -> object:
        """A prepared write's change, applied here (in a worker process: in the write log's order,
        `logged`: as the log carried it, revived first: `WriteHandler.revive`). A failure is an
        outcome like any other (a `Refusal` with its text), never an exception."""
        try:
            handler = BY_CODE[code].handler
            if logged and handler.revive is not None:
                change = handler.revive(change)
            return handler.apply(self._ctx, change, channel)
        except OSError as exc:
            log.error("applying a change of request code %s from %s failed: %s", code, channel, file_error(exc))
            return Refusal(ResponseCode.SYSTEM_ERROR, file_error(exc))
        except Exception as exc:  # noqa: BLE001 - one bad change must become an answer, never stop the log
            log.exception("applying a change of request code %s from %s failed", code, channel)
            return Refusal(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")

    def answer(self, request: RemotingCommand, outcome: object) -> RemotingCommand:
        """The response to a write whose change was applied with `outcome` (or refused: a `Refusal`)."""
        spec = BY_CODE[request.code]
        return _with_response_header(spec, spec.handler.respond(self._ctx, request, outcome))

    def answer_reads(self, code: int) -> Callable[[], object] | None:
        """What the answer to a write of `code` reads besides the request and the outcome, as a
        call (None: nothing; `WriteHandler.answer_reads`): a kept answer is current while it
        returns what it returned before the answer was made."""
        reads = BY_CODE[code].handler.answer_reads
        return None if reads is None else partial(reads, self._ctx)

    def _guarded(self, spec: RequestSpec, request: RemotingCommand, channel: Channel,
                 hints: Hints | None = None) -> RemotingCommand | Change:
        """The handler's result (with `hints`: the write's `prepare` only) behind the admin guard,
        with failures made responses."""
        try:
            refused = self._refused(request, channel) if spec.admin else None
            if refused is not None:
                result = refused
            elif hints is not None:
                result = spec.handler.prepare(self._ctx, request, channel, hints)
            else:
                result = spec.handler(self._ctx, request, channel)
        except (BadRequest, ProtocolError) as exc:
            log.warning("bad request code %s from %s: %s", request.code, channel, exc)
            result = request.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
        except OSError as exc:
            log.error("request code %s from %s failed: %s", request.code, channel, file_error(exc))
            result = request.make_response(ResponseCode.SYSTEM_ERROR, file_error(exc))
        except Exception as exc:  # noqa: BLE001 - a handler failure must become an answer, never a dropped connection
            log.exception("request code %s from %s failed", request.code, channel)
            result = request.make_response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if spec.response_header and type(result) is RemotingCommand:
            _with_response_header(spec, result)
        return result

    def _refused(self, request: RemotingCommand, channel: Channel) -> RemotingCommand | None:
        """NO_PERMISSION for an admin request the guard refuses; None when the request may run."""
        if not self._admin_guard.restricted:
            return None
        refusal = self._admin_guard.refusal(request.ext_fields, channel.remote_addr)
        if refusal is None:
            log.info("admin request code %s from %s admitted", request.code, channel)
            return None
        log.warning("admin request code %s from %s refused: %s", request.code, channel, refusal)
        return request.make_response(ResponseCode.NO_PERMISSION, refusal)


def _with_response_header(spec: RequestSpec, response: RemotingCommand) -> RemotingCommand:
    """Java answers a code with a typed response header with extFields present, even on errors."""
    if spec.response_header and response.ext_fields is None:
        response.ext_fields = {}
    return response
