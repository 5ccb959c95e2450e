"""Warm restart: the route tables saved to a file, and served again at the next start.

After a restart RocketMQ's NameServer answers TOPIC_NOT_EXIST for every topic until each broker's
next registration (up to 30 s; `needWaitForService` only makes clients wait instead). namesrv
saves its route tables (`routeSnapshotPath`, beside the KV file by default) whenever a route
changed, at most every `routeSnapshotIntervalSeconds`, and at shutdown, and restores them at start:
every restored broker is served at once, as if it had just registered (no connection yet), and
expires like any silent broker if it does not register again within its timeout (120 s by
default). The trade-off: a broker that died while the NameServer was down is served until then.
When no route changed the file is only touched, so its modification time says until when a
running server held these routes; a snapshot older than `routeSnapshotMaxAgeSeconds` by that time
is not restored: its routes are too likely gone.

With worker processes the supervisor hands every worker the same `BootCopy` and worker 0 saves
(namesrv.controller).

The route history (namesrv.routeinfo.history: what explainRoute answers from) is saved beside the
snapshot (`<snapshot>.history`) at shutdown only, and restored with the routes at the next start,
then the file is removed: a periodic save would cost as much again as the routes' (the history
is up to routeHistoryMaxBytes), and after a crash a restored history would lack the events since
the last stop and tell a topic that came and went in between as "never registered". So the
history survives a graceful restart (SIGTERM) and a worker's restart (it is copied with the
tables, namesrv.writelog.snapshot); a crash starts it afresh. The file is read a value at a time
and charged against routeHistoryMaxBytes as it is read (past it the file is refused), within
`history_file_limit` bytes.

The file is written atomically (a temporary file, fsync, rename, fsync of the directory), so
after a crash at any point, kill -9 included, it holds the previous snapshot or the new one. Its
content is msgpack behind a magic and a CRC32: a torn, truncated or foreign file is refused with
a log line and the server starts cold, as RocketMQ would. What is saved is topology only: groups,
addresses, queue entries, filter servers, static-topic mappings, each broker's DataVersion (so
its next registration with an unchanged topic table is a liveness refresh); not connections,
liveness times or the registration shortcuts, which the next registration rebuilds.
"""
from __future__ import annotations

import gc
import logging
import os
import struct
import sys
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgpack

from namesrv.config import NamesrvConfig
from namesrv.errors import ProtocolError
from namesrv.fastpath.registration import queue_facts
from namesrv.files import private_copy, write_atomically
from namesrv.protocol.codes import INT32_MAX, INT32_MIN
from namesrv.protocol.route import BrokerData, QueueData
from namesrv.protocol.topic import DataVersion
from namesrv.routeinfo.history import RouteHistory
from namesrv.routeinfo.manager import RouteInfoManager
from namesrv.routeinfo.model import BrokerLiveInfo, Registrant, RouteTables, now_ms
from namesrv.routeinfo.route_input import IllegalRoute, check_names, check_queues_summed, check_topic

log = logging.getLogger(__name__)

MAGIC = b"NSRVROUT"
HISTORY_MAGIC = b"NSRVHIST"
_SAVED_AT = struct.Struct(">q")
FORMAT = 1
_CRC = struct.Struct(">I")
#: A snapshot file larger than this is not read (maxQueueDatas entries take about 60 bytes each).
MAX_FILE_BYTES = 512 * 1024 * 1024


#: Most of the time periodic saves may take (RouteSnapshots).
MAX_SAVE_SHARE = 0.1
#: Bytes of a queue entry's row, about (to cut the packed payload into parts of about PART_BYTES).
ROW_BYTES = 24
#: Parts this large are mapped by the allocator on their own, and so given back to the system whole.
PART_BYTES = 32 * 1024 * 1024
#: Queue entries packed under one read lock, between two hand-overs of the interpreter lock, by
#: `encode_routes` (about half a millisecond).
SLICE_ENTRIES = 2_000
#: Sliced packings tried before one under a single read lock (routes kept changing meanwhile).
SLICED_ATTEMPTS = 3
#: Periodic saves given up in a row (routes changing all the time: a fleet's first registration,
#: which a read lock over the whole table would hold up for seconds) before one holds the lock.
SKIPPED_SAVES = 6


