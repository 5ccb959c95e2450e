"""`python -m namesrv` with serverWorkerProcesses = N > 1: the parent of N worker processes.

It validates the configuration, reserves the ports (namesrv.writelog.ports.reserve_port:
listenPort=0 and a ZeroMQ "*" port become concrete ones), runs the write log's sequencer
(namesrv.writelog.sequencer: the one order of every write, and the one writer of the KV and config
files), starts the workers as fresh interpreters (`python -m namesrv.workers.worker`, in their own
process group, so a terminal's Ctrl-C reaches the supervisor only) and logs the usual boot line
once all of them serve. A worker that exits unexpectedly is restarted (at once, or after
RESTART_DELAY_SECONDS if it lived less than MIN_UPTIME_SECONDS) and copies a serving sibling's
tables before it serves. SIGTERM/SIGINT are forwarded: every worker shuts down gracefully, then the
supervisor exits 0. If the supervisor itself is killed, the workers see their stdin close and shut
down too. A worker failing before the boot line ends the whole start (exit 1, or 2 for a port or
configuration error).
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from namesrv.config import NamesrvConfig
from namesrv.controller import DRAIN_SECONDS, FLUSH_SECONDS, validate
from namesrv.operator_http import check_bindable
from namesrv.remoting import BindError
from namesrv.remoting.reactor import TCP_KEYS, ZMQ_KEY, tcp_endpoint
from namesrv.routeinfo.persist import BootCopy
from namesrv.stop_signals import StopSignals
from namesrv.writelog.ports import reserve_port, zmq_tcp_address
from namesrv.writelog.replication import WorkerRole
from namesrv.writelog.sequencer import Sequencer, new_bus_name

log = logging.getLogger(__name__)

#: How long a stopping worker may take (it drains, flushes, lingers) before it is killed.
STOP_SECONDS = DRAIN_SECONDS + FLUSH_SECONDS + 5
#: A worker that dies younger than this is restarted after RESTART_DELAY_SECONDS, not at once.
MIN_UPTIME_SECONDS = 5.0
RESTART_DELAY_SECONDS = 1.0
_SOURCE_ROOT = str(Path(__file__).resolve().parent.parent.parent)


class WorkerProcess:
    """One worker child: its process, its control pipes (spec in, reports out), whether it serves."""

    def __init__(self, role: WorkerRole, config: NamesrvConfig, log_config: str | None,
                 boot_copy: BootCopy | None) -> None:
        self.role = role
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (_SOURCE_ROOT, env.get("PYTHONPATH"))))
        self.process = subprocess.Popen([sys.executable, "-m", "namesrv.workers.worker"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, env=env, process_group=0)
        spec = {"role": asdict(role), "config": config.to_properties(reveal_secrets=True), "logConfig": log_config,
                "bootCopy": None if boot_copy is None else asdict(boot_copy)}
        self.process.stdin.write(json.dumps(spec).encode() + b"\n")
        self.process.stdin.flush()  # stdin stays open: its end tells the worker the supervisor is gone
        self.started = time.monotonic()
        #: The worker's "serving" report ({"address", "zmq", "http", "tls"}), None until it serves.
        self.serving: dict | None = None
        self._partial = b""

    @property
    def pid(self) -> int:
        return self.process.pid

    def fileno(self) -> int:
        return self.process.stdout.fileno()

    def read_reports(self) -> list[dict] | None:
        """The reports that arrived (JSON lines), or None: the worker has exited."""
        data = os.read(self.fileno(), 65536)
        if not data:
            return None
        *lines, self._partial = (self._partial + data).split(b"\n")
        return [json.loads(line) for line in lines if line]

    def signal(self, signum: int) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signum)

    def reap(self, timeout: float | None = None) -> int:
        """Wait for the exit (subprocess.TimeoutExpired if it takes longer) and close the pipes."""
        code = self.process.wait(timeout)
        self.process.stdin.close()
        self.process.stdout.close()
        return code


class Supervisor:
    """`run()` until SIGTERM/SIGINT; returns the exit code."""

    def __init__(self, config: NamesrvConfig, log_config: str | None) -> None:
        validate(config)
        self._config = config
        self._log_config = log_config
        self._workers: dict[int, WorkerProcess] = {}
        self._generations = 0
        self._bus_name = new_bus_name()
        self._boot_copy: BootCopy | None = None

    def run(self) -> int:
        stops = StopSignals()
        stops.install()  # first: a signal while the ports are reserved still ends in a clean shutdown
        reservations = self._reserve_ports()
        self._boot_copy = BootCopy.take(self._config)
        sequencer = Sequencer(self._config, self._bus_name)
        sequencer.start()
        try:
            return self._supervise(stops, sequencer)
        finally:
            self._stop_workers()
            sequencer.stop()
            for reservation in reservations:
                reservation.close()
            if self._boot_copy is not None:
                self._boot_copy.remove()
            log.info("The Name Server shut down")

    def _reserve_ports(self) -> list[socket.socket]:
        """Hold the ports for the workers; BindError if one is in use. Chosen ports go into the config."""
        config = self._config
        if config.http_listen_address:
            check_bindable(config.http_listen_address)  # worker 0's to bind: a port in use is said here too
        reservations: list[socket.socket] = []
        endpoint, keys = tcp_endpoint(config.bind_address, config.listen_port), TCP_KEYS
        try:
            reservations.append(reserve_port(config.bind_address, config.listen_port))
            config.listen_port = reservations[-1].getsockname()[1]
            shared_zmq = zmq_tcp_address(config.zmq_listen_address) if config.zmq_listen_address else None
            if shared_zmq is not None:
                endpoint, keys = config.zmq_listen_address, ZMQ_KEY
                host, _ = shared_zmq
                reservations.append(reserve_port(*shared_zmq))
                config.zmq_listen_address = f"tcp://{host}:{reservations[-1].getsockname()[1]}"
        except OSError as exc:
            for reservation in reservations:
                reservation.close()
            raise BindError(endpoint, keys, exc.strerror or str(exc)) from None
        return reservations

    def _supervise(self, stops: StopSignals, sequencer: Sequencer) -> int:
        count = self._config.server_worker_processes
        for index in range(count):
            self._spawn(index, restart=False)
        booted = False
        restarts: dict[int, float] = {}  # worker index -> when to start it again
        while stops.reason is None:
            timeout = max(0.0, min(restarts.values()) - time.monotonic()) if restarts else None
            by_fd = {worker.fileno(): worker for worker in self._workers.values()}
            for fd in stops.wait(*by_fd, timeout=timeout):
                worker = by_fd[fd]
                reports = worker.read_reports()
                if reports is not None:
                    if reports and booted:
                        log.info("worker %d (pid %d) restarted and serving", worker.role.index, worker.pid)
                    worker.serving = next((r["serving"] for r in reports if "serving" in r), worker.serving)
                    continue
                del self._workers[worker.role.index]
                code = worker.reap()
                sequencer.worker_gone(worker.role.index, worker.role.generation)
                if not booted:
                    log.error("worker %d (pid %d) exited with %d before serving", worker.role.index, worker.pid, code)
                    return code if code in (1, 2) else 1
                delay = 0.0 if time.monotonic() - worker.started >= MIN_UPTIME_SECONDS else RESTART_DELAY_SECONDS
                log.error("worker %d (pid %d) exited with %d; restarting it%s", worker.role.index, worker.pid, code,
                          f" in {delay:.0f} s" if delay else "")
                restarts[worker.role.index] = time.monotonic() + delay
            if not booted and len(self._workers) == count and all(w.serving for w in self._workers.values()):
                booted = True
                first = self._workers[0].serving
                log.info("The Name Server boot success. serializeType=JSON, address %s, zmq %s, http %s (%s; %d "
                         "worker processes, pids %s)", first["address"], first["zmq"] or "disabled",
                         first.get("http") or "disabled", first.get("tls"), count,
                         " ".join(str(self._workers[i].pid) for i in range(count)))
            for index, due in list(restarts.items()):
                if due <= time.monotonic():
                    del restarts[index]
                    self._spawn(index, restart=True)
        return 0

    def _spawn(self, index: int, restart: bool) -> None:
        """Start worker `index`; one started while the log was written to copies a serving sibling's tables."""
        self._generations += 1
        role = WorkerRole(index, self._generations, self._config.server_worker_processes, self._bus_name)
        worker = WorkerProcess(role, self._config, self._log_config, self._boot_copy)
        self._workers[index] = worker
        log.info("%s worker %d (pid %d, generation %d)", "restarted" if restart else "started", index, worker.pid,
                 role.generation)

    def _stop_workers(self) -> None:
        """SIGTERM every worker (graceful: they finish what they accepted), SIGKILL what is left after STOP_SECONDS."""
        workers = list(self._workers.values())
        self._workers.clear()
        for worker in workers:
            worker.signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        for worker in workers:
            try:
                code = worker.reap(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("worker %d (pid %d) did not stop within %.0f s: killed", worker.role.index, worker.pid,
                          STOP_SECONDS)
                worker.signal(signal.SIGKILL)
                code = worker.reap()
            if code != 0:
                log.warning("worker %d (pid %d) exited with %d", worker.role.index, worker.pid, code)
