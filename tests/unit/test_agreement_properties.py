"""Property tests: the engine equals the ``krippendorff`` package, and naive references, on random votes."""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass

import krippendorff
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaval.domain.agreement import LEVELS, Level, VoteColumns, agreement_report, round_alpha
from dynaval.domain.agreement.alpha import alpha_kernel, alphas
from dynaval.domain.agreement.encoding import check_values, encode_votes
from dynaval.domain.agreement.resampling import resampled_weights
from dynaval.domain.agreement.tally import pairable_patterns, tally_items

MAX_EXAMPLES = 150


@dataclass(frozen=True)
class Round:
    """A random round: ``codes[a, u]`` is annotator a's label index on item u, -1 for no vote."""

    codes: npt.NDArray[np.int64]
    domain: npt.NDArray[np.float64]
    """The number of each label index (distinct; for ordinal data, the order is the index order)."""

    def reliability_data(self) -> npt.NDArray[np.float64]:
        return np.where(self.codes >= 0, self.domain[np.maximum(self.codes, 0)], np.nan)

    def triples(self, *, words: bool) -> list[tuple[str, str, str | float]]:
        annotators, items = np.nonzero(self.codes >= 0)
        return [
            (f"u{u}", f"a{a}", self.word(self.codes[a, u]) if words else float(self.domain[self.codes[a, u]]))
            for a, u in zip(annotators.tolist(), items.tolist(), strict=True)
        ]

    def columns(self) -> VoteColumns:
        annotators, items = np.nonzero(self.codes.T >= 0)[::-1]
        return VoteColumns(items, annotators, self.domain[self.codes[annotators, items]])

    def word(self, code: int) -> str:
        return f"label {code}"


