"""`make fuzz`: run every harness for its share of the time, report, and fail on any crash.

    python -m fuzz.run --seconds 60            # FUZZ_SECONDS in all, split evenly across harnesses
    python -m fuzz.run --promote fuzz/crashes/bodies-crash-<sha1> quadratic-regex
                                               # file a crash input as a regression test

Per harness: libFuzzer flags bound time (-max_total_time), memory (-rss_limit_mb, which also caps
a single allocation) and the time of one input (-timeout); its working corpus persists in
fuzz/corpus/<harness>/ (gitignored), seeded each run from `fuzz.targets.SEEDS` and from
tests/fuzz_corpus/. The full libFuzzer output goes to fuzz/logs/<harness>.log.
FUZZ_NATIVE=0 skips the clang/ASan build of the Cython extension (see `fuzz/__init__.py`).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

FUZZ = Path(__file__).resolve().parent
REPO = FUZZ.parent
CRASHES = FUZZ / "crashes"
HARNESSES = ("frames", "commands", "bodies")
MAX_LEN = {"frames": 8192, "commands": 8192, "bodies": 16384}
RSS_LIMIT_MB = 1024
INPUT_TIMEOUT_S = 10
#: Corpus files larger than this are stored deflated (see fuzz.targets.DEFLATED_SUFFIX).
DEFLATE_FROM = 64 * 1024

_RUNS = re.compile(r"^(?:#(\d+)\s|Done (\d+) runs)", re.MULTILINE)
_RSS = re.compile(r"rss: (\d+)Mb")


@dataclass
class Outcome:
    harness: str
    runs: int
    peak_rss_mb: int
    seconds: float
    crashed: bool
    artifacts: list[Path]


def native_build() -> Path | None:
    """A clang build of the Cython extension with libFuzzer coverage and ASan, or None without clang."""
    clang = shutil.which("clang")
    source = REPO / "namesrv" / "_fastpath.c"
    if os.environ.get("FUZZ_NATIVE") == "0" or clang is None or not source.exists():
        return None
    if source.stat().st_mtime < (REPO / "namesrv" / "_fastpath.pyx").stat().st_mtime:
        raise SystemExit("namesrv/_fastpath.c is older than _fastpath.pyx: rebuild it (make install) first")
    target = FUZZ / "build" / ("_fastpath" + sysconfig.get_config_var("EXT_SUFFIX"))
    if target.exists() and target.stat().st_mtime >= source.stat().st_mtime:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([clang, "-shared", "-fPIC", "-O1", "-g", "-fno-omit-frame-pointer",
                    "-fsanitize=address,fuzzer-no-link", f"-I{sysconfig.get_paths()['include']}",
                    str(source), "-lz", "-o", str(target)], check=True)
    return target


def harness_env(build: Path | None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("NAMESRV_PURE_PYTHON", None)
    if build is not None:
        import atheris  # noqa: PLC0415 - only the runner's native mode needs to locate its runtime

        env.update({
            "FUZZ_FASTPATH_SO": str(build),
            "LD_PRELOAD": str(Path(atheris.path()) / "asan_with_fuzzer.so"),
            # CPython keeps memory until exit (no leak reports); a small quarantine keeps RSS near the plain run's
            "ASAN_OPTIONS": "detect_leaks=0:allocator_may_return_null=1:quarantine_size_mb=16:malloc_context_size=5",
            "PYTHONMALLOC": "malloc",  # so ASan sees every object's bounds, not pymalloc's arenas
        })
    return env


def targets_of(harness: str) -> tuple[str, ...]:
    return importlib.import_module(f"fuzz.fuzz_{harness}").TARGETS


def write_seeds(harness: str, directory: Path) -> int:
    """Seeds and regression inputs of the harness's targets, each behind its selector byte."""
    from fuzz import targets

    names = targets_of(harness)
    inputs = [bytes([index]) + seed for index, name in enumerate(names) for seed in targets.SEEDS[name]]
    for path in targets.corpus_files():
        if path.parent.name in names:
            data = bytes([names.index(path.parent.name)]) + targets.read_corpus_file(path)
            if len(data) <= MAX_LEN[harness]:
                inputs.append(data)
    for data in inputs:
        (directory / hashlib.sha1(data).hexdigest()).write_bytes(data)
    return len(inputs)


