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

A heartbeat (BROKER_HEARTBEAT, QUERY_DATA_VERSION: `WriteHandler.replayable`) repeats its header
and body every few seconds, and its change is read from them alone. So the change and the answer
of the last one of each header read (`PreparedWrite.request`, held once per header by the seen-
header memo) are kept (`Replay`, for a body of at most REPLAY_BODY_BYTES); the next with the same
body runs the handler's `apply` on the kept change and, when the outcome is the same (the broker
is as known, its DataVersion as stored), sends the kept answer with the new opaque: the prepare
and the encoding are not done again. Any other outcome is answered by the handler's `answer` and
kept instead. The replays are a memo of their own (REPLAYS: two per broker of a full route table),
emptied when full. Frames of one received chunk that repeat one such write (the same header and
body, their opaques aside) arrived together: the kept change is applied once for them all and the
kept answer stamped with each opaque, as a chunk of cached route queries is answered (`answer_run`).
"""
from __future__ import annotations

import time
from typing import Any, NamedTuple, Protocol

from namesrv.caches import BoundedMemo
from namesrv.channel import Channel
from namesrv.processor.context import Hints
from namesrv.processor.requests import REQUESTS
from namesrv.processor.seen_headers import HEADER_LENGTH_MASK, INT32, OpaqueTemplate
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.command import RemotingCommand
from namesrv.request_stats import FAST_PATH, AnswerSlot, RequestTally

#: Bounds of the remembered response headers (distinct codecs and header fields answered: master and HA
#: addresses, a data-version query's "changed"; emptied when full).
TEMPLATES = 1024
TEMPLATE_BYTES = 4 * 1024 * 1024
#: Largest request body a replay is kept for (a data-version query's DataVersion is about 60 bytes).
REPLAY_BODY_BYTES = 256
#: Bounds of the kept replays (a heartbeat's and a data-version query's per broker, maxBrokers 4096).
REPLAYS = 8192
#: What a replay is charged: its body and the answer's (a DataVersion), at most.
REPLAY_CHARGE = 2 * REPLAY_BODY_BYTES
REPLAY_BYTES = REPLAYS * REPLAY_CHARGE
#: The request codes whose handlers are replayable.
_REPLAYABLE = frozenset(int(spec.code) for spec in REQUESTS if getattr(spec.handler, "replayable", False))
_SUCCESS = int(ResponseCode.SUCCESS)


class Processor(Protocol):
    """The regular path (namesrv.processor.core.RequestProcessor): whole, or in a write's steps."""

    def process(self, request: RemotingCommand, channel: Channel, inline: bool = False) -> RemotingCommand | None: ...

    def prepare(self, request: RemotingCommand, channel: Channel, hints: Hints = Hints.TABLE) -> Any: ...

    def apply(self, code: int, change: Any, channel: Channel) -> object: ...

    def answer(self, request: RemotingCommand, outcome: object) -> RemotingCommand: ...


class Replay(NamedTuple):
    """A replayable write's request (a header read once: `request`, without opaque or body) as last answered."""

    request: RemotingCommand
    body: bytes | None
    change: Any
    outcome: object
    template: OpaqueTemplate
    response_body: bytes | None
    counted: AnswerSlot


#: A write answered here: (the response frame, the tally slot it is counted in, the template of its
#: header, None unless it is a plain SUCCESS).
Answered = tuple[bytes, AnswerSlot, OpaqueTemplate | None]


