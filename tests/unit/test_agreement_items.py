"""`dynaval agreement --items FILE` and the Dawid-Skene part of the report (per-item labels,
convergence, tied majorities), through the real command's entry point in-process."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from dynaval.domain.agreement.dawid_skene import dawid_skene
from dynaval.entrypoints.cli.agreement import format_agreement
from dynaval.entrypoints.cli.main import main

# Two reliable annotators and one who always says "a". Item 3 is tied in the majority vote
# (r1 "b", s "a"); Dawid-Skene follows the reliable annotator there.
VOTES = [
    ("1", "r1", "a"), ("1", "r2", "a"), ("1", "s", "a"),
    ("2", "r1", "b"), ("2", "r2", "b"), ("2", "s", "a"),
    ("3", "r1", "b"), ("3", "s", "a"),
    ("4", "r1", "b"), ("4", "r2", "b"), ("4", "s", "a"),
    ("5", "r1", "a"), ("5", "r2", "a"),
]  # fmt: skip


def votes_file(tmp_path: Path) -> Path:
    path = tmp_path / "votes.jsonl"
    path.write_text(
        "".join(json.dumps({"item": i, "annotator": a, "label": x}) + "\n" for i, a, x in VOTES),
        encoding="utf-8",
    )
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def expected_rows() -> list[tuple[str, list[str], str, float, int]]:
    result = dawid_skene(VOTES)
    majority = {"1": ["a"], "2": ["b"], "3": ["a", "b"], "4": ["b"], "5": ["a"]}
    counts = {"1": 3, "2": 3, "3": 2, "4": 3, "5": 2}
    return [
        (item, majority[item], label, float(posterior), counts[item])
        for item, label, posterior in zip(
            result.items, result.aggregated, result.winning_posteriors(), strict=True
        )
    ]


def test_json_carries_per_item_labels_posteriors_and_ties(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "agreement", str(votes_file(tmp_path)), "--json", "--bootstrap", "0")
    assert code == 0, err
    aggregate = json.loads(out)["dawid_skene"]
    expected = expected_rows()
    assert aggregate["items"] == [
        {"item": r[0], "majority": r[1], "label": r[2], "posterior": r[3], "votes": r[4]} for r in expected
    ]
    assert [row["label"] for row in aggregate["items"]] == ["a", "b", "b", "b", "a"]
    assert all(0.5 < row["posterior"] <= 1.0 for row in aggregate["items"])
    assert aggregate["item_count"] == 5
    assert aggregate["items_tied_in_majority"] == 1
    assert aggregate["items_differing_from_majority"] == 0
    assert aggregate["converged"] is True
    assert aggregate["parameter_change"] < aggregate["tolerance"] == 1e-6
    assert aggregate["iterations"] < aggregate["max_iterations"]


def test_items_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "labels.jsonl"
    code, _, err = run(
        capsys, "agreement", str(votes_file(tmp_path)), "--bootstrap", "0", "--items", str(target)
    )
    assert code == 0, err
    rows = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    assert rows == [
        {"item": i, "majority": m, "dawid_skene_label": x, "dawid_skene_posterior": p, "votes": n}
        for i, m, x, p, n in expected_rows()
    ]


def test_items_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "labels.CSV"
    code, _, err = run(
        capsys, "agreement", str(votes_file(tmp_path)), "--bootstrap", "0", "--items", str(target)
    )
    assert code == 0, err
    with target.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [
        (
            r["item"],
            r["majority"].split("|"),
            r["dawid_skene_label"],
            float(r["dawid_skene_posterior"]),
            int(r["votes"]),
        )
        for r in rows
    ] == expected_rows()
    assert rows[2]["majority"] == "a|b"


@pytest.mark.parametrize("name", ["labels.json", "labels.txt", "labels"])
def test_items_other_extension_is_refused_and_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    source = votes_file(tmp_path)
    code, out, err = run(capsys, "agreement", str(source), "--items", str(tmp_path / name))
    assert code != 0 and out == ""
    assert "--items" in err and ".jsonl" in err and ".csv" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["votes.jsonl"]


def test_items_in_a_missing_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(
        capsys, "agreement", str(votes_file(tmp_path)), "--items", str(tmp_path / "no" / "x.csv")
    )
    assert code != 0 and "does not exist" in err
    assert not (tmp_path / "no").exists()


def test_text_output_counts_ties_apart_and_says_when_not_converged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "agreement", str(votes_file(tmp_path)), "--bootstrap", "0")
    assert code == 0, err
    assert "0 of 5 items labelled differently from the majority vote, 1 tied in the majority vote" in out
    assert "did not converge" not in out
    _, out, _ = run(capsys, "agreement", str(votes_file(tmp_path)), "--bootstrap", "0", "--json")
    data = json.loads(out)
    data["dawid_skene"].update(converged=False, iterations=1000, parameter_change=3.5e-4)
    text = format_agreement(data)
    assert "Dawid-Skene did not converge: 1000 iterations reached" in text
    assert "still moving by 0.00035" in text and "tolerance 1e-06" in text
