"""A sans-IO server for the inline-path tests: the processor and its route table on a settable clock."""
from __future__ import annotations

import time

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.kvconfig import KVConfigManager
from namesrv.processor import RequestProcessor
from namesrv.protocol import RemotingCommand
from namesrv.routeinfo import RouteInfoManager

START = 1_700_000_000_000


class InlineServer:
    """`inline(frame, channel)`: what the reactor answers itself; `regular(...)`: what the executors would."""

    def __init__(self, tmp_path, inline_writes: bool = True, **config) -> None:
        self.now = START
        self.config = NamesrvConfig(kv_config_path=str(tmp_path / "kvConfig.json"),
                                    config_store_path=str(tmp_path / "namesrv.properties"), **config)
        self.routes = RouteInfoManager(self.config, clock=lambda: self.now)
        self.kv = KVConfigManager(self.config.kv_config_path)
        self.kv.load()
        self.processor = RequestProcessor(self.config, self.routes, self.kv, clock=lambda: self.now,
                                          inline_writes=inline_writes)

    def inline(self, frame: bytes, channel: Channel) -> bytes | RemotingCommand | None:
        """`InlineAnswers.answer`: one frame's answer, the request decoded for the executors, or None."""
        return self.processor.inline.answer(frame, channel, time.monotonic())

    def received(self, frame: bytes, channel: Channel) -> bytes | RemotingCommand:
        """What the reactor makes of `frame` received alone (`InlineAnswers.answer_all`, which reads
        a new DataVersion's header from its shape): the answer, or the request for the executors."""
        replies, commands = self.processor.inline.answer_all([frame], channel, time.monotonic())
        return replies[0] if replies else commands[0]

    def regular(self, frame: bytes, channel: Channel) -> bytes:
        return self.processor.process(RemotingCommand.decode(frame), channel).encode()
