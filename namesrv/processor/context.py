"""What every request handler works with."""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from namesrv.channel import Channel
from namesrv.config import NamesrvConfig
from namesrv.kvconfig import KVConfigManager
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


#: A request handler: decoded request (and the connection it came on) -> response.
Handler = Callable[[HandlerContext, RemotingCommand, Channel], RemotingCommand]
