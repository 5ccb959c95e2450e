"""namesrv.files: atomic replacement through temporary files nobody can plant (issue 31, class 5)."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from namesrv.files import private_copy, write_atomically


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_write_atomically_replaces_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "file.json"
    write_atomically(target, b"one")
    write_atomically(target, [b"t", memoryview(b"wo")])
    assert target.read_bytes() == b"two"
    assert names(target.parent) == ["file.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "file.json"
    write_atomically(target, b"old")
    with pytest.raises(TypeError):
        write_atomically(target, [b"new", None])  # fails halfway through the temporary file
    assert target.read_bytes() == b"old"
    assert names(tmp_path) == ["file.json"]


def test_a_file_that_cannot_be_started_is_named_by_its_target_not_its_temporary_name() -> None:
    """What the server's one-line 'cannot write' error shows (namesrv.processor.core.file_error)."""
    with pytest.raises(FileNotFoundError) as raised:
        write_atomically("/proc/namesrv-test.json", b"x")  # no file can be created in /proc
    assert (raised.value.filename, raised.value.strerror) == ("/proc/namesrv-test.json", "No such file or directory")


@pytest.mark.parametrize("planted", ["file.json.tmp", ".file.json.tmp"])
def test_a_symlink_planted_at_a_temporary_path_is_never_followed_nor_renamed_into_place(tmp_path: Path,
                                                                                         planted: str) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    target = tmp_path / "file.json"
    link = tmp_path / planted
    link.symlink_to(victim)
    write_atomically(target, b"new")
    assert victim.read_bytes() == b"precious"
    assert target.read_bytes() == b"new" and not target.is_symlink()
    assert link.is_symlink() and os.readlink(link) == str(victim)


def test_a_symlink_at_the_target_itself_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    target = tmp_path / "file.json"
    target.symlink_to(victim)
    write_atomically(target, b"new")
    assert victim.read_bytes() == b"precious" and not target.is_symlink() and target.read_bytes() == b"new"


def test_modes_a_new_file_less_the_umask_a_replaced_one_keeps_its_own_never_more(tmp_path: Path) -> None:
    target = tmp_path / "file.json"
    old_umask = os.umask(0o077)
    try:
        write_atomically(target, b"x", mode=0o644)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    os.chmod(target, 0o640)
    write_atomically(target, b"y", mode=0o644)
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    write_atomically(target, b"z", mode=0o600)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_the_temporary_file_is_the_owners_alone_while_it_is_written(tmp_path: Path, monkeypatch) -> None:
    seen = []
    real_write = os.write

    def spying_write(fd: int, data: object) -> int:
        seen.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", spying_write)
    write_atomically(tmp_path / "kv.json", b"secret", mode=0o644)
    assert seen and set(seen) == {0o600}


def test_a_private_copy_is_a_new_owner_only_file_beside_its_source(tmp_path: Path) -> None:
    source = tmp_path / "routes.snapshot"
    source.write_bytes(b"snapshot")
    (tmp_path / f".routes.snapshot.boot-{os.getpid()}").symlink_to(tmp_path / "victim")  # a guess at a name
    copy = private_copy(source, ".routes.snapshot.boot-")
    assert copy.parent == tmp_path and copy.read_bytes() == b"snapshot" and not copy.is_symlink()
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600 and not (tmp_path / "victim").exists()
