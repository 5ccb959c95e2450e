"""The report's inputs: the run directories the locations name, their meta.json and server scrapes.

A location is a run directory (it holds meta.json) or a folder holding some up to RUN_SEARCH_DEPTH
levels down; local folders are walked here, other URIs listed with Hadoop's glob, and every file
is read through Spark so any Hadoop-compatible file system works.
"""
from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bench.lib import verdict
from bench.report import server_metrics
from bench.lib.output import thread_config

log = logging.getLogger("spark_report")


@dataclass(frozen=True, slots=True)
class Run:
    """One run directory's identity and meta.json."""

    run_id: str
    uri: str
    meta: dict

    @property
    def config(self) -> dict[str, str]:
        """The thread configuration the run is compared by: the sweep point, else the server's pools."""
        sweep = self.meta.get("sweep") or {}
        if sweep.get("point"):
            point = sweep["point"]
            return {k: str(point[k]) for k in sweep.get("keys") or sorted(point)}
        threads = (self.meta.get("server") or {}).get("thread_config") or {}
        return {k: str(v) for k, v in thread_config(threads).items()}  # meta.json sorts keys: restore the order

    @property
    def config_label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.config.items()) or "unknown"

    @property
    def push(self) -> dict | None:
        """meta.json's route-change push summary when the run had subscribers, else None."""
        propagation = self.meta.get("propagation") or {}
        return propagation if propagation.get("subscribers") else None

    @property
    def measured(self) -> bool:
        """Whether the run recorded latency histograms (a storm, a knee's or a sweep's step); else it is
        another verb's, whose figures are its meta.json's "results"."""
        return "histograms" in (self.meta.get("files") or {})

    @property
    def implementation(self) -> str:
        return (self.meta.get("server") or {}).get("implementation") or "unknown"

    @property
    def cores(self) -> dict | None:
        """The CPUs the server and the generator ran on (bench/lib/servers.CorePlan), None when not pinned."""
        return (self.meta.get("generator") or {}).get("cores") or None

    @property
    def saturation(self) -> dict | None:
        """meta.json's "saturation" when the run is a step of a saturation search, else None."""
        return self.meta.get("saturation") or None

    @property
    def slo(self) -> verdict.Slo:
        """The SLO the run is judged by: its sweep's, else its search's, else verdict's default."""
        for owner in ("sweep", "saturation"):
            described = (self.meta.get(owner) or {}).get("slo")
            if described:
                return verdict.Slo(**described)
        return verdict.Slo()

    @property
    def offered_per_s(self) -> float:
        """The open-loop rates summed; 0 for a closed loop, whose load is whatever the server answers.

        A search's step is judged at the rate the search planned (`python -m bench knee`), which the
        fleet's per-kind rates only sum to up to float rounding: that rate, so knees match the search's.
        """
        load = self.meta.get("load") or {}
        if self.meta.get("mode") == "closed":
            return 0.0
        if self.saturation and self.saturation.get("offered_per_s") is not None:
            return float(self.saturation["offered_per_s"])
        return float(sum((load.get("rates_per_s") or {}).values()))


#: How far below a folder given as a location run directories are looked for (bench/X/namesrv/step01).
RUN_SEARCH_DEPTH = 3


def normalize_uri(location: str) -> str:
    """Local paths become absolute file: URIs; anything with a scheme (hdfs:, s3a:, file:) is kept."""
    if urlparse(location).scheme and not (len(location) > 1 and location[1] == ":"):
        return location.rstrip("/")
    return Path(location).resolve().as_uri()


def find_run_uris(locations: Sequence[str], spark: SparkSession | None = None) -> list[str]:
    """The run directories the locations name, as URIs, each once, in the order given.

    A location is a run directory or a folder holding some, so a user can point the report at what
    a sweep or bench wrote without listing its runs. Local folders are walked here (no Spark
    needed, so a wrong path fails before a session starts); other URIs are listed with Hadoop's
    glob when a session is given, and taken as run directories otherwise.
    """
    uris: list[str] = []
    for location in locations:
        uri = normalize_uri(location)
        uris.extend(_local_run_uris(uri) if uri.startswith("file:") else _remote_run_uris(spark, uri))
    return list(dict.fromkeys(uris))


def _no_runs(where: str) -> str:
    return f"{where} holds no run directories (no meta.json within {RUN_SEARCH_DEPTH} levels)"