class SnapshotError(Exception):
    """The file is not a route snapshot namesrv can restore."""


def encode_routes(routes: RouteInfoManager, taken_ms: int,
                  locked_at_last: bool = True) -> list[bytes | memoryview] | None:
    """The snapshot file's bytes, in parts: the magic and the payload's CRC32, then the payload,
    msgpack of {"format", "takenAtMs", "routes"}. "routes" holds the topology: "clusters", "groups",
    "live" (each broker's address, HA address, timeout and DataVersion), "filters", "mappings"
    (static topics), and "queues": [topic, [[brokerName, readQueueNums, writeQueueNums, perm,
    topicSysFlag], ...]] rows; not connections, liveness or shortcuts.

    The queue entries are packed straight from the route table, `SLICE_ENTRIES` at a time
    under a read lock each, the interpreter lock handed over between slices, into parts of about
    `PART_BYTES`. So no copy of the table is made (a copy of every entry as Python objects is
    larger than the table, and freed while registrations went on it left the server that much
    larger), no read lock is held for long (one over the whole table held off every registration,
    and a route query that missed the cache queued behind the waiting registration: the lock
    prefers writers), and the interpreter lock is never held for long (one msgpack call over the
    table holds it for as long as the table takes to pack). The slices make one consistent
    snapshot when no route changed meanwhile (`route_changes`, which every change of a queue
    entry moves); else it is packed again, and after `SLICED_ATTEMPTS` under one read lock if
    `locked_at_last`, else not at all (None)."""
    for _ in range(SLICED_ATTEMPTS):
        parts = _pack(routes, taken_ms, sliced=True)
        if parts is not None:
            return parts
    return _pack(routes, taken_ms, sliced=False) if locked_at_last else None


def _pack(routes: RouteInfoManager, taken_ms: int, sliced: bool) -> list[bytes | memoryview] | None:
    """`encode_routes`' bytes, the queue entries in slices or under the first read lock; None when
    sliced and a route changed meanwhile."""
    out = _Parts()
    with routes.reading() as tables:
        changes = routes.route_changes
        small = _small_tables(tables)
        topics = list(tables.topic_queue_table)
        out.packer.pack_map_header(3)
        for item in ("format", FORMAT, "takenAtMs", taken_ms, "routes"):
            out.packer.pack(item)
        out.packer.pack_map_header(len(small) + 1)
        for key, value in small.items():
            out.packer.pack(key)
            out.packer.pack(value)
        out.packer.pack("queues")
        out.packer.pack_array_header(len(topics))
        if not sliced:
            _pack_queues(out, tables.topic_queue_table, topics, 0, sys.maxsize)
    start = 0
    while sliced and start < len(topics):
        time.sleep(0)
        with routes.reading() as tables:
            if routes.route_changes != changes:
                return None
            start = _pack_queues(out, tables.topic_queue_table, topics, start, SLICE_ENTRIES)
    return out.close()


def _pack_queues(out: _Parts, by_topic: Mapping[str, Mapping[str, tuple[int, int, int, int]]], topics: list[str],
                 start: int, entries: int) -> int:
    """Pack the rows of `topics[start:]` (each in `by_topic`) until about `entries` queue entries are
    packed; the index of the next topic."""
    packed = 0
    pack = out.packer.pack
    while start < len(topics) and packed < entries:
        topic = topics[start]
        queues = by_topic[topic]
        pack([topic, [[group, *entry] for group, entry in queues.items()]])
        packed += len(queues)
        start += 1
    out.count(packed)
    return start


