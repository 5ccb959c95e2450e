"""Codec micro-benchmarks: the Cython fast path against the pure-Python fallback, in one run.

Run: `python -m bench codec` (or `make codec-bench`; pytest-benchmark's options follow the verb).
Both implementations of each case are measured by pytest-benchmark; at the end one line per
case gives both per-call times (the minimum over rounds, the least disturbed by other load on a
shared machine) and `speedup: N.Nx` = python time / cython time. The scan_registration cases (a
REGISTER_BROKER body of 100 and of 10,000 topics) also measure plain `orjson.loads` of the same
body, the parse the scanner replaces, and give `N.Nx orjson.loads` = orjson time / cython time.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from bench.lib.fleet import FleetShape, register_body
from namesrv.fastpath import pure
from namesrv.protocol import DataVersion, RemotingCommand, SerializeType

try:
    from namesrv import _fastpath
except ImportError:  # extension not built: the fallback is still measured
    _fastpath = None

MAX_FRAME = 16 * 1024 * 1024
IMPLEMENTATIONS = {"cython": _fastpath, "python": pure}
HEADER_ARGS = (103, 0, 479, 4242, 0, None, {
    "brokerName": "broker-a",
    "brokerAddr": "192.168.0.17:10911",
    "clusterName": "DefaultCluster",
    "haServerAddr": "192.168.0.17:10912",
    "brokerId": "0",
    "bodyCrc32": "1718141032",
})


def frame_of_200_bytes() -> bytes:
    """A GET_ROUTEINFO_BY_TOPIC request in a binary header, padded with a body to 200 bytes."""
    bare = RemotingCommand.request(105, {"topic": "TopicTest"}, serialize_type=SerializeType.ROCKETMQ).encode()
    return RemotingCommand.request(105, {"topic": "TopicTest"}, body=b"x" * (200 - len(bare)),
                                   serialize_type=SerializeType.ROCKETMQ).encode()


FRAME = frame_of_200_bytes()
STREAM = (FRAME * (65536 // len(FRAME) + 1))[:65536]  # 64 KiB as a recv() returns it: 327 frames + a partial one
HEADER = pure.encode_binary_header(*HEADER_ARGS)
CRC_DATA = random.Random(0).randbytes(16 * 1024)
TABLE_PATH = ("topicConfigSerializeWrapper", "topicConfigTable")


def registration_body(topics: int) -> bytes:
    """The JSON RegisterBrokerBody of a broker with `topics` topics of 8 queues, as bench/storm sends it."""
    fleet = FleetShape(brokers=1, slaves_per_master=0, topics_per_broker=topics, clusters=1)
    return register_body(fleet, fleet.broker(0).cluster, DataVersion(1, 1700000000000))


def scan_case(body: bytes) -> Callable:
    """The decoded body (the Cython scan also digests each topic entry, which the pure twin does not)."""
    return lambda impl: lambda: impl.scan_registration(body, TABLE_PATH, None)[0]


BODIES = {"scan_registration_100": registration_body(100), "scan_registration_10000": registration_body(10_000)}

CASES: dict[str, Callable] = {
    "frame_split": lambda impl: lambda: impl.split_frames(STREAM, MAX_FRAME),
    "header_decode": lambda impl: lambda: impl.decode_binary_header(HEADER),
    "header_encode": lambda impl: lambda: impl.encode_binary_header(*HEADER_ARGS),
    "crc32": lambda impl: lambda: impl.body_crc32(CRC_DATA),
    **{case: scan_case(body) for case, body in BODIES.items()},
}
BYTES_PER_CALL = {"crc32": len(CRC_DATA), **{case: len(body) for case, body in BODIES.items()}}

_seconds_per_call: dict[tuple[str, str], float] = {}


def _summary_line(case: str) -> str:
    cython, python = _seconds_per_call.get((case, "cython")), _seconds_per_call.get((case, "python"))
    parts = []
    for name, seconds in (("cython", cython), ("python", python)):
        if seconds is None:
            parts.append(f"{name} not measured")
            continue
        text = f"{name} {seconds * 1e6:.2f} us/call"
        if case in BYTES_PER_CALL:
            text += f" ({BYTES_PER_CALL[case] / seconds / 1e9:.2f} GB/s)"
        parts.append(text)
    line = f"{case}: " + ", ".join(parts)
    if cython and python:
        line += f", speedup: {python / cython:.1f}x"
    baseline = _seconds_per_call.get((case, "orjson"))
    if baseline:
        line += f"; orjson.loads {baseline * 1e6:.2f} us/call"
        if cython:
            line += f" = {baseline / cython:.1f}x orjson.loads"
    return line


@pytest.fixture(scope="module", autouse=True)
def print_speedups(request):
    """After every case ran, print the comparison on the terminal, whatever the capture mode."""
    yield
    terminal = request.config.get_terminal_writer()
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        if terminal.width_of_current_line:  # after the progress dots
            terminal.line()
        for case in CASES:
            terminal.line(_summary_line(case))


@pytest.mark.benchmark(max_time=0.5, min_rounds=20, min_time=0.0002)
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CASES)
def test_codec(benchmark, case: str, implementation: str) -> None:
    impl = IMPLEMENTATIONS[implementation]
    if impl is None:
        pytest.skip("namesrv._fastpath is not built (run: python setup.py build_ext --inplace)")
    call = CASES[case](impl)
    expected = CASES[case](pure)()
    benchmark.group = case
    assert benchmark(call) == expected
    if benchmark.stats is not None:  # None under --benchmark-disable
        _seconds_per_call[case, implementation] = benchmark.stats.stats.min


@pytest.mark.benchmark(max_time=0.5, min_rounds=20, min_time=0.0002)
@pytest.mark.parametrize("case", BODIES)
def test_orjson_baseline(benchmark, case: str) -> None:
    """orjson.loads of a scan_registration case's body: what decoding it cost before the scanner."""
    body = BODIES[case]
    benchmark.group = case
    assert benchmark(orjson.loads, body) == orjson.loads(body)
    if benchmark.stats is not None:
        _seconds_per_call[case, "orjson"] = benchmark.stats.stats.min


def main(argv: list[str] | None = None) -> int:
    """The verb: pytest-benchmark over this file (any of its options after the verb), then its run directory."""
    from bench.lib import cli
    from bench.lib.output import machine, machine_line, write_results

    parser = cli.parser("codec", __doc__)
    cli.add_out(parser)
    args, rest = parser.parse_known_args(argv)
    status = pytest.main([str(Path(__file__)), "-q", "-s", "--benchmark-disable-gc", "-p", "no:cacheprovider", *rest])
    lines = [machine_line(machine()), *(_summary_line(case) for case in CASES)]
    results = [{"case": case, "implementation": impl, "seconds_per_call": seconds}
               for (case, impl), seconds in sorted(_seconds_per_call.items())]
    write_results(cli.out_dir(args, "codec"), "codec", results, lines)
    return int(status)
