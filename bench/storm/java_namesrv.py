"""Start the real Apache RocketMQ 4.9.8 NameServer of ../shared/rocketmq-4.9.8 for a benchmark run.

Benchmarks put Java beside namesrv in the same run, so every ratio they print is measured, never
pasted. The reference's own scripts start and stop it (`bin/namesrv PORT`, `bin/stop namesrv-PORT`),
with its state in a private directory. Java 4.9.8 binds 0.0.0.0 (it has no bind-address option)
and never answers request codes it does not know (BROKER_HEARTBEAT is a 5.x code).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "rocketmq-4.9.8"
#: The heap the benchmarks give Java: the reference script's 256 MB is a test size, and RocketMQ's own
#: runserver.sh asks for 4 GB; 1 GB is ample for the storms here (its RSS stays far below).
DEFAULT_JAVA_OPTS = "-Xms1g -Xmx1g"


def java_unavailable_reason(reference: Path = REFERENCE) -> str | None:
    """Why the Java NameServer cannot run here (the caller skips Java and says so), or None."""
    check = reference / "bin" / "check"
    if not check.exists():
        return f"the Java RocketMQ 4.9.8 reference is not at {reference}"
    result = subprocess.run([check], capture_output=True, text=True, timeout=60)
    if result.returncode:
        return "Java 17 is not available: " + (result.stderr.strip() or result.stdout.strip())
    return None


def java_wanted(mode: str) -> tuple[bool, str | None]:
    """A bench's `--java off|auto|on`: whether to start Java, and the line saying why it was skipped
    (auto without Java 17); ValueError for `on` without Java 17."""
    if mode == "off":
        return False, None
    reason = java_unavailable_reason()
    if reason is None:
        return True, None
    if mode == "on":
        raise ValueError(f"--java on, but {reason}")
    return False, f"Java NameServer skipped: {reason}"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class JavaNamesrvProcess:
    """One Java NameServer 4.9.8 on a free port of 127.0.0.1, stopped (SIGTERM, as the script does) on exit."""

    def __init__(self, java_opts: str = DEFAULT_JAVA_OPTS, reference: Path = REFERENCE) -> None:
        self._reference = reference
        self._state = Path(tempfile.mkdtemp(prefix="java-namesrv-"))
        self._env = {**os.environ, "ROCKETMQ_REF_RUN": str(self._state), "ROCKETMQ_REF_JAVA_OPTS": java_opts}
        self.java_opts = java_opts
        self.port = 0
        self.pid = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self._state / f"namesrv-{self.port}" / "stdout.log"

    def start(self) -> JavaNamesrvProcess:
        self.port = _free_port()
        result = subprocess.run([self._reference / "bin" / "namesrv", str(self.port)], env=self._env,
                                capture_output=True, text=True, timeout=120,
                                start_new_session=True)  # the JVM too: the terminal's Ctrl-C is the caller's
        if result.returncode:
            raise RuntimeError(f"the Java NameServer did not start: {result.stderr.strip()[-2000:]}")
        self.pid = int(result.stdout.split()[0])
        return self

    def stop(self) -> None:
        if self.pid:
            subprocess.run([self._reference / "bin" / "stop", f"namesrv-{self.port}"], env=self._env,
                           capture_output=True, text=True, timeout=60)
            self.pid = 0

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self._state, ignore_errors=True)

    def __enter__(self) -> JavaNamesrvProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()
