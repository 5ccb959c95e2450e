"""namesrv_gc_pause_seconds: every collection counted in its generation's histogram, on a real server's /metrics."""
from __future__ import annotations

import gc
import urllib.request

from namesrv.gc_pauses import GcPauses, freeze_before_serving
from namesrv.request_stats import LATENCY_BOUNDS


def test_each_collection_is_counted_in_its_generation():
    pauses = GcPauses()
    pauses.install()
    pauses.install()  # idempotent: one callback
    try:
        for generation in (0, 1, 2, 2):
            gc.collect(generation)
        counts = {generation: sum(buckets[:-1]) for generation, buckets in pauses.snapshot().items()}
        assert counts[2] >= 2 and counts[1] >= 1 and counts[0] >= 1  # (others may collect meanwhile too)
        assert all(len(buckets) == len(LATENCY_BOUNDS) + 2 and buckets[-1] >= 0 for buckets in pauses.buckets.values())
    finally:
        gc.callbacks.remove(pauses._observe)
    assert pauses._observe not in gc.callbacks


def test_a_server_reports_its_collections(namesrv_factory):
    server = namesrv_factory()
    with urllib.request.urlopen(f"{server.http_url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    assert 'namesrv_gc_pause_seconds_count{generation="2"}' in text
    assert 'namesrv_gc_pause_seconds_bucket{generation="0",le="+Inf"}' in text


def test_a_built_server_freezes_what_it_holds_and_collects_what_building_left():
    class Cycle:
        def __init__(self) -> None:
            self.me = self

    import weakref
    left = Cycle()
    gone = weakref.ref(left)
    del left
    held = {"topic": {"group": (8, 8, 6, 0)}}
    try:
        freeze_before_serving()
        assert gone() is None  # collected first: garbage is not frozen
        assert gc.get_freeze_count() > 0 and gc.is_tracked(held)
        assert not any(o is held for o in gc.get_objects())  # in the permanent generation, walked by none
    finally:
        gc.unfreeze()
