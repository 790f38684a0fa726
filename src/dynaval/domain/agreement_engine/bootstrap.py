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
label has no alpha and is left out (the report counts them). The generator is
``numpy.random.default_rng(seed)``; blocks of replicates are drawn in an order fixed by the data's
shape, so a seed gives the same interval on every machine.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from dynaval.domain.agreement_engine.alpha import AlphaKernel, alphas
from dynaval.domain.agreement_engine.encoding import FloatArray, IntArray

_COMMON = 32
"""A binomial draw costs about as much as drawing this many items one by one."""
_MAX_CELLS = 1 << 19


def bootstrap_alphas(kernel: AlphaKernel, resamples: int, seed: int | None) -> FloatArray:
    """Alpha of ``resamples`` bootstrap replicates (NaN where a replicate's alpha is undefined)."""
    per_replicate = max(kernel.patterns.count, kernel.patterns.entry_label.size, 1)
    blocks = resampled_weights(kernel.patterns.frequency, resamples, seed, per_replicate=per_replicate)
    return np.concatenate([alphas(kernel, weights) for weights in blocks] or [np.zeros(0)])


def resampled_weights(
    frequency: IntArray, resamples: int, seed: int | None, *, per_replicate: int = 1
) -> Iterator[FloatArray]:
    """Blocks of replicates (rows) x patterns: how many items of each pattern a replicate drew.

    Each row is ``Multinomial(n_items, frequency / n_items)``: common patterns are cells of one
    multinomial draw, rare ones share a cell whose items are then drawn one by one.
    """
    n_items = int(frequency.sum())
    common = np.flatnonzero(frequency >= _COMMON)
    rare = np.flatnonzero(frequency < _COMMON)
    rare_item_pattern = np.repeat(np.arange(rare.size), frequency[rare])
    n_rare = int(rare_item_pattern.size)
    cells = np.append(frequency[common], n_rare) if n_rare else frequency[common]
    probabilities = cells / n_items
    block = max(1, min(resamples, _MAX_CELLS // max(frequency.size, n_rare, per_replicate)))
    generator = np.random.default_rng(seed)
    for first in range(0, resamples, block):
        rows = min(block, resamples - first)
        weights = np.zeros((rows, frequency.size), dtype=np.float64)
        if common.size:
            drawn = generator.multinomial(n_items, probabilities, size=rows)
            weights[:, common] = drawn[:, : common.size]
            in_rare = drawn[:, common.size :].sum(axis=1)
        else:
            in_rare = np.full(rows, n_items)
        if n_rare:
            picks = rare_item_pattern[generator.integers(0, n_rare, size=int(in_rare.sum()))]
            row = np.repeat(np.arange(rows), in_rare)
            tally = np.bincount(row * rare.size + picks, minlength=rows * rare.size)
            weights[:, rare] = tally.reshape(rows, rare.size)
        yield weights


def percentile_interval(replicates: FloatArray) -> tuple[float, float] | None:
    """The 95% percentile interval of the defined replicates (None if none is defined)."""
    defined = replicates[np.isfinite(replicates)]
    if defined.size == 0:
        return None
    low, high = np.quantile(defined, [0.025, 0.975])
    return float(low), float(high)
