"""RequestProcessor: one handler per NameServer request code, and the rules every response follows."""
from __future__ import annotations

import logging
from collections.abc import Callable

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.kvconfig import KVConfigManager
from namesrv.processor.context import HandlerContext
from namesrv.processor.header import BadRequest
from namesrv.processor.inline import InlineAnswers
from namesrv.processor.requests import BY_CODE
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.command import RemotingCommand
from namesrv.errors import ProtocolError
from namesrv.routeinfo import RouteInfoManager, now_ms
from namesrv.security import AdminGuard

log = logging.getLogger(__name__)


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
        # Read once: the security keys are locked, no request can change them.
        self._admin_guard = AdminGuard.from_settings(config.admin_allowed_networks, config.admin_token)
        #: Requests answered from raw frames (the reactor's shortcut past `process`).
        self.inline = InlineAnswers(self._ctx, self.process, registrations=inline_writes)

    def process(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """The response to `request` (also for oneway requests: the server drops it)."""
        spec = BY_CODE.get(request.code)
        if spec is None:
            log.warning("request code %s from %s not supported", request.code, channel)
            return request.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                         f" request type {request.code} not supported")
        try:
            refused = self._refused(request, channel) if spec.admin else None
            response = refused if refused is not None else spec.handler(self._ctx, request, channel)
        except (BadRequest, ProtocolError) as exc:
            log.warning("bad request code %s from %s: %s", request.code, channel, exc)
            response = request.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
        except Exception as exc:  # noqa: BLE001 - a handler failure must become an answer, never a dropped connection
            log.exception("request code %s from %s failed", request.code, channel)
            response = request.make_response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if spec.response_header and response.ext_fields is None:
            response.ext_fields = {}
        return response

    @staticmethod
    def respond(request: RemotingCommand, code: int, remark: str | None) -> RemotingCommand:
        """An answer decided elsewhere (a write the sequencer refused), with the rules every response follows."""
        spec = BY_CODE.get(request.code)
        return request.make_response(code, remark, ext_fields={} if spec is not None and spec.response_header
                                     else None)

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
