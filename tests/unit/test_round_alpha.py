"""Round-level Krippendorff's alpha (nominal), checked against the krippendorff package."""

from __future__ import annotations

import math
from typing import Literal

import krippendorff
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaval.domain.agreement.nominal import nominal_alpha

LABELS = ("positive", "negative", "neutral")

# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability": 4 observers x 12 units,
# values 1-5, "." = missing. Published: nominal 0.743, ordinal 0.815, interval 0.849, ratio 0.797.
_: None = None
KRIPPENDORFF_EXAMPLE = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, _, _, _],  # observer A
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, _, 3],  # observer B
    [_, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, _],  # observer C
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, _],  # observer D
]


def reliability_matrix(rows: list[list[int | None]]) -> npt.NDArray[np.float64]:
    return np.array([[np.nan if v is None else v for v in row] for row in rows], dtype=float)


def by_item(rows: list[list[int | None]]) -> dict[str, list[str]]:
    """Observers x units -> each unit's list of vote labels (labels as strings)."""
    units = len(rows[0])
    return {f"u{u}": [str(row[u]) for row in rows if row[u] is not None] for u in range(units)}


def oracle(rows: list[list[int | None]]) -> float:
    data = reliability_matrix(rows)
    return float(krippendorff.alpha(reliability_data=data, level_of_measurement="nominal"))


def test_krippendorff_package_reproduces_the_published_example() -> None:
    data = reliability_matrix(KRIPPENDORFF_EXAMPLE)
    published: dict[Literal["nominal", "ordinal", "interval", "ratio"], float] = {
        "nominal": 0.743,
        "ordinal": 0.815,
        "interval": 0.849,
        "ratio": 0.797,
    }
    for level, value in published.items():
        assert krippendorff.alpha(reliability_data=data, level_of_measurement=level) == pytest.approx(
            value, abs=5e-4
        )


def test_published_example_nominal_alpha() -> None:
    result = nominal_alpha(by_item(KRIPPENDORFF_EXAMPLE), ["1", "2", "3", "4", "5"])
    assert result.alpha == pytest.approx(0.743, abs=5e-4)
    assert result.alpha == pytest.approx(oracle(KRIPPENDORFF_EXAMPLE), abs=1e-12)
    assert result.undefined_reason is None
    assert result.level == "nominal"
    # Unit 12 has a single value: not pairable. 11 units with 2+ values; 40 values on them.
    assert result.items == 11
    assert result.pairable_values == 40


def test_label_order_in_label_set_does_not_matter() -> None:
    votes = by_item(KRIPPENDORFF_EXAMPLE)
    a = nominal_alpha(votes, ["1", "2", "3", "4", "5"]).alpha
    b = nominal_alpha(votes, ["5", "3", "1", "4", "2", "unused"]).alpha
    assert a is not None and b is not None
    assert a == pytest.approx(b, abs=1e-12)


def test_small_sentiment_round_matches_oracle() -> None:
    votes = {
        "c1": ["positive", "positive"],
        "c2": ["positive", "negative", "positive"],
        "c3": ["negative", "negative"],
        "c4": ["neutral", "negative", "neutral"],
        "c5": ["positive"],  # not pairable
    }
    code = {label: i for i, label in enumerate(LABELS)}
    rows: list[list[int | None]] = [[None] * len(votes) for _ in range(3)]
    for u, labels in enumerate(votes.values()):
        for annotator, label in enumerate(labels):
            rows[annotator][u] = code[label]
    result = nominal_alpha(votes, LABELS)
    assert result.alpha == pytest.approx(oracle(rows), abs=1e-12)
    assert result.items == 4
    assert result.pairable_values == 10


def test_perfect_agreement_with_two_labels_is_one() -> None:
    result = nominal_alpha({"a": ["positive", "positive"], "b": ["negative", "negative"]}, LABELS)
    assert result.alpha == pytest.approx(1.0)


def test_undefined_when_no_item_has_two_votes() -> None:
    for votes in ({}, {"a": ["positive"], "b": ["negative"], "c": []}):
        result = nominal_alpha(votes, LABELS)
        assert result.alpha is None
        assert result.undefined_reason
        assert result.items == 0
        assert result.pairable_values == 0


