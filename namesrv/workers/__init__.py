"""Worker processes (`serverWorkerProcesses = N > 1`): N processes serving connections in parallel.

The NameServer's own model is independent, eventually consistent servers, so each worker is a
whole server with its own copy of the route table and KV table: it binds the shared ports with
SO_REUSEPORT (the kernel spreads connections over the workers), answers route queries from its own
tables without ever waiting for another process, applies the writes it receives, and publishes
them (and its connections' closes) to its siblings over ZeroMQ PUB/SUB on ipc, where each sibling
applies them in order on one bus thread. Expiry runs in every worker.

* `supervisor` - the parent: reserves the ports, starts and restarts the workers, forwards SIGTERM.
* `worker` - a worker process's main (`python -m namesrv.workers.worker`, spec on stdin).
* `replication` - the bus: publishing writes, applying siblings' writes, the start-up barrier and
  the table copy a restarted worker starts from.
* `bus`, `snapshot`, `ports` - the bus's messages and ordering rules, the table copy, shared ports.
"""
