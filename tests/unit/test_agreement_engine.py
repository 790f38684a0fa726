"""The agreement engine: published values, the report's shape, degenerate data and bad input."""

from __future__ import annotations

import json
import math
import warnings

import krippendorff
import numpy as np
import numpy.typing as npt
import pytest

from dynaval.domain.agreement import (
    LEVELS,
    Level,
    VoteColumns,
    agreement_report,
    report,
    round_alpha,
)

# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability": 4 observers x 12 units.
EXAMPLE = {
    "A": "1 2 3 3 2 1 4 1 2 . . .",
    "B": "1 2 3 3 2 2 4 1 2 5 . 3",
    "C": ". 3 3 3 2 3 4 2 2 5 1 .",
    "D": "1 2 3 3 2 4 4 1 2 5 1 .",
}
PUBLISHED: dict[Level, float] = {"nominal": 0.743, "ordinal": 0.815, "interval": 0.849, "ratio": 0.797}
WORDS = {1: "very low", 2: "low", 3: "mid", 4: "high", 5: "very high"}


def example_votes() -> list[tuple[str, str, int]]:
    return [
        (f"u{unit + 1}", observer, int(value))
        for observer, row in EXAMPLE.items()
        for unit, value in enumerate(row.split())
        if value != "."
    ]


def example_matrix() -> npt.NDArray[np.float64]:
    return np.array(
        [[np.nan if v == "." else float(v) for v in row.split()] for row in EXAMPLE.values()], dtype=float
    )


def package_alpha(level: Level) -> float:
    return float(krippendorff.alpha(reliability_data=example_matrix(), level_of_measurement=level))


def json_round_trip(data: dict[str, object]) -> object:
    return json.loads(json.dumps(data, allow_nan=False))


# --- published values ------------------------------------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
def test_reproduces_krippendorffs_published_example(level: Level) -> None:
    estimate = round_alpha(example_votes(), level=level, bootstrap=0)
    assert estimate.alpha == pytest.approx(PUBLISHED[level], abs=5e-4)
    assert estimate.alpha == pytest.approx(package_alpha(level), abs=1e-12)
    assert (estimate.items, estimate.pairable_values, estimate.annotators, estimate.votes) == (11, 40, 4, 41)
    assert estimate.undefined_reason is None


def test_ordinal_labels_in_the_given_order_match_numbers() -> None:
    words = [(item, observer, WORDS[value]) for item, observer, value in example_votes()]
    estimate = round_alpha(words, level="ordinal", values=list(WORDS.values()), bootstrap=0)
    assert estimate.alpha == pytest.approx(package_alpha("ordinal"), abs=1e-12)


def test_interval_labels_mapped_to_numbers() -> None:
    words = [(item, observer, WORDS[value]) for item, observer, value in example_votes()]
    scale = {word: float(number) for number, word in WORDS.items()}
    for level in ("interval", "ratio"):
        estimate = round_alpha(words, level=level, values=scale, bootstrap=0)
        assert estimate.alpha == pytest.approx(package_alpha(level), abs=1e-12)


def test_ordinal_mapping_orders_labels_by_their_numbers() -> None:
    words = [(item, observer, WORDS[value]) for item, observer, value in example_votes()]
    shuffled = {"mid": 3, "very low": 1, "very high": 5, "low": 2, "high": 4}
    estimate = round_alpha(words, level="ordinal", values=shuffled, bootstrap=0)
    assert estimate.alpha == pytest.approx(package_alpha("ordinal"), abs=1e-12)


def test_unused_labels_in_values_change_nothing() -> None:
    for level in LEVELS:
        estimate = round_alpha(example_votes(), level=level, values=[0, 1, 2, 3, 4, 5, 9], bootstrap=0)
        assert estimate.alpha == pytest.approx(package_alpha(level), abs=1e-12)


# --- the report -------------------------------------------------------------------------------


