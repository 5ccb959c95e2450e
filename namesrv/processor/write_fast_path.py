"""Brokers' writes answered on the reactor thread: a thin adapter over the regular path.

A broker re-registers every 30 seconds, almost always with the topic table it sent last time; a
new DataVersion usually changes a few topics; a heartbeat or a data-version query only refreshes
its liveness. The work is less than the hand-off to an executor and back (which would hold the
interpreter lock as long anyway). So for the request-table rows marked `Inline.WRITE` the reactor
runs the regular path's steps itself (`RequestProcessor.prepare`, `apply`, `answer`: the same
checks, the same `_guarded` failures), hands back what is an executor's (a registration body to
decode that is compressed or larger than inlineRegistrationMaxBodyBytes: EXECUTOR; a hint the
route table declines: RETRY), and writes a SUCCESS answer from a template of its encoded header
with the opaque stamped in. The bytes are the ones the regular path would send
(tests/test_register_fast_path.py).

A broker's heartbeat (BROKER_HEARTBEAT, QUERY_DATA_VERSION, and REGISTER_BROKER with its last
body) repeats its header and body every few seconds. So the answer of the last one of each header
read (`PreparedWrite`, held once per header by the seen-header memo) is kept (`Replay`), with its
change when its handler's `replayable` admits it (a registration's refresh, not a decoded table);
the next with the same body (its XXH3, read off the frame in C:
`fastpath.body_digest`; the one repeat check) runs the handler's guarded `apply` on the kept
change and, when the outcome is the same (the broker is as known, its DataVersion as stored) and
so is what the answer reads besides (`WriteHandler.answer_reads`: the order topics' KV table),
sends the kept answer with the new opaque: the prepare and the encoding are not done again. Any
other outcome is answered by the handler's `answer` and kept instead; RETRY (the route table no
longer holds the kept hint) takes the regular steps again. A new body (a broker's next
DataVersion, read from its header's shape with the new bodyCrc32) is prepared and applied, and
answered from the kept answer too when the outcome and the state read are the same: what a
registration's answer says (the master, the order topics) rarely changes with the topics. The replays are a memo of their own
(REPLAYS: three per broker of a full route table), emptied when full. Frames of one received chunk
that repeat one such write (the same header and body, their opaques aside) arrived together: the
kept change is applied once for them all and the kept answer stamped with each opaque, as a chunk
of cached route queries is answered (`answer_run`).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from namesrv import fastpath
from namesrv.caches import BoundedMemo
from namesrv.channel import Channel
from namesrv.processor.context import EXECUTOR, HINTS_INLINE, RETRY, Hints
from namesrv.processor.requests import REQUESTS
from namesrv.processor.seen_headers import HEADER_LENGTH_MASK, INT32, OpaqueTemplate
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.command import RemotingCommand
from namesrv.request_stats import FAST_PATH, AnswerSlot, RequestTally

#: Bounds of the remembered response headers (distinct codecs and header fields answered: master and HA
#: addresses, a data-version query's "changed"; emptied when full).
TEMPLATES = 1024
TEMPLATE_BYTES = 4 * 1024 * 1024
#: Bounds of the kept replays (a registration's, a heartbeat's and a data-version query's per broker,
#: maxBrokers 4096).
REPLAYS = 3 * 4096
#: What a replay is charged besides its answer's body (which it holds): the objects it holds.
REPLAY_CHARGE = 512
REPLAY_BYTES = 8 * 1024 * 1024
#: code -> which of its changes may be replayed (`WriteHandler.replayable`), for the replayable codes.
_REPLAYABLE: dict[int, Callable[[Any], bool]] = {
    int(spec.code): spec.handler.replayable for spec in REQUESTS if getattr(spec.handler, "replayable", None)}
_SUCCESS = int(ResponseCode.SUCCESS)


class Processor(Protocol):
    """The regular path (namesrv.processor.core.RequestProcessor), in a write's steps."""

    def prepare(self, request: RemotingCommand, channel: Channel, hints: Hints = Hints.TABLE) -> Any: ...

    def apply(self, code: int, change: Any, channel: Channel) -> object: ...

    def answer(self, request: RemotingCommand, outcome: object) -> RemotingCommand: ...

    def answer_reads(self, code: int) -> Callable[[], object] | None: ...