@st.composite
def rounds(draw: st.DrawFn) -> Round:
    annotators = draw(st.integers(2, 8))
    items = draw(st.integers(1, 60))
    n_labels = draw(st.integers(2, 12))
    missing = draw(st.sampled_from([0.0, 0.1, 0.3, 0.6, 0.9]))
    agreement = draw(st.sampled_from([0.0, 0.5, 0.9, 1.0]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    skew = rng.dirichlet(np.full(n_labels, draw(st.sampled_from([0.2, 1.0, 5.0]))))
    truth = rng.choice(n_labels, size=items, p=skew)
    noise = rng.choice(n_labels, size=(annotators, items), p=skew)
    codes = np.where(rng.random((annotators, items)) < agreement, truth, noise)
    codes[rng.random((annotators, items)) < missing] = -1
    numbers = draw(st.sampled_from(["small", "negative", "float"]))
    if numbers == "small":
        domain = rng.permutation(np.arange(1, 40))[:n_labels].astype(float)
    elif numbers == "negative":
        domain = rng.permutation(np.arange(-15, 25))[:n_labels].astype(float)
    else:
        domain = np.round(rng.normal(0, 50, size=n_labels), 3)
        domain = np.unique(domain) if np.unique(domain).size == n_labels else np.arange(n_labels) + 0.5
        domain = rng.permutation(domain)
    return Round(codes.astype(np.int64), domain)


def package(round_: Round, level: Level) -> float | None:
    """The package's alpha, None where it raises or returns NaN."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            value = float(
                krippendorff.alpha(
                    reliability_data=round_.reliability_data(),
                    value_domain=round_.domain,
                    level_of_measurement=level,
                )
            )
        except ValueError:
            return None
    return None if np.isnan(value) else value


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(round_=rounds(), level=st.sampled_from(LEVELS), as_columns=st.booleans())
def test_alpha_equals_the_krippendorff_package_or_says_why_not(
    round_: Round, level: Level, as_columns: bool
) -> None:
    expected = package(round_, level)
    if level in ("nominal", "ordinal") and not as_columns:
        # Our labels are words; ordinal order is the order of the package's value_domain.
        words = [round_.word(code) for code in range(round_.domain.size)]
        result = round_alpha(round_.triples(words=True), level=level, values=words, bootstrap=0)
    else:
        votes = round_.columns() if as_columns else round_.triples(words=False)
        result = round_alpha(votes, level=level, values=round_.domain.tolist(), bootstrap=0)
    if expected is None:
        assert result.alpha is None
        assert result.undefined_reason
        return
    assert result.undefined_reason is None
    assert result.alpha == pytest.approx(expected, abs=1e-9)


@settings(max_examples=MAX_EXAMPLES // 3, deadline=None)
@given(round_=rounds(), level=st.sampled_from(LEVELS), seed=st.integers(0, 2**16))
def test_every_bootstrap_replicate_equals_the_package_on_the_resampled_items(
    round_: Round, level: Level, seed: int
) -> None:
    coded = encode_votes(round_.triples(words=False), level, check_values(level, round_.domain.tolist()))
    tally = tally_items(coded.item, coded.label, len(coded.item_ids), len(coded.domain.labels))
    patterns = pairable_patterns(tally)
    if patterns.count == 0:
        return
    kernel = alpha_kernel(patterns, level, coded.domain.numbers)
    weights = next(resampled_weights(patterns.frequency, 4, seed))
    ours = alphas(kernel, weights)
    counts = np.zeros((patterns.count, len(coded.domain.labels)), dtype=np.int64)
    counts[patterns.entry_pattern, patterns.entry_label] = patterns.entry_count
    for row, value in zip(weights, ours, strict=True):
        assert row.sum() == patterns.items
        value_counts = np.repeat(counts, row.astype(np.int64), axis=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            try:
                expected = float(
                    krippendorff.alpha(
                        value_counts=value_counts, value_domain=round_.domain, level_of_measurement=level
                    )
                )
            except ValueError:
                expected = float("nan")
        if np.isnan(expected):
            assert np.isnan(value)
        else:
            assert value == pytest.approx(expected, abs=1e-9)


@settings(max_examples=MAX_EXAMPLES // 3, deadline=None)
@given(round_=rounds(), level=st.sampled_from(LEVELS))
def test_merging_patterns_and_dense_or_sparse_marginals_do_not_change_alpha(
    round_: Round, level: Level
) -> None:
    coded = encode_votes(round_.columns(), level, check_values(level, round_.domain.tolist()))
    tally = tally_items(coded.item, coded.label, len(coded.item_ids), len(coded.domain.labels))
    results = []
    for distinct in (True, False):
        patterns = pairable_patterns(tally, distinct=distinct)
        if patterns.count == 0:
            return
        for dense in (True, False):
            kernel = alpha_kernel(patterns, level, coded.domain.numbers, dense=dense)
            results.append(alphas(kernel, patterns.frequency[None, :].astype(float))[0])
    assert np.allclose(results, results[0], rtol=0, atol=1e-12, equal_nan=True)


@settings(max_examples=MAX_EXAMPLES // 2, deadline=None)
@given(round_=rounds())
def test_breakdowns_equal_naive_references(round_: Round) -> None:
    votes = round_.triples(words=True)
    writers = {f"u{u}": round_.word(u % round_.domain.size) for u in range(0, round_.codes.shape[1], 2)}
    result = agreement_report(votes, bootstrap=0, writer_labels=writers, include_items=True)
    by_item: dict[str, dict[str, str]] = {}
    for item, annotator, label in votes:
        by_item.setdefault(item, {})[annotator] = str(label)

    def majority(labels: list[str]) -> str | None:
        ranked = Counter(labels).most_common()
        if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
            return None
        return ranked[0][0]

    assert result.per_item is not None
    for row in result.per_item:
        labels = list(by_item[str(row.item)].values())
        assert row.votes == len(labels)
        assert row.majority_label == majority(labels)
        assert row.majority_share == pytest.approx(Counter(labels).most_common(1)[0][1] / len(labels))
        expected_writer = None if row.item not in writers else majority(labels) == writers[str(row.item)]
        assert row.writer_is_majority == expected_writer

    for summary in result.per_annotator:
        compared = agreed = 0
        for ballots in by_item.values():
            if summary.annotator not in ballots:
                continue
            others = majority([label for who, label in ballots.items() if who != summary.annotator])
            if others is not None:
                compared += 1
                agreed += others == ballots[str(summary.annotator)]
        assert summary.votes == sum(summary.annotator in ballots for ballots in by_item.values())
        assert summary.compared == compared
        assert summary.agreement_with_others == (agreed / compared if compared else None)

    pairwise = result.pairwise
    names = list(pairwise.annotators)
    for i, first in enumerate(names):
        for j, second in enumerate(names):
            shared = [b for b in by_item.values() if first in b and second in b]
            assert pairwise.shared_items[i, j] == len(shared)
            assert pairwise.agreeing_items[i, j] == sum(b[str(first)] == b[str(second)] for b in shared)

    data = round_.reliability_data()
    for label_row in result.per_label:
        code = int(str(label_row.label).split()[-1])
        binary = np.where(np.isnan(data), np.nan, (data == round_.domain[code]).astype(float))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            try:
                expected = float(krippendorff.alpha(reliability_data=binary, level_of_measurement="nominal"))
            except ValueError:
                expected = float("nan")
        if label_row.alpha is None:
            assert np.isnan(expected) or label_row.pairable_values in (0, result.estimate.pairable_values)
        else:
            assert label_row.alpha == pytest.approx(expected, abs=1e-9)


@settings(max_examples=MAX_EXAMPLES // 3, deadline=None)
@given(round_=rounds(), level=st.sampled_from(LEVELS))
def test_columns_and_triples_agree_with_the_same_bootstrap(round_: Round, level: Level) -> None:
    values = round_.domain.tolist()
    from_triples = round_alpha(round_.triples(words=False), level=level, values=values, bootstrap=50, seed=5)
    from_columns = round_alpha(round_.columns(), level=level, values=values, bootstrap=50, seed=5)
    assert from_triples.undefined_reason == from_columns.undefined_reason
    if from_triples.alpha is None:
        assert from_columns.alpha is None and from_columns.ci95 is None
        return
    assert from_columns.alpha == pytest.approx(from_triples.alpha, abs=1e-12)
    assert from_triples.ci95 is not None
    assert from_columns.ci95 == pytest.approx(from_triples.ci95, abs=1e-12)
    assert from_columns.defined_resamples == from_triples.defined_resamples
