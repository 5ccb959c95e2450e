"""The storm's HdrHistogram conventions: one histogram layout, bucket rows, interval logs (format 1.3).

Every latency is recorded in microseconds into histograms of the same layout, so interval histograms
from any worker, interval or run merge exactly (`HdrHistogram.add`), in Python or — as bucket rows —
in Spark.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TextIO

import numpy as np
from hdrh.histogram import HdrHistogram

#: Values are microseconds; 1 µs .. 1 h at 3 significant digits (0.1 % resolution).
LOWEST_US = 1
HIGHEST_US = 3_600_000_000
SIGNIFICANT_FIGURES = 3
#: Interval_Max in the log is written in milliseconds (values / 1000), as Java's writer does for ns / 1e6.
MAX_VALUE_UNIT_RATIO = 1000.0
LOG_FORMAT_VERSION = "1.3"


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_FIGURES)


def record_us(histogram: HdrHistogram, value_us: int) -> None:
    """Record one latency; values past the layout's range are clamped to it, never dropped."""
    histogram.record_value(min(max(value_us, 0), HIGHEST_US))


def bucket_rows(histogram: HdrHistogram) -> Iterator[tuple[int, int, int]]:
    """(lowest equivalent value, highest equivalent value, count) of every non-empty bucket, ascending.

    The highest equivalent value is what HdrHistogram reports for a percentile landing in that
    bucket, so percentiles computed from these rows equal `get_value_at_percentile` exactly.
    """
    counts = np.ctypeslib.as_array(histogram.counts)
    for index in np.flatnonzero(counts):
        low = histogram.get_value_from_index(int(index))
        yield low, histogram.get_highest_equivalent_value(low), int(counts[index])


class HdrLogWriter:
    """HdrHistogram interval log, format 1.3, readable by Java's HistogramLogReader and hdrh's.

    hdrh ships a 1.2 writer whose StartTime line fails; this one writes Java's header lines,
    interval timestamps relative to BaseTime (= StartTime) and a `Tag=` per histogram.
    """

    def __init__(self, stream: TextIO, start_epoch_s: float, comment: str = "") -> None:
        self._stream = stream
        if comment:
            stream.write(f"#{comment}\n")
        stream.write(f"#[Histogram log format version {LOG_FORMAT_VERSION}]\n")
        stamp = time.strftime("%a %b %d %H:%M:%S %Z %Y", time.localtime(start_epoch_s))
        stream.write(f"#[StartTime: {start_epoch_s:.3f} (seconds since epoch), {stamp}]\n")
        stream.write(f"#[BaseTime: {start_epoch_s:.3f} (seconds since epoch)]\n")
        stream.write('"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n')

    def write(self, tag: str, start_offset_s: float, length_s: float, histogram: HdrHistogram) -> None:
        if not tag or any(c in tag for c in ", \n"):
            raise ValueError(f"HDR log tag {tag!r} must be non-empty without commas, spaces or newlines")
        payload = histogram.encode().decode("ascii")
        interval_max = histogram.get_max_value() / MAX_VALUE_UNIT_RATIO
        self._stream.write(f"Tag={tag},{start_offset_s:.3f},{length_s:.3f},{interval_max:.3f},{payload}\n")


def generator_layout() -> tuple[int, int, int]:
    """(unit magnitude, sub-bucket half-count magnitude, highest value): the layout of `new_histogram`,
    as namesrv.fastpath.RequestGenerator counts its buckets."""
    histogram = new_histogram()
    return histogram.unit_magnitude, histogram.sub_bucket_half_count_magnitude, HIGHEST_US


def add_bucket_counts(histogram: HdrHistogram, indexes: np.ndarray, counts: np.ndarray) -> None:
    """Add `counts` at the (distinct) bucket `indexes` of the histogram's layout, as recording that many
    values of each bucket would: percentiles, max, min and the encoded form alike."""
    np.ctypeslib.as_array(histogram.counts)[indexes] += counts.astype(np.uint64)
    histogram.total_count += int(counts.sum())
    histogram.min_value = min(histogram.min_value, histogram.get_value_from_index(int(indexes.min())))
    histogram.max_value = max(histogram.max_value, histogram.get_highest_equivalent_value(
        histogram.get_value_from_index(int(indexes.max()))))
