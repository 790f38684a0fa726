"""The dashboard's figure cache: computed once per fingerprint, recomputed in the background."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from dynaval.service_layer.dashboard.figures_cache import Cached, FiguresCache


def test_the_figures_cache_computes_a_miss_once_for_concurrent_views() -> None:
    cache = FiguresCache()
    calls: list[int] = []

    def slow() -> str:
        calls.append(1)
        time.sleep(0.2)
        return "figures"

    results: list[Cached[str]] = []
    threads = [
        threading.Thread(target=lambda: results.append(cache.get("a", 1, "fp1", slow))) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r.value for r in results] == ["figures"] * 4 and all(r.current for r in results)
    assert len(calls) == 1 and cache.misses == 1
    assert cache.get("a", 1, "fp1", slow).value == "figures" and len(calls) == 1
    assert cache.get("a", 2, "fp1", lambda: "other round").value == "other round"
    assert cache.get("a", 1, "fp2", lambda: "recomputed").value == "recomputed"


def test_a_slow_recompute_shows_the_previous_figures_marked_then_the_new_ones() -> None:
    cache = FiguresCache(wait_s=0.05)
    release = threading.Event()
    started: list[str] = []

    def figures(name: str, *, gate: threading.Event | None = None) -> Callable[[], str]:
        def compute() -> str:
            started.append(name)
            if gate is not None:
                assert gate.wait(10)
            return name

        return compute

    first = cache.get("alpha", 1, "fp1", figures("first"))
    assert (first.value, first.current) == ("first", True)
    # Votes changed and the recompute is slow: the view answers at once with the old figures.
    stale = cache.get("alpha", 1, "fp2", figures("second", gate=release))
    assert (stale.value, stale.current) == ("first", False)
    assert stale.computed_at == first.computed_at
    # More votes while it runs: no second computation in parallel; the latest is queued.
    assert cache.get("alpha", 1, "fp3", figures("third")).value == "first"
    assert cache.get("alpha", 1, "fp3", figures("third")).current is False
    assert started == ["first", "second"]
    release.set()
    cache.settle()
    assert started == ["first", "second", "third"]  # the queued fingerprint was computed next
    latest = cache.get("alpha", 1, "fp3", figures("unused"))
    assert (latest.value, latest.current) == ("third", True)
    assert latest.computed_at >= first.computed_at


def test_a_failed_first_computation_reaches_the_view_and_a_failed_recompute_keeps_the_old_figures() -> None:
    cache = FiguresCache(wait_s=1.0)

    def broken() -> str:
        raise LookupError("round 9 is gone")

    with pytest.raises(LookupError, match="round 9 is gone"):
        cache.get("alpha", 9, "fp1", broken)
    assert cache.get("alpha", 9, "fp1", lambda: "computed").value == "computed"
    kept = cache.get("alpha", 9, "fp2", broken)
    assert (kept.value, kept.current) == ("computed", False)
