"""Dawid-Skene aggregation: each item's likely true label, learnt together with each annotator's confusion.

Dawid and Skene (1979) model every annotator by a confusion matrix ``pi[a, t, g]``, the probability
that annotator ``a`` gives label ``g`` to an item whose true label is ``t``, and the items' true
labels by class priors ``p[t]``. Expectation-maximisation alternates between the items' posterior
distributions over true labels (E-step) and the priors and confusion matrices that best explain
the votes under those posteriors (M-step). Any pattern of missing votes is fine: an annotator's
matrix is learnt from the items that annotator labelled.

The procedure follows crowd-kit's ``DawidSkene`` (crowdkit/aggregation/classification/dawid_skene.py)
step for step, so the two agree to rounding error on the same votes:

* initialisation: the posteriors are the majority-vote shares of each item's votes, the priors
  their mean, and the confusion matrices one M-step on those posteriors;
* each iteration: E-step, priors (mean posterior), M-step, as crowd-kit does.

Stopping differs from crowd-kit's on purpose. crowd-kit stops as soon as its evidence lower bound
per vote (in which the log prior enters once per vote, so it is not the quantity EM increases)
improves by less than its tolerance, a fall included: on real sets it stops after two iterations
while the priors are still moving by several points. Here iteration stops when no parameter moves
by ``tolerance`` or more: the largest absolute change of any confusion-matrix cell and any prior
between two iterations (``parameter_change``) is below ``tolerance`` (default ``1e-6``). When
``max_iterations`` (default 1000) is reached first, ``converged`` is ``False``. The data's
log-likelihood under the final parameters (``log_likelihood``, the sum over items of
``log sum_t p[t] prod pi[a, t, g]``, which EM never decreases) is reported beside it. Run for the
same number of iterations (``tolerance=0`` and ``max_iterations`` set to crowd-kit's iteration
count), the two give the same labels, and posteriors and priors within ``1e-9``
(tests/unit/test_dawid_skene_crowd_kit.py).

Smoothing (crowd-kit's): an annotator's matrix has a cell for every label, but only the labels that
annotator gave at least once get probability. Their expected counts (sums of posteriors) are floored
at ``SMOOTHING`` (1e-10) before each row is divided by its total; a label the annotator never gave
keeps probability exactly 0 (the maximum-likelihood estimate, and never looked up in a logarithm,
since no vote of that annotator carries it). So a row with no evidence at all (a true label that
none of the annotator's items is believed to have) becomes uniform over the labels the annotator
gave instead of 0/0, and every row sums to 1. Priors are floored at the same value inside
logarithms. Counts that real votes feed are orders of magnitude larger than the floor, which moves
them by about 1e-10 at most. Reported posteriors and priors are not floored (crowd-kit's returned
ones are, so they differ from these by up to 1e-10). A label in ``labels`` that no vote carries is
left out of the fit altogether (posterior and prior 0): under the floor it could otherwise grow from
nothing into a catch-all class for ambiguous items.

Determinism: votes, items, annotators and labels are put in sorted order before any arithmetic,
so the result is bit-for-bit the same whatever order the votes or ``labels`` come in; ties between
labels with the same posterior go to the label that sorts first (as crowd-kit's ``idxmax`` over its
sorted label columns does).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
from numpy.typing import NDArray

SMOOTHING = 1e-10
"""Floor on expected confusion counts and on priors inside logarithms (see the module docstring)."""

TOLERANCE = 1e-6
"""Iteration stops once no confusion cell or prior moves by this much or more in one iteration."""
MAX_ITERATIONS = 1000
"""Iterations run at most; reaching it first reports ``converged=False``."""

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class DawidSkeneResult:
    """What Dawid-Skene learnt from one set of votes. Arrays are read-only.

    Rows and axes follow ``items``, ``annotators`` and ``labels``; ``labels`` is the caller's order
    when ``labels`` was given, otherwise the sorted set of labels seen in the votes.
    """

    labels: tuple[str, ...]
    items: tuple[str, ...]
    """Every item that has at least one vote, sorted."""
    annotators: tuple[str, ...]
    """Every annotator who cast at least one vote, sorted."""
    aggregated: tuple[str, ...]
    """Each item's most probable true label (aligned with ``items``)."""
    posteriors: FloatArray
    """``(len(items), len(labels))``: each item's distribution over true labels; rows sum to 1."""
    confusion: FloatArray
    """``(len(annotators), len(labels), len(labels))``: ``[a, true, given]``; rows sum to 1."""
    priors: FloatArray
    """``(len(labels),)``: the class priors, the mean of the posteriors (sums to 1 when any item)."""
    iterations: int
    """EM iterations run (E-step plus M-step); 0 for no votes or ``max_iterations=0``."""
    converged: bool
    """Whether the parameters settled (or there was nothing to fit) before ``max_iterations``."""
    parameter_change: float
    """The largest absolute change of a confusion cell or prior in the last iteration (0 when none ran)."""
    log_likelihood: float
    """Log-likelihood of the votes under the final priors and confusion matrices (0 for no votes)."""
    tolerance: float
    """The stopping tolerance on ``parameter_change``."""

    def winning_posteriors(self) -> FloatArray:
        """Each item's posterior probability of its aggregated label (aligned with ``items``)."""
        if not self.items:
            return np.zeros(0)
        column = {label: k for k, label in enumerate(self.labels)}
        chosen = np.array([column[label] for label in self.aggregated], dtype=np.int64)
        picked: FloatArray = self.posteriors[np.arange(len(self.items)), chosen]
        return picked

    def aggregate_of(self, item: str) -> str:
        """The aggregated label of ``item``; ``KeyError`` when the item has no votes."""
        try:
            return self.aggregated[self.items.index(item)]
        except ValueError:
            raise KeyError(item) from None

    def to_dict(self) -> dict[str, object]:
        """A JSON-friendly copy: lists of plain floats aligned with ``labels``."""
        return {
            "labels": list(self.labels),
            "priors": [float(p) for p in self.priors],
            "items": [
                {"item": item, "label": label, "posterior": [float(p) for p in row]}
                for item, label, row in zip(self.items, self.aggregated, self.posteriors, strict=True)
            ],
            "annotators": [
                {"annotator": annotator, "confusion": [[float(p) for p in row] for row in matrix]}
                for annotator, matrix in zip(self.annotators, self.confusion, strict=True)
            ],
            "iterations": self.iterations,
            "converged": self.converged,
            "parameter_change": self.parameter_change,
            "tolerance": self.tolerance,
            "log_likelihood": self.log_likelihood,
            "smoothing": SMOOTHING,
        }