def test_report_to_dict_is_plain_json_with_the_promised_keys() -> None:
    result = agreement_report(example_votes(), bootstrap=200, seed=3)
    data = result.to_dict()
    assert json_round_trip(data) == data
    assert {
        "alpha",
        "undefined_reason",
        "level",
        "items",
        "annotators",
        "pairable_values",
        "ci95",
        "per_label",
        "per_annotator",
        "pairwise",
    } <= set(data)
    assert "per_item" not in data
    assert data["level"] == "nominal"
    assert data["bootstrap"] == {"resamples": 200, "defined": 200, "seed": 3}
    annotators = data["per_annotator"]
    assert isinstance(annotators, list)
    assert [row["annotator"] for row in annotators] == ["A", "B", "C", "D"]
    assert all({"votes", "agreement_with_others"} <= set(row) for row in annotators)
    pairwise = data["pairwise"]
    assert isinstance(pairwise, dict)
    assert set(pairwise) == {"annotators", "agreement", "shared_items"}


def test_per_item_rows_only_when_asked() -> None:
    data = agreement_report(example_votes(), bootstrap=0, include_items=True).to_dict()
    rows = data["per_item"]
    assert isinstance(rows, list) and len(rows) == 12
    assert rows[0] == {
        "item": "u1",
        "votes": 3,
        "majority_label": 1,
        "majority_share": 1.0,
        "writer_label": None,
        "writer_is_majority": None,
    }


def test_confidence_interval_is_reproducible_and_brackets_alpha() -> None:
    first = round_alpha(example_votes(), level="interval", bootstrap=500, seed=11)
    again = round_alpha(example_votes(), level="interval", bootstrap=500, seed=11)
    other = round_alpha(example_votes(), level="interval", bootstrap=500, seed=12)
    assert first.ci95 == again.ci95
    assert first.ci95 != other.ci95
    assert first.ci95 is not None and first.alpha is not None
    assert first.ci95[0] < first.alpha < first.ci95[1]
    assert first.resamples == 500


def test_no_interval_without_resamples() -> None:
    estimate = round_alpha(example_votes(), bootstrap=0)
    assert estimate.ci95 is None
    assert estimate.to_dict()["bootstrap"] is None


def test_replicates_using_one_label_are_left_out_of_the_interval() -> None:
    # Two items: resampling both copies of one gives a single-label replicate (no alpha).
    votes = [("a", "x", "pos"), ("a", "y", "pos"), ("b", "x", "neg"), ("b", "y", "neg")]
    estimate = round_alpha(votes, bootstrap=400, seed=1)
    assert estimate.alpha == 1.0
    assert 0 < estimate.defined_resamples < 400
    assert estimate.ci95 == (1.0, 1.0)


# --- per label, annotator, item ---------------------------------------------------------------


def test_per_label_alpha_is_the_binary_label_versus_rest_alpha() -> None:
    data = example_matrix()
    result = agreement_report(example_votes(), bootstrap=0)
    assert [row.label for row in result.per_label] == [1, 2, 3, 4, 5]
    for row in result.per_label:
        binary = np.where(np.isnan(data), np.nan, (data == row.label).astype(float))
        expected = krippendorff.alpha(reliability_data=binary, level_of_measurement="nominal")
        assert row.alpha == pytest.approx(expected, abs=1e-12)


def test_per_label_agreement_is_the_share_of_pairable_values_paired_alike() -> None:
    votes = [
        ("a", "x", "p"),
        ("a", "y", "p"),
        ("a", "z", "n"),
        ("b", "x", "n"),
        ("b", "y", "n"),
        ("c", "x", "p"),
    ]
    rows = {row.label: row for row in agreement_report(votes, bootstrap=0).per_label}
    # Item a: p pairs with p once out of its two pairings (1/2 each); b: n with n.
    assert rows["p"].votes == 3 and rows["p"].pairable_values == 2
    assert rows["p"].agreement == pytest.approx(0.5)
    assert rows["n"].pairable_values == 3
    assert rows["n"].agreement == pytest.approx(2 / 3)


