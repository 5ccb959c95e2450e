"""The copy of a worker's tables a restarted sibling starts from (sans-IO).

A restarted worker must not serve an empty route table while its siblings serve a full one, so
before it accepts connections it takes over one sibling's tables: routes (with the
queue-removal counts the re-registration shortcut relies on), the route history, the KV table
and the remotely updatable config keys, together with the `position` - the last entry of the write log the tables
include - from which it applies the entries it buffered meanwhile. Connections
in the tables become stand-ins (`SiblingChannel`): the copier's own are stood in for as its
origin's. The payload is a pickle: it only ever travels between a worker's own processes, over
ipc in the supervisor's private directory.
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass

from namesrv.config import NamesrvConfig
from namesrv.kvconfig import KVConfigManager
from namesrv.routeinfo import RouteInfoManager, RouteTables
from namesrv.writelog.log import SiblingChannel


@dataclass(frozen=True)
class Snapshot:
    #: The last log entry these tables include.
    position: int
    routes: RouteTables
    queue_changes: dict[str, int]
    kv: dict[str, dict[str, str | None]]
    #: The remotely updatable config keys (UPDATE_NAMESRV_CONFIG may have changed them since start).
    config: dict[str, str]
    #: The route history (namesrv.routeinfo.history's encoding), None when it keeps none.
    history: bytes | None = None

    @property
    def summary(self) -> str:
        return (f"{len(self.routes.broker_live_table)} brokers, {len(self.routes.topic_queue_table)} topics, "
                f"{len(self.kv)} KV namespaces")


def take(index: int, generation: int, position: int, routes: RouteInfoManager,
         kv: KVConfigManager, config: NamesrvConfig) -> bytes:
    """The pickled copy of tables that have applied the log up to `position` (taken on the thread
    that applies it)."""
    tables, queue_changes = routes.export_tables()
    for live in tables.broker_live_table.values():
        if live.channel is not None and not isinstance(live.channel, SiblingChannel):
            live.channel = SiblingChannel.stand_in(index, generation, live.channel)
    updatable = NamesrvConfig.remote_updatable()
    remote_config = {key: value for key, value in config.to_properties().items() if key in updatable}
    history = None if routes.route_events is None else routes.route_events.encode()
    snapshot = Snapshot(position, tables, queue_changes, kv.export_table(), remote_config, history)
    return pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)


def restore(payload: bytes, routes: RouteInfoManager, kv: KVConfigManager, config: NamesrvConfig) -> Snapshot:
    """Replace the tables (in memory: the files are the origins' business) by the copy in `payload`."""
    snapshot: Snapshot = pickle.loads(payload)
    routes.import_tables(snapshot.routes, snapshot.queue_changes)
    if snapshot.history is not None and routes.route_events is not None:
        routes.route_events.decode(snapshot.history)
    kv.restore_table(snapshot.kv)
    config.apply(snapshot.config)
    return snapshot
