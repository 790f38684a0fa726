"""Krippendorff's alpha for any number of weightings of the count patterns at once.

With ``o`` the coincidence matrix, ``n_c`` its marginals, ``n = sum(n_c)`` and a metric ``d``
(zero on the diagonal), ``alpha = 1 - (n - 1) * sum(o * d) / sum(n_c * n_k * d)``. Item u with
count vector ``c_u`` (n_u votes) adds ``(c_u c_u^T - diag(c_u)) / (n_u - 1)`` to ``o``, so

* observed: ``sum(o * d) = sum_u (c_u^T d c_u) / (n_u - 1)``, a number per item (per pattern);
* marginals: ``n_c = sum_u c_uc`` over the pairable items.

Neither needs the L x L coincidence matrix. Per level:

* nominal: ``c^T d c = sum_c c_c (n_u - c_c)``; expected ``sum_c n_c (n - n_c)``. O(L).
* interval: ``c^T d c = 2 n_u sum_c c_c (v_c - mean_u)^2`` (centred per item, so no cancellation);
  expected ``2 n sum_c n_c (v_c - mean)^2``. O(L).
* ordinal: Krippendorff's metric ``(sum_{g=c..k} n_g - (n_c + n_k) / 2)^2`` is ``(r_k - r_c)^2``
  with the mid-rank ``r_c = sum_{g<c} n_g + n_c / 2``: the interval metric on mid-ranks, which
  come from the cumulative marginals in O(L). The ranks depend on the marginals, so the observed
  part is recomputed per weighting: O(entries) each.
* ratio: ``((v_c - v_k) / (v_c + v_k))^2`` (0 when ``v_c + v_k == 0``, as the ``krippendorff``
  package does) has no moment form: observed sums run over the pairs of labels present in each
  pattern (O(sum of squared distinct labels per pattern)); expected is a quadratic form in the
  marginals, O(L^2) time, computed in row blocks so memory stays O(L x block).

Only labels that occur in a pairable item take part: unused labels have zero marginals and change
nothing (for ordinal data their mid-ranks are never weighted).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dynaval.domain.agreement.encoding import FloatArray, IntArray, Level
from dynaval.domain.agreement.tally import Patterns, pairs_within_groups

BLOCK_CELLS = 1 << 21
"""Largest temporary array (in elements: 16 MiB of floats) built per block of weightings."""
_PAIR_CELLS = 1 << 18


@dataclass(frozen=True)
class AlphaKernel:
    """Everything alpha needs from the patterns, precomputed once for any number of weightings."""

    level: Level
    patterns: Patterns
    """The patterns with labels renumbered to the used ones (0..used-1, in domain order)."""
    numbers: FloatArray | None
    """The used labels' numbers (interval and ratio)."""
    features: FloatArray
    """Per pattern: its counts of the used labels (when kept dense, i.e. when that is O(entries)
    in size), then its size, then ``c^T d c / (n_u - 1)`` (0 for ordinal data, whose metric moves
    with the marginals). One matrix product with a block of weightings gives every linear
    statistic alpha needs."""
    dense: bool
    by_label: IntArray
    label_start: IntArray

    @property
    def used_labels(self) -> int:
        return int(self.label_start.size - 1)

    @property
    def cells_per_row(self) -> int:
        """The largest temporary, in elements, per weighting evaluated."""
        widest = max(self.patterns.count, self.used_labels, 1)
        if self.level == "ordinal" or not self.dense:
            return max(widest, self.patterns.entry_label.size)
        return widest


def alpha_kernel(
    patterns: Patterns, level: Level, numbers: FloatArray | None, *, dense: bool | None = None
) -> AlphaKernel:
    """Precompute the per-pattern parts; ``dense`` forces the count-matrix choice (for tests)."""
    used, label = np.unique(patterns.entry_label, return_inverse=True)
    label = label.reshape(-1).astype(np.intp)
    compact = Patterns(
        frequency=patterns.frequency,
        size=patterns.size,
        start=patterns.start,
        entry_pattern=patterns.entry_pattern,
        entry_label=label,
        entry_count=patterns.entry_count,
        n_labels=int(used.size),
    )
    used_numbers = numbers[used] if numbers is not None else None
    by_label = np.argsort(label, kind="stable").astype(np.intp)
    label_start = np.zeros(used.size + 1, dtype=np.intp)
    np.cumsum(np.bincount(label, minlength=used.size), out=label_start[1:])
    cells = compact.count * int(used.size)
    if dense is None:
        dense = cells <= 8 * label.size + (1 << 16)
    observed = _observed_per_pattern(compact, level, used_numbers)
    width = int(used.size) if dense else 0
    features = np.zeros((compact.count, width + 2), dtype=np.float64)
    if dense:
        features[compact.entry_pattern, label] = compact.entry_count
    features[:, width] = compact.size
    if observed is not None:
        features[:, width + 1] = observed
    return AlphaKernel(
        level=level,
        patterns=compact,
        numbers=used_numbers,
        features=features,
        dense=dense,
        by_label=by_label,
        label_start=label_start,
    )


