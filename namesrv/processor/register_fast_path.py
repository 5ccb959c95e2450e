"""REGISTER_BROKER answered on the reactor thread: the periodic repeat of an unchanged body, and
a changed body small enough to apply at once.

A broker re-registers every 30 seconds, and almost always with the topic table it sent last time.
The regular path recognises that by the body's fingerprint and only refreshes the broker's
liveness, so what is left to pay is the request's trip through an executor and back: more than
the work itself. Here the header is known from the broker's previous registration
(`SeenHeaders`), the body is checked against its announced CRC32 and its last fingerprint, the
liveness refresh is the regular path's own (`RouteInfoManager.refresh_registration`), and the
answer is a pre-encoded header with the opaque patched in.

A changed body up to inlineRegistrationMaxBodyBytes (uncompressed) goes through the regular
path's own `RequestProcessor.process` here: the new DataVersion usually changes a few topics,
which costs less than the hand-off (an executor thread would hold the interpreter lock as long).
A larger or compressed body and a CRC32 mismatch step aside to the executors with None; the bytes
answered here are the ones the regular path would send (tests/test_register_fast_path.py).
"""
from __future__ import annotations

from collections.abc import Callable

from namesrv.caches import BoundedMemo
from namesrv.channel import Channel
from namesrv.processor.broker_handlers import (RegistrationHeader, order_topics_body, refresh_if_unchanged,
                                               registration_ext_fields)
from namesrv.processor.context import HandlerContext
from namesrv.processor.seen_headers import OpaqueTemplate
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.command import RemotingCommand

#: Bounds of the remembered response headers (distinct master/HA addresses answered; emptied when full).
TEMPLATES = 1024
TEMPLATE_BYTES = 4 * 1024 * 1024

#: The regular path (RequestProcessor.process).
Process = Callable[[RemotingCommand, Channel], RemotingCommand]


class RegistrationFastPath:
    """`answer(...)`: the response frame to a registration answered here, else None (reactor thread only)."""

    def __init__(self, ctx: HandlerContext, process: Process) -> None:
        self._ctx = ctx
        self._process = process
        self.templates: BoundedMemo[tuple[int, tuple[tuple[str, str], ...]], OpaqueTemplate] = BoundedMemo(
            TEMPLATES, TEMPLATE_BYTES)

    def answer(self, registration: RegistrationHeader, request: RemotingCommand, channel: Channel) -> bytes | None:
        """`request` is the decoded registration; `registration` its header read."""
        if not registration.body_intact(request.body_crc32()):
            return None  # the regular path answers "crc32 not match"
        result = refresh_if_unchanged(self._ctx, registration, request, channel)
        if result is None:
            return self._apply(registration, request, channel)
        return self._success(request, registration_ext_fields(result), order_topics_body(self._ctx))

    def _apply(self, registration: RegistrationHeader, request: RemotingCommand, channel: Channel) -> bytes | None:
        """A changed registration through the regular path, if its body is small enough to apply here."""
        limit = self._ctx.config.inline_registration_max_body_bytes
        if not limit or registration.compressed or len(request.body or b"") > limit:
            return None
        response = self._process(request, channel)
        if response.code != ResponseCode.SUCCESS:
            return response.encode()
        return self._success(request, response.ext_fields or {}, response.body)

    def _success(self, request: RemotingCommand, ext_fields: dict[str, str], body: bytes | None) -> bytes:
        """The SUCCESS answer's frame: its header encoded once per codec and header fields, the opaque stamped in."""
        key = (request.serialize_type, tuple(sorted(ext_fields.items())))
        template = self.templates.table.get(key)
        if template is None:
            template = OpaqueTemplate(request.make_response(ResponseCode.SUCCESS, ext_fields=ext_fields))
            self.templates.remember(key, template, 2 * sum(len(k) + len(v) for k, v in key[1]))
        return template.frame(request.opaque, body)
