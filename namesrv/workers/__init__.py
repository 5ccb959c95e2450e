"""Worker processes (`serverWorkerProcesses = N > 1`): N processes serving connections in parallel.

Each worker is a whole server with its own copy of the route and KV tables: it binds the shared
ports with SO_REUSEPORT (the kernel spreads connections over the workers) and answers reads from
its own tables without waiting for another process. Writes go through one log: every worker
proposes the writes it receives to the supervisor's sequencer, which orders them (and writes the
KV and config files, the only process that does), and every worker applies the log in that
order, so the workers cannot drift apart.

* `supervisor` - the parent: reserves the ports, runs the sequencer, starts and restarts the workers.
* `sequencer` - the one order of all writes, the one file writer.
* `worker` - a worker process's main (`python -m namesrv.workers.worker`, spec on stdin).
* `replication` - a worker's end of the log: proposing, applying in order, answering, catching up.
* `log`, `snapshot`, `ports` - the log's messages and ordering rule, the table copy, shared ports.
"""
