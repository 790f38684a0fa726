"""Alpha from votes already coded (a build's integer columns) is round_alpha's of the votes they
stand for: the same estimate, interval and counts, without the columns read again."""

from __future__ import annotations

from array import array

import numpy as np
import pytest

from dynaval.domain.agreement.encoding import VoteColumns
from dynaval.domain.agreement.report import coded_nominal_alpha, nominal_alpha_of_codes, round_alpha

LABELS = ["positive", "negative", "neutral", "mixed"]


def _votes(seed: int, items: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Items 0.. in order, each with 1 to 4 votes by distinct annotators (some single: not pairable)."""
    rng = np.random.default_rng(seed)
    item, annotator, label = [], [], []
    for i in range(items):
        truth = int(rng.integers(len(LABELS)))
        for who in rng.choice(12, size=int(rng.integers(1, 5)), replace=False):
            item.append(i)
            annotator.append(int(who))
            label.append(truth if rng.random() < 0.7 else int(rng.integers(len(LABELS))))
    return np.array(item, dtype=np.intp), np.array(annotator), np.array(label, dtype=np.intp)


@pytest.mark.parametrize(("seed", "bootstrap"), [(1, 1000), (2, 200), (3, 0)])
def test_the_coded_estimate_is_round_alphas(seed: int, bootstrap: int) -> None:
    item, annotator, label = _votes(seed, 300)
    names = np.array(LABELS, dtype=object)
    expected = round_alpha(
        [(f"item-{i}", f"annotator-{a}", names[v]) for i, a, v in zip(item, annotator, label, strict=True)],
        level="nominal",
        values=LABELS,
        bootstrap=bootstrap,
        seed=5,
    )
    # A release's tally hands over C-int columns as they are (no wider copy): the same estimate.
    for width in (np.intp, np.intc):
        coded = coded_nominal_alpha(
            item.astype(width),
            label.astype(width),
            items=300,
            annotators=len(set(annotator.tolist())),
            labels=LABELS,
            bootstrap=bootstrap,
            seed=5,
        )
        assert coded.to_dict() == expected.to_dict(), width
    assert expected.alpha is not None


def test_no_votes_and_one_label_are_undefined_as_round_alpha_says() -> None:
    none = np.zeros(0, dtype=np.intp)
    assert (
        coded_nominal_alpha(none, none, items=0, annotators=0, labels=LABELS).to_dict()
        == round_alpha([], level="nominal", values=LABELS).to_dict()
    )
    same = np.zeros(4, dtype=np.intp)
    votes = [("a", "x", "positive"), ("a", "y", "positive"), ("b", "x", "positive"), ("b", "y", "positive")]
    coded = coded_nominal_alpha(np.array([0, 0, 1, 1]), same, items=2, annotators=2, labels=LABELS)
    assert coded.to_dict() == round_alpha(votes, level="nominal", values=LABELS).to_dict()
    assert coded.undefined_reason is not None


def test_columns_of_two_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="3 item codes for 2 label codes"):
        coded_nominal_alpha(
            np.zeros(3, dtype=np.intp), np.zeros(2, dtype=np.intp), items=1, annotators=3, labels=LABELS
        )


def _columns(seed: int, items: int, names: list[str]) -> tuple[VoteColumns, list[tuple[str, str, str]]]:
    """Votes as the round's counted votes are read (codes, labels numbered by first appearance in
    ``names``' order of first use), and the same votes as tuples."""
    item, annotator, label = _votes(seed, items)
    items_codes, annotator_codes, label_codes = array("q"), array("q"), array("q")
    first: dict[int, int] = {}
    by_name: dict[str, int] = {}
    tuples = []
    for i, a, v in zip(item.tolist(), annotator.tolist(), label.tolist(), strict=True):
        name = names[v]
        items_codes.append(i)
        annotator_codes.append(first.setdefault(a, len(first)))
        label_codes.append(by_name.setdefault(name, len(by_name)))
        tuples.append((f"item-{i:04d}", f"annotator-{a}", name))
    return VoteColumns.from_codes(items_codes, annotator_codes, label_codes, by_name), tuples


@pytest.mark.parametrize(("seed", "bootstrap"), [(6, 1000), (7, 0)])
def test_alpha_of_the_round_counted_votes_codes_is_round_alphas(seed: int, bootstrap: int) -> None:
    """A release's round figures take alpha from the codes the database query keeps (the label
    names in the order they first came, not the task's): the same estimate as from the tuples."""
    columns, tuples = _columns(seed, 400, list(reversed(LABELS)))
    assert columns.label_codes is not None and list(columns.label_names) != LABELS
    expected = round_alpha(tuples, level="nominal", values=LABELS, bootstrap=bootstrap, seed=9)
    assert (
        nominal_alpha_of_codes(columns, LABELS, bootstrap=bootstrap, seed=9).to_dict() == expected.to_dict()
    )
    # Annotator codes with gaps (not numbered as they first come) count the annotators in use.
    sparse = VoteColumns.from_codes(
        array("q", np.asarray(columns.items).tolist()),
        array("q", (3 * np.asarray(columns.annotators)).tolist()),
        array("q", np.asarray(columns.label_codes).tolist()),
        columns.label_names,
    )
    assert nominal_alpha_of_codes(sparse, LABELS, bootstrap=bootstrap, seed=9).to_dict() == expected.to_dict()
    # Columns without codes, and a label outside the values, go to round_alpha itself.
    plain = VoteColumns(items=columns.items, annotators=columns.annotators, labels=columns.labels)
    assert nominal_alpha_of_codes(plain, LABELS, bootstrap=bootstrap, seed=9).to_dict() == expected.to_dict()
    with pytest.raises(ValueError) as from_round_alpha:
        round_alpha(tuples, level="nominal", values=LABELS[:3], bootstrap=bootstrap, seed=9)
    with pytest.raises(ValueError) as from_codes:
        nominal_alpha_of_codes(columns, LABELS[:3], bootstrap=bootstrap, seed=9)
    assert str(from_codes.value) == str(from_round_alpha.value)
    empty = VoteColumns.from_codes(array("q"), array("q"), array("q"), [])
    assert nominal_alpha_of_codes(empty, LABELS).to_dict() == round_alpha([], values=LABELS).to_dict()