def _small_tables(tables: RouteTables) -> dict[str, Any]:
    """Every table but the queue entries, copied (the caller holds the read lock)."""
    return {
        "clusters": {cluster: sorted(names) for cluster, names in tables.cluster_addr_table.items()},
        "groups": [[g.cluster, g.broker_name, list(g.broker_addrs.items()), g.enable_acting_master, g.zone_name]
                   for g in tables.broker_addr_table.values()],
        "live": [[cluster, addr, live.ha_server_addr, live.heartbeat_timeout_millis,
                  live.data_version.to_dict()] for (cluster, addr), live in tables.broker_live_table.items()],
        "filters": [[cluster, addr, list(servers)]
                    for (cluster, addr), servers in tables.filter_server_table.items()],
        "mappings": {topic: dict(infos) for topic, infos in tables.topic_queue_mapping_info_table.items()},
    }


class _Parts:
    """A payload packed into parts of about PART_BYTES (each its own packer's buffer, never copied),
    and its CRC32."""

    def __init__(self) -> None:
        self.packer = msgpack.Packer(autoreset=False)
        self._parts: list[bytes | memoryview] = []
        self._crc = 0
        self._rows = 0

    def count(self, rows: int) -> None:
        """`rows` queue entries were packed: start a new part when this one is full."""
        self._rows += rows
        if self._rows * ROW_BYTES >= PART_BYTES:
            self._cut()

    def _cut(self) -> None:
        part = self.packer.getbuffer()
        self._parts.append(part)
        self._crc = zlib.crc32(part, self._crc)
        self.packer = msgpack.Packer(autoreset=False)
        self._rows = 0

    def close(self) -> list[bytes | memoryview]:
        self._cut()
        return [MAGIC + _CRC.pack(self._crc), *self._parts]


def restore_routes(routes: RouteInfoManager, exported: dict[str, Any], now: int) -> dict[str, int]:
    """Replace every table of `routes` by the "routes" of a decoded snapshot; each broker counts as registered
    at `now` (no connection yet). ValueError, changing nothing, for data that is not such a result
    or holds more than maxBrokers / maxQueueDatas. Returns the sizes restored."""
    config = routes.config
    try:
        live = {(cluster, addr): BrokerLiveInfo(now, timeout, DataVersion.from_dict(version), None, ha)
                for cluster, addr, ha, timeout, version in exported["live"]}
        topics = {topic: {name: QueueData(name, read, write, perm, flag) for name, read, write, perm, flag in rows}
                  for topic, rows in exported["queues"]}
        tables = RouteTables(
            topics,
            {name: BrokerData(cluster, name, {int(i): addr for i, addr in addrs}, bool(acting), zone)
             for cluster, name, addrs, acting, zone in exported["groups"]},
            {cluster: set(names) for cluster, names in exported["clusters"].items()},
            live,
            {(cluster, addr): list(servers) for cluster, addr, servers in exported["filters"]},
            {topic: dict(infos) for topic, infos in exported["mappings"].items()})
    except (KeyError, TypeError, ValueError, ProtocolError) as exc:
        raise ValueError(f"not a route table: {type(exc).__name__}: {exc}") from None
    queue_datas = sum(map(len, topics.values()))
    if len(live) > config.max_brokers or queue_datas > config.max_queue_datas:
        raise ValueError(f"{len(live)} brokers and {queue_datas} queue entries: more than maxBrokers "
                         f"({config.max_brokers}) or maxQueueDatas ({config.max_queue_datas})")
    routes.import_tables(tables, {})
    return routes.sizes()


def decode(blob: bytes) -> tuple[int, dict[str, Any]]:
    """(when it was taken, wall-clock ms; the tables as `encode_routes` packed them)."""
    head = len(MAGIC) + _CRC.size
    if len(blob) < head or not blob.startswith(MAGIC):
        raise SnapshotError("not a namesrv route snapshot")
    if _CRC.unpack_from(blob, len(MAGIC))[0] != zlib.crc32(blob[head:]):
        raise SnapshotError("CRC32 mismatch: the file is torn or was changed")
    try:
        snapshot = msgpack.unpackb(blob[head:], strict_map_key=False)
        if snapshot["format"] != FORMAT:
            raise SnapshotError(f"format {snapshot['format']!r}, this namesrv reads {FORMAT}")
        return int(snapshot["takenAtMs"]), snapshot["routes"]
    except (ValueError, TypeError, KeyError, msgpack.UnpackException) as exc:
        raise SnapshotError(f"unreadable: {type(exc).__name__}: {exc}") from None


