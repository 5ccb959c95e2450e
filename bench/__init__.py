"""The benchmarks: `python -m bench VERB` (bench/__main__.py lists the verbs); the storm; the Spark report."""