def dawid_skene(
    votes: Iterable[tuple[str, str, str]],
    *,
    labels: Sequence[str] | None = None,
    max_iterations: int = MAX_ITERATIONS,
    tolerance: float = TOLERANCE,
) -> DawidSkeneResult:
    """Aggregate ``(item, annotator, label)`` votes with Dawid-Skene EM.

    ``labels`` fixes the label set and the order of the outputs; every vote's label must be in it
    (labels that no vote carries are allowed: they are left out of the fit and get posterior and
    prior 0). Without it the labels are those seen in the votes, sorted. An annotator votes at most
    once per item.

    Degenerate inputs give finite results, never NaN: no votes gives empty items and annotators,
    uniform priors over ``labels`` (``iterations=0``, ``converged=True``); a single label gives
    posteriors and matrices of 1; a single annotator reproduces that annotator's labels.

    Raises ``ValueError`` naming the problem for malformed votes, duplicate votes, labels outside
    ``labels``, a malformed ``labels``, a negative or non-integer ``max_iterations`` or a negative or
    non-finite ``tolerance``.
    """
    triples = _validated_votes(votes)
    label_order = _validated_labels(labels, triples)
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, int) or max_iterations < 0:
        raise ValueError(f"max_iterations must be a non-negative integer, got {max_iterations!r}")
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or not math.isfinite(tolerance):
        raise ValueError(f"tolerance must be a finite number, got {tolerance!r}")
    if tolerance < 0:
        raise ValueError(f"tolerance must not be negative, got {tolerance!r}")

    if not triples:
        n_labels = len(label_order)
        uniform: FloatArray = np.full(n_labels, 1.0 / n_labels) if n_labels else np.zeros(0)
        empty_posteriors = np.zeros((0, n_labels))
        empty_confusion = np.zeros((0, n_labels, n_labels))
        return _result(
            label_order,
            label_order,
            (),
            (),
            (),
            empty_posteriors,
            empty_confusion,
            uniform,
            _Progress(0, True, 0.0, 0.0, float(tolerance)),
        )

    triples.sort()
    used = tuple(sorted({t[2] for t in triples}))
    items = tuple(sorted({t[0] for t in triples}))
    annotators = tuple(sorted({t[1] for t in triples}))
    item_index = {item: i for i, item in enumerate(items)}
    annotator_index = {annotator: i for i, annotator in enumerate(annotators)}
    label_index = {label: i for i, label in enumerate(used)}
    item_of = np.array([item_index[t[0]] for t in triples], dtype=np.int64)
    annotator_of = np.array([annotator_index[t[1]] for t in triples], dtype=np.int64)
    label_of = np.array([label_index[t[2]] for t in triples], dtype=np.int64)

    posteriors, priors, confusion, progress = _fit(
        item_of, annotator_of, label_of, len(items), len(annotators), len(used), max_iterations, tolerance
    )
    winners = tuple(used[int(k)] for k in np.argmax(posteriors, axis=1))
    unused = tuple(sorted(set(label_order) - set(used)))
    posteriors, confusion, priors = _with_unused_labels(posteriors, confusion, priors, len(unused))
    return _result(
        label_order,
        used + unused,
        items,
        annotators,
        winners,
        posteriors,
        confusion,
        priors,
        progress,
    )