_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1
#: Nesting allowed inside a static-topic mapping's info (a real one nests three deep).
MAX_MAPPING_DEPTH = 16


def check_routes(routes: Any, config: NamesrvConfig) -> None:
    """SnapshotError, naming the first offender in one line, unless every value of `decode`'s
    tables is one a registration could have brought (namesrv.routeinfo.route_input's rules on
    names, topics, queue counts and permissions; the header's and body's types and ranges): a
    file with a valid CRC32 is still a file anyone with write access to the folder may have made."""
    try:
        _check_routes(routes, config.max_queue_nums_per_topic)
    except IllegalRoute as exc:
        raise SnapshotError(str(exc)) from None


def _check_routes(routes: Any, max_queue_nums: int) -> None:
    _of(routes, dict, "the tables")
    for cluster, names in _of(routes.get("clusters"), dict, "clusters").items():
        _name(_of(cluster, str, "clusters: a cluster name"), "cluster_name")
        for name in _of(names, list, f"clusters[{cluster!r}]"):
            _name(_of(name, str, f"clusters[{cluster!r}]: a broker name"), "broker_name")
    groups = set()
    for i, group in enumerate(_of(routes.get("groups"), list, "groups")):
        cluster, name, addrs, acting, zone = _row(group, 5, f"groups[{i}]")
        _name(_of(cluster, str, f"groups[{i}].clusterName"), "cluster_name")
        _name(_of(name, str, f"groups[{i}].brokerName"), "broker_name")
        for pair in _of(addrs, list, f"groups[{i}].brokerAddrs"):
            broker_id, addr = _row(pair, 2, f"groups[{i}].brokerAddrs")
            _long(broker_id, f"groups[{i}].brokerId")
            _name(_of(addr, str, f"groups[{i}].brokerAddr"), "broker_addr")
        _of(acting, bool, f"groups[{i}].enableActingMaster")
        _name(_of(zone, (str, type(None)), f"groups[{i}].zoneName"), "zone_name")
        groups.add(name)
    for i, live in enumerate(_of(routes.get("live"), list, "live")):
        cluster, addr, ha, timeout, version = _row(live, 5, f"live[{i}]")
        _name(_of(cluster, str, f"live[{i}].clusterName"), "cluster_name")
        _name(_of(addr, str, f"live[{i}].brokerAddr"), "broker_addr")
        _name(_of(ha, (str, type(None)), f"live[{i}].haServerAddr"), "ha_server_addr")
        if timeout is not None:
            _long(timeout, f"live[{i}].heartbeatTimeoutMillis")
        for field, value in _of(version, dict, f"live[{i}].dataVersion").items():
            _long(value, f"live[{i}].dataVersion.{field}")
    for i, entry in enumerate(_of(routes.get("filters"), list, "filters")):
        cluster, addr, servers = _row(entry, 3, f"filters[{i}]")
        _name(_of(cluster, str, f"filters[{i}].clusterName"), "cluster_name")
        _name(_of(addr, str, f"filters[{i}].brokerAddr"), "broker_addr")
        for server in _of(servers, list, f"filters[{i}].filterServerList"):
            _of(server, str, f"filters[{i}].filterServerList[]")
    for topic, infos in _of(routes.get("mappings"), dict, "mappings").items():
        _of(topic, str, "mappings: a topic")
        for name, info in _of(infos, dict, f"mappings[{topic[:64]!r}]").items():
            _of(name, str, f"mappings[{topic[:64]!r}]: a brokerName")
            _json(_of(info, dict, f"mappings[{topic[:64]!r}][{name[:64]!r}]"), f"mappings[{topic[:64]!r}]", 0)
    queues: list[tuple[str, int, int, int, int]] = []  # checked at once: 10 million entries restore
    for i, entry in enumerate(_of(routes.get("queues"), list, "queues")):
        topic, rows = _row(entry, 2, f"queues[{i}]")
        if type(topic) is not str or not rows:
            check_topic(topic)  # the others with their entries
        for row in _of(rows, list, f"queues[{i}] ({topic!r})"):
            if (type(row) is not list or len(row) != 5 or row[0] not in groups or type(row[1]) is not int
                    or type(row[2]) is not int or type(row[3]) is not int or type(row[4]) is not int
                    or not INT32_MIN <= row[4] <= INT32_MAX):
                raise SnapshotError(f"queues[{i}] ({topic!r}): {str(row)[:120]} is not [brokerName of a group, "
                                    "readQueueNums, writeQueueNums, perm, topicSysFlag (32-bit integers)]")
            queues.append((topic, row[1], row[2], row[3], row[4]))
    check_queues_summed(queue_facts(queues), queues, max_queue_nums)


