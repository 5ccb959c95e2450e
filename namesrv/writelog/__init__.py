"""The write log of worker processes: one total order of every write across all of them.

With `serverWorkerProcesses = N > 1` every worker keeps its own copy of the route and KV tables,
so a write applied where it arrives would leave the others behind or apply it in another order.
Instead every worker proposes the writes it receives to the supervisor's sequencer, which numbers
them into one log (and writes the KV and config files, the only process that does) and publishes
it; every worker, the one that took the request and its siblings alike, applies the entries in
that order, so the workers cannot drift apart. The controller runs a worker's end of the log,
the supervisor (namesrv.workers) runs the sequencer: this layer sits below both.

* `sequencer` - the one order of all writes, the one file writer.
* `replication` - a worker's end of the log: proposing, applying in order, answering, catching up.
* `log`, `snapshot`, `ports` - the log's messages and ordering rule, the table copy, shared ports.
"""
