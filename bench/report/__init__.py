"""The Spark report over the run directories of every verb, module by module (bench/spark_report.py is its entry point)."""
