"""Spark report over heartbeat-storm run directories, module by module (bench/spark_report.py is its entry point)."""
