"""Brokers' writes answered on the reactor thread: a thin adapter over the regular path.

A broker re-registers every 30 seconds, almost always with the topic table it sent last time; a
new DataVersion usually changes a few topics; a heartbeat or a data-version query only refreshes
its liveness. The work is less than the hand-off to an executor and back (which would hold the
interpreter lock as long anyway). So for the request-table rows marked `Inline.WRITE` the reactor
runs the one regular path itself (`RequestProcessor.process(..., inline=True)`: the same checks,
the same `_guarded` failures), which answers None for what is an executor's (a registration body
to decode that is compressed or larger than inlineRegistrationMaxBodyBytes, a refresh the route
table declines), and writes a SUCCESS answer from a template of its encoded header with the opaque
stamped in. The bytes are the ones the regular path would send (tests/test_register_fast_path.py).
"""
from __future__ import annotations

from collections.abc import Callable

from namesrv.caches import BoundedMemo
from namesrv.channel import Channel
from namesrv.processor.seen_headers import OpaqueTemplate
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.command import RemotingCommand

#: The regular path (RequestProcessor.process).
Process = Callable[..., RemotingCommand | None]

#: Bounds of the remembered response headers (distinct codecs and header fields answered: master and HA
#: addresses, a data-version query's "changed"; emptied when full).
TEMPLATES = 1024
TEMPLATE_BYTES = 4 * 1024 * 1024
_SUCCESS = int(ResponseCode.SUCCESS)


class WriteFastPath:
    """`answer(request, channel)`: the response frame to a write answered here, and its (request code,
    response code); None: not answered here (reactor thread only)."""

    def __init__(self, process: Process) -> None:
        self._process = process
        self.templates: BoundedMemo[tuple[int, bool, tuple[tuple[str, str], ...]], OpaqueTemplate] = BoundedMemo(
            TEMPLATES, TEMPLATE_BYTES)

    def answer(self, request: RemotingCommand, channel: Channel) -> tuple[bytes, tuple[int, int]] | None:
        response = self._process(request, channel, inline=True)
        if response is None:
            return None
        code = response.code
        if code != _SUCCESS or response.remark is not None:
            return response.encode(), (request.code, code)
        ext_fields = response.ext_fields
        key = (response.serialize_type, ext_fields is None, tuple(sorted(ext_fields.items())) if ext_fields else ())
        template = self.templates.table.get(key)
        if template is None:
            template = OpaqueTemplate(response)
            self.templates.remember(key, template, 2 * sum(len(k) + len(v) for k, v in key[2]))
        return template.frame(response.opaque, response.body), (request.code, code)