@dataclass(frozen=True, slots=True)
class Replay:
    """A write's header (read once: `prepared`, with bodyCrc32 `crc` unless None: as read) as last
    answered: the `outcome` of applying its change, what the answer read besides (`reads()`
    returned `state`), and the answer; with the change itself when it may be applied again
    (`replayable`: a refresh), for a body of `fastpath.body_digest` `digest` (0: none; None: no
    change kept). The kept answer is current while an outcome is the same and `reads()` returns
    the same state.

    Slots, not a NamedTuple: every heartbeat reads several of its fields, and Python 3.11 reads a
    slot with a specialised instruction but a NamedTuple's field through the generic attribute
    lookup."""

    prepared: PreparedWrite
    crc: int | None
    digest: int | None
    change: Any
    outcome: object
    reads: Callable[[], object] | None
    state: object
    template: OpaqueTemplate
    response_body: bytes | None
    counted: AnswerSlot

    def current(self, outcome: object) -> bool:
        """Is the kept answer the one to `outcome` (the same outcome, and the same state read besides)?
        (The same object is the same outcome: a master's registration result is one constant, and
        a result's `==` is a Python call.) `WriteFastPath.answer` checks the case this accepts first,
        the very outcome kept with nothing read besides (a heartbeat's None, a data-version query's
        stored DataVersion), before calling it: the call costs more than the check."""
        kept = self.outcome
        if outcome is not kept and outcome != kept:
            return False
        reads = self.reads
        return reads is None or reads() == self.state


#: A write answered here: (the response frame, the tally slot it is counted in, the template of its
#: header, None unless it is a plain SUCCESS).
Answered = tuple[bytes, AnswerSlot, OpaqueTemplate | None]


