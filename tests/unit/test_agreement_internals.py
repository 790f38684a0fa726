"""The engine's building blocks on inputs the small random rounds do not reach."""

from __future__ import annotations

import tracemalloc
import warnings

import krippendorff
import numpy as np
import numpy.typing as npt
import pytest

from dynaval.domain.agreement import VoteColumns, agreement_report, round_alpha
from dynaval.domain.agreement.alpha import alpha_kernel
from dynaval.domain.agreement.resampling import STREAMS, bootstrap_alphas, resampled_weights
from dynaval.domain.agreement.tally import (
    _group_identical,
    _refine_groups,
    dense_patterns,
    dense_rank,
    own_label_counts,
    pairable_patterns,
    pairs_within_groups,
    stable_order,
    tally_items,
)


def canonical(groups: npt.NDArray[np.intp]) -> list[int]:
    """Group ids renumbered by first appearance, so two partitions compare equal."""
    seen: dict[int, int] = {}
    return [seen.setdefault(int(g), len(seen)) for g in groups]


def random_votes(rng: np.random.Generator, items: int, annotators: int, labels: int) -> VoteColumns:
    codes = rng.integers(0, labels, size=(annotators, items))
    # Few distinct labels per item, drawn from a wide label set, so patterns repeat.
    codes = np.where(rng.random((annotators, items)) < 0.7, codes[0], codes)
    present = rng.random((annotators, items)) < 0.8
    annotator, item = np.nonzero(present)
    return VoteColumns(item, annotator, codes[annotator, item])


def test_partition_refinement_equals_the_mixed_radix_grouping() -> None:
    rng = np.random.default_rng(4)
    columns = random_votes(rng, items=3000, annotators=6, labels=8)
    item, label = np.asarray(columns.items), np.asarray(columns.labels)
    tally = tally_items(item, label, 3000, 8)
    patterns = pairable_patterns(tally, distinct=False)
    args = (patterns.entry_pattern, patterns.entry_label, patterns.entry_count, patterns.start)
    lengths = np.diff(patterns.start)
    radix = _group_identical(*args, lengths, int(patterns.size.max()), 8)
    refined = _refine_groups(*args, lengths, int(patterns.size.max()) + 1)
    assert canonical(radix) == canonical(refined)
    assert len(set(radix.tolist())) < 3000 / 2  # patterns do repeat


def test_many_labels_use_refinement_and_still_match_the_package() -> None:
    rng = np.random.default_rng(5)
    labels = 60  # 60 * log2(9) > 62 bits: the mixed-radix code would overflow
    columns = random_votes(rng, items=400, annotators=8, labels=labels)
    data = np.full((8, 400), np.nan)
    data[np.asarray(columns.annotators), np.asarray(columns.items)] = np.asarray(columns.labels)
    for level in ("nominal", "ordinal", "interval", "ratio"):
        expected = krippendorff.alpha(reliability_data=data, level_of_measurement=level)
        estimate = round_alpha(columns, level=level, bootstrap=20)
        assert estimate.alpha == pytest.approx(expected, abs=1e-9)
        assert estimate.ci95 is not None


@pytest.mark.parametrize(
    ("items", "annotators", "labels", "seed"), [(3000, 6, 8, 1), (500, 3, 20, 2), (40, 2, 3, 3)]
)
def test_dense_patterns_equal_the_general_path(items: int, annotators: int, labels: int, seed: int) -> None:
    columns = random_votes(np.random.default_rng(seed), items=items, annotators=annotators, labels=labels)
    item, label = np.asarray(columns.items), np.asarray(columns.labels)
    # Items with one vote (or none) are left out of both.
    assert np.any(np.bincount(item, minlength=items) < 2)
    shortcut = dense_patterns(item, label, items, labels)
    general = pairable_patterns(tally_items(item, label, items, labels), distinct=True)
    assert shortcut is not None
    for field in ("frequency", "size", "start", "entry_pattern", "entry_label", "entry_count"):
        assert np.array_equal(getattr(shortcut, field), getattr(general, field)), field
    assert shortcut.n_labels == general.n_labels


def test_dense_patterns_decline_where_the_shortcut_does_not_apply() -> None:
    one_vote_each = np.arange(5)
    assert dense_patterns(one_vote_each, np.zeros(5, dtype=np.intp), 5, 2) is None
    assert dense_patterns(np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp), 0, 1) is None
    wide = np.repeat(np.arange(10), 2)
    assert dense_patterns(wide, np.arange(20) * 10_000, 10, 200_000) is None  # key space far above votes
    many = np.repeat(np.arange(3), 9)  # 60 labels, 9 votes: the mixed-radix code would overflow
    assert dense_patterns(many, np.arange(27) % 60, 3, 60) is None


def test_sparse_tally_equals_dense_tally() -> None:
    rng = np.random.default_rng(6)
    item = rng.integers(0, 50, size=200)
    label = rng.integers(0, 7, size=200)
    dense = tally_items(item, label, 50, 7)
    sparse = tally_items(item, label * 10_000, 50, 70_000)  # key space far above 8 x votes
    assert np.array_equal(dense.entry_item, sparse.entry_item)
    assert np.array_equal(dense.entry_label * 10_000, sparse.entry_label)
    assert np.array_equal(dense.entry_count, sparse.entry_count)
    own = own_label_counts(dense, item, label)
    assert np.array_equal(own, own_label_counts(sparse, item, label * 10_000))
    assert np.array_equal(
        own, [np.sum((item == i) & (label == lab)) for i, lab in zip(item, label, strict=True)]
    )
    assert np.array_equal(dense.item_start, sparse.item_start)


