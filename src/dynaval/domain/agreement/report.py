"""The engine's entry points: :func:`round_alpha` (alpha and its interval) and :func:`agreement_report`."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from dynaval.domain.agreement.alpha import alpha_kernel, alphas
from dynaval.domain.agreement.breakdown import (
    AnnotatorAgreement,
    ItemAgreement,
    LabelAgreement,
    PairwiseAgreement,
    item_modes,
    pairwise,
    per_annotator,
    per_item,
    per_label,
    writer_codes,
    writer_is_majority,
)
from dynaval.domain.agreement.encoding import (
    CodedVotes,
    Domain,
    Id,
    Label,
    Level,
    Values,
    VoteColumns,
    Votes,
    WriterLabels,
    check_level,
    check_values,
    encode_votes,
    label_codes,
)
from dynaval.domain.agreement.resampling import bootstrap_alphas, percentile_interval
from dynaval.domain.agreement.tally import (
    CodeArray,
    Patterns,
    dense_patterns,
    pairable_patterns,
    tally_items,
)

NO_VOTES = "there are no votes"
NO_PAIRABLE = "no item has two or more votes, so no value can be paired"
ONE_LABEL = "every pairable vote carries the same label ({label!r}), so there is no expected disagreement"
RATIO_ZERO = (
    "the ratio distance between every two labels used is zero (their numbers sum to zero), "
    "so there is no expected disagreement"
)


@dataclass(frozen=True)
class AlphaEstimate:
    """Krippendorff's alpha of a set of votes, with its bootstrap interval."""

    alpha: float | None
    undefined_reason: str | None
    level: Level
    items: int
    """Items with two or more votes (the only ones alpha can use)."""
    annotators: int
    pairable_values: int
    """Votes on those items."""
    votes: int
    ci95: tuple[float, float] | None
    """95% percentile bootstrap interval over items; None when not asked for or undefined."""
    resamples: int
    defined_resamples: int
    """Replicates whose alpha is defined (the interval uses only these)."""
    seed: int | None

    def to_dict(self) -> dict[str, object]:
        return {
            "alpha": self.alpha,
            "undefined_reason": self.undefined_reason,
            "level": self.level,
            "items": self.items,
            "annotators": self.annotators,
            "pairable_values": self.pairable_values,
            "votes": self.votes,
            **interval_to_dict(self.ci95, self.resamples, self.defined_resamples, self.seed),
        }


def interval_to_dict(
    ci95: tuple[float, float] | None, resamples: int, defined_resamples: int, seed: int | None
) -> dict[str, object]:
    """The JSON of a bootstrap interval: ``ci95`` and ``bootstrap`` (None for no resampling)."""
    return {
        "ci95": list(ci95) if ci95 is not None else None,
        "bootstrap": (
            {"resamples": resamples, "defined": defined_resamples, "seed": seed} if resamples else None
        ),
    }