def majority_vote_posteriors(
    item_of: IntArray, label_of: IntArray, n_items: int, n_labels: int
) -> FloatArray:
    """Each item's share of votes per label, ``(n_items, n_labels)``: crowd-kit's initialisation.

    Every item index in ``range(n_items)`` must occur in ``item_of`` (an item without votes has no
    share to take).
    """
    counts = np.bincount(item_of * n_labels + label_of, minlength=n_items * n_labels).astype(np.float64)
    counts = counts.reshape(n_items, n_labels)
    totals = counts.sum(axis=1, keepdims=True)
    if np.any(totals == 0):
        raise ValueError("every item needs at least one vote for majority-vote posteriors")
    shares: FloatArray = counts / totals
    return shares


def m_step(
    posteriors: FloatArray, item_of: IntArray, annotator_of: IntArray, label_of: IntArray, n_annotators: int
) -> FloatArray:
    """Confusion matrices ``[annotator, true, given]`` from posteriors, smoothed (rows sum to 1).

    The expected count of annotator ``a`` giving ``g`` when the truth is ``t`` is the sum of
    ``posteriors[i, t]`` over the items ``i`` that ``a`` labelled ``g``. Counts of labels ``a`` gave
    are floored at ``SMOOTHING``, those of labels ``a`` never gave stay 0, and each ``(a, t)`` row is
    divided by its total (every annotator gave some label, so no total is 0).
    """
    n_labels = posteriors.shape[1]
    cells = annotator_of * n_labels + label_of
    n_cells = n_annotators * n_labels
    # One weighted bincount per true label: far cheaper than np.add.at over votes x labels.
    counts = np.empty((n_cells, n_labels))
    for true in range(n_labels):
        counts[:, true] = np.bincount(cells, weights=posteriors[item_of, true], minlength=n_cells)
    given = np.bincount(cells, minlength=n_annotators * n_labels).reshape(n_annotators, 1, n_labels) > 0
    # counts[a * K + given, true] -> [a, true, given]
    expected: FloatArray = counts.reshape(n_annotators, n_labels, n_labels).transpose(0, 2, 1)
    expected = np.where(given, np.maximum(expected, SMOOTHING), 0.0)
    confusion: FloatArray = expected / expected.sum(axis=2, keepdims=True)
    return confusion


