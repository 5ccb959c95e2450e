"""The codec verb (bench/codec_bench.py) times only calls whose results the two implementations agree on."""
from __future__ import annotations

import pytest

from bench.codec_bench import CASES, IMPLEMENTATIONS
from namesrv.fastpath import pure


@pytest.mark.skipif(IMPLEMENTATIONS["cython"] is None, reason="namesrv._fastpath is not built")
@pytest.mark.parametrize("case", CASES)
def test_every_case_gives_the_fallbacks_result(case):
    assert CASES[case](IMPLEMENTATIONS["cython"])() == CASES[case](pure)()
