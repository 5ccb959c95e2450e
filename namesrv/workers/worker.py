"""A worker process's main: `python -m namesrv.workers.worker`, started by the supervisor only.

Its spec arrives as one JSON line on stdin (so secrets never show in the process list): the
`WorkerRole`, the configuration (every key, ports already chosen) and the logging config file.
Once serving it writes one JSON line to stdout, `{"serving": {"address": ..., "zmq": ..., "http": ...}}`
It stops gracefully on SIGTERM, when the supervisor goes away (stdin reaches its end), or when
it falls out of step with its siblings (exit 1, to be restarted). A SIGTERM before it serves
ends it at once: it has accepted nothing yet.
"""
from __future__ import annotations

import json
import logging
import os
import sys

from namesrv.config import ConfigError, NamesrvConfig
from namesrv.controller import NamesrvController
from namesrv.gc_pauses import freeze_before_serving
from namesrv.logsetup import UsageError, setup_logging
from namesrv.routeinfo.persist import BootCopy
from namesrv.remoting import BindError
from namesrv.stop_signals import StopSignals
from namesrv.writelog.replication import SyncError, WorkerRole

log = logging.getLogger(__name__)

#: Why a worker stops when its supervisor is gone.
SUPERVISOR_GONE = "the supervisor is gone"


def label_log_records(index: int) -> None:
    """Prefix the thread name of every log record with the worker's index ("w1/NamesrvReactor")."""
    make_record = logging.getLogRecordFactory()

    def labelled(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        record.threadName = f"w{index}/{record.threadName}"
        return record

    logging.setLogRecordFactory(labelled)


def main() -> int:
    spec = json.loads(sys.stdin.buffer.readline())
    role = WorkerRole(**spec["role"])
    try:
        setup_logging(spec["logConfig"])
    except UsageError as exc:
        print(f"namesrv worker {role.index}: {exc}", file=sys.stderr)
        return 2
    label_log_records(role.index)
    stops = StopSignals()
    try:
        boot_copy = None if spec.get("bootCopy") is None else BootCopy(**spec["bootCopy"])
        controller = NamesrvController(NamesrvConfig.load(None, spec["config"]), role, stops.request, boot_copy)
        freeze_before_serving()
        controller.start()
    except (ConfigError, BindError) as exc:
        log.error("cannot start: %s", exc)
        return 2
    except SyncError as exc:
        log.error("cannot start: %s", exc)
        return 1
    stops.install()
    http = controller.http.bound if controller.http is not None else None
    sys.stdout.write(json.dumps({"serving": {"address": controller.reactor.tcp_address,
                                             "zmq": controller.reactor.zmq_address, "http": http,
                                             "tls": controller.reactor.tls.describe()}}) + "\n")
    sys.stdout.flush()
    control = sys.stdin.fileno()
    while stops.reason is None:
        if stops.wait(control) and not os.read(control, 4096):
            log.warning("%s: shutting down", SUPERVISOR_GONE)
            stops.request(SUPERVISOR_GONE)
    controller.shutdown()
    return 0 if stops.reason in ("SIGTERM", "SIGINT", SUPERVISOR_GONE) else 1


if __name__ == "__main__":
    sys.exit(main())