def e_step(
    priors: FloatArray,
    confusion: FloatArray,
    item_of: IntArray,
    annotator_of: IntArray,
    label_of: IntArray,
    n_items: int,
) -> FloatArray:
    """Items' posteriors over true labels given priors and confusion matrices, ``(n_items, K)``.

    Works in logarithms and shifts each item's row so its maximum is 0 before exponentiating, so
    long products of small probabilities neither underflow nor overflow. ``item_of`` must be sorted
    and cover every item.
    """
    return e_step_with_likelihood(priors, confusion, item_of, annotator_of, label_of, n_items)[0]


def e_step_with_likelihood(
    priors: FloatArray,
    confusion: FloatArray,
    item_of: IntArray,
    annotator_of: IntArray,
    label_of: IntArray,
    n_items: int,
) -> tuple[FloatArray, float]:
    """:func:`e_step` and the votes' log-likelihood under ``priors`` and ``confusion``."""
    n_labels = confusion.shape[1]
    # Only cells of labels an annotator gave are looked up, and those are floored above 0.
    given = confusion.transpose(0, 2, 1).reshape(-1, n_labels)  # [a * K + given, true]
    log_given = np.log(given, out=np.full(given.shape, -np.inf), where=given > 0)
    log_votes = log_given[annotator_of * n_labels + label_of]
    starts = np.flatnonzero(np.r_[True, item_of[1:] != item_of[:-1]])
    if starts.size != n_items:
        raise ValueError("e_step needs votes sorted by item, with every item voted on")
    log_likelihood = np.log(np.maximum(priors, SMOOTHING)) + np.add.reduceat(log_votes, starts, axis=0)
    peak = log_likelihood.max(axis=1, keepdims=True)
    scaled = np.exp(log_likelihood - peak)
    totals = scaled.sum(axis=1, keepdims=True)
    posteriors: FloatArray = scaled / totals
    return posteriors, float(np.sum(peak + np.log(totals)))


def _fit(
    item_of: IntArray,
    annotator_of: IntArray,
    label_of: IntArray,
    n_items: int,
    n_annotators: int,
    n_labels: int,
    max_iterations: int,
    tolerance: float,
) -> tuple[FloatArray, FloatArray, FloatArray, _Progress]:
    posteriors = majority_vote_posteriors(item_of, label_of, n_items, n_labels)
    priors: FloatArray = posteriors.mean(axis=0)
    confusion = m_step(posteriors, item_of, annotator_of, label_of, n_annotators)
    change = 0.0
    for iteration in range(1, max_iterations + 1):
        posteriors = e_step(priors, confusion, item_of, annotator_of, label_of, n_items)
        new_priors = posteriors.mean(axis=0)
        new_confusion = m_step(posteriors, item_of, annotator_of, label_of, n_annotators)
        change = max(
            float(np.max(np.abs(new_confusion - confusion))), float(np.max(np.abs(new_priors - priors)))
        )
        priors, confusion = new_priors, new_confusion
        if change < tolerance:
            return (
                posteriors,
                priors,
                confusion,
                _progress(
                    iteration, True, change, tolerance, priors, confusion, item_of, annotator_of, label_of
                ),
            )
    return (
        posteriors,
        priors,
        confusion,
        _progress(
            max_iterations, False, change, tolerance, priors, confusion, item_of, annotator_of, label_of
        ),
    )


@dataclass(frozen=True)
class _Progress:
    iterations: int
    converged: bool
    parameter_change: float
    log_likelihood: float
    tolerance: float


