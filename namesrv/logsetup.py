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
