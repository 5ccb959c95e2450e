"""Logging set up the same way in every process: the command line's, the supervisor's and each worker's.

Below both namesrv.cli and namesrv.workers (a worker process sets up logging from the file its
supervisor was given), so neither has to import the other for it.
"""
from __future__ import annotations

import logging
import logging.config
from pathlib import Path

#: The repository's logging configuration, used when --logConfig is not given.
DEFAULT_LOG_CONFIG = Path(__file__).resolve().parent.parent / "conf" / "logging.conf"

#: Control characters (C0, DEL, C1) and Unicode line separators, written as Python escapes.
_ESCAPES = {code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0))}
_ESCAPES.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", 0x2028: "\\u2028", 0x2029: "\\u2029"})


class EscapeControlCharacters(logging.Filter):
    """Writes a record's message with its control characters escaped.

    Names in log lines come from the wire (broker, cluster and topic names, KV keys, peers' text);
    a newline in one must not forge a log line, nor an escape sequence drive the operator's
    terminal. Installed on every handler by `setup_logging`, whatever configuration it loads, so no
    log call has to remember it. Tracebacks are not touched (they are not the message).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        escaped = message.translate(_ESCAPES)
        if escaped != message:
            record.msg, record.args = escaped, None
        return True


class UsageError(Exception):
    """A command line namesrv cannot run with; the message is the whole story."""


def setup_logging(path: str | None) -> None:
    """fileConfig from `path`, else the repository's conf/logging.conf, else plain INFO to stderr."""
    chosen = Path(path) if path is not None else DEFAULT_LOG_CONFIG
    if path is not None and not chosen.is_file():
        raise UsageError(f"cannot read logging config {path}")
    if chosen.is_file():
        try:
            logging.config.fileConfig(chosen, disable_existing_loggers=False)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise UsageError(f"bad logging config {chosen}: {exc}") from None
    else:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s [%(threadName)s] %(name)s - %(message)s")
    escaper = EscapeControlCharacters()
    for handler in logging.getLogger().handlers:
        if not any(isinstance(existing, EscapeControlCharacters) for existing in handler.filters):
            handler.addFilter(escaper)