def _progress(
    iterations: int,
    converged: bool,
    change: float,
    tolerance: float,
    priors: FloatArray,
    confusion: FloatArray,
    item_of: IntArray,
    annotator_of: IntArray,
    label_of: IntArray,
) -> _Progress:
    n_items = int(item_of[-1]) + 1
    likelihood = e_step_with_likelihood(priors, confusion, item_of, annotator_of, label_of, n_items)[1]
    return _Progress(iterations, converged, change, likelihood, float(tolerance))


def _validated_votes(votes: Iterable[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    if isinstance(votes, str | bytes):
        raise ValueError("votes must be an iterable of (item, annotator, label) triples, not a string")
    try:
        materialised = list(votes)
    except TypeError:
        raise ValueError("votes must be an iterable of (item, annotator, label) triples") from None
    triples: list[tuple[str, str, str]] = []
    seen: set[tuple[str, str]] = set()
    for position, vote in enumerate(materialised):
        if not isinstance(vote, tuple | list) or len(vote) != 3:
            raise ValueError(f"vote #{position} is not an (item, annotator, label) triple: {vote!r}")
        item, annotator, label = vote
        for name, value in (("item", item), ("annotator", annotator), ("label", label)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"vote #{position} has a {name} that is not a non-empty string: {value!r}")
        if (item, annotator) in seen:
            raise ValueError(f"duplicate vote: annotator {annotator!r} voted twice on item {item!r}")
        seen.add((item, annotator))
        triples.append((item, annotator, label))
    return triples


def _validated_labels(labels: Sequence[str] | None, triples: list[tuple[str, str, str]]) -> tuple[str, ...]:
    used = {t[2] for t in triples}
    if labels is None:
        return tuple(sorted(used))
    if isinstance(labels, str | bytes):
        raise ValueError("labels must be a sequence of label strings, not a single string")
    order = tuple(labels)
    for label in order:
        if not isinstance(label, str) or not label:
            raise ValueError(f"labels must be non-empty strings, got {label!r}")
    if len(set(order)) != len(order):
        duplicated = sorted({label for label in order if order.count(label) > 1})
        raise ValueError(f"labels must be distinct, repeated: {duplicated}")
    unknown = used - set(order)
    if unknown:
        raise ValueError(f"votes carry labels outside the given label set: {sorted(unknown)}")
    return order


def _with_unused_labels(
    posteriors: FloatArray, confusion: FloatArray, priors: FloatArray, n_unused: int
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Append labels that no vote carries: posterior and prior 0, confusion rows with no evidence.

    EM starts from majority-vote shares, in which such a label has probability 0, and in exact
    arithmetic it keeps 0 for ever; fitting without it avoids letting the smoothing floor grow it
    into a catch-all class. An annotator's row for it is uniform over the labels that annotator
    gave, like any row without evidence, and nobody ever gives it (its column is 0).
    """
    if n_unused == 0:
        return posteriors, confusion, priors
    n_items, n_used = posteriors.shape
    n_annotators = confusion.shape[0]
    wide_posteriors = np.hstack([posteriors, np.zeros((n_items, n_unused))])
    wide_priors = np.concatenate([priors, np.zeros(n_unused)])
    # Cells of labels an annotator gave are floored above 0; those of labels never given are exactly 0.
    gave = (confusion > 0).any(axis=1).astype(np.float64)
    no_evidence = gave / gave.sum(axis=1, keepdims=True)
    wide_confusion = np.zeros((n_annotators, n_used + n_unused, n_used + n_unused))
    wide_confusion[:, :n_used, :n_used] = confusion
    wide_confusion[:, n_used:, :n_used] = no_evidence[:, np.newaxis, :]
    return wide_posteriors, wide_confusion, wide_priors


def _result(
    label_order: tuple[str, ...],
    canonical: tuple[str, ...],
    items: tuple[str, ...],
    annotators: tuple[str, ...],
    winners: tuple[str, ...],
    posteriors: FloatArray,
    confusion: FloatArray,
    priors: FloatArray,
    progress: _Progress,
) -> DawidSkeneResult:
    """Reorder arrays whose label axes follow ``canonical`` into the caller's label order, read-only."""
    position = {label: k for k, label in enumerate(canonical)}
    perm = np.array([position[label] for label in label_order], dtype=np.int64)
    ordered_posteriors = np.ascontiguousarray(posteriors[:, perm])
    ordered_confusion = np.ascontiguousarray(confusion[:, perm][:, :, perm])
    ordered_priors = np.ascontiguousarray(priors[perm])
    for array in (ordered_posteriors, ordered_confusion, ordered_priors):
        array.setflags(write=False)
    return DawidSkeneResult(
        labels=label_order,
        items=items,
        annotators=annotators,
        aggregated=winners,
        posteriors=ordered_posteriors,
        confusion=ordered_confusion,
        priors=ordered_priors,
        iterations=progress.iterations,
        converged=progress.converged,
        parameter_change=progress.parameter_change,
        log_likelihood=progress.log_likelihood,
        tolerance=progress.tolerance,
    )


def majority_labels(votes: Iterable[tuple[str, str, str]]) -> dict[str, tuple[str, ...]]:
    """Each item's majority label(s): the labels with the most votes, sorted; several on a tie.

    No tie-break: an item whose top count is shared has no single majority label, and reports
    count it apart from the items with one.
    """
    by_item: dict[str, Counter[str]] = {}
    for item, _annotator, label in votes:
        by_item.setdefault(item, Counter())[label] += 1
    majority: dict[str, tuple[str, ...]] = {}
    for item, counts in by_item.items():
        top = max(counts.values())
        majority[item] = tuple(sorted(label for label, count in counts.items() if count == top))
    return majority


class ItemAggregate(TypedDict):
    """One item's aggregate labels (see :func:`aggregate_items`)."""

    item: str
    majority: list[str]
    label: str
    posterior: float
    votes: int


def aggregate_items(result: DawidSkeneResult, votes: Sequence[tuple[str, str, str]]) -> list[ItemAggregate]:
    """Per item, in ``result.items`` order: majority label(s), Dawid-Skene label and its posterior,
    and the number of votes."""
    majority = majority_labels(votes)
    n_votes = Counter(item for item, _annotator, _label in votes)
    return [
        ItemAggregate(
            item=item,
            majority=list(majority[item]),
            label=label,
            posterior=float(posterior),
            votes=n_votes[item],
        )
        for item, label, posterior in zip(
            result.items, result.aggregated, result.winning_posteriors(), strict=True
        )
    ]


def dawid_skene_beside_majority(
    votes: Sequence[tuple[str, str, str]], *, labels: Sequence[str] | None = None
) -> dict[str, object]:
    """Dawid-Skene's view of the votes, for reports: priors, each annotator's confusion matrix,
    convergence, each item's label and posterior (with its majority label(s) and number of votes),
    and how it compares with the majority vote.

    Items whose majority is tied (two or more labels share the top count) have no majority label:
    they are counted in ``items_tied_in_majority`` and never in ``items_differing_from_majority``,
    which counts items with a single majority label that Dawid-Skene labels otherwise.
    """
    result = dawid_skene(votes, labels=labels)
    per_item = aggregate_items(result, votes)
    tied = sum(1 for row in per_item if len(row["majority"]) > 1)
    differing = sum(1 for row in per_item if len(row["majority"]) == 1 and row["majority"] != [row["label"]])
    full = result.to_dict()
    return {
        "labels": full["labels"],
        "priors": full["priors"],
        "annotators": full["annotators"],
        "iterations": result.iterations,
        "max_iterations": MAX_ITERATIONS,
        "converged": result.converged,
        "tolerance": result.tolerance,
        "parameter_change": result.parameter_change,
        "log_likelihood": result.log_likelihood,
        "items": per_item,
        "item_count": len(result.items),
        "items_differing_from_majority": differing,
        "items_tied_in_majority": tied,
        "majority_tie_rule": "no tie-break: an item whose top vote count is shared by several labels "
        "has no majority label and is counted as tied, never as differing",
    }
