"""Files the server writes (the KV table, the config file, the route snapshot and its boot copy):
written whole or not at all, through temporary files nobody else can plant or read.

Every write starts a new file in the target's own folder under a name no one can guess
(O_CREAT|O_EXCL|O_NOFOLLOW: never a file or a link that was already there, so a symlink planted
beside the target cannot make us truncate or overwrite what it points to), readable by the owner
only (0600) while it is written. `write_atomically` then fsyncs it, gives it its final mode and
renames it over the target (a rename replaces a link, never follows it), then fsyncs the folder:
after a crash at any point the target is the old content or the new. RocketMQ 5.x overwrites its
files in place (a crash leaves them torn) through fixed names.
"""
from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

#: Attempts at an unused temporary name (each of 64 random bits) before giving up.
NAME_ATTEMPTS = 16
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def write_atomically(path: str | Path, data: bytes | Iterable[bytes | memoryview], mode: int = 0o644) -> None:
    """Replace `path` by `data` (or its parts, in order): after a crash at any point the file is the
    old or the new content.

    A new file gets `mode` less the umask; a replaced one keeps its permissions, never more than
    `mode` (an operator's chmod 600 on a file holding a secret survives the rewrite).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        final_mode: int | None = mode & stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        final_mode = None  # `mode` less the umask: what the kernel gives a file created with `mode`
    try:
        fd, tmp = _create(path.parent, f".{path.name}.", mode)
    except OSError as exc:  # named by the file it was to become: the temporary name means nothing to anyone
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    try:
        try:
            if final_mode is None:
                final_mode = stat.S_IMODE(os.fstat(fd).st_mode)
            os.fchmod(fd, 0o600)  # empty so far: nobody could have read anything
            _write_all(fd, [data] if isinstance(data, (bytes, bytearray, memoryview)) else data)
            os.fsync(fd)
            os.fchmod(fd, final_mode)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)


def private_copy(source: str | Path, prefix: str) -> Path:
    """A new file beside `source` holding a copy of it, mode 0600, named `prefix` and random
    characters: the caller removes it."""
    source = Path(source)
    data = source.read_bytes()
    fd, copy = _create(source.parent, prefix, 0o600)
    try:
        try:
            _write_all(fd, [data])
        finally:
            os.close(fd)
    except BaseException:
        copy.unlink(missing_ok=True)
        raise
    return copy


def _create(folder: Path, prefix: str, mode: int) -> tuple[int, Path]:
    """(descriptor, path) of a new, empty file in `folder` that did not exist in any form before."""
    for _ in range(NAME_ATTEMPTS):
        candidate = folder / f"{prefix}{secrets.token_hex(8)}.tmp"
        try:
            return os.open(candidate, _CREATE, mode), candidate
        except FileExistsError:
            continue
    raise FileExistsError(f"no unused temporary name in {folder} after {NAME_ATTEMPTS} attempts")


def _write_all(fd: int, parts: Iterable[bytes | memoryview]) -> None:
    for part in parts:
        view = memoryview(part)
        while view:
            view = view[os.write(fd, view):]


def _fsync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable."""
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
