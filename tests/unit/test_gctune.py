"""`tune_for_throughput` (called by `serve`, `--receivers` processes and `worker`)."""

from __future__ import annotations

import gc

from porteiro.http.gctune import YOUNG_THRESHOLD, tune_for_throughput


def test_start_up_objects_are_frozen_and_young_collections_made_rare() -> None:
    before = gc.get_threshold()
    gc.unfreeze()
    try:
        tune_for_throughput()
        # Everything alive now (modules, the test session) is out of the collector's sight.
        assert gc.get_freeze_count() > 10_000
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
        assert before[0] < YOUNG_THRESHOLD
    finally:
        gc.unfreeze()  # the rest of the test session collects as usual
        gc.set_threshold(*before)
