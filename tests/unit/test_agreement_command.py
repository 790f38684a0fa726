"""`dynaval agreement` on files: JSONL votes and Label Studio exports, and the bad files it refuses.

These call the real command's entry point in-process (no server, no database)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import krippendorff
import numpy as np
import pytest

from dynaval.adapters.files.vote_files import LABEL_STUDIO, VoteFileError, read_votes
from dynaval.entrypoints.cli.main import main

KRIPPENDORFF_EXAMPLE = {
    "A": "1 2 3 3 2 1 4 1 2 . . .",
    "B": "1 2 3 3 2 2 4 1 2 5 . 3",
    "C": ". 3 3 3 2 3 4 2 2 5 1 .",
    "D": "1 2 3 3 2 4 4 1 2 5 1 .",
}


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def example_votes() -> list[dict[str, Any]]:
    return [
        {"item": f"u{unit}", "annotator": observer, "label": int(value)}
        for observer, row in KRIPPENDORFF_EXAMPLE.items()
        for unit, value in enumerate(row.split())
        if value != "."
    ]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("level", "expected"), [("nominal", 0.743), ("ordinal", 0.815), ("interval", 0.849), ("ratio", 0.797)]
)
def test_reproduces_krippendorffs_published_example_from_jsonl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], level: str, expected: float
) -> None:
    path = write_jsonl(tmp_path / "votes.jsonl", example_votes())
    code, out, err = run(capsys, "agreement", str(path), "--level", level, "--json", "--bootstrap", "200")
    assert code == 0, err
    data = json.loads(out)
    assert round(data["alpha"], 3) == expected
    assert data["level"] == level and data["items"] == 11 and data["annotators"] == 4
    assert data["pairable_values"] == 40
    low, high = data["ci95"]
    assert low <= data["alpha"] <= high
    assert {row["annotator"] for row in data["per_annotator"]} == set(KRIPPENDORFF_EXAMPLE)
    assert all("votes" in row and "agreement_with_others" in row for row in data["per_annotator"])
    assert data["pairwise"]["annotators"] == sorted(KRIPPENDORFF_EXAMPLE)


def test_prints_a_readable_table_by_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(tmp_path / "votes.jsonl", example_votes())
    code, out, _ = run(capsys, "agreement", str(path), "--bootstrap", "100", "--seed", "5")
    assert code == 0
    assert out.startswith("Krippendorff's alpha (nominal): 0.743   95% CI [")
    assert "agreement with others" in out and "pairwise agreement (shared items)" in out


def test_same_seed_same_interval(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(tmp_path / "votes.jsonl", example_votes())
    first = json.loads(run(capsys, "agreement", str(path), "--json", "--seed", "9")[1])["ci95"]
    second = json.loads(run(capsys, "agreement", str(path), "--json", "--seed", "9")[1])["ci95"]
    assert first == second


def test_degenerate_votes_report_undefined_alpha(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(
        tmp_path / "same.jsonl",
        [{"item": i, "annotator": a, "label": "pos"} for i in range(3) for a in ("x", "y")],
    )
    code, out, _ = run(capsys, "agreement", str(path), "--json")
    data = json.loads(out)
    assert code == 0 and data["alpha"] is None and data["ci95"] is None
    assert "same label" in data["undefined_reason"]
    assert "NaN" not in out


def label_studio_export() -> list[dict[str, Any]]:
    def annotation(ident: int, user: Any, label: str | None, *, cancelled: bool = False, at: str = "") -> Any:
        result = [
            {"from_name": "sentiment", "to_name": "text", "type": "choices", "value": {"choices": [label]}}
        ]
        return {
            "id": ident,
            "completed_by": user,
            "result": result if label else [],
            "was_cancelled": cancelled,
            "updated_at": at or f"2026-01-01T00:00:{ident:02d}Z",
        }

    return [
        {"id": 1, "data": {"text": "a"}, "annotations": [annotation(1, 7, "pos"), annotation(2, 8, "pos")]},
        {
            "id": 2,
            "data": {"text": "b"},
            "annotations": [
                annotation(3, 7, "neg"),
                annotation(4, {"id": 8, "email": "e@x"}, "pos"),
                annotation(5, 8, "neg"),  # the same annotator again, later: this one counts
                annotation(6, 9, "pos", cancelled=True),
            ],
        },
        {"id": 3, "data": {"text": "c"}, "annotations": []},
    ]


def test_reads_a_label_studio_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "export.json"
    path.write_text(json.dumps(label_studio_export()), encoding="utf-8")
    votes = read_votes(path)
    assert votes.source == LABEL_STUDIO and votes.from_name == "sentiment"
    assert sorted(votes.votes) == [("1", "7", "pos"), ("1", "8", "pos"), ("2", "7", "neg"), ("2", "8", "neg")]
    assert votes.cancelled_ignored == 1 and votes.superseded_ignored == 1
    code, out, _ = run(capsys, "agreement", str(path), "--json", "--bootstrap", "0")
    data = json.loads(out)
    reference = krippendorff.alpha(
        reliability_data=np.array([[0, 1], [0, 1]], dtype=float), level_of_measurement="nominal"
    )
    assert code == 0 and data["alpha"] == pytest.approx(reference)


@pytest.mark.parametrize(
    ("content", "args", "says"),
    [
        ("this is not json\n", [], "not JSON"),
        ('{"item": 1, "annotator": "a"}\n', [], "missing 'label'"),
        (
            '{"item": 1, "annotator": "a", "label": "x"}\n{"item": 1, "annotator": "a", "label": "y"}\n',
            [],
            "second vote",
        ),
        ('{"item": 1, "annotator": "a", "label": "x"}\n', ["--level", "cardinal"], "unknown level"),
        ('{"item": 1, "annotator": "a", "label": "low"}\n', ["--level", "ordinal"], "--labels"),
        ('{"item": 1, "annotator": "a", "label": "low"}\n', ["--level", "interval"], "numeric"),
        ('{"item": 1, "annotator": "a", "label": "x"}\n', ["--labels", "y,z"], "x"),
        ("", [], "empty"),
        ('[{"id": 1, "annotations": []}]', [], "no annotation results"),
        ('{"item": 1, "annotator": "a", "label": "x"}\n', ["--bootstrap", "-1"], "--bootstrap"),
    ],
)
def test_bad_files_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, args: list[str], says: str
) -> None:
    path = tmp_path / "votes.jsonl"
    path.write_text(content, encoding="utf-8")
    code, out, err = run(capsys, "agreement", str(path), *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and says in err, err


def test_a_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "agreement", str(tmp_path / "nope.jsonl"))
    assert code == 2 and "no such file" in err


def test_export_with_several_choices_controls_needs_from_name(tmp_path: Path) -> None:
    tasks = label_studio_export()
    flag = {"from_name": "flag", "to_name": "text", "type": "choices", "value": {"choices": ["flag"]}}
    tasks[0]["annotations"][0]["result"].append(flag)
    path = tmp_path / "export.json"
    path.write_text(json.dumps(tasks), encoding="utf-8")
    with pytest.raises(VoteFileError, match="--from-name"):
        read_votes(path)
    assert len(read_votes(path, from_name="sentiment").votes) == 4
    with pytest.raises(VoteFileError, match="no control named 'mood'"):
        read_votes(path, from_name="mood")