def alphas(kernel: AlphaKernel, weights: FloatArray) -> FloatArray:
    """Alpha for each row of ``weights`` (rows x patterns: how many items of each pattern).

    Undefined rows (fewer than two labels used, or no expected disagreement) are NaN here; the
    report turns them into ``None`` with a reason.
    """
    rows = weights.shape[0]
    result = np.empty(rows, dtype=np.float64)
    block = max(1, BLOCK_CELLS // kernel.cells_per_row)
    for first in range(0, rows, block):
        result[first : first + block] = _alpha_block(kernel, weights[first : first + block])
    return result


def ratio_distance(left: FloatArray, right: FloatArray) -> FloatArray:
    """``((x - y) / (x + y))^2``, and 0 where ``x + y == 0`` (the ``krippendorff`` package's rule)."""
    total = left + right
    share = np.divide(left - right, total, out=np.zeros(np.broadcast(left, right).shape), where=total != 0)
    return np.asarray(share**2, dtype=np.float64)


def _alpha_block(kernel: AlphaKernel, weights: FloatArray) -> FloatArray:
    # One BLAS product (the bootstrap runs it on one thread: see resampling.bootstrap_alphas).
    # Only the summation order differs from numpy's own loops: rounding, far below 1e-12.
    linear = weights @ kernel.features
    values, observed = linear[:, -2], linear[:, -1]
    marginals = linear[:, :-2] if kernel.dense else _sparse_marginals(kernel, weights)
    if kernel.level == "ordinal":
        ranks = np.cumsum(marginals, axis=1) - marginals / 2 - values[:, None] / 2
        observed = _observed_on_scale(kernel.patterns, weights, ranks)
        expected = _expected_on_scale(marginals, values, ranks)
    else:
        if kernel.level == "nominal":
            expected = (marginals * (values[:, None] - marginals)).sum(axis=1)
        elif kernel.level == "interval":
            assert kernel.numbers is not None
            expected = _expected_on_scale(marginals, values, np.broadcast_to(kernel.numbers, marginals.shape))
        else:
            assert kernel.numbers is not None
            expected = _ratio_expected(marginals, kernel.numbers)
    defined = (np.count_nonzero(marginals, axis=1) >= 2) & (expected > 0)
    result = np.full(weights.shape[0], np.nan)
    np.divide(observed, expected, out=result, where=defined)
    return np.where(defined, 1 - (values - 1) * result, np.nan)


def _sparse_marginals(kernel: AlphaKernel, weights: FloatArray) -> FloatArray:
    patterns = kernel.patterns
    order = kernel.by_label
    spread = weights[:, patterns.entry_pattern[order]] * patterns.entry_count[order]
    return np.asarray(np.add.reduceat(spread, kernel.label_start[:-1], axis=1), dtype=np.float64)


def _observed_per_pattern(patterns: Patterns, level: Level, numbers: FloatArray | None) -> FloatArray | None:
    if level == "ordinal":
        return None
    if patterns.count == 0:
        return np.zeros(0, dtype=np.float64)
    counts = patterns.entry_count.astype(np.float64)
    size = patterns.size.astype(np.float64)
    if level == "nominal":
        spread = counts * (size[patterns.entry_pattern] - counts)
        return np.asarray(np.add.reduceat(spread, patterns.start[:-1]) / (size - 1), dtype=np.float64)
    assert numbers is not None
    if level == "interval":
        return _interval_observed(patterns, numbers)
    total = np.zeros(patterns.count, dtype=np.float64)
    for first, second in pairs_within_groups(patterns.start, _PAIR_CELLS):
        product = counts[first] * counts[second]
        product *= ratio_distance(numbers[patterns.entry_label[first]], numbers[patterns.entry_label[second]])
        total += np.bincount(patterns.entry_pattern[first], weights=product, minlength=patterns.count)
    return total / (size - 1)


def _interval_observed(patterns: Patterns, numbers: FloatArray) -> FloatArray:
    counts = patterns.entry_count.astype(np.float64)
    size = patterns.size.astype(np.float64)
    starts = patterns.start[:-1]
    value = numbers[patterns.entry_label]
    mean = np.add.reduceat(counts * value, starts) / size
    spread = np.add.reduceat(counts * (value - mean[patterns.entry_pattern]) ** 2, starts)
    return np.asarray(2 * size * spread / (size - 1), dtype=np.float64)


def _observed_on_scale(patterns: Patterns, weights: FloatArray, scale: FloatArray) -> FloatArray:
    """``sum_p w_p c_p^T d c_p / (n_p - 1)`` for the interval metric on a per-row scale (rows x labels)."""
    counts = patterns.entry_count.astype(np.float64)
    size = patterns.size.astype(np.float64)
    starts = patterns.start[:-1]
    value = scale[:, patterns.entry_label]
    mean = np.add.reduceat(value * counts, starts, axis=1) / size
    spread = np.add.reduceat((value - mean[:, patterns.entry_pattern]) ** 2 * counts, starts, axis=1)
    return np.asarray((weights * (2 * size / (size - 1)) * spread).sum(axis=1), dtype=np.float64)


def _expected_on_scale(marginals: FloatArray, values: FloatArray, scale: FloatArray) -> FloatArray:
    """``sum_ck n_c n_k (x_c - x_k)^2 = 2 n sum_c n_c (x_c - mean)^2`` per row."""
    mean = (marginals * scale).sum(axis=1) / values
    spread = (marginals * (scale - mean[:, None]) ** 2).sum(axis=1)
    return np.asarray(2 * values * spread, dtype=np.float64)


def _ratio_expected(marginals: FloatArray, numbers: FloatArray) -> FloatArray:
    """``n^T d n`` per row, with the L x L metric built a block of rows at a time."""
    used = numbers.size
    step = max(1, _PAIR_CELLS // max(used, 1))
    total = np.zeros(marginals.shape[0], dtype=np.float64)
    for first in range(0, used, step):
        distance = ratio_distance(numbers[first : first + step, None], numbers[None, :])
        total += (marginals[:, first : first + step] * (marginals @ distance.T)).sum(axis=1)
    return total