def run_harness(harness: str, seconds: int, env: dict[str, str]) -> Outcome:
    corpus = FUZZ / "corpus" / harness
    log = FUZZ / "logs" / f"{harness}.log"
    for directory in (corpus, CRASHES, log.parent):
        directory.mkdir(parents=True, exist_ok=True)
    before = set(CRASHES.iterdir())
    with tempfile.TemporaryDirectory(prefix=f"fuzz-seeds-{harness}-") as seeds:
        write_seeds(harness, Path(seeds))
        command = [sys.executable, "-m", f"fuzz.fuzz_{harness}", f"-max_total_time={seconds}",
                   f"-rss_limit_mb={RSS_LIMIT_MB}", f"-max_len={MAX_LEN[harness]}", f"-timeout={INPUT_TIMEOUT_S}",
                   f"-artifact_prefix={CRASHES}/{harness}-", "-print_final_stats=1", str(corpus), seeds]
        dictionary = FUZZ / f"{harness}.dict"
        if dictionary.exists():
            command.insert(4, f"-dict={dictionary}")
        started = time.monotonic()
        with log.open("w") as out:
            returncode = subprocess.run(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                        timeout=seconds + 300).returncode
        elapsed = time.monotonic() - started
    text = log.read_text(errors="replace")
    runs = max((int(a or b) for a, b in _RUNS.findall(text)), default=0)
    rss = max((int(mb) for mb in _RSS.findall(text)), default=0)
    artifacts = sorted(set(CRASHES.iterdir()) - before)
    return Outcome(harness, runs, rss, elapsed, returncode != 0 or bool(artifacts), artifacts)


def promote(crash: Path, name: str) -> Path:
    """File a crash input under tests/fuzz_corpus/<target>/<name>, without its selector byte."""
    from fuzz import targets

    harness = crash.name.split("-", 1)[0]
    if harness not in HARNESSES:
        raise SystemExit(f"{crash.name}: not named <harness>-...; cannot tell its target")
    data = crash.read_bytes()
    if not data:
        raise SystemExit(f"{crash}: empty input selects no target")
    names = targets_of(harness)
    target = names[data[0] % len(names)]
    payload = data[1:]
    path = targets.CORPUS / target / name
    if len(payload) > DEFLATE_FROM:
        payload = zlib.compress(payload, 9)
        path = path.with_name(name + targets.DEFLATED_SUFFIX)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(payload)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=60, help="fuzzing time in all (default 60)")
    parser.add_argument("--promote", nargs=2, metavar=("CRASH_FILE", "WHAT_IT_BROKE"))
    args = parser.parse_args(argv)
    if args.promote:
        print(f"promoted to {promote(Path(args.promote[0]), args.promote[1])}")
        return 0
    if importlib.util.find_spec("atheris") is None:
        raise SystemExit("atheris is not installed: pip install -r requirements-fuzz.txt (or run `make fuzz`)")
    build = native_build()
    print("Cython fast path:", f"clang build with libFuzzer coverage + ASan ({build.relative_to(REPO)})" if build
          else "shipped build, uninstrumented (no clang, no namesrv/_fastpath.c, or FUZZ_NATIVE=0)")
    env = harness_env(build)
    share = max(5, args.seconds // len(HARNESSES))
    outcomes = []
    for harness in HARNESSES:
        outcome = run_harness(harness, share, env)
        outcomes.append(outcome)
        print(f"{harness:9} {outcome.runs:>10,} inputs in {outcome.seconds:5.1f} s   crashes: {int(outcome.crashed)}"
              f"   peak RSS {outcome.peak_rss_mb} MB   log: fuzz/logs/{harness}.log")
        for artifact in outcome.artifacts:
            print(f"          crash input: {artifact.relative_to(REPO)}"
                  f"  (promote: python -m fuzz.run --promote {artifact.relative_to(REPO)} <what-it-broke>)")
    crashed = [o.harness for o in outcomes if o.crashed]
    print(f"fuzz: {sum(o.runs for o in outcomes):,} inputs, crashes: {len(crashed)}"
          + (f" ({', '.join(crashed)}; libFuzzer stops at the first)" if crashed else ""))
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
