"""REGISTER_BROKER answered on the reactor thread: the periodic repeat of an unchanged body, and
a changed body small enough to apply at once.

A broker re-registers every 30 seconds, and almost always with the topic table it sent last time.
The regular path recognises that by the body's fingerprint and only refreshes the broker's
liveness, so what is left to pay is the request's trip through an executor and back: more than
the work itself. Here the header is known from the broker's previous registration
(`SeenHeaders`), the request goes through the regular path (`RequestProcessor.process`), and
the answer is a pre-encoded header with the opaque patched in.

A changed body up to inlineRegistrationMaxBodyBytes (uncompressed) is answered here too: the new
DataVersion usually changes a few topics, which costs less than the hand-off (an executor
thread would hold the interpreter lock as long). A larger or compressed body that is not a
repeat steps aside to the executors with None; the bytes answered here are the ones the regular
path would send (tests/test_register_fast_path.py).
"""
from __future__ import annotations

from collections.abc import Callable

from namesrv.caches import BoundedMemo
from namesrv.channel import Channel
from namesrv.processor.broker_handlers import (RegistrationHeader, register_broker, registration_answer,
                                               repeats_last_body)
from namesrv.processor.context import HandlerContext
from namesrv.processor.seen_headers import OpaqueTemplate
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.command import RemotingCommand
from namesrv.protocol.route import RegisterBrokerResult

#: The regular path (RequestProcessor.process).
Process = Callable[..., RemotingCommand | None]

#: Bounds of the remembered response headers (distinct master/HA addresses answered; emptied when full).
TEMPLATES = 1024
TEMPLATE_BYTES = 4 * 1024 * 1024


class RegistrationFastPath:
    """`answer(...)`: the response to a registration answered here, else None (reactor thread only)."""

    def __init__(self, ctx: HandlerContext, process: Process) -> None:
        self._ctx = ctx
        self._process = process
        self.templates: BoundedMemo[tuple[int, tuple[tuple[str, str], ...]], OpaqueTemplate] = BoundedMemo(
            TEMPLATES, TEMPLATE_BYTES)

    def answer(self, registration: RegistrationHeader, request: RemotingCommand,
               channel: Channel) -> tuple[bytes, int] | None:
        """(the response frame, its response code), or None: not answered here. `request` is the
        decoded registration; `registration` its header read."""
        ctx = self._ctx
        repeat = repeats_last_body(ctx, registration, request.body or b"", request.body_crc32())
        if repeat:
            # The periodic repeat, most of a broker's traffic: the handler's own steps, answered
            # from a template without building a response.
            change = register_broker.prepare(ctx, request, channel, True)
            if type(change) is not RemotingCommand:  # else refused (a CRC32 mismatch): the regular path answers
                outcome = register_broker.apply(ctx, change, channel)
                if type(outcome) is RegisterBrokerResult:
                    return self._success(request, *registration_answer(ctx, outcome)), ResponseCode.SUCCESS
        limit = ctx.config.inline_registration_max_body_bytes
        small = limit and not registration.compressed and len(request.body or b"") <= limit
        if not small and not repeat:
            return None
        # A large body is only refreshed here: if the route table declines, decoding it is an executor's work.
        response = self._process(request, channel, retry=bool(small))
        if response is None:
            return None
        if response.code != ResponseCode.SUCCESS:
            return response.encode(), response.code
        return self._success(request, response.ext_fields or {}, response.body), ResponseCode.SUCCESS

    def _success(self, request: RemotingCommand, ext_fields: dict[str, str], body: bytes | None) -> bytes:
        """The SUCCESS answer's frame: its header encoded once per codec and header fields, the opaque stamped in."""
        key = (request.serialize_type, tuple(sorted(ext_fields.items())))
        template = self.templates.table.get(key)
        if template is None:
            template = OpaqueTemplate(request.make_response(ResponseCode.SUCCESS, ext_fields=ext_fields))
            self.templates.remember(key, template, 2 * sum(len(k) + len(v) for k, v in key[1]))
        return template.frame(request.opaque, body)
