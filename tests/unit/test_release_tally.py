"""The release tally keeps each round's counted votes as integer columns: its figures must be those
of the ``(example, annotator, label)`` tuples, and a repeated row must be a finding, not a crash."""

from __future__ import annotations

import random
from typing import Any

import pytest

from dynaval.adapters.files.release_files import canonical_line
from dynaval.domain.agreement.report import round_alpha
from dynaval.domain.releases.checks import ALPHA_RESAMPLES, ReleaseTally
from dynaval.domain.releases.release import SplitRule, content_hash, row_digest, text_keys

LABELS = ["positive", "negative", "neutral"]
ANNOTATORS = [f"a{i}" for i in range(7)]


def _rows(rng: random.Random, count: int) -> list[tuple[str, dict[str, Any]]]:
    rows = []
    for i in range(count):
        round_index = rng.choice([1, 2])
        label = rng.choice(LABELS)
        votes = [
            {
                "annotator": annotator,
                # Some votes are flags without a label, some annotators did not count.
                "label": None if rng.random() < 0.1 else rng.choice([label, label, *LABELS]),
                "flagged": False,
                "counted": rng.random() > 0.15,
            }
            for annotator in rng.sample(ANNOTATORS, rng.randrange(0, 5))
        ]
        kind = rng.choice(["train", "train", "dev", "test"])
        row = {
            "example_id": f"ex-{rng.randrange(10**9):09d}-{i}",
            "round": round_index,
            "text": f"text {i}",
            "label": label,
            "writer": f"w{rng.randrange(30)}",
            "votes": votes,
        }
        rows.append((f"{kind}_r{round_index}", row))
    return rows


def _tally(rows: list[tuple[str, dict[str, Any]]], *, checks: bool = True) -> ReleaseTally:
    tally = ReleaseTally(fields=["text"], labels=LABELS, rule=SplitRule(), checks=checks)
    for split, row in rows:
        tally.add(split, canonical_line(row), row)
    return tally


def test_the_tallys_round_figures_are_those_of_the_vote_tuples() -> None:
    rows = _rows(random.Random(11), 400)
    figures = _tally(rows).round_figures(seed=3)
    assert sorted(figures) == [1, 2]
    for round_index, figure in figures.items():
        tuples = [
            (row["example_id"], v["annotator"], v["label"])
            for _split, row in rows
            if row["round"] == round_index
            for v in row["votes"]
            if v["counted"] and v["label"] is not None
        ]
        expected = round_alpha(tuples, level="nominal", values=LABELS, bootstrap=ALPHA_RESAMPLES, seed=3)
        assert figure["alpha"] == expected.to_dict()
        assert figure["votes"] == len(tuples)
        assert figure["rows"] == sum(1 for _split, row in rows if row["round"] == round_index)
        assert expected.ci95 is not None


def test_the_content_hash_is_over_the_rows_in_id_order() -> None:
    rows = _rows(random.Random(12), 50)
    tally = _tally(rows)
    expected = content_hash((row["example_id"], row_digest(canonical_line(row))) for _split, row in rows)
    assert tally.content_hash() == expected
    assert _tally(list(reversed(rows))).content_hash() == expected


def test_a_repeated_row_is_named_and_counted_once() -> None:
    rows = _rows(random.Random(13), 60)
    with_votes = next((split, row) for split, row in rows if sum(v["counted"] for v in row["votes"]) >= 2)
    once = _tally(rows)
    twice = _tally([*rows, with_votes])
    assert twice.duplicate_ids == [with_votes[1]["example_id"]]
    assert any(line.startswith("ids: 1 example id appears twice") for line in twice.findings())
    # The figures of the distinct rows: alpha is computable (two votes of one annotator on one
    # item would make it fail) and the same as without the repetition.
    assert twice.round_figures(seed=0) == once.round_figures(seed=0)
    assert twice.content_hash() != once.content_hash()
    # Told by the caller which ids came before (verify's scan keeps them), it keeps no set of its own
    # and finds the same.
    told = ReleaseTally(fields=["text"], labels=LABELS, rule=SplitRule())
    seen: set[str] = set()
    for split, row in [*rows, with_votes]:
        told.add(split, canonical_line(row), row, repeated=row["example_id"] in seen)
        seen.add(row["example_id"])
    assert not told._ids
    assert told.duplicate_ids == twice.duplicate_ids and told.findings() == twice.findings()
    assert told.round_figures(seed=0) == once.round_figures(seed=0)
    assert told.content_hash() == twice.content_hash()


