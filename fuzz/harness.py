"""The libFuzzer entry point every harness shares: instrumented imports, then one selector byte
(which of the harness's targets, modulo their number) followed by that target's payload."""
from __future__ import annotations

import importlib.util
import os
import sys

#: Set by `fuzz.run` to a clang/ASan build of namesrv/_fastpath.c that libFuzzer can see into.
NATIVE_BUILD_ENV = "FUZZ_FASTPATH_SO"


def _load_native_build(path: str) -> None:
    """Register the instrumented extension as namesrv._fastpath before anything imports the shipped one."""
    spec = importlib.util.spec_from_file_location("namesrv._fastpath", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{NATIVE_BUILD_ENV}={path} is not an extension module")
    module = importlib.util.module_from_spec(spec)
    sys.modules["namesrv._fastpath"] = module
    spec.loader.exec_module(module)


def main(targets: tuple[str, ...]) -> None:
    import atheris

    with atheris.instrument_imports(include=["namesrv"]):
        if os.environ.get(NATIVE_BUILD_ENV):
            _load_native_build(os.environ[NATIVE_BUILD_ENV])
        from fuzz import targets as checks

    if "cython" not in checks.IMPLEMENTATIONS:
        print("WARNING: namesrv._fastpath is not built; only the pure-Python fast path is fuzzed", file=sys.stderr)
    selected = [checks.CHECKS[name] for name in targets]

    def test_one_input(data: bytes) -> None:
        if data:
            selected[data[0] % len(selected)](data[1:])

    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