#: A registrant with no name in it: `_name` checks one at a time with the registration's own rule.
_NO_NAMES = Registrant("", "", "", 0)


def _name(value: str | None, field: str) -> None:
    """A name or address by the rule a registration's (`check_names`), `field` its Registrant field."""
    check_names(replace(_NO_NAMES, **{field: value}))


def _of(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    """`value` if its type is `kind` exactly (a bool is no int), else SnapshotError naming `where`."""
    if type(value) is kind or (isinstance(kind, tuple) and type(value) in kind):
        return value
    expected = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
    raise SnapshotError(f"{where}: {expected} expected, got {type(value).__name__} {str(value)[:64]!r}")


def _row(value: Any, length: int, where: str) -> list:
    if type(value) is not list or len(value) != length:
        raise SnapshotError(f"{where}: a list of {length} expected, got {str(value)[:64]!r}")
    return value


def _long(value: Any, where: str) -> int:
    """A Java long, as a header's or body's integer field must be."""
    if type(value) is not int or not _INT64_MIN <= value <= _INT64_MAX:
        raise SnapshotError(f"{where}: a 64-bit integer expected, got {str(value)[:64]!r}")
    return value


def _json(value: Any, where: str, depth: int) -> None:
    """What a registration's JSON body could hold: objects with text keys, arrays, text, 64-bit
    integers, floats, booleans and null, nested at most MAX_MAPPING_DEPTH deep."""
    if depth > MAX_MAPPING_DEPTH:
        raise SnapshotError(f"{where}: nested more than {MAX_MAPPING_DEPTH} deep")
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            _of(key, str, f"{where}: a key")
            _json(item, where, depth + 1)
    elif kind is list:
        for item in value:
            _json(item, where, depth + 1)
    elif kind is int:
        _long(value, where)
    elif kind not in (str, float, bool, type(None)):
        raise SnapshotError(f"{where}: {kind.__name__} is no JSON value")


@contextmanager
def no_collection() -> Iterator[None]:
    """Python's cyclic collector paused: packing or restoring 300,000 queue entries makes as many new
    lists, and the full collections they set off over the whole heap cost twice the work itself
    (and, while `encode_routes` holds a read lock, longer locks). Nothing made here holds a cycle."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def history_path(snapshot: Path) -> Path:
    """Where the route history of a snapshot file is saved: routes.snapshot.history, and for the
    workers' boot copy routes.snapshot.boot-PID, routes.snapshot.history.boot-PID."""
    base, boot, pid = snapshot.name.partition(".boot-")
    return snapshot.with_name(f"{base}.history{boot}{pid}")


def history_file_limit(config: NamesrvConfig) -> int:
    """The largest history file read: twice the budget (the file spells out the topic names the route
    table holds for the history in memory), and 1 MiB."""
    return 2 * config.route_history_max_bytes + (1 << 20)


def save_history(history: RouteHistory, path: Path, now: int) -> int:
    """Write the history (magic, CRC32, when it was saved in ms, `RouteHistory.encode`) atomically; its size."""
    payload = _SAVED_AT.pack(now) + history.encode()
    write_atomically(path, [HISTORY_MAGIC + _CRC.pack(zlib.crc32(payload)), payload], mode=0o600)
    return len(payload)


def load_history(history: RouteHistory, path: Path, now: int, limit: int) -> None:
    """Restore a `save_history` file into `history`, marking the restart. SnapshotError or ValueError
    (nothing changed) for a file that is not one, larger than `limit`, or past the history's budget."""
    if path.stat().st_size > limit:
        raise SnapshotError(f"larger than {limit} bytes")
    blob = path.read_bytes()
    head = len(HISTORY_MAGIC) + _CRC.size
    if len(blob) < head + _SAVED_AT.size or not blob.startswith(HISTORY_MAGIC) \
            or _CRC.unpack_from(blob, len(HISTORY_MAGIC))[0] != zlib.crc32(memoryview(blob)[head:]):
        raise SnapshotError("not a namesrv route history, or torn")
    saved_at = _SAVED_AT.unpack_from(blob, head)[0]
    try:  # read a value at a time and charged as it comes (RouteHistory.decode)
        history.decode(memoryview(blob)[head + _SAVED_AT.size:], restarted_at_ms=now, saved_at_ms=saved_at)
    except ValueError as exc:
        raise SnapshotError(f"unreadable: {exc}") from None


def snapshot_path(config: NamesrvConfig) -> Path:
    """routeSnapshotPath, or routes.snapshot beside the KV file (a server with its own KV file has its own routes)."""
    return Path(config.route_snapshot_path or Path(config.kv_config_path).parent / "routes.snapshot")


@dataclass(frozen=True)
class BootCopy:
    """What worker processes restore at a fresh start (nothing in the write log yet): the supervisor's
    copy of the snapshot file, taken before any worker could write a new one, and one restore time
    for all of them, so that every worker builds the same tables with the same liveness stamps."""

    path: str
    at_ms: int

    @classmethod
    def take(cls, config: NamesrvConfig) -> BootCopy | None:
        """Copy the snapshot beside itself (None: no snapshot, or warm restart is off)."""
        source = snapshot_path(config)
        if not config.route_snapshot_enable or not source.exists():
            return None
        try:
            target = private_copy(source, f".{source.name}.boot-")
            if history_path(source).exists():  # taken, not copied: read once (see the module docstring)
                os.replace(history_path(source), history_path(target))
        except OSError as exc:
            log.error("route snapshot %s not copied for the workers (%s): they start with no routes", source, exc)
            return None
        return cls(str(target), now_ms())

    def remove(self) -> None:
        Path(self.path).unlink(missing_ok=True)
        history_path(Path(self.path)).unlink(missing_ok=True)


class RouteSnapshots:
    """`restore()` once before serving; `save()` periodically; `save(force=True)` at shutdown.

    A save costs CPU in proportion to the table (10 million queue entries: seconds), so periodic
    saves take at most `MAX_SAVE_SHARE` of the time: after a save that took T seconds the next one
    waits at least T / MAX_SAVE_SHARE, routeSnapshotIntervalSeconds or not. A small table is saved
    every interval; a huge one, under constant route changes, less often."""

    def __init__(self, config: NamesrvConfig, routes: RouteInfoManager,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._routes = routes
        self._clock = clock
        self.path = snapshot_path(config)
        #: `routes.route_changes` when the file last matched the tables (None: never written here).
        self._saved_changes: int | None = None
        #: No periodic save before this `clock` time (the last save's cost).
        self._quiet_until = 0.0
        #: Saves given up in a row because the routes kept changing while they were packed.
        self._skipped = 0

    def restore(self, now: int | None = None, path: Path | None = None) -> bool:
        """Serve the saved tables (of `path`, default the snapshot file), if a usable snapshot is
        there; False (logged why) otherwise."""
        now = now_ms() if now is None else now
        path = self.path if path is None else path
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                raise SnapshotError(f"larger than {MAX_FILE_BYTES} bytes")
            held_until_ms = path.stat().st_mtime_ns // 1_000_000
            started = time.perf_counter()
            with no_collection():
                taken_ms, tables = decode(path.read_bytes())
            age_s = (now - max(taken_ms, held_until_ms)) / 1000
            max_age = self._config.route_snapshot_max_age_seconds
            if age_s > max_age:
                log.warning("route snapshot %s is %.0f s old, more than routeSnapshotMaxAgeSeconds (%d): starting "
                            "with no routes", path, age_s, max_age)
                return False
            with no_collection():
                check_routes(tables, self._config)
                sizes = restore_routes(self._routes, tables, now)
        except FileNotFoundError:
            log.info("no route snapshot at %s: starting with no routes", path)
            self._take_history(path, None)
            return False
        except (SnapshotError, ValueError) as exc:
            aside = self._set_aside(path)
            log.error("route snapshot %s refused%s: %s; starting with no routes", path,
                      f" and set aside as {aside}" if aside is not None else "", exc)
            self._take_history(path, None)
            return False
        except OSError as exc:
            log.error("route snapshot %s not read (%s): starting with no routes", path, exc)
            self._take_history(path, None)
            return False
        self._take_history(path, now)
        self._saved_changes = self._routes.route_changes
        log.info("restored the routes held %.1f s ago from %s in %.3f s: %s; each broker expires unless it "
                 "registers again within its timeout", age_s, path, time.perf_counter() - started,
                 ", ".join(f"{count} {what}" for what, count in sizes.items()))
        return True

    def _set_aside(self, path: Path) -> Path | None:
        """Move a refused file out of the way (the next save would replace it) for the operator to
        look at: `<snapshot>.refused`, the last one only. None if it could not be moved."""
        aside = self.path.with_name(f"{self.path.name}.refused")
        try:
            os.replace(path, aside)
        except OSError:
            return None
        return aside

    def _take_history(self, path: Path, now: int | None) -> None:
        """Restore the history saved beside `path` if the routes were restored (`now`), and remove the
        file (a boot copy's is removed with it, once every worker has read it)."""
        saved = history_path(path)
        history = self._routes.route_events
        try:
            if now is not None and history is not None and saved.exists():
                load_history(history, saved, now, history_file_limit(self._config))
                log.info("restored the route history from %s: %s", saved, history.usage())
        except (OSError, SnapshotError) as exc:
            log.error("route history %s not restored (%s): it starts empty", saved, exc)
        if path == self.path:
            saved.unlink(missing_ok=True)

    def save(self, force: bool = False) -> bool:
        """Write the tables if a route changed since the last write (`force`: anyway), else touch the
        file; True if written."""
        routes = self._routes
        changes = routes.route_changes  # read first: a change during the export is saved next time
        if not force and changes == self._saved_changes:
            try:
                os.utime(self.path, follow_symlinks=False)
            except FileNotFoundError:
                self._saved_changes = None  # removed behind our back: written at the next call
            return False
        started = self._clock()
        if not force and started < self._quiet_until:
            return False  # not touched either: the file no longer holds the routes served
        with no_collection():
            parts = encode_routes(routes, now_ms(), locked_at_last=force or self._skipped >= SKIPPED_SAVES)
        if parts is None:  # the routes kept changing (a fleet registering): the next interval tries again
            self._skipped += 1
            log.debug("the routes kept changing while they were packed: not saved (%d in a row)", self._skipped)
            return False
        self._skipped = 0
        write_atomically(self.path, parts, mode=0o600)
        history = routes.route_events
        if force and history is not None:  # at shutdown (see the module docstring)
            save_history(history, history_path(self.path), now_ms())
        self._saved_changes = changes
        took = self._clock() - started
        self._quiet_until = started + took / MAX_SAVE_SHARE
        log.debug("saved the routes to %s (%d bytes) in %.3f s", self.path, sum(map(len, parts)), took)
        return True