def test_undefined_when_all_votes_carry_the_same_label() -> None:
    votes = {"a": ["positive", "positive"], "b": ["positive", "positive", "positive"], "c": ["negative"]}
    result = nominal_alpha(votes, LABELS)
    assert result.alpha is None
    assert result.undefined_reason
    assert result.items == 2
    assert result.pairable_values == 5
    assert result.to_dict()["alpha"] is None  # never NaN in what gets serialised


def test_unknown_label_raises_value_error() -> None:
    with pytest.raises(ValueError, match="sarcastic"):
        nominal_alpha({"a": ["positive", "sarcastic"]}, LABELS)


def test_to_dict() -> None:
    result = nominal_alpha({"a": ["positive", "negative"], "b": ["negative", "negative"]}, LABELS)
    data = result.to_dict()
    assert set(data) == {"alpha", "undefined_reason", "level", "items", "pairable_values"}
    assert data["level"] == "nominal"
    assert data["items"] == 2


@st.composite
def rounds(draw: st.DrawFn) -> list[list[int | None]]:
    annotators = draw(st.integers(2, 5))
    items = draw(st.integers(1, 12))
    cell = st.one_of(st.none(), st.integers(0, len(LABELS) - 1))
    return [[draw(cell) for _ in range(items)] for _ in range(annotators)]


@settings(max_examples=200, deadline=None)
@given(rows=rounds())
def test_matches_krippendorff_package_or_explains_why_undefined(rows: list[list[int | None]]) -> None:
    votes = {
        f"u{u}": [LABELS[row[u]] for row in rows if row[u] is not None]  # type: ignore[index]
        for u in range(len(rows[0]))
    }
    result = nominal_alpha(votes, LABELS)
    if result.alpha is None:
        assert result.undefined_reason
        return
    assert not math.isnan(result.alpha)
    assert result.undefined_reason is None
    assert result.alpha == pytest.approx(oracle(rows), abs=1e-9)


def test_columns_as_the_round_summary_reads_them_give_the_same_alpha() -> None:
    """The round summary reads a round's votes as integer columns (``counted_vote_codes``), with
    each item's real annotators; single votes, even with a label the round does not have, are left
    out unchecked, as :func:`nominal_alpha` leaves them."""
    from array import array

    from dynaval.domain.agreement.nominal import VoteColumns, nominal_alpha_of_columns

    rng = np.random.default_rng(4)
    names = [*LABELS, "not-a-label"]
    by_item: dict[str, list[str]] = {}
    items, annotators, codes = array("q"), array("q"), array("q")
    for item in range(300):
        count = int(rng.integers(1, 5))
        for annotator in rng.choice(9, size=count, replace=False):
            code = 3 if count == 1 and item % 3 == 0 else int(rng.integers(0, 3))
            items.append(item)
            annotators.append(int(annotator))
            codes.append(code)
            by_item.setdefault(f"c{item}", []).append(names[code])
    columns = VoteColumns.from_codes(items, annotators, codes, names)
    assert "not-a-label" in set(columns.labels)  # single votes only
    result = nominal_alpha_of_columns(columns, LABELS)
    expected = nominal_alpha(by_item, LABELS)
    assert expected.alpha is not None and 0 < expected.items < 300
    assert result.alpha == pytest.approx(expected.alpha, abs=1e-12)
    assert (result.items, result.pairable_values) == (expected.items, expected.pairable_values)
    assert expected.items == sum(1 for labels in by_item.values() if len(labels) >= 2)

    single = VoteColumns.from_codes(array("q", [0, 1]), array("q", [0, 0]), array("q", [0, 3]), names)
    assert (
        nominal_alpha_of_columns(single, LABELS).to_dict()
        == nominal_alpha({"a": ["positive"], "b": ["not-a-label"]}, LABELS).to_dict()
    )
    empty = VoteColumns.from_codes(array("q"), array("q"), array("q"), [])
    assert nominal_alpha_of_columns(empty, LABELS).alpha is None
