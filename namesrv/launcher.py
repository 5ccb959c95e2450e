"""Start a real namesrv process: what tests, `python -m bench` and `make bench` run against.

The server binds 127.0.0.1 on ports the kernel picks (listenPort=0, ZeroMQ "*"), so parallel runs
never race for a port, and it keeps its KV and config files in a private work directory. The
launcher learns the bound addresses from the boot line the server logs once it is serving.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

#: The line NamesrvController logs once both endpoints are bound and the reactor runs.
BOOT_LINE = re.compile(r"The Name Server boot success\. serializeType=\w+, address (?P<address>\S+), "
                       r"zmq (?P<zmq>[^\s,]+)(?:, http (?P<http>\S+))?")
_SOURCE_ROOT = str(Path(__file__).resolve().parent.parent)


class NamesrvStartError(RuntimeError):
    """The server exited or did not report its boot line in time; the message ends with its log."""


def _wire(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class NamesrvProcess:
    """One `python -m namesrv` child process.

    `overrides` are configuration keys (camelCase) passed as `--key=value`; the launcher's own
    defaults (127.0.0.1, free ports, KV and config files under `workdir`) apply unless overridden.
    Its stdout and stderr go to `workdir/namesrv.log` (`log_text()`); `log_config` is passed as
    --logConfig (the boot line must still reach stderr at INFO: the launcher waits for it).
    """

    def __init__(self, overrides: Mapping[str, object] | None = None, *, workdir: str | Path | None = None,
                 config_file: str | Path | None = None, log_config: str | Path | None = None,
                 startup_timeout: float = 20.0, source_root: str | Path | None = None,
                 wrapper: Sequence[str] = ()) -> None:
        """`source_root`: the checkout whose `namesrv` package runs (default: this one), say an
        older commit's worktree for a before-and-after measurement; `wrapper`: a command the
        server runs under (say valgrind, whose output then joins the server's log)."""
        #: The checkout whose `namesrv` package runs.
        self.source_root = str(source_root or _SOURCE_ROOT)
        self._owns_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="namesrv-") if workdir is None else workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / "namesrv.log"
        settings: dict[str, object] = {
            "bindAddress": "127.0.0.1",
            "listenPort": 0,
            "zmqListenAddress": "tcp://127.0.0.1:*",
            "httpListenAddress": "127.0.0.1:0",
            "kvConfigPath": self.workdir / "kvConfig.json",
            "configStorePath": self.workdir / "namesrv.properties",
        }
        if source_root is not None:  # an older checkout may not know every key (it then binds no such port)
            known = self._known_keys()
            settings = {key: value for key, value in settings.items() if key in known}
        settings.update(overrides or {})
        self.command = [*wrapper, sys.executable, "-m", "namesrv"]
        if config_file is not None:
            self.command += ["-c", str(config_file)]
        if log_config is not None:
            self.command.append(f"--logConfig={log_config}")
        self.command += [f"--{key}={_wire(value)}" for key, value in settings.items()]
        self._startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self.address = ""
        self.zmq_address: str | None = None
        #: "http://host:port" of the operator's HTTP port, None when disabled (after start()).
        self.http_url: str | None = None

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (self.source_root, env.get("PYTHONPATH"))))
        return env

    def _known_keys(self) -> set[str]:
        """The configuration keys the checkout's server knows (what its `-p` prints)."""
        printed = subprocess.run([sys.executable, "-m", "namesrv", "-p"], capture_output=True, text=True, timeout=60,
                                 env=self._environment(), cwd=self.workdir, check=True)
        return {line.partition("=")[0] for line in printed.stdout.splitlines()}

    # ---- life cycle
    def start(self) -> NamesrvProcess:
        """Start the server and return once it serves (NamesrvStartError if it does not)."""
        env = self._environment()
        with open(self.log_path, "wb") as log_file:  # a session of its own: the terminal's Ctrl-C is the caller's
            self._process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=log_file,
                                             stderr=subprocess.STDOUT, cwd=self.workdir, env=env,
                                             start_new_session=True)
        deadline = time.monotonic() + self._startup_timeout
        while True:
            match = BOOT_LINE.search(self.log_text())
            if match:
                break
            if self._process.poll() is not None:
                raise NamesrvStartError(f"namesrv exited with {self._process.returncode} before serving:\n"
                                        f"{self.log_text()}")
            if time.monotonic() > deadline:
                self.kill()
                raise NamesrvStartError(f"namesrv did not boot within {self._startup_timeout} s:\n{self.log_text()}")
            time.sleep(0.02)
        host, port = match["address"].rsplit(":", 1)
        self.address = f"{'127.0.0.1' if host == '0.0.0.0' else host}:{port}"
        self.zmq_address = None if match["zmq"] == "disabled" else match["zmq"].replace("0.0.0.0", "127.0.0.1")
        http = match["http"]
        self.http_url = None if http in (None, "disabled") else "http://" + http.replace("0.0.0.0", "127.0.0.1")
        return self

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("namesrv is not started")
        return self._process.pid

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])

    @property
    def returncode(self) -> int | None:
        return None if self._process is None else self._process.poll()

    def wait(self, timeout: float = 20.0) -> int:
        """Wait for the process to exit by itself (subprocess.TimeoutExpired if it does not); its exit code."""
        if self._process is None:
            raise RuntimeError("namesrv is not started")
        return self._process.wait(timeout)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM (graceful shutdown) and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        if self._process is None:
            return 0
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self._process.wait()

    def kill(self) -> None:
        """SIGKILL at once: a crash, as far as peers can tell."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def close(self) -> None:
        """Stop the process and remove the work directory if the launcher made it."""
        self.stop()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> NamesrvProcess:
        return self.start() if self._process is None else self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- observation
    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def wait_for_log(self, pattern: str, timeout: float = 10.0) -> re.Match[str]:
        """The first match of the regular expression `pattern` in the log, waiting up to `timeout` s."""
        compiled = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            match = compiled.search(self.log_text())
            if match:
                return match
            if time.monotonic() > deadline:
                raise AssertionError(f"{pattern!r} not logged within {timeout} s:\n{self.log_text()[-4000:]}")
            time.sleep(0.02)

    def __repr__(self) -> str:
        state = "not started" if self._process is None else f"pid {self.pid}, rc {self.returncode}"
        return f"NamesrvProcess({self.address or '-'}, zmq {self.zmq_address}, {state})"
