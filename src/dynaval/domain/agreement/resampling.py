"""Bootstrap confidence interval for alpha, resampling items without looping over them.

A bootstrap replicate draws the pairable items (two or more votes) with replacement, as many as
there are. Alpha depends only on how many drawn items carry each count pattern, and those numbers
follow ``Multinomial(n_items, frequency / n_items)``, so a replicate is a weight vector over the
patterns and every replicate's alpha is matrix algebra over those weights (:mod:`.alpha`).

Drawing a multinomial costs one binomial per pattern; rare patterns are cheaper to draw item by
item. So the patterns shared by at least ``_COMMON`` items get one multinomial cell each and the
rest share one cell; the items falling in that shared cell are then drawn uniformly from the
rare-pattern items. This is the same multinomial distribution (the conditional law of a cell's
split given its total), at a cost of about ``resamples x (common patterns + rare items)``.

The interval is the percentile one: the 2.5th and 97.5th percentiles (numpy's linear
interpolation) of the replicates whose alpha is defined; a replicate that happens to use a single
label has no alpha and is left out (the report counts them).

The replicates come from :data:`STREAMS` independent streams, ``numpy.random.SeedSequence(seed)``
spawned that many times, each drawing its share of the replicates in blocks of a size fixed by the
data's shape. The streams run side by side where there are cores for them and one after the other
where there are not; they are fixed in number and draw the same numbers either way, so a seed gives
the same replicates on every machine.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import ThreadpoolController

from dynaval.domain.agreement.alpha import BLOCK_CELLS, AlphaKernel, alphas
from dynaval.domain.agreement.encoding import FloatArray, IntArray

_COMMON = 16
"""A multinomial cell (one binomial draw, ~100 ns) costs about as much as drawing this many items
one by one (gather and count, ~6-9 ns each); measured, the total is flat between 8 and 32."""


STREAMS = 2
"""Independent random streams the replicates are split into (see the module's docstring). The
draws and the weights x features products release the GIL, so two streams on two cores take
about half the time of one; the number is fixed, not taken from the machine, so that the seed's
replicates do not depend on it."""

_SIDE_BY_SIDE = 1 << 22
"""Below this many item draws in all (resamples x items), the streams run one after the other: a
thread costs more than it saves."""

_ONE_BLAS_THREAD = threading.Lock()
"""Held while BLAS is limited to one thread, so that concurrent bootstraps restore it in turn."""


@functools.cache
def _blas() -> ThreadpoolController:
    return ThreadpoolController()


def bootstrap_alphas(
    kernel: AlphaKernel, resamples: int, seed: int | None, *, side_by_side: bool | None = None
) -> FloatArray:
    """Alpha of ``resamples`` bootstrap replicates (NaN where a replicate's alpha is undefined).

    Each block's weights x features product runs on one BLAS thread: measured on 5 annotators x
    100,000 items with 20 labels, a threaded product costs twice the CPU time (its threads spin
    while this thread draws the next block) and far more on a loaded machine; numpy's own einsum
    loops cost four times as much. The limit is process-wide while it lasts (a fraction of a
    second), and a lock makes concurrent bootstraps take it in turn. The :data:`STREAMS` streams
    run on threads of their own when there are cores for them (``side_by_side`` forces the choice,
    for tests: the replicates are the same either way).
    """
    frequency = kernel.patterns.frequency
    shares = [resamples * (k + 1) // STREAMS - resamples * k // STREAMS for k in range(STREAMS)]
    seeds = np.random.SeedSequence(seed).spawn(STREAMS)

    def stream(k: int) -> FloatArray:
        blocks = resampled_weights(frequency, shares[k], seeds[k], per_replicate=kernel.cells_per_row)
        return np.concatenate([alphas(kernel, weights) for weights in blocks] or [np.zeros(0)])

    if side_by_side is None:
        side_by_side = _cores() > 1 and resamples * int(frequency.sum()) >= _SIDE_BY_SIDE
    with _ONE_BLAS_THREAD, _blas().limit(limits=1, user_api="blas"):
        if side_by_side:
            with ThreadPoolExecutor(max_workers=STREAMS, thread_name_prefix="bootstrap") as pool:
                parts = list(pool.map(stream, range(STREAMS)))
        else:
            parts = [stream(k) for k in range(STREAMS)]
    return np.concatenate(parts)


def _cores() -> int:
    """The cores this process may run on."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def resampled_weights(
    frequency: IntArray,
    resamples: int,
    seed: int | np.random.SeedSequence | None,
    *,
    per_replicate: int = 1,
) -> Iterator[FloatArray]:
    """Blocks of replicates (rows) x patterns: how many items of each pattern a replicate drew.

    Each row is ``Multinomial(n_items, frequency / n_items)``: common patterns are cells of one
    multinomial draw, rare ones share a cell whose items are then drawn one by one.
    """
    n_items = int(frequency.sum())
    # Work on the patterns most frequent first (the order pairable_patterns already gives).
    order = np.argsort(-frequency, kind="stable")
    ranked = frequency[order]
    n_common = int(np.count_nonzero(ranked >= _COMMON))
    rare_item_pattern = np.repeat(np.arange(ranked.size - n_common, dtype=np.intp), ranked[n_common:])
    n_rare = int(rare_item_pattern.size)
    draw_type = np.int32 if n_rare < 2**31 else np.int64
    cells = np.append(ranked[:n_common], n_rare) if n_rare else ranked[:n_common]
    probabilities = cells / n_items
    block = max(1, min(resamples, BLOCK_CELLS // max(frequency.size, n_rare, per_replicate)))
    in_order = bool(np.array_equal(order, np.arange(order.size)))
    generator = np.random.default_rng(seed)
    for first in range(0, resamples, block):
        rows = min(block, resamples - first)
        weights = np.zeros((rows, frequency.size), dtype=np.float64)
        if n_common:
            drawn = generator.multinomial(n_items, probabilities, size=rows)
            weights[:, :n_common] = drawn[:, :n_common]
            in_rare = drawn[:, n_common:].sum(axis=1)
        else:
            in_rare = np.full(rows, n_items)
        # One replicate at a time: its draws stay in cache (a loop over replicates, not items).
        for row, draws in enumerate(in_rare.tolist() if n_rare else ()):
            picks = rare_item_pattern[generator.integers(0, n_rare, size=draws, dtype=draw_type)]
            weights[row, n_common:] = np.bincount(picks, minlength=ranked.size - n_common)
        if not in_order:
            unranked = np.empty_like(weights)
            unranked[:, order] = weights
            weights = unranked
        yield weights


def percentile_interval(replicates: FloatArray) -> tuple[float, float] | None:
    """The 95% percentile interval of the defined replicates (None if none is defined)."""
    defined = replicates[np.isfinite(replicates)]
    if defined.size == 0:
        return None
    low, high = np.quantile(defined, [0.025, 0.975])
    return float(low), float(high)