def _local_run_uris(uri: str) -> list[str]:
    """`uri` itself when it is a run directory, else the run directories below it, in natural order."""
    root = Path(unquote(urlparse(uri).path))
    if (root / "meta.json").is_file():
        return [uri]
    if not root.exists():
        raise FileNotFoundError(f"{root} does not exist")
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a run directory (a folder holding meta.json)")
    found, level = [], [root]
    for _ in range(RUN_SEARCH_DEPTH):
        children = [child for folder in level for child in folder.iterdir()
                    if child.is_dir() and not child.name.startswith(".")]
        found += [child for child in children if (child / "meta.json").is_file()]
        level = [child for child in children if not (child / "meta.json").is_file()]  # never inside a run
    if not found:
        raise FileNotFoundError(_no_runs(str(root)))
    return [run.as_uri() for run in sorted(found, key=lambda run: natural_key(run.relative_to(root).as_posix()))]


def _remote_run_uris(spark: SparkSession | None, uri: str) -> list[str]:
    """`uri` itself when it holds meta.json (or cannot be listed), else its run directories found by glob."""
    if spark is None:
        return [uri]
    try:
        hadoop_path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path
        fs = hadoop_path(uri).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
        if fs.exists(hadoop_path(f"{uri}/meta.json")):
            return [uri]
        found = [str(status.getPath().getParent().toString())
                 for depth in range(1, RUN_SEARCH_DEPTH + 1)
                 for status in (fs.globStatus(hadoop_path(uri + "/*" * depth + "/meta.json")) or [])]
    except Exception as exc:  # py4j or file-system errors: let the read say what is wrong
        log.warning("could not list %s (%s); reading it as a run directory", uri, exc)
        return [uri]
    outermost = [run for run in found if not any(run.startswith(other + "/") for other in found)]
    if not outermost:
        raise FileNotFoundError(_no_runs(uri))
    return sorted(dict.fromkeys(outermost), key=natural_key)


def load_runs(spark: SparkSession, locations: Sequence[str]) -> list[Run]:
    """Each run directory's meta.json, read through Spark (so any Hadoop-compatible file system works)."""
    uris = find_run_uris(locations, spark)
    texts = dict(spark.sparkContext.wholeTextFiles(",".join(f"{uri}/meta.json" for uri in uris)).collect())
    runs = []
    for uri in uris:
        wanted = _tail(uri) + "/meta.json"
        text = next((body for path, body in texts.items() if path.rstrip("/").endswith(wanted)), None)
        if text is None:
            raise FileNotFoundError(f"{uri} has no meta.json: not a run directory")
        meta = json.loads(text)
        runs.append(Run(meta["run_id"], uri, meta))
    seen: dict[str, str] = {}
    for run in runs:
        if run.run_id in seen:
            raise ValueError(f"run {run.run_id} given twice ({seen[run.run_id]} and {run.uri})")
        seen[run.run_id] = run.uri
    return runs


def _tail(uri: str) -> str:
    """A URI's path, decoded (Spark reports file paths decoded or not depending on the API)."""
    return unquote(urlparse(uri).path).rstrip("/")


def read_server_windows(spark: SparkSession, runs: Sequence[Run]) -> dict[str, server_metrics.ServerWindow]:
    """Each run's server-side latency, or why it has none, from its metrics-*.prom files read through Spark.

    The run directories are read with a file-name filter rather than the files named, so a scrape
    that was never written is simply absent instead of failing the whole read.
    """
    files = (spark.read.option("pathGlobFilter", "metrics-*.prom").text([run.uri for run in runs], wholetext=True)
             .select(F.col("_metadata.file_path"), "value").collect())
    run_ids = {_tail(run.uri): run.run_id for run in runs}
    scrapes: dict[str, dict[str, str]] = {run.run_id: {} for run in runs}
    for path, text in files:
        directory, _, name = _tail(path).rpartition("/")
        scrapes[run_ids[directory]][name] = text
    return {run.run_id: server_metrics.ServerWindow(problem=JAVA_HAS_NO_METRICS) if run.implementation == "java"
            else server_metrics.run_window(scrapes[run.run_id], run.meta.get("server_metrics")) for run in runs}


#: Why a Java step has no server-side latency: there is nothing to scrape, whatever the storm was told.
JAVA_HAS_NO_METRICS = "the Java NameServer 4.9.8 has no /metrics (it exports no Prometheus histogram to read)"


def natural_key(text: str) -> list:
    """A sort key that orders "step10" after "step9": runs of digits compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]