def test_label_never_paired_has_no_agreement() -> None:
    votes = [("a", "x", "p"), ("a", "y", "p"), ("b", "x", "n"), ("b", "y", "p"), ("c", "x", "q")]
    rows = {row.label: row for row in agreement_report(votes, bootstrap=0).per_label}
    assert rows["q"].votes == 1 and rows["q"].pairable_values == 0
    assert rows["q"].agreement is None and rows["q"].alpha is None


def test_agreement_with_the_others_majority() -> None:
    votes = [
        ("i1", "ann", "pos"), ("i1", "bob", "pos"), ("i1", "cyd", "neg"),  # ann, bob: tie among others
        ("i2", "ann", "pos"), ("i2", "bob", "pos"), ("i2", "cyd", "pos"),
        ("i3", "ann", "neg"), ("i3", "bob", "pos"), ("i3", "cyd", "pos"), ("i3", "dee", "pos"),
        ("i4", "ann", "pos"),  # alone: nobody to compare with
    ]  # fmt: skip
    rows = {row.annotator: row for row in agreement_report(votes, bootstrap=0).per_annotator}
    assert (rows["ann"].votes, rows["ann"].compared, rows["ann"].agreement_with_others) == (4, 2, 0.5)
    assert (rows["bob"].compared, rows["bob"].agreement_with_others) == (2, 1.0)
    assert (rows["cyd"].compared, rows["cyd"].agreement_with_others) == (3, 2 / 3)
    assert (rows["dee"].compared, rows["dee"].agreement_with_others) == (1, 1.0)


def test_annotator_never_compared_has_no_agreement() -> None:
    votes = [("i1", "ann", "pos"), ("i1", "bob", "neg"), ("i1", "cyd", "neu")]
    rows = agreement_report(votes, bootstrap=0).per_annotator
    assert [(row.compared, row.agreement_with_others) for row in rows] == [(0, None)] * 3


def test_pairwise_agreement_on_shared_items() -> None:
    votes = [
        ("i1", "ann", "pos"), ("i1", "bob", "pos"),
        ("i2", "ann", "neg"), ("i2", "bob", "pos"), ("i2", "cyd", "neg"),
        ("i3", "cyd", "pos"),
        ("i4", "dee", "pos"),
    ]  # fmt: skip
    data = agreement_report(votes, bootstrap=0).pairwise.to_dict()
    assert data["annotators"] == ["ann", "bob", "cyd", "dee"]
    assert data["shared_items"] == [[2, 2, 1, 0], [2, 2, 1, 0], [1, 1, 2, 0], [0, 0, 0, 1]]
    assert data["agreement"] == [
        [1.0, 0.5, 1.0, None],
        [0.5, 1.0, 0.0, None],
        [1.0, 0.0, 1.0, None],
        [None, None, None, 1.0],
    ]


def test_per_item_majority_tie_and_writer() -> None:
    votes = [
        ("i1", "a", "pos"), ("i1", "b", "pos"), ("i1", "c", "neg"),
        ("i2", "a", "pos"), ("i2", "b", "neg"),
        ("i3", "a", "neu"),
    ]  # fmt: skip
    writers = {"i1": "pos", "i2": "pos", "i3": "pos", "never voted on": "neg"}
    result = agreement_report(votes, bootstrap=0, writer_labels=writers, include_items=True)
    assert result.per_item is not None
    rows = [
        (r.item, r.votes, r.majority_label, r.majority_share, r.writer_is_majority) for r in result.per_item
    ]
    assert rows == [("i1", 3, "pos", 2 / 3, True), ("i2", 2, None, 0.5, False), ("i3", 1, "neu", 1.0, False)]
    assert result.to_dict()["writer"] == {"items": 3, "majority_is_writer": 1, "share": 1 / 3}


def test_writer_label_unknown_to_the_votes_is_never_the_majority() -> None:
    votes = [("i1", "a", "pos"), ("i1", "b", "pos")]
    result = agreement_report(votes, bootstrap=0, writer_labels={"i1": "sarcastic"}, include_items=True)
    assert result.per_item is not None and result.per_item[0].writer_is_majority is False


