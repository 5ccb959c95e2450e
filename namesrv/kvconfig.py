"""KV configuration (RocketMQ's KVConfigManager): namespaces of key -> value, persisted atomically.

The one piece of NameServer state that survives a restart. RocketMQ 5.x overwrites the file in
place, so a crash mid-write leaves a torn or empty file; here every write replaces it atomically
(namesrv.files), so the file on disk is always a complete old or new version. File format:
reference 3.14.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from namesrv.errors import ProtocolError
from namesrv.files import write_atomically
from namesrv.protocol import jsonbody

log = logging.getLogger(__name__)

#: Namespace whose entries (topic -> "brokerName:queueNums;...") mark order topics.
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager:
    """namespace -> key -> value (a value may be None: PUT without a value, as RocketMQ stores it)."""

    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        self._persist = True
        self._table: dict[str, dict[str, str | None]] = {}  # changed in place only: memory_only views share it
        self._lock = threading.Lock()  # guards _table; never held during file I/O
        self._persist_lock = threading.Lock()  # one writer at a time, so the newest snapshot is written last
        #: The table's changes so far, bumped under `_lock` (one list: `memory_only` views share it).
        self._revision = [0]

    @property
    def path(self) -> Path:
        return self._path

    def memory_only(self) -> KVConfigManager:
        """The same table, changed in memory only: how a worker process applies the write log
        write (namesrv.writelog); the supervisor's sequencer persisted it."""
        view = KVConfigManager(self._path)
        view._persist = False
        view._table, view._lock, view._persist_lock = self._table, self._lock, self._persist_lock
        view._revision = self._revision
        return view

    @property
    def revision(self) -> int:
        """A number every change of the table moves: what was read from the table (a registration's
        kept answer) is current while it reads the same. Read without the lock (one int)."""
        return self._revision[0]

    def entry_count(self) -> int:
        """How many key/value entries all namespaces hold."""
        with self._lock:
            return sum(map(len, self._table.values()))

    def export_table(self) -> dict[str, dict[str, str | None]]:
        """A copy of the whole table (what a restarted worker process copies from a sibling)."""
        with self._lock:
            return {namespace: dict(entries) for namespace, entries in self._table.items()}

    def restore_table(self, table: dict[str, dict[str, str | None]]) -> None:
        """Replace the whole table in memory (a sibling's `export_table`); the file is left as it is."""
        with self._lock:
            self._table.clear()
            self._table.update(table)
            self._revision[0] += 1

    def load(self) -> None:
        """Read the file (missing = empty). A file that does not parse is moved aside, never overwritten."""
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            log.info("no KV config file at %s, starting empty", self._path)
            return
        try:
            table = _parse(data)
        except ProtocolError as exc:
            aside = self._path.with_name(f"{self._path.name}.corrupt-{time.time_ns()}")
            os.replace(self._path, aside)
            log.error("KV config file %s is unreadable (%s); moved to %s, starting empty", self._path, exc, aside)
            return
        with self._lock:
            self._table.clear()
            self._table.update(table)
            self._revision[0] += 1
        log.info("loaded KV config from %s: %d namespaces", self._path, len(table))

    def put(self, namespace: str, key: str, value: str | None) -> None:
        def apply() -> None:
            self._table.setdefault(namespace, {})[key] = value

        self._write(apply)
        log.log(self._change_log_level(), "KV put, namespace %r key %r value %r", namespace, key, value)

    def delete(self, namespace: str | None, key: str | None) -> None:
        """Remove the key if present; the file is rewritten either way (as RocketMQ does)."""
        def apply() -> None:
            self._table.get(namespace, {}).pop(key, None)

        self._write(apply)
        log.log(self._change_log_level(), "KV delete, namespace %r key %r", namespace, key)

    def _change_log_level(self) -> int:
        """Changes are logged (as RocketMQ does) by the table that persists them: with worker
        processes that is the sequencer's, so each change is logged once, not once per worker."""
        return logging.INFO if self._persist else logging.DEBUG

    def get(self, namespace: str | None, key: str | None) -> str | None:
        with self._lock:
            return self._table.get(namespace, {}).get(key)

    def get_namespace(self, namespace: str | None) -> dict[str, str] | None:
        """A copy of the namespace's entries with a value, or None if the namespace does not exist."""
        with self._lock:
            entries = self._table.get(namespace)
            return None if entries is None else {k: v for k, v in entries.items() if v is not None}

    def log_table(self) -> None:
        """Log every entry (the controller calls this every 10 minutes, as RocketMQ does)."""
        with self._lock:
            rows = [(ns, k, v) for ns, entries in self._table.items() for k, v in entries.items()]
            size = len(self._table)
        log.info("configTable SIZE: %d", size)
        for namespace, key, value in rows:
            log.info("configTable NS: %s Key: %s Value: %s", namespace, key, value)

    def _write(self, apply: Callable[[], None]) -> None:
        if not self._persist:
            with self._lock:
                apply()
                self._revision[0] += 1
            return
        with self._persist_lock:
            with self._lock:
                apply()
                self._revision[0] += 1
                data = jsonbody.dumps({"configTable": {ns: {k: v for k, v in entries.items() if v is not None}
                                                       for ns, entries in self._table.items()}})
            write_atomically(self._path, data)


def _parse(data: bytes) -> dict[str, dict[str, str | None]]:
    """The file's `{"configTable":{ns:{key:value}}}`; scalar values are read as their text."""
    what = "KV config file"
    root = jsonbody.expect(jsonbody.loads(data, what), dict, what)
    table: dict[str, dict[str, str | None]] = {}
    for namespace, entries in jsonbody.get_dict(root, "configTable", what).items():
        jsonbody.expect(entries, dict, what, " namespace ", namespace)
        table[namespace] = {key: _text(value, f"{what} {namespace}/{key}") for key, value in entries.items()
                            if value is not None}
    return table


def _text(value: object, what: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise ProtocolError(f"{what} must be a string, got {type(value).__name__}")
