"""Benchmarks: codec micro-benchmarks, the heartbeat storm, thread sweeps and the Spark report."""
