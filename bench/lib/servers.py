"""The servers a verb measures, and what it reads off their processes.

* namesrv: `open_targets` starts a fresh one (namesrv.launcher) or takes `--namesrv`'s.
* The Java NameServer 4.9.8 of ../shared/rocketmq-4.9.8: benchmarks put it beside namesrv in the
  same run, so every ratio they print is measured, never pasted. The reference's own scripts start
  and stop it (`bin/namesrv PORT`, `bin/stop namesrv-PORT`), with its state in a private directory.
  Java 4.9.8 binds 0.0.0.0 (it has no bind-address option) and never answers request codes it does
  not know (BROKER_HEARTBEAT is a 5.x code).
* The ceiling (`Ceiling`): a bare pyzmq STREAM server that splits RocketMQ frames and echoes them,
  nothing else — what namesrv's reactor must do at the least for any request, so what one load
  generator reaches against it bounds any Python/pyzmq server on this machine.
* Cores (`core_plan`, `pin`): on a host with few cores the server under test and the generator each
  get CPUs of their own, the same ones for every target, so a knee measures the server and not
  their fight for the same core.
* Quiet (`settle`): the targets share those CPUs, so a step starts only once every server is idle:
  a server overloaded by its own step (Java's first knee step, far past its knee) drains its
  backlog for seconds after it, on the CPU of the next target's step.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from namesrv.launcher import NamesrvProcess

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


# ---------------------------------------------------------------- what a server process costs


def _tree(process: psutil.Process) -> list[psutil.Process]:
    return [process, *process.children(recursive=True)]


def tree_cpu_split(process: psutil.Process) -> tuple[float, float]:
    """CPU seconds (user, system) of `process` and its descendants (worker processes); one that
    ended meanwhile is left out."""
    user = system = 0.0
    for member in _tree(process):
        try:
            times = member.cpu_times()
        except psutil.NoSuchProcess:
            continue
        user += times.user
        system += times.system
    return user, system


def tree_cpu_seconds(process: psutil.Process) -> float:
    """CPU seconds (user + system) of `process` and its descendants."""
    return sum(tree_cpu_split(process))


def tree_rss_bytes(process: psutil.Process) -> int:
    """RSS of `process` and its descendants; one that ended meanwhile is left out."""
    total = 0
    for member in _tree(process):
        try:
            total += member.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def percentile(ordered: list[float], p: float) -> float:
    """The nearest-rank `p` percentile (0-100) of `ordered` (sorted ascending); NaN when empty."""
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else float("nan")


def listening_pid(port: int) -> int | None:
    """The pid listening on TCP `port` on this host, if this user may see it."""
    try:
        for connection in psutil.net_connections(kind="tcp"):
            if connection.status == psutil.CONN_LISTEN and connection.laddr and connection.laddr.port == port:
                return connection.pid
    except (psutil.Error, OSError):
        pass
    return None


# ---------------------------------------------------------------- quiet

#: A server is idle below this share of a core (namesrv's expiry scan and Java's timers stay under it).
QUIET_CORES = 0.10
#: Measured over windows of this many seconds...
QUIET_WINDOW_S = 0.5
#: ...for at most this long (then the step starts anyway, and says so).
QUIET_MAX_WAIT_S = 30.0


@dataclass(frozen=True)
class Quiet:
    """What `settle` saw: how long it waited, the cores the servers used in its last window, and
    whether that was under the threshold (False: it gave up at its limit)."""

    waited_s: float
    cores: float
    settled: bool

    def line(self) -> str:
        if self.settled:
            return f"  waited {self.waited_s:.1f} s for the servers to go idle"
        return (f"  the servers were still busy after {self.waited_s:.1f} s ({self.cores:.2f} of a core): "
                "this step shares its CPU with them")


def settle(cpu_seconds: Callable[[], float], threshold_cores: float = QUIET_CORES,
           window_s: float = QUIET_WINDOW_S, max_wait_s: float = QUIET_MAX_WAIT_S,
           clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Quiet:
    """Wait until the servers whose CPU seconds so far `cpu_seconds()` returns use less than
    `threshold_cores` over a window of `window_s`, or `max_wait_s` has passed (at least one window)."""
    started = clock()
    while True:
        cpu_before, before = cpu_seconds(), clock()
        sleep(window_s)
        cores = (cpu_seconds() - cpu_before) / max(clock() - before, 1e-9)
        waited = clock() - started
        if cores < threshold_cores or waited >= max_wait_s:
            return Quiet(waited, cores, cores < threshold_cores)


def servers_cpu_seconds(pids: Iterable[int]) -> Callable[[], float]:
    """The CPU seconds so far of the process trees of `pids` (0: a server whose process is unknown,
    left out), as a call for `settle`."""
    processes = [psutil.Process(pid) for pid in pids if pid]
    return lambda: sum(tree_cpu_seconds(process) for process in processes)


# ---------------------------------------------------------------- cores


@dataclass(frozen=True)
class CorePlan:
    """The CPUs of the server under test and of the generator (coordinator, workers, subscribers)."""

    server: tuple[int, ...]
    generator: tuple[int, ...]

    def describe(self) -> dict:
        return {"server_cpus": list(self.server), "generator_cpus": list(self.generator),
                "how": "sched_setaffinity of every thread of the server's process tree, as taskset -a -p does; "
                       "the generator's processes inherit theirs"}

    def line(self) -> str:
        return (f"cores: the server under test on CPU {_cpus(self.server)}, the generator on CPU "
                f"{_cpus(self.generator)} (the same for every target)")


def _cpus(cpus: Iterable[int]) -> str:
    return ",".join(map(str, cpus))


def core_plan(mode: str) -> CorePlan | None:
    """`--pin auto|off`: with two usable CPUs or more, half of them (rounded down) for the server,
    the rest for the generator; None when off or on one CPU (nothing to split)."""
    cpus = sorted(os.sched_getaffinity(0))
    if mode == "off" or len(cpus) < 2:
        return None
    split = len(cpus) - len(cpus) // 2
    return CorePlan(server=tuple(cpus[split:]), generator=tuple(cpus[:split]))


def pin(pid: int, cpus: Iterable[int]) -> None:
    """Every thread of `pid` and of its descendants onto `cpus` (threads they start later inherit it)."""
    wanted = set(cpus)
    for process in _tree(psutil.Process(pid)):
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{process.pid}/task"):
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(task), wanted)


# ---------------------------------------------------------------- targets


@dataclass(frozen=True)
class Target:
    """A server under test: its name in the results, what it is, where it listens."""

    name: str
    implementation: str
    address: str
    pid: int
    metrics_url: str | None = None


@contextlib.contextmanager
def open_targets(namesrv: str | None, overrides: dict[str, str], java: str, java_opts: str = DEFAULT_JAVA_OPTS,
                 *, ceiling: bool = False, cores: CorePlan | None = None,
                 name: str = "namesrv") -> Iterator[tuple[list[Target], str | None]]:
    """[the ceiling,] namesrv (`namesrv`'s address, else a fresh one with `overrides`)[, Java] and the line
    saying why Java was skipped; every server started here is stopped after, and pinned to `cores`."""
    start_java, skipped = java_wanted(java)
    with contextlib.ExitStack() as stack:
        targets = []

        def started(target: Target) -> None:  # only a server started here is pinned, never someone else's
            if cores is not None:
                pin(target.pid, cores.server)
            targets.append(target)

        if ceiling:
            echo = stack.enter_context(Ceiling())
            started(Target("ceiling", "ceiling", echo.address, echo.pid))
        if namesrv is None:
            server = stack.enter_context(NamesrvProcess(overrides))
            started(Target(name, "namesrv", server.address, server.pid,
                           None if server.http_url is None else server.http_url + "/metrics"))
        else:
            targets.append(Target(name, "unknown", namesrv, listening_pid(int(namesrv.rsplit(":", 1)[1])) or 0))
        if start_java:
            java_server = stack.enter_context(JavaNamesrvProcess(java_opts))
            started(Target("java", "java", java_server.address, java_server.pid))
        yield targets, skipped


class Ceiling:
    """The echo server in a process of its own on a free 127.0.0.1 port (`address`, `pid`)."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        ports = context.Queue()
        self._process = context.Process(target=_serve_ceiling, args=(ports,), name="ceiling", daemon=True)
        self._process.start()
        try:
            self.address = f"127.0.0.1:{ports.get(timeout=60)}"
        except Exception:
            self.close()
            raise RuntimeError("the ceiling did not start") from None
        self.pid = self._process.pid

    def close(self) -> None:
        if self._process.is_alive():
            os.kill(self._process.pid, signal.SIGTERM)
            self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()

    def __enter__(self) -> Ceiling:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _serve_ceiling(ports) -> None:
    """Echo every complete frame back to its connection, one send per received chunk, until SIGTERM."""
    import zmq

    from namesrv.errors import ProtocolError
    from namesrv.fastpath import split_frames
    from namesrv.protocol.codes import DEFAULT_MAX_FRAME_LENGTH

    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    context = zmq.Context()
    sock = context.socket(zmq.STREAM)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.STREAM_NOTIFY, 1)
    sock.bind("tcp://127.0.0.1:*")
    ports.put(int(sock.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1]))
    partial: dict[bytes, bytes] = {}
    dropped: set[bytes] = set()  # peers whose echo could not be sent: their stream is out of step
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    while not stop[0]:
        if not poller.poll(200):
            continue
        while True:
            try:
                ident = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            data = sock.recv()
            if not data:  # connect or disconnect notification
                partial.pop(ident, None)
                dropped.discard(ident)
                continue
            if ident in dropped:
                continue
            data = partial.pop(ident, b"") + data
            try:
                _frames, consumed = split_frames(data, DEFAULT_MAX_FRAME_LENGTH)
                if consumed:  # (an empty message would close the connection)
                    sock.send(ident, zmq.SNDMORE | zmq.NOBLOCK)
                    sock.send(data if consumed == len(data) else data[:consumed], zmq.NOBLOCK, copy=False)
            except (zmq.ZMQError, ProtocolError):  # the peer is gone, does not read, or sent garbage
                dropped.add(ident)
                continue
            partial[ident] = data[consumed:]
    sock.close(0)
    context.term()