class WriteFastPath:
    """`answer(...)`: a write's frame answered here (the response frame, counted), or the request to
    dispatch (reactor thread only)."""

    def __init__(self, processor: Processor, tally: RequestTally, applies: bool = True) -> None:
        """`tally`: where the answers are counted (a kept replay holds its slot: looked up once, not
        per answer). `applies=False`: writes are only read here, never applied (every request is
        handed back: worker processes apply writes in the write log's order, namesrv.writelog)."""
        self._processor = processor
        self._tally = tally
        self._applies = applies
        self.templates: BoundedMemo[tuple[int, bool, tuple[tuple[str, str], ...]], OpaqueTemplate] = BoundedMemo(
            TEMPLATES, TEMPLATE_BYTES)
        #: By `id(Replay.request)`: the replay holds the request, so no other object has its id meanwhile.
        self.replays: BoundedMemo[int, Replay] = BoundedMemo(REPLAYS, REPLAY_BYTES)

    def answer(self, frame: bytes, opaque: int, prepared: RemotingCommand, channel: Channel,
               arrived: float) -> bytes | RemotingCommand:
        """The write in `frame` (as split_frames yields it), whose header was read before as
        `prepared` (its `PreparedWrite.request`) with `opaque`, taken off the socket at `arrived`:
        its response frame, counted, when the regular path answers it here (a replayable write's
        from its `Replay` when it has the replay's body and outcome); else the request, for an
        executor."""
        size = len(frame)
        body_at = 4 + (INT32.unpack_from(frame)[0] & HEADER_LENGTH_MASK)
        # The body as a view of the frame: a registration's repeat is recognised, a changed body
        # decoded, without copying it.
        body = memoryview(frame)[body_at:] if size > body_at else None
        if not self._applies:
            return prepared.derive(opaque, body, size)
        if prepared.code not in _REPLAYABLE or (body is not None and len(body) > REPLAY_BODY_BYTES):
            request = prepared.derive(opaque, body, size)
            response = self._processor.process(request, channel, inline=True)
            if response is None:
                return request
            answered = self._encoded(request, response)
        else:
            data = None if body is None else bytes(body)
            replay = self.replays.table.get(id(prepared))
            if replay is not None and replay.body == data:
                outcome = self._processor.apply(prepared.code, replay.change, channel)
                if outcome == replay.outcome:
                    replay.counted.add(time.monotonic() - arrived)
                    return replay.template.frame(opaque, replay.response_body)
                answered = self._replayable(prepared, opaque, data, size, channel, (replay.change, outcome))
            else:
                answered = self._replayable(prepared, opaque, data, size, channel)
        answered[1].add(time.monotonic() - arrived)
        return answered[0]

    def answer_run(self, frames: list[bytes], opaques: list[int], prepared: RemotingCommand, channel: Channel,
                   arrived: float) -> list[bytes] | None:
        """The answers of a chunk whose frames all carry the header `prepared` was read from (a
        broker pipelining one write), with `opaques`, when it is a replayable write and each frame
        carries its kept replay's body: the frames arrived together, so the change is applied once
        for them all and the kept answer stamped with each opaque. None when that does not hold:
        answer them one by one (`answer`)."""
        if not self._applies or prepared.code not in _REPLAYABLE:
            return None
        replay = self.replays.table.get(id(prepared))
        if replay is None:
            return None
        data = replay.body
        length = 0 if data is None else len(data)
        for frame in frames:
            if len(frame) - 4 - (INT32.unpack_from(frame)[0] & HEADER_LENGTH_MASK) != length or (
                    length and not frame.endswith(data)):
                return None
        outcome = self._processor.apply(prepared.code, replay.change, channel)
        if outcome != replay.outcome:  # answered with this outcome, then the others one by one
            answered = self._replayable(prepared, opaques[0], data, len(frames[0]), channel, (replay.change, outcome))
            answered[1].add(time.monotonic() - arrived)
            return [answered[0]] + [self.answer(frame, opaque, prepared, channel, arrived)
                                    for frame, opaque in zip(frames[1:], opaques[1:])]
        replay.counted.add(time.monotonic() - arrived, len(frames))
        return replay.template.frames(opaques, replay.response_body)

    def _replayable(self, prepared: RemotingCommand, opaque: int, data: bytes | None, size: int, channel: Channel,
                    applied: tuple[Any, object] | None = None) -> Answered:
        """A replayable write answered through the regular path's steps (`applied`: its change and
        the outcome of applying it, when a kept replay's change was applied with another outcome);
        its answer is kept as its `Replay`."""
        processor = self._processor
        request = prepared.derive(opaque, data, size)
        if applied is None:
            change = processor.prepare(request, channel, Hints.INLINE)
            if type(change) is RemotingCommand:
                return self._encoded(request, change)
            outcome = processor.apply(request.code, change, channel)
        else:
            change, outcome = applied
        response = processor.answer(request, outcome)
        answered = self._encoded(request, response)
        template = answered[2]
        if template is not None:  # (a kept replay of another outcome may stay: its answer is that outcome's)
            self.replays.remember(id(prepared), Replay(prepared, data, change, outcome, template, response.body,
                                                       answered[1]), REPLAY_CHARGE)
        return answered

    def _encoded(self, request: RemotingCommand, response: RemotingCommand) -> Answered:
        """(the response frame, its tally slot, its header template); a plain SUCCESS answer is
        written from a template of its header (None for any other answer)."""
        code = response.code
        counted = self._tally.slot(request.code, code, FAST_PATH)
        if code != _SUCCESS or response.remark is not None:
            return response.encode(), counted, None
        ext_fields = response.ext_fields
        key = (response.serialize_type, ext_fields is None, tuple(sorted(ext_fields.items())) if ext_fields else ())
        template = self.templates.table.get(key)
        if template is None:
            template = OpaqueTemplate(response)
            self.templates.remember(key, template, 2 * sum(len(k) + len(v) for k, v in key[2]))
        return template.frame(response.opaque, response.body), counted, template