@dataclass(frozen=True)
class AgreementReport:
    """Alpha with its interval, and where agreement comes from (see :mod:`.breakdown`)."""

    estimate: AlphaEstimate
    per_label: tuple[LabelAgreement, ...]
    per_annotator: tuple[AnnotatorAgreement, ...]
    pairwise: PairwiseAgreement
    writer_items: int
    """Items with votes whose writer label is known."""
    writer_majority_items: int
    """Those whose majority label is the writer's."""
    per_item: tuple[ItemAgreement, ...] | None

    @property
    def alpha(self) -> float | None:
        return self.estimate.alpha

    @property
    def undefined_reason(self) -> str | None:
        return self.estimate.undefined_reason

    @property
    def ci95(self) -> tuple[float, float] | None:
        return self.estimate.ci95

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: plain numbers, lists and None (never NaN); ``per_item`` only if computed."""
        data: dict[str, object] = {
            **self.estimate.to_dict(),
            "per_label": [row.to_dict() for row in self.per_label],
            "per_annotator": [row.to_dict() for row in self.per_annotator],
            "pairwise": self.pairwise.to_dict(),
            "writer": (
                {
                    "items": self.writer_items,
                    "majority_is_writer": self.writer_majority_items,
                    "share": self.writer_majority_items / self.writer_items,
                }
                if self.writer_items
                else None
            ),
        }
        if self.per_item is not None:
            data["per_item"] = [row.to_dict() for row in self.per_item]
        return data


def round_alpha(
    votes: Votes,
    *,
    level: Level = "nominal",
    values: Values | None = None,
    bootstrap: int = 1000,
    seed: int | None = 0,
) -> AlphaEstimate:
    """Krippendorff's alpha of ``(item, annotator, label)`` votes, with a 95% bootstrap interval.

    ``level`` is "nominal" (default), "ordinal", "interval" or "ratio". ``values`` is the value
    domain: for ordinal data the labels in order (needed unless the labels are numbers, which
    are then ordered by value); for interval and ratio data the labels must be numbers, or
    ``values`` maps each label to its number. When given, every vote's label must be in it.
    Any pattern of missing votes is fine; each annotator votes at most once per item.
    ``bootstrap`` replicates (0 for none) resample the items with two or more votes; ``seed``
    makes them reproducible. Degenerate data gives ``alpha=None`` and an ``undefined_reason``.

    Krippendorff's (2011) 4 observers x 12 units example ("." = no vote):

    >>> rows = {
    ...     "A": "1 2 3 3 2 1 4 1 2 . . .",
    ...     "B": "1 2 3 3 2 2 4 1 2 5 . 3",
    ...     "C": ". 3 3 3 2 3 4 2 2 5 1 .",
    ...     "D": "1 2 3 3 2 4 4 1 2 5 1 .",
    ... }
    >>> votes = [
    ...     (unit, observer, int(value))
    ...     for observer, row in rows.items()
    ...     for unit, value in enumerate(row.split())
    ...     if value != "."
    ... ]
    >>> for level in ("nominal", "ordinal", "interval", "ratio"):
    ...     print(level, round(round_alpha(votes, level=level, bootstrap=0).alpha, 3))
    nominal 0.743
    ordinal 0.815
    interval 0.849
    ratio 0.797
    >>> estimate = round_alpha(votes, seed=7)
    >>> estimate.items, estimate.pairable_values
    (11, 40)
    >>> low, high = estimate.ci95
    >>> low < estimate.alpha < high
    True
    >>> round_alpha([("u1", "A", "pos"), ("u1", "B", "pos")]).undefined_reason
    "every pairable vote carries the same label ('pos'), so there is no expected disagreement"
    """
    checked_level = check_level(level)
    fixed = check_values(checked_level, values)
    _check_bootstrap(bootstrap, seed)
    coded = encode_votes(votes, checked_level, fixed)
    n_items, n_labels = len(coded.item_ids), max(len(coded.domain.labels), 1)
    shape = _Shape(coded.votes, len(coded.annotator_ids), coded.domain)
    patterns = dense_patterns(coded.item, coded.label, n_items, n_labels) if bootstrap else None
    if patterns is None:
        tally = tally_items(coded.item, coded.label, n_items, n_labels)
        del coded  # alpha needs only the tally from here on: let the vote codes go
        patterns = pairable_patterns(tally, distinct=bootstrap > 0)
    return _estimate(shape, patterns, checked_level, bootstrap, seed)


def coded_nominal_alpha(
    item: CodeArray,
    label: CodeArray,
    *,
    items: int,
    annotators: int,
    labels: Sequence[Label],
    bootstrap: int = 1000,
    seed: int | None = 0,
) -> AlphaEstimate:
    """:func:`round_alpha` at the nominal level of votes already coded, from their per-item label
    counts, without reading the columns again: ``item[k]`` (in ``range(items)``, each item with a
    vote) and ``label[k]`` (its position in ``labels``) make vote k; the votes come from
    ``annotators`` distinct annotators, each with at most one vote per item (the caller's word: not
    checked here). The estimate is ``round_alpha``'s for the votes these codes stand for: how a
    build counts a million rows' votes without a copy of each column."""
    _check_bootstrap(bootstrap, seed)
    domain = check_values("nominal", list(labels))
    assert domain is not None
    if item.size != label.size:
        raise ValueError(f"{item.size} item codes for {label.size} label codes")
    shape = _Shape(int(item.size), annotators, domain)
    n_labels = max(len(domain.labels), 1)
    patterns = dense_patterns(item, label, items, n_labels) if bootstrap else None
    if patterns is None:
        patterns = pairable_patterns(tally_items(item, label, items, n_labels), distinct=bootstrap > 0)
    return _estimate(shape, patterns, "nominal", bootstrap, seed)