# --- inputs -----------------------------------------------------------------------------------


def test_columns_and_triples_give_the_same_report() -> None:
    votes = example_votes()
    items, annotators, labels = (list(column) for column in zip(*votes, strict=True))
    from_triples = agreement_report(votes, level="ordinal", bootstrap=300).to_dict()
    for columns in (
        VoteColumns(items, annotators, labels),
        VoteColumns(np.array(items), np.array(annotators), np.array(labels)),
        VoteColumns(np.array(items, dtype=object), np.array(annotators, dtype=object), np.array(labels)),
    ):
        from_columns = agreement_report(columns, level="ordinal", bootstrap=300).to_dict()
        assert from_columns == from_triples


def test_integer_id_columns_are_encoded_by_counting() -> None:
    items = np.array([10**12, 10**12, 5, 5, 7])  # sparse ids: sorted, not counted
    result = round_alpha(VoteColumns(items, np.array([1, 2, 1, 2, 1]), np.array([0.5, 0.5, 1.5, 2.5, 1.5])))
    expected = krippendorff.alpha(value_counts=[[2, 0, 0], [0, 1, 1]], level_of_measurement="nominal")
    assert result.alpha == pytest.approx(expected)


def test_mixed_label_types_are_distinct_nominal_labels() -> None:
    votes: list[tuple[str, str, str | int]] = [
        ("a", "x", 1), ("a", "y", "1"), ("b", "x", 1), ("b", "y", 1), ("c", "x", "1"), ("c", "y", "1")
    ]  # fmt: skip
    expected = krippendorff.alpha(value_counts=[[1, 1], [2, 0], [0, 2]], level_of_measurement="nominal")
    assert round_alpha(votes, bootstrap=0).alpha == pytest.approx(expected)


# --- degenerate data: undefined, with a reason ------------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(
    ("votes", "reason"),
    [
        ([], report.NO_VOTES),
        ([("a", "x", 1), ("b", "y", 2), ("c", "x", 3)], report.NO_PAIRABLE),
        ([("a", "x", 2), ("a", "y", 2), ("b", "x", 2), ("b", "y", 2), ("c", "z", 1)], "same label (2)"),
    ],
)
def test_degenerate_votes_have_no_alpha_but_a_reason(
    level: Level, votes: list[tuple[str, str, int]], reason: str
) -> None:
    result = agreement_report(votes, level=level, bootstrap=100)
    assert result.alpha is None and result.ci95 is None
    assert result.undefined_reason is not None and reason in result.undefined_reason
    data = result.to_dict()
    assert json_round_trip(data) == data


def test_package_gives_nan_or_raises_where_we_say_undefined() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert math.isnan(krippendorff.alpha(value_counts=[[2, 0], [2, 0]], level_of_measurement="nominal"))
    with pytest.raises(ValueError):
        krippendorff.alpha(value_counts=[[1, 0], [0, 1]], level_of_measurement="nominal")


def test_ratio_alpha_undefined_when_all_ratio_distances_are_zero() -> None:
    votes = [("a", "x", -1), ("a", "y", 1), ("b", "x", 1), ("b", "y", 1)]
    estimate = round_alpha(votes, level="ratio")
    assert estimate.alpha is None
    assert estimate.undefined_reason == report.RATIO_ZERO
    assert round_alpha(votes, level="interval", bootstrap=0).alpha is not None


def test_single_label_domain_is_undefined_not_an_error() -> None:
    estimate = round_alpha([("a", "x", "pos"), ("a", "y", "pos")], values=["pos"])
    assert estimate.alpha is None and estimate.undefined_reason


