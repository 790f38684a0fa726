"""A build's figures come from each row's codes, taken as the rows are read and folded once they
are placed: they must be exactly what a ``ReleaseTally`` states when it is handed the placed rows in
the order read (as ``verify`` reads them from the files)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from dynaval.domain.releases.build_tally import BuildTally
from dynaval.domain.releases.checks import ReleaseTally
from dynaval.domain.releases.release import SplitRule
from dynaval.domain.releases.rows import canonical_line

LABELS = ["positive", "negative", "neutral"]
ANNOTATORS = [f"a{i}" for i in range(9)]


def _rows(rng: random.Random, count: int) -> list[tuple[str | None, dict[str, Any]]]:
    """Rows in read order, each with its split (``None``: withheld)."""
    rows: list[tuple[str | None, dict[str, Any]]] = []
    for i in range(count):
        round_index = rng.choice([1, 2, 3])
        label = rng.choice(LABELS)
        votes = [
            {
                "annotator": annotator,
                # Flags without a label, annotators who did not count, a label not the task's.
                "label": None
                if rng.random() < 0.1
                else rng.choice([label, label, *LABELS, "not-a-label" if rng.random() < 0.05 else label]),
                "flagged": False,
                "counted": rng.random() > 0.15,
            }
            for annotator in rng.sample(ANNOTATORS, rng.randrange(0, 5))
        ]
        split = None if rng.random() < 0.2 else f"{rng.choice(['train', 'dev', 'test'])}_r{round_index}"
        row = {
            "example_id": f"ex-{rng.randrange(10**9):09d}-{i}",
            "round": round_index,
            "text": f"text {i}",
            "label": label,
            "writer": f"w{rng.randrange(40)}",
            "votes": votes,
        }
        rows.append((split, row))
    return rows


def _both(rows: list[tuple[str | None, dict[str, Any]]]) -> tuple[Any, ReleaseTally]:
    build = BuildTally(LABELS)
    reference = ReleaseTally(fields=["text"], labels=LABELS, rule=SplitRule(), checks=False)
    for split, row in rows:
        build.add(row)
        if split is not None:
            reference.add(split, canonical_line(row), row)
    placed = build.placed([split for split, _row in rows])
    for split, row in rows:  # the second pass: each placed row's line, in the order read
        if split is not None:
            placed.add_line(canonical_line(row))
    return placed, reference


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_placed_figures_are_those_of_the_tally_over_the_placed_rows(seed: int) -> None:
    rows = _rows(random.Random(seed), 600)
    placed, reference = _both(rows)
    assert placed.split_figures() == reference.split_figures()
    assert list(placed.split_figures()) == list(
        reference.split_figures()
    )  # sorted, as the manifest keeps them
    assert placed.round_figures(seed=7) == reference.round_figures(seed=7)
    assert placed.content_hash() == reference.content_hash()
    assert placed.released_writers() == reference.released_writers()
    assert placed.split_order() == [split for split, _row in rows]


def test_a_round_none_of_whose_rows_is_placed_has_no_figures() -> None:
    rows = [(None if row["round"] == 2 else split, row) for split, row in _rows(random.Random(5), 200)]
    placed, reference = _both(rows)
    figures = placed.round_figures(seed=0)
    assert sorted(figures) == [1, 3]
    assert figures == reference.round_figures(seed=0)


def test_a_row_without_a_counted_vote_is_released_but_no_item() -> None:
    rows: list[tuple[str | None, dict[str, Any]]] = [
        ("train_r1", {"example_id": "a", "round": 1, "label": "positive", "writer": "w1", "votes": []}),
        (
            "dev_r1",
            {
                "example_id": "b",
                "round": 1,
                "label": "negative",
                "writer": "w2",
                "votes": [
                    {"annotator": "x", "label": "negative", "counted": True},
                    {"annotator": "y", "label": "negative", "counted": True},
                    {"annotator": "z", "label": "positive", "counted": False},
                ],
            },
        ),
    ]
    placed, reference = _both(rows)
    figures = placed.round_figures(seed=0)
    assert figures[1]["rows"] == 2
    assert figures[1]["votes"] == 2
    assert figures[1]["alpha"]["items"] == reference.round_figures(seed=0)[1]["alpha"]["items"]
    assert figures == reference.round_figures(seed=0)


def test_nothing_placed_gives_empty_figures() -> None:
    rows = [(None, row) for _split, row in _rows(random.Random(6), 20)]
    placed, _reference = _both(rows)
    assert placed.split_figures() == {}
    assert placed.round_figures(seed=0) == {}
    assert placed.released_writers() == set()
    assert placed.split_order() == [None] * 20


def test_a_split_for_every_row_is_required() -> None:
    build = BuildTally(LABELS)
    for _split, row in _rows(random.Random(8), 3):
        build.add(row)
    with pytest.raises(ValueError, match="2 splits for 3 rows"):
        build.placed(["train_r1", None])


def test_the_content_hash_needs_every_placed_rows_line() -> None:
    build = BuildTally(LABELS)
    rows = _rows(random.Random(9), 30)
    for _split, row in rows:
        build.add(row)
    placed = build.placed([split for split, _row in rows])
    placed.add_line(b"{}")
    with pytest.raises(RuntimeError, match="1 lines added for"):
        placed.content_hash()
