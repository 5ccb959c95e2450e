"""Percentiles of merged HDR histograms, read in Spark SQL with HdrHistogram's own rule.

The runs' non-empty buckets are summed per bucket and each percentile read off the cumulative
counts, so a p99 over many intervals or runs is exactly HdrHistogram's for the union of their
samples (percentiles are never averaged). Built-in Spark SQL functions only: executors run none
of this repository's code. The tables, the HTML and the tests name percentile columns alike.
"""
from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F


#: Percentiles of the summary tables.
SUMMARY_PERCENTILES = (50.0, 90.0, 99.0, 99.9)
#: Percentiles of the latency spectrum plot (plus 100 = max).
SPECTRUM_PERCENTILES = (0.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 99.995, 99.999, 100.0)


def percentile_column(p: float) -> str:
    """50 -> p50, 99.9 -> p99_9 (column names Spark and CSV readers accept)."""
    return "p" + f"{p:g}".replace(".", "_")


def merged_percentiles(buckets: DataFrame, keys: Sequence[str], percentiles: Sequence[float]) -> DataFrame:
    """Per group of `keys`: count, the given percentiles and max, from merged HDR buckets.

    HdrHistogram's rule (hdrh `get_value_at_percentile`): target = max(int(p * total / 100 + 0.5), 1);
    the answer is the highest equivalent value of the first bucket whose cumulative count reaches
    the target (the lowest equivalent value for p = 0). Same double arithmetic, same order.
    """
    merged = buckets.groupBy(*keys, "value_lo", "value_hi").agg(F.sum("count").alias("count"))
    group = Window.partitionBy(*keys)
    running = group.orderBy("value_lo").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    merged = merged.withColumn("total", F.sum("count").over(group)).withColumn("cum", F.sum("count").over(running))
    aggregates = [F.max("total").alias("count")]
    for p in percentiles:
        target = F.greatest(F.floor(F.lit(float(min(p, 100.0))) * F.col("total") / F.lit(100.0) + F.lit(0.5)),
                            F.lit(1))
        value = F.col("value_hi") if p > 0 else F.col("value_lo")
        aggregates.append(F.min(F.when(F.col("cum") >= target, value)).alias(percentile_column(p)))
    aggregates.append(F.max("value_hi").alias("max"))
    return merged.groupBy(*keys).agg(*aggregates)