# --- bad input: ValueError saying what is wrong -----------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"level": "Nominal"}, "level must be one of"),
        (
            {"level": "ordinal", "votes": [("a", "x", "low"), ("a", "y", "high")]},
            "ordinal level needs values",
        ),
        ({"level": "interval", "votes": [("a", "x", "low"), ("a", "y", "high")]}, "'low' is not a number"),
        ({"level": "ratio", "values": ["low", "high"]}, "ratio level needs numbers"),
        ({"values": ["1", "2"]}, r"outside values: \[1, 2, 3, 4, 5\]"),
        ({"values": [1, 2, 2, 3]}, "lists 2 more than once"),
        ({"values": "123"}, "not a string"),
        ({"values": []}, "values is empty"),
        ({"values": 3}, "got int"),
        ({"values": {1: 1.0, 2: 1.0, 3: 2.0}, "level": "interval"}, "same number 1.0"),
        ({"values": {1: "one"}, "level": "interval"}, "'one' .* is not a number"),
        ({"values": [1, 2, float("nan")]}, "not a finite number"),
        ({"bootstrap": -1}, "bootstrap must be"),
        ({"bootstrap": True}, "bootstrap must be"),
        ({"seed": -3}, "seed must be"),
        ({"votes": [("a", "x", 1), ("a", "x", 2)]}, "'x' voted more than once on item 'a'"),
        ({"votes": [("a", "x")]}, r"vote 0 is not an \(item, annotator, label\) triple"),
        ({"votes": ["abc"]}, "vote 0 is not an"),
        ({"votes": [("a", "x", [1])]}, "unhashable"),
        ({"votes": [("a", "x", True)]}, "holds a bool"),
        ({"votes": [("a", "x", 1), ("a", "y", True)]}, "vote 1 holds a bool"),
        ({"votes": [(True, "x", 1)]}, "holds a bool"),
        ({"votes": VoteColumns(["a", "a"], ["x", "y"], np.array([1, True], dtype=object))}, "holds a bool"),
        ({"values": [1, 2, True]}, "is a bool"),
        ({"votes": [("a", "x", float("nan"))]}, "not a finite number"),
        ({"votes": [("a", "x", None)]}, "neither a string nor a number"),
        ({"votes": [(1.5, "x", 1)]}, "item id 1.5 must be a string or an integer"),
        ({"votes": [("a", ("x",), 1)]}, "annotator id"),
        ({"votes": {"a": [1, 2]}}, "iterable of"),
        ({"votes": VoteColumns([1, 2], [1], [1, 2])}, "one length"),
        (
            {"votes": VoteColumns(np.array([1.0, 2.0]), [1, 2], [1, 2])},
            "strings or integers; got dtype float64",
        ),
        ({"votes": VoteColumns(np.ones((1, 2)), np.ones((1, 2)), np.ones((1, 2)))}, "one-dimensional"),
        ({"votes": VoteColumns([1, 2], [1, 1], np.array([1.0, np.nan]))}, "NaN"),
        ({"votes": VoteColumns([1, 1], [1, 1], [1, 2])}, "voted more than once on item 1"),
    ],
)
def test_bad_input_raises_value_error_saying_what_is_wrong(kwargs: dict[str, object], message: str) -> None:
    votes = kwargs.pop("votes", example_votes())
    with pytest.raises(ValueError, match=message):
        agreement_report(votes, **kwargs)  # type: ignore[arg-type]


def test_bad_writer_labels_raise() -> None:
    with pytest.raises(ValueError, match="mapping from item to label"):
        agreement_report(example_votes(), writer_labels=[("u1", 1)])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="writer label 7 of item 'u1' is not in values"):
        agreement_report(example_votes(), values=[1, 2, 3, 4, 5], writer_labels={"u1": 7})
    with pytest.raises(ValueError, match="neither a string nor a number"):
        agreement_report(example_votes(), writer_labels={"u1": True})


def test_inputs_are_checked_before_any_vote_is_read() -> None:
    def exploding_votes() -> object:
        raise AssertionError("votes read before the level was checked")
        yield  # pragma: no cover

    with pytest.raises(ValueError, match="level must be"):
        round_alpha(exploding_votes(), level="nominl")  # type: ignore[arg-type]
