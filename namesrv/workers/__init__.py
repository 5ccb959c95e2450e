"""Worker processes (`serverWorkerProcesses = N > 1`): N processes serving connections in parallel.

Each worker is a whole server with its own copy of the route and KV tables: it binds the shared
ports with SO_REUSEPORT (the kernel spreads connections over the workers) and answers reads from
its own tables without waiting for another process. Writes go through one log (namesrv.writelog,
the layer below the controller), so the workers cannot drift apart. This package is the process
layer above the controller: the parent that starts the workers, and a worker's main.

* `supervisor` - the parent: reserves the ports, runs the sequencer, starts and restarts the workers.
* `worker` - a worker process's main (`python -m namesrv.workers.worker`, spec on stdin).
"""