def nominal_alpha_of_codes(
    votes: VoteColumns, values: Sequence[Label], *, bootstrap: int = 1000, seed: int | None = 0
) -> AlphaEstimate:
    """``round_alpha(votes, level="nominal", values=values, ...)``, taken from the votes' codes
    where the columns keep them (:meth:`VoteColumns.from_codes`, as the round's counted votes are
    read) and every label is one of ``values``: a release's round figures count 3,000,000 votes
    without encoding their label names again (the build's peak at that step fell by 59 MB).
    Otherwise, ``round_alpha`` itself."""
    codes, names = votes.label_codes, votes.label_names
    if codes is None or not set(names) <= set(values):
        return round_alpha(votes, level="nominal", values=list(values), bootstrap=bootstrap, seed=seed)
    items = np.asarray(votes.items)
    annotators = np.asarray(votes.annotators)
    position = np.array([list(values).index(name) for name in names] or [0], dtype=np.intp)
    return coded_nominal_alpha(
        items,
        position[codes],
        items=int(items[-1]) + 1 if items.size else 0,
        annotators=int(np.count_nonzero(np.bincount(annotators))),  # codes in use, gaps or not
        labels=values,
        bootstrap=bootstrap,
        seed=seed,
    )


def agreement_report(
    votes: Votes,
    *,
    level: Level = "nominal",
    values: Values | None = None,
    bootstrap: int = 1000,
    seed: int | None = 0,
    writer_labels: WriterLabels | None = None,
    include_items: bool = False,
) -> AgreementReport:
    """Alpha with its interval (as :func:`round_alpha`) and the breakdowns of :mod:`.breakdown`.

    ``writer_labels`` maps items to the label their writer intended (None: not known); the report
    then says for how many items the majority is the writer's label (and, per item, whether it
    is). A writer label must be in ``values`` when that is given. Per-item rows can be many, so
    they are computed only with ``include_items=True``.

    >>> votes = [
    ...     ("t1", "ann", "pos"), ("t1", "bob", "pos"), ("t1", "cyd", "neg"),
    ...     ("t2", "ann", "neg"), ("t2", "bob", "neg"), ("t2", "cyd", "neg"),
    ...     ("t3", "ann", "pos"), ("t3", "bob", "neu"),
    ... ]
    >>> writers = {"t1": "pos", "t3": "neu"}
    >>> report = agreement_report(votes, bootstrap=0, writer_labels=writers, include_items=True)
    >>> round(report.alpha, 3)  # krippendorff.alpha(..., level_of_measurement="nominal") gives 0.263
    0.263
    >>> [(row.label, row.pairable_values, round(row.agreement, 3)) for row in report.per_label]
    [('pos', 3, 0.333), ('neg', 4, 0.75), ('neu', 1, 0.0)]
    >>> [(row.annotator, row.compared, row.agreement_with_others) for row in report.per_annotator]
    [('ann', 2, 0.5), ('bob', 2, 0.5), ('cyd', 2, 0.5)]
    >>> report.pairwise.to_dict()["shared_items"]
    [[3, 3, 2], [3, 3, 2], [2, 2, 2]]
    >>> [(row.item, row.majority_label, row.writer_is_majority) for row in report.per_item]
    [('t1', 'pos', True), ('t2', 'neg', None), ('t3', None, False)]
    """
    checked_level = check_level(level)
    fixed = check_values(checked_level, values)
    _check_bootstrap(bootstrap, seed)
    if writer_labels is not None and not isinstance(writer_labels, Mapping):
        raise ValueError(
            f"writer_labels must be a mapping from item to label; got {type(writer_labels).__name__}"
        )
    coded = encode_votes(votes, checked_level, fixed)
    writers = cast(Mapping[Id, Label | None] | None, writer_labels)
    if writers is not None:
        _check_writer_labels(writers, coded, restricted=fixed is not None)
    tally = tally_items(coded.item, coded.label, len(coded.item_ids), max(len(coded.domain.labels), 1))
    estimate = _estimate(
        _Shape(coded.votes, len(coded.annotator_ids), coded.domain),
        pairable_patterns(tally, distinct=bootstrap > 0),
        checked_level,
        bootstrap,
        seed,
    )
    modes = item_modes(tally)
    writer = writer_codes(coded, writers)
    writer_items, writer_majority = writer_is_majority(modes, writer)
    return AgreementReport(
        estimate=estimate,
        per_label=tuple(per_label(coded, tally)),
        per_annotator=tuple(per_annotator(coded, tally, modes)),
        pairwise=pairwise(coded, tally),
        writer_items=writer_items,
        writer_majority_items=writer_majority,
        per_item=tuple(per_item(coded, tally, modes, writers, writer)) if include_items else None,
    )


