"""A per-process cache of a round's computed figures, recomputed in the background.

The round's agreement figures (alpha with its bootstrap interval, the pairwise matrix, the
annotators' report) need every vote: on a round of 100,000 candidates they take seconds. They are
cached under a fingerprint of the round's votes, so a page view recomputes them only when a vote or
an exclusion changed, and then without keeping the lead waiting (see :class:`FiguresCache`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar, cast

from dynaval.domain.clock import utcnow
from dynaval.domain.errors import Unavailable

T = TypeVar("T")
FIRST_COMPUTATION_WAIT_S = 120.0
"""A first view waits this long for its figures at most, then answers 503 (the computation goes on)."""
logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------ the figure cache


@dataclass(frozen=True)
class Cached(Generic[T]):
    """Figures as a page shows them, with when they were computed and whether they are current."""

    value: T
    computed_at: datetime
    current: bool
    """Computed under the round's present fingerprint; False while newer votes are being counted."""


@dataclass
class _Entry:
    fingerprint: Hashable
    value: Any
    computed_at: datetime


@dataclass
class _Run:
    fingerprint: Hashable
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class FiguresCache:
    """Per-process cache of computed round figures, one entry per (kind, round).

    An entry is current while the round's fingerprint (see :func:`votes_fingerprint`) is the one it
    was computed under. When the fingerprint moved on, the figures are recomputed in a background
    thread, and the view waits up to ``wait_s`` for them: small rounds are recomputed well within
    that and always show current figures; on a large round the view shows the previous figures,
    marked with the time they were computed, instead of keeping the lead waiting for seconds. Only
    the very first view of a round's figures waits for the whole computation.

    At most one computation per (kind, round) runs at a time; a view that finds one running for an
    older fingerprint queues one for its own, which starts when the running one ends, so a steady
    stream of votes costs one computation after another, never a pile of them. Thread-safe.
    """

    def __init__(self, *, wait_s: float = 0.5) -> None:
        self.wait_s = wait_s
        self._entries: dict[tuple[str, int], _Entry] = {}
        self._runs: dict[tuple[str, int], _Run] = {}
        self._queued: dict[tuple[str, int], tuple[Hashable, Callable[[], Any]]] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, kind: str, round_id: int, fingerprint: Hashable, compute: Callable[[], T]) -> Cached[T]:
        key = (kind, round_id)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.fingerprint == fingerprint:
                self.hits += 1
                return Cached(cast(T, entry.value), entry.computed_at, current=True)
            run = self._runs.get(key)
            if run is None:
                run = self._start(key, fingerprint, compute)
            elif run.fingerprint != fingerprint:
                self._queued[key] = (fingerprint, compute)
        finished = run.done.wait(self.wait_s if entry is not None else FIRST_COMPUTATION_WAIT_S)
        with self._lock:
            latest = self._entries.get(key)
        if latest is None:
            if not finished:
                raise Unavailable(
                    f"the {kind} figures of round {round_id} are still being computed; try again shortly"
                )
            if run.error is not None:
                raise run.error
            # The run we waited for was an older fingerprint's and failed; ours is queued.
            raise RuntimeError(f"the {kind} figures of round {round_id} could not be computed")
        return Cached(cast(T, latest.value), latest.computed_at, current=latest.fingerprint == fingerprint)

    def _start(self, key: tuple[str, int], fingerprint: Hashable, compute: Callable[[], Any]) -> _Run:
        """Start computing ``key`` under ``fingerprint``; the caller holds the lock."""
        run = _Run(fingerprint)
        self._runs[key] = run
        thread = threading.Thread(
            target=self._compute, args=(key, run, compute), name=f"figures-{key[0]}-{key[1]}", daemon=True
        )
        thread.start()
        return run

    def _compute(self, key: tuple[str, int], run: _Run, compute: Callable[[], Any]) -> None:
        try:
            value = compute()
        except BaseException as exc:  # handed to the views that wait for it; logged here
            run.error = exc
            logger.warning("computing the %s figures of round %s failed: %r", key[0], key[1], exc)
            value = None
        with self._lock:
            if run.error is None:
                self.misses += 1
                self._entries[key] = _Entry(run.fingerprint, value, utcnow())
            del self._runs[key]
            queued = self._queued.pop(key, None)
            if queued is not None and queued[0] != run.fingerprint:
                self._start(key, *queued)
        run.done.set()

    def settle(self, timeout_s: float = 60.0) -> None:
        """Wait until no computation is running (for tests and benchmarks)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                runs = list(self._runs.values())
            if not runs:
                return
            for run in runs:
                run.done.wait(max(0.0, deadline - time.monotonic()))
        raise TimeoutError("figures were still being computed")
