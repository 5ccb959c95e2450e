"""The process's descriptor limit against maxConnections: raised where it can be, else the
connection limit is clamped to what fits.

Every connection holds a descriptor (a ZeroMQ peer's inside libzmq), so a server allowing more
connections than its descriptor limit runs out of them under a flood. ZeroMQ's listener then
fails every accept with EMFILE and retries at once, for ever: a core pinned at 100 %, new clients
timing out, and nothing logged. So at start the soft limit is raised toward the hard one (as far
as maxConnections needs), and if maxConnections per endpoint still does not fit beside RESERVED
descriptors for everything else, it is clamped (logged at INFO: the default 10,000 is clamped on
many hosts, and nothing is wrong): a newcomer beyond it is then refused at once by the endpoint
(namesrv.remoting.endpoints), before descriptors run out.
"""
from __future__ import annotations

import logging
import math
import resource

from namesrv.config import NamesrvConfig

log = logging.getLogger(__name__)

#: Descriptors kept for everything but connections: ZeroMQ's sockets, mailboxes and I/O threads,
#: the write log, files being written, logging. An idle server holds about 20.
RESERVED = 128


def fit_descriptor_limit(config: NamesrvConfig) -> str | None:
    """Raise RLIMIT_NOFILE's soft limit as far as maxConnections needs; clamp maxConnections
    (0 = unlimited included) to what the limit then fits. Returns what to log once serving
    (before that, a start that fails must stay one line), or None."""
    endpoints = 2 if config.zmq_listen_address else 1
    soft, hard = (math.inf if limit == resource.RLIM_INFINITY else limit
                  for limit in resource.getrlimit(resource.RLIMIT_NOFILE))
    target = min(config.max_connections * endpoints + RESERVED if config.max_connections else math.inf, hard)
    if soft < target < math.inf:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, resource.RLIM_INFINITY if hard == math.inf else hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the descriptor limit from %d to %d: %s", soft, target, exc)
    if soft == math.inf:
        return None
    fits = max(1, (soft - RESERVED) // endpoints)
    if config.max_connections and config.max_connections <= fits:
        return None
    clamped = (f"the descriptor limit ({soft}, hard {'unlimited' if hard == math.inf else hard}) "
               f"fits {fits} connections per endpoint beside {RESERVED} reserved: maxConnections "
               f"{config.max_connections} clamped to {fits} (raise the hard limit, e.g. ulimit -Hn, to allow more)")
    config.max_connections = fits
    return clamped