@dataclass(frozen=True, slots=True)
class PreparedWrite:
    """An inline write's header read once: its typed reading (the request-table row's `header`), and
    the request minus opaque and body (which keeps it as its typed header). Slots, as `Replay`:
    every write answered here reads its request."""

    header: Any
    request: RemotingCommand

    @classmethod
    def of(cls, header: object, request: RemotingCommand) -> PreparedWrite:
        """`request` keeping `header` as its typed reading (the requests derived from it share it)."""
        request.keep_typed_header(header)
        return cls(header, request)

    def request_for(self, opaque: int, frame: bytes, crc: int | None = None) -> RemotingCommand:
        """The request in `frame` (as split_frames yields it), whose header is this one with `opaque`
        and, unless `crc` is None, a registration's bodyCrc32 of `crc` (a broker's next DataVersion:
        namesrv.processor.inline.HeaderReader). Its body is a view of the frame: a changed
        registration body is decoded without copying it."""
        size = len(frame)
        body_at = 4 + (INT32.unpack_from(frame)[0] & HEADER_LENGTH_MASK)
        request = self.request.derive(opaque, memoryview(frame)[body_at:] if size > body_at else None, size)
        return request if crc is None else self.rebind(request, crc)

    def rebind(self, request: RemotingCommand, crc: int) -> RemotingCommand:
        """`request`, derived from this one's, made to announce bodyCrc32 `crc` (a non-negative int32,
        written as Java writes it) in its fields and its typed header (a `RegistrationHeader`)."""
        ext_fields = request.ext_fields = request.ext_fields.copy()
        ext_fields["bodyCrc32"] = str(crc)
        request.keep_typed_header(self.header.with_crc(crc))
        return request


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
        #: By `id(Replay.prepared)`: the replay holds it, so no other object has its id meanwhile.
        self.replays: BoundedMemo[int, Replay] = BoundedMemo(REPLAYS, REPLAY_BYTES)

    def answer(self, frame: bytes, opaque: int, prepared: PreparedWrite, channel: Channel,
               arrived: float, crc: int | None = None) -> bytes | RemotingCommand:
        """The write in `frame` (as split_frames yields it), whose header was read before as
        `prepared` with `opaque` (and bodyCrc32 `crc` unless None: `PreparedWrite.request_for`),
        taken off the socket at `arrived`: its response frame, counted, when the regular path's
        steps answer it here (from its `Replay` when it has the replay's body and bodyCrc32 and the
        kept answer is current); else the request, for an executor."""
        if not self._applies:
            return prepared.request_for(opaque, frame, crc)
        replay = self.replays.table.get(id(prepared))
        if replay is not None and replay.crc == crc and replay.digest == fastpath.body_digest(frame):
            outcome = self._processor.apply(prepared.request.code, replay.change, channel)
            if outcome is replay.outcome and replay.reads is None or replay.current(outcome):  # see current
                replay.counted.add(time.monotonic() - arrived)
                return replay.template.frame(opaque, replay.response_body)
            answered = self._steps(prepared, opaque, frame, channel, crc, replay, (replay.change, outcome))
        else:
            answered = self._steps(prepared, opaque, frame, channel, crc, replay)
        if type(answered) is RemotingCommand:
            return answered
        answered[1].add(time.monotonic() - arrived)
        return answered[0]

    def answer_run(self, frames: list[bytes], opaques: list[int], prepared: PreparedWrite, channel: Channel,
                   arrived: float, crc: int | None = None) -> list[bytes] | None:
        """The answers of a chunk whose frames all carry the header `prepared` was read from (a
        broker pipelining one write), with `opaques`, when it is a replayable write and each frame
        carries its kept replay's body: the frames arrived together, so the change is applied once
        for them all and the kept answer stamped with each opaque. None when that does not hold,
        or when the kept answer is not current: answer them one by one (`answer`)."""
        if not self._applies:
            return None
        replay = self.replays.table.get(id(prepared))
        if replay is None or replay.crc != crc:
            return None
        digest = replay.digest
        body_digest = fastpath.body_digest
        for frame in frames:
            if body_digest(frame) != digest:
                return None
        outcome = self._processor.apply(prepared.request.code, replay.change, channel)
        if not replay.current(outcome):  # answered with this outcome, then the others one by one
            first = self._steps(prepared, opaques[0], frames[0], channel, crc, replay, (replay.change, outcome))
            if type(first) is RemotingCommand:  # nothing changed (EXECUTOR, RETRY): each is an executor's
                return None
            first[1].add(time.monotonic() - arrived)
            return [first[0]] + [self.answer(frame, opaque, prepared, channel, arrived, crc)
                                 for frame, opaque in zip(frames[1:], opaques[1:])]
        replay.counted.add(time.monotonic() - arrived, len(frames))
        return replay.template.frames(opaques, replay.response_body)

    def _steps(self, prepared: PreparedWrite, opaque: int, frame: bytes, channel: Channel, crc: int | None,
               replay: Replay | None, applied: tuple[Any, object] | None = None) -> Answered | RemotingCommand:
        """A write answered through the regular path's steps (`applied`: a kept change and the
        outcome of applying it again, unless that is RETRY: then prepared again), or the request
        when it is an executor's (EXECUTOR, RETRY). `replay` is the header's kept one (or None):
        its answer is sent again when it is `current` for the outcome, whatever the change (a new
        DataVersion is answered as the last one was). A SUCCESS answer is kept as the header's
        `Replay`, with the change when its handler's `replayable` admits it (else without: None)."""
        processor = self._processor
        request = prepared.request_for(opaque, frame, crc)
        code = request.code
        if applied is None or applied[1] is RETRY:
            change = processor.prepare(request, channel, HINTS_INLINE)
            if change is EXECUTOR:
                return request
            if type(change) is RemotingCommand:
                return self._encoded(request, change)
            outcome = processor.apply(code, change, channel)
            if outcome is RETRY:
                return request
        else:
            change, outcome = applied
        keeps = _REPLAYABLE.get(code)
        if keeps is None:
            return self._encoded(request, processor.answer(request, outcome))
        replayed = keeps(change)
        if replay is not None and replay.current(outcome):
            if replayed:  # the kept answer, now with this change
                self._keep(replace(replay, crc=crc, digest=fastpath.body_digest(frame), change=change))
            return replay.template.frame(opaque, replay.response_body), replay.counted, replay.template
        reads = processor.answer_reads(code)
        state = None if reads is None else reads()  # before the answer reads it
        response = processor.answer(request, outcome)
        answered = self._encoded(request, response)
        if answered[2] is not None:  # (a kept replay of another outcome may stay)
            self._keep(Replay(prepared, crc, fastpath.body_digest(frame) if replayed else None,
                              change if replayed else None, outcome, reads, state, answered[2], response.body,
                              answered[1]))
        return answered

    def _keep(self, replay: Replay) -> None:
        answer_body = replay.response_body
        self.replays.remember(id(replay.prepared), replay,
                              REPLAY_CHARGE + (0 if answer_body is None else len(answer_body)))

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