@dataclass(frozen=True)
class _Shape:
    votes: int
    annotators: int
    domain: Domain


def _estimate(
    shape: _Shape, patterns: Patterns, level: Level, bootstrap: int, seed: int | None
) -> AlphaEstimate:
    def result(
        alpha: float | None,
        reason: str | None,
        items: int = 0,
        values: int = 0,
        ci95: tuple[float, float] | None = None,
        defined: int = 0,
    ) -> AlphaEstimate:
        return AlphaEstimate(
            alpha=alpha,
            undefined_reason=reason,
            level=level,
            items=items,
            annotators=shape.annotators,
            pairable_values=values,
            votes=shape.votes,
            ci95=ci95,
            resamples=bootstrap,
            defined_resamples=defined,
            seed=seed,
        )

    if shape.votes == 0:
        return result(None, NO_VOTES)
    if patterns.count == 0:
        return result(None, NO_PAIRABLE)
    items, values = patterns.items, patterns.values
    kernel = alpha_kernel(patterns, level, shape.domain.numbers)
    if kernel.used_labels < 2:
        only = shape.domain.labels[int(patterns.entry_label[0])]
        return result(None, ONE_LABEL.format(label=only), items, values)
    point = float(alphas(kernel, patterns.frequency[None, :].astype(np.float64))[0])
    if math.isnan(point):
        return result(None, RATIO_ZERO, items, values)
    if not bootstrap:
        return result(point, None, items, values)
    replicates = bootstrap_alphas(kernel, bootstrap, seed)
    defined = int(np.isfinite(replicates).sum())
    return result(point, None, items, values, percentile_interval(replicates), defined)


def _check_bootstrap(bootstrap: object, seed: object) -> None:
    if not _is_count(bootstrap):
        raise ValueError(f"bootstrap must be a whole number of resamples, 0 or more; got {bootstrap!r}")
    if seed is not None and not _is_count(seed):
        raise ValueError(f"seed must be a non-negative integer or None; got {seed!r}")


def _is_count(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 0


def _check_writer_labels(
    writer_labels: Mapping[Id, Label | None], coded: CodedVotes, *, restricted: bool
) -> None:
    known = label_codes(coded.domain)
    for item, label in writer_labels.items():
        if label is None:
            continue
        if isinstance(label, bool) or not isinstance(label, str | numbers.Real):
            raise ValueError(f"writer label {label!r} of item {item!r} is neither a string nor a number")
        if restricted and label not in known:
            raise ValueError(f"writer label {label!r} of item {item!r} is not in values")
