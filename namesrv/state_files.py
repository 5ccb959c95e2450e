"""The files a server writes while it runs (KV table, route snapshot, config file), checked at start.

Each is written atomically, through a temporary file beside it that is renamed over it, so what a
file needs is a directory the server can create files in. Unchecked, a path that cannot be written
passes start-up and fails the first write that needs it (an updateKvConfig refused, an error in the
log, perhaps hours later); checked here, the server refuses to start with one line naming the key.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from namesrv.config import ConfigError, NamesrvConfig
from namesrv.routeinfo.persist import snapshot_path


def state_files(config: NamesrvConfig) -> list[tuple[str, Path]]:
    """(the key that names it, path) of every file the server may write."""
    files = [("kvConfigPath", Path(config.kv_config_path)), ("configStorePath", Path(config.config_store_path))]
    if config.route_snapshot_enable:  # beside the KV file unless routeSnapshotPath says otherwise
        files.append(("routeSnapshotPath" if config.route_snapshot_path else "kvConfigPath", snapshot_path(config)))
    return files


def check_state_files(config: NamesrvConfig) -> None:
    """ConfigError naming the key of the first file the server could not write (or read back)."""
    for key, path in state_files(config):
        problem = _unwritable(path)
        if problem is not None:
            raise ConfigError(key, f"cannot write {path}: {problem}")


def _unwritable(path: Path) -> str | None:
    """Why `path` cannot be written as the server writes it, or None. Creates its missing
    directories, as the first write would."""
    if path.is_dir():
        return "it is a directory"
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{ancestor} is not a directory"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"{exc.filename or path.parent} cannot be created ({exc.strerror or exc})"
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=path.parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"no file can be created in {path.parent} ({exc.strerror or exc})"
    try:
        if path.exists():
            path.open("rb").close()  # read at start, rewritten later
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    return None