def test_a_vote_label_outside_the_tasks_labels_is_named_not_a_crash() -> None:
    rows = _rows(random.Random(14), 80)
    row = next(row for _split, row in rows if any(v["counted"] for v in row["votes"]))
    vote = next(v for v in row["votes"] if v["counted"])
    vote["label"] = "sarcastic"
    tally = _tally(rows)
    assert tally.foreign_vote_labels == [row["example_id"]]
    assert any(
        line.startswith("votes: 1 row has a counted vote whose label is not one of the task's labels")
        for line in tally.findings()
    )
    figures = tally.round_figures(seed=0)  # alpha over the other votes: no exception
    vote["counted"] = False  # the same rows without that vote
    assert figures == _tally(rows).round_figures(seed=0)


def test_a_figures_only_tally_states_the_same_figures_and_refuses_to_check() -> None:
    """A build's tally keeps no check state; its figures are the checking tally's, to the digit."""
    rows = _rows(random.Random(15), 300)
    checking, figures_only = _tally(rows), _tally(rows, checks=False)
    assert figures_only.split_figures() == checking.split_figures()
    assert figures_only.round_figures(seed=4) == checking.round_figures(seed=4)
    assert figures_only.content_hash() == checking.content_hash()
    assert {s: f.writers for s, f in figures_only.splits.items()} == {
        s: f.writers for s, f in checking.splits.items()
    }
    assert checking.text_kinds and not figures_only.text_kinds and not figures_only.writer_kinds
    with pytest.raises(RuntimeError, match="figures only"):
        figures_only.findings()


def test_texts_in_two_kinds_counts_each_shared_text_once_as_a_dict_of_kinds_would() -> None:
    rng = random.Random(5)
    fields = ["premise", "hypothesis"]
    tally = ReleaseTally(fields=fields, labels=LABELS, rule=SplitRule())
    by_key: dict[str, set[str]] = {}
    for i in range(3_000):
        # Few premises and hypotheses, so that many keys repeat, within and across kinds.
        row = {"premise": f"Premise {rng.randrange(40)}", "hypothesis": f"h {rng.randrange(60)}"}
        kind = rng.choice(["train", "train", "dev", "test"])
        tally.add(f"{kind}_r1", canonical_line({"example_id": f"e{i}", **row}), {
            "example_id": f"e{i}", "round": 1, "label": "positive", "writer": f"w{i}", "votes": [], **row,
        })  # fmt: skip
        for key in text_keys(row, fields):
            by_key.setdefault(key, set()).add(kind)
    crossing = sum(1 for kinds in by_key.values() if len(kinds) > 1)
    assert crossing > 0
    finding = next(f for f in tally.findings() if f.startswith("texts: "))
    assert finding.startswith(f"texts: {crossing} normalised texts (or first fields) are in two split kinds")
    # One text in one kind, however often, is no finding; folded texts are the same key.
    alone = ReleaseTally(fields=["text"], labels=LABELS, rule=SplitRule())
    for i, text in enumerate(["A  text", "a text", "A TEXT "]):
        row = {
            "example_id": f"e{i}",
            "round": 1,
            "label": "positive",
            "writer": "w",
            "votes": [],
            "text": text,
        }
        alone.add("dev_r1", canonical_line(row), row)
    assert not any(f.startswith("texts: ") for f in alone.findings())
    row = {"example_id": "e9", "round": 1, "label": "positive", "writer": "v", "votes": [], "text": "a TEXT"}
    alone.add("test_r1", canonical_line(row), row)
    assert "texts: 1 normalised text (or first field) is in two split kinds" in alone.findings()


def test_the_content_hash_with_a_repeated_id_orders_its_rows_by_digest() -> None:
    rows = _rows(random.Random(14), 30)
    split, row = rows[3]
    rows.append((split, {**row, "label": "neutral" if row["label"] != "neutral" else "positive"}))
    expected = content_hash((r["example_id"], row_digest(canonical_line(r))) for _split, r in rows)
    assert _tally(rows).content_hash() == expected == _tally(list(reversed(rows))).content_hash()