def test_duplicate_vote_found_without_a_dense_tally() -> None:
    items = np.arange(2000) % 1000
    annotators = np.arange(2000) * 1000  # 1000 items x 2000 annotators >> 8 x votes
    annotators[-1] = annotators[999 - 0]  # vote 1999 (item 999) repeats vote 999's annotator
    with pytest.raises(ValueError, match="voted more than once on item 999"):
        round_alpha(VoteColumns(items, annotators, np.zeros(2000, dtype=int)))


@pytest.mark.parametrize("n_keys", [1, 7, 65_536, 65_537, 2**40])
def test_stable_order_is_a_stable_argsort(n_keys: int) -> None:
    keys = np.random.default_rng(n_keys).integers(0, n_keys, size=5000).astype(np.intp)
    assert np.array_equal(stable_order(keys, n_keys), np.argsort(keys, kind="stable"))


@pytest.mark.parametrize("span", [10, 10**15])
def test_dense_rank_equals_unique_inverse(span: int) -> None:
    keys = np.random.default_rng(1).integers(0, span, size=1000)
    assert np.array_equal(dense_rank(keys), np.unique(keys, return_inverse=True)[1])


def test_pairs_in_chunks_are_all_the_pairs() -> None:
    start = np.array([0, 3, 3, 4, 9, 11], dtype=np.intp)
    everything = [
        (i, j) for g in range(5) for i in range(start[g], start[g + 1]) for j in range(start[g], start[g + 1])
    ]
    for max_pairs in (1, 5, 26, 1000):
        chunked = [
            (int(i), int(j))
            for first, second in pairs_within_groups(start, max_pairs)
            for i, j in zip(first, second, strict=True)
        ]
        assert chunked == everything


def test_resampled_pattern_counts_follow_the_multinomial() -> None:
    # Common patterns (>= 16 items) are multinomial cells; rare ones are drawn item by item.
    frequency = np.array([400, 3, 1, 1, 60, 35, 2, 31, 1, 1], dtype=np.intp)
    n = int(frequency.sum())
    draws = np.concatenate(list(resampled_weights(frequency, 20_000, seed=9)))
    assert draws.shape == (20_000, frequency.size)
    assert np.all(draws.sum(axis=1) == n)
    p = frequency / n
    mean_error = (draws.mean(axis=0) - n * p) / np.sqrt(n * p * (1 - p) / 20_000)
    assert np.all(np.abs(mean_error) < 5)
    expected_cov = n * (np.diag(p) - np.outer(p, p))
    assert np.allclose(np.cov(draws, rowvar=False), expected_cov, atol=0.05 * n * p.max())


def test_resampling_is_reproducible_by_seed() -> None:
    frequency = np.array([50, 3, 1, 40], dtype=np.intp)
    first = np.concatenate(list(resampled_weights(frequency, 300, seed=1)))
    again = np.concatenate(list(resampled_weights(frequency, 300, seed=1)))
    other = np.concatenate(list(resampled_weights(frequency, 300, seed=2)))
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other)


def test_streams_side_by_side_draw_the_same_replicates_as_one_after_the_other() -> None:
    # The seed fixes the replicates whatever the machine's cores: the streams are fixed in number.
    rng = np.random.default_rng(8)
    columns = random_votes(rng, items=4000, annotators=5, labels=12)
    item, label = np.asarray(columns.items), np.asarray(columns.labels)
    patterns = pairable_patterns(tally_items(item, label, 4000, 12), distinct=True)
    kernel = alpha_kernel(patterns, "nominal", None)
    threaded = bootstrap_alphas(kernel, 301, seed=5, side_by_side=True)
    in_turn = bootstrap_alphas(kernel, 301, seed=5, side_by_side=False)
    assert STREAMS > 1 and threaded.shape == (301,)
    assert np.array_equal(threaded, in_turn)
    assert np.isfinite(threaded).all() and np.unique(threaded).size > 250
    assert not np.array_equal(threaded, bootstrap_alphas(kernel, 301, seed=6, side_by_side=True))


def test_a_large_label_domain_costs_no_labels_squared_memory() -> None:
    # 5,000 labels: the package's items x labels x labels coincidences would need 10^12 cells.
    rng = np.random.default_rng(2)
    columns = random_votes(rng, items=5000, annotators=3, labels=5000)
    tracemalloc.start()
    for level in ("nominal", "ordinal", "interval"):
        result = agreement_report(columns, level=level, values=list(range(5000)), bootstrap=200)
        assert result.alpha is not None and result.ci95 is not None
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 * 2**20


def test_ratio_with_many_labels_matches_the_package() -> None:
    rng = np.random.default_rng(3)
    columns = random_votes(rng, items=200, annotators=4, labels=150)
    data = np.full((4, 200), np.nan)
    data[np.asarray(columns.annotators), np.asarray(columns.items)] = np.asarray(columns.labels) + 1.0
    shifted = VoteColumns(columns.items, columns.annotators, np.asarray(columns.labels) + 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = krippendorff.alpha(reliability_data=data, level_of_measurement="ratio")
    assert round_alpha(shifted, level="ratio", bootstrap=0).alpha == pytest.approx(expected, abs=1e-9)


def test_bootstrap_gives_the_blas_threads_back() -> None:
    from threadpoolctl import threadpool_info

    before = [(lib["filepath"], lib["num_threads"]) for lib in threadpool_info() if lib["user_api"] == "blas"]
    columns = random_votes(np.random.default_rng(8), items=2000, annotators=5, labels=20)
    assert round_alpha(columns, bootstrap=50, seed=1).ci95 is not None
    after = [(lib["filepath"], lib["num_threads"]) for lib in threadpool_info() if lib["user_api"] == "blas"]
    assert before and after == before
