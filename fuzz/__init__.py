"""Coverage-guided fuzzing of the protocol layer with atheris (libFuzzer for Python).

`make fuzz` runs every harness for FUZZ_SECONDS in all (default 60) and fails on any crash:

- `fuzz/fuzz_frames.py`   split_frames (varying max_frame_length) and FrameDecoder (random chunkings).
- `fuzz/fuzz_commands.py` decode_binary_header, encode_binary_header, RemotingCommand.decode and
  decode_msgpack, with every decoded command re-encoded in both header codecs.
- `fuzz/fuzz_bodies.py`   every body decoder (RegisterBrokerBody in all its forms, TopicRouteData,
  ClusterInfo, TopicList, KVTable, BrokerMemberGroup, DataVersion, text-form TopicConfig).

What each target checks lives in `fuzz/targets.py`, free of atheris, so `tests/test_fuzz_corpus.py`
replays the regression corpus with the very same checks. Every fast-path call runs on both
implementations (Cython and pure Python), which must agree on the result or on the exact
`ProtocolError` message; any other exception, a disagreement, a broken round trip, an input
slower than libFuzzer's `-timeout`, or memory past `-rss_limit_mb` is a crash.

A harness input is one selector byte (which of the harness's TARGETS, modulo their number)
followed by that target's payload. libFuzzer writes a crashing input to `fuzz/crashes/`
(gitignored); `python -m fuzz.run --promote fuzz/crashes/<file> <what-it-broke>` strips the
selector and files the payload under `tests/fuzz_corpus/<target>/`, where it stays a regression test.

Coverage: atheris instruments the Python modules of `namesrv` at import. The Cython extension
is C, which only a clang build with `-fsanitize=fuzzer-no-link` exposes to libFuzzer. When clang
is on PATH (`apt-get install clang`), `fuzz.run` builds such a copy of `namesrv/_fastpath.c`
with AddressSanitizer into `fuzz/build/` and runs the harnesses with atheris' ASan runtime
preloaded, so the fuzzer sees the C branches and any out-of-bounds read in them aborts the run.
Without clang (or with FUZZ_NATIVE=0) the shipped extension runs uninstrumented: the
differential check still covers it, steered by the coverage of the pure-Python twin, whose
branches mirror the C code's one for one.
"""
