"""`dynaval agreement` on every form of Label Studio export and every control, on small hand-written
files: each parsing branch, and each figure against an independent implementation (the
`krippendorff` package; nltk's AnnotationTask with the MASI distance for set-valued answers)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import krippendorff
import numpy as np
import pytest
from nltk.metrics.agreement import AnnotationTask
from nltk.metrics.distance import masi_distance as nltk_masi

from dynaval.adapters.files.vote_files import VoteFileError, read_votes
from dynaval.domain.agreement.against_gold import score_against_gold
from dynaval.domain.agreement.dawid_skene import dawid_skene
from dynaval.domain.agreement.set_valued import masi_alpha, masi_distance, per_choice_alpha
from dynaval.entrypoints.cli.main import main


def region(kind: str, value: Any, from_name: str | None = None) -> dict[str, Any]:
    return {"from_name": from_name or kind, "to_name": "text", "type": kind, "value": {kind: value}}


def annotation(ident: int, user: int, *regions: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": ident,
        "completed_by": user,
        "result": list(regions),
        "was_cancelled": False,
        "updated_at": f"2026-01-01T00:00:{ident:02d}Z",
        **extra,
    }


def write(tmp_path: Path, content: Any, name: str = "export.json") -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def nltk_alpha(votes: list[tuple[str, str, frozenset[str]]]) -> float:
    return float(AnnotationTask(data=[(a, i, s) for i, a, s in votes], distance=nltk_masi).alpha())


def kripp(votes: list[tuple[str, str, str]], level: str, value: Any = float) -> float:
    items = sorted({i for i, _, _ in votes})
    annotators = sorted({a for _, a, _ in votes})
    data = np.full((len(annotators), len(items)), np.nan)
    for item, who, label in votes:
        data[annotators.index(who), items.index(item)] = value(label)
    return float(krippendorff.alpha(reliability_data=data, level_of_measurement=level))


# ------------------------------------------------------------------ export forms


def test_a_task_without_the_annotations_key_counts_as_a_task_with_none(tmp_path: Path) -> None:
    tasks = [
        {"id": 1, "data": {}, "annotations": [annotation(1, 7, region("choices", ["a"]))]},
        {"id": 2, "data": {}},
    ]
    votes = read_votes(write(tmp_path, tasks))
    assert votes.votes == [("1", "7", "a")] and votes.tasks_without_annotations == 1


def test_the_old_completions_form_is_read(tmp_path: Path) -> None:
    tasks = [
        {"id": 1, "data": {}, "completions": [annotation(1, 7, region("choices", ["a"]))]},
        {"id": 2, "data": {}, "completions": [annotation(2, 8, region("choices", ["b"]))]},
    ]
    assert read_votes(write(tmp_path, tasks)).votes == [("1", "7", "a"), ("2", "8", "b")]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ({"tasks": [{"id": 1, "annotations": []}], "total": 1}, "with the tasks under 'tasks'"),
        ({"count": 3, "next": None}, "a JSON object (keys: 'count', 'next')"),
        ({"id": 1, "data": {}, "annotations": []}, "one Label Studio task, not an export"),
        (
            [{"id": 1, "text": "x", "sentiment": "a", "annotator": 7, "annotation_id": 3, "lead_time": 2.0}],
            "JSON-MIN export, which leaves out what agreement needs",
        ),
    ],
)
def test_wrapped_and_json_min_exports_say_what_to_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: Any, says: str
) -> None:
    code, out, err = run(capsys, "agreement", str(write(tmp_path, content)))
    assert code == 2 and out == "" and says in err and "exportType=JSON" in err
    assert len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------ controls


def test_spans_beside_choices_name_the_controls_and_which_can_be_used(tmp_path: Path) -> None:
    span = {
        "from_name": "ner",
        "to_name": "text",
        "type": "labels",
        "value": {"start": 0, "end": 3, "labels": ["P"]},
    }
    tasks = [
        {"id": 1, "data": {}, "annotations": [annotation(1, 7, span, region("choices", ["a"], "topic"))]}
    ]
    path = write(tmp_path, tasks)
    assert read_votes(path).from_name == "topic"
    with pytest.raises(VoteFileError) as caught:
        read_votes(path, from_name="ner")
    message = str(caught.value)
    assert "the export has: ner (labels), topic (choices)" in message
    assert "'ner' cannot be used" in message and "usable: topic" in message and "spans (labels)" in message
    only_spans = [{"id": 1, "data": {}, "annotations": [annotation(1, 7, span)]}]
    with pytest.raises(VoteFileError, match=r"ner \(labels\); usable: none"):
        read_votes(write(tmp_path, only_spans, "spans.json"))


def multi_choice_votes(seed: int, items: int = 40) -> list[tuple[str, str, frozenset[str]]]:
    rng = random.Random(seed)
    choices = ["a", "b", "c", "d"]
    votes = []
    for item in range(items):
        for who in rng.sample(["u1", "u2", "u3", "u4"], rng.randint(1, 4)):
            votes.append((f"t{item}", who, frozenset(rng.sample(choices, rng.randint(1, 3)))))
    return votes


@pytest.mark.parametrize("seed", range(5))
def test_masi_alpha_equals_nltk(seed: int) -> None:
    votes = multi_choice_votes(seed)
    assert masi_alpha(votes, bootstrap=0).alpha == pytest.approx(nltk_alpha(votes), abs=1e-9)


def test_masi_distance_is_nltks() -> None:
    sets = [frozenset(s) for s in ({"a"}, {"a", "b"}, {"b", "c"}, {"c"}, {"a", "b", "c"})]
    for a in sets:
        for b in sets:
            assert masi_distance(a, b) == pytest.approx(nltk_masi(set(a), set(b)), abs=1e-12)


def test_multi_choice_export_is_set_valued_with_per_choice_alpha(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    votes = multi_choice_votes(11, items=25)
    ident = iter(range(1, 10_000))
    tasks = [
        {
            "id": int(item[1:]),
            "data": {},
            "annotations": [
                annotation(next(ident), int(who[1:]), region("choices", sorted(answer), "tags"))
                for i, who, answer in votes
                if i == item
            ],
        }
        for item in sorted({i for i, _, _ in votes})
    ]
    path = write(tmp_path, tasks)
    code, out, err = run(capsys, "agreement", str(path), "--json", "--bootstrap", "200")
    assert code == 0, err
    data = json.loads(out)
    expected = [(i[1:], w[1:], s) for i, w, s in votes]
    assert data["level"] == "masi"
    assert data["alpha"] == pytest.approx(nltk_alpha(expected), abs=1e-9)
    assert data["ci95"][0] <= data["alpha"] <= data["ci95"][1]
    for row in data["per_choice"]:
        binary = [(i, w, "1" if row["choice"] in s else "0") for i, w, s in expected]
        assert row["alpha"] == pytest.approx(kripp(binary, "nominal"), abs=1e-9)
        assert row["chosen"] == sum(row["choice"] in s for _, _, s in expected)
    assert [row["choice"] for row in data["per_choice"]] == ["a", "b", "c", "d"]
    code, out, _ = run(capsys, "agreement", str(path), "--bootstrap", "0")
    assert (
        code == 0
        and "Krippendorff's alpha (MASI, set-valued answers)" in out
        and "alpha (chosen / not)" in out
    )
    code, _, err = run(capsys, "agreement", str(path), "--level", "ordinal")
    assert code == 2 and "MASI" in err


def test_single_element_sets_give_the_nominal_alpha() -> None:
    votes = [
        (f"t{i}", w, frozenset({random.Random(i * 7 + k).choice("xyz")}))
        for i in range(20)
        for k, w in enumerate("ab")
    ]
    nominal = kripp(
        [(i, w, next(iter(s))) for i, w, s in votes], "nominal", value=lambda label: "xyz".index(label)
    )
    assert masi_alpha(votes, bootstrap=0).alpha == pytest.approx(nominal, abs=1e-12)


def test_per_choice_is_undefined_when_a_choice_is_always_taken() -> None:
    votes = [("1", "a", frozenset({"x", "y"})), ("1", "b", frozenset({"x"}))]
    rows = {row.choice: row for row in per_choice_alpha(votes)}
    assert rows["x"].alpha is None and rows["x"].undefined_reason
    assert rows["y"].chosen == 1


def taxonomy_export() -> list[dict[str, Any]]:
    def tax(ident: int, user: int, *paths: list[str]) -> dict[str, Any]:
        return annotation(ident, user, region("taxonomy", [list(p) for p in paths]))

    return [
        {"id": 1, "data": {}, "annotations": [tax(1, 7, ["A", "A1"]), tax(2, 8, ["A", "A2"])]},
        {"id": 2, "data": {}, "annotations": [tax(3, 7, ["B", "B1"]), tax(4, 8, ["B", "B1"])]},
        {"id": 3, "data": {}, "annotations": [tax(5, 7, ["A", "A1"]), tax(6, 8, ["B"])]},
    ]


def test_taxonomy_paths_are_labels_cut_at_the_depth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, taxonomy_export())
    whole = read_votes(path)
    assert whole.control == "taxonomy" and whole.set_votes is None
    assert ("1", "7", "A / A1") in whole.votes
    cut = read_votes(path, taxonomy_depth=1)
    assert sorted(cut.votes) == [
        ("1", "7", "A"),
        ("1", "8", "A"),
        ("2", "7", "B"),
        ("2", "8", "B"),
        ("3", "7", "A"),
        ("3", "8", "B"),
    ]
    for depth, votes in ((None, whole.votes), ("1", cut.votes)):
        labels = sorted({label for _, _, label in votes})
        code, out, _ = run(
            capsys,
            "agreement",
            str(path),
            "--json",
            "--bootstrap",
            "0",
            *(["--taxonomy-depth", depth] if depth else []),
        )
        assert code == 0
        assert json.loads(out)["alpha"] == pytest.approx(kripp(votes, "nominal", labels.index), abs=1e-9)


def test_several_taxonomy_paths_make_a_set(tmp_path: Path) -> None:
    tasks = taxonomy_export()
    tasks[0]["annotations"][0]["result"][0]["value"]["taxonomy"].append(["B", "B2"])
    votes = read_votes(write(tmp_path, tasks), taxonomy_depth=1)
    assert votes.set_votes is not None
    assert ("1", "7", frozenset({"A", "B"})) in votes.set_votes
    assert masi_alpha(votes.set_votes, bootstrap=0).alpha == pytest.approx(
        nltk_alpha(votes.set_votes), abs=1e-9
    )


def test_depth_is_refused_for_other_controls(tmp_path: Path) -> None:
    tasks = [{"id": 1, "data": {}, "annotations": [annotation(1, 7, region("choices", ["a"]))]}]
    with pytest.raises(VoteFileError, match="--taxonomy-depth applies to a taxonomy control"):
        read_votes(write(tmp_path, tasks), taxonomy_depth=2)


@pytest.mark.parametrize(("kind", "default"), [("rating", "ordinal"), ("number", "interval")])
def test_ratings_and_numbers_are_numeric_with_their_default_level(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, default: str
) -> None:
    values = {1: (1, 2, 2), 2: (4, 5, 4), 3: (3, 3, 1), 4: (5, 4.0, 5), 5: (2, 1, 2)}
    ident = iter(range(1, 100))
    tasks = [
        {
            "id": t,
            "data": {},
            "annotations": [
                annotation(next(ident), u, region(kind, v)) for u, v in zip((7, 8, 9), row, strict=True)
            ],
        }
        for t, row in values.items()
    ]
    path = write(tmp_path, tasks)
    votes = read_votes(path)
    assert ("4", "8", "4") in votes.votes  # 4.0 and 4 are one label
    for level in (default, "nominal", "ratio"):
        args = ["--level", level] if level != default else []
        code, out, err = run(capsys, "agreement", str(path), "--json", "--bootstrap", "0", *args)
        assert code == 0, err
        data = json.loads(out)
        assert data["level"] == level
        assert data["alpha"] == pytest.approx(kripp(votes.votes, level), abs=1e-9)


# ------------------------------------------------------------------ ground truth and duplicates


def ground_truth_export() -> list[dict[str, Any]]:
    def vote(ident: int, user: int, label: str, **extra: Any) -> dict[str, Any]:
        return annotation(ident, user, region("choices", [label]), **extra)

    return [
        {
            "id": 1,
            "data": {},
            "annotations": [vote(1, 7, "a"), vote(2, 8, "a"), vote(3, 1, "a", ground_truth=True)],
        },
        {
            "id": 2,
            "data": {},
            "annotations": [vote(4, 7, "b"), vote(5, 8, "a"), vote(6, 1, "b", ground_truth=True)],
        },
        {
            "id": 3,
            "data": {},
            "annotations": [vote(7, 7, "b"), vote(8, 8, "b"), vote(9, 1, "a", ground_truth=True)],
        },
        {"id": 4, "data": {}, "annotations": [vote(10, 7, "a"), vote(11, 8, "b")]},
    ]


def test_ground_truth_included_excluded_or_gold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, ground_truth_export())
    assert len(read_votes(path).votes) == 11
    excluded = read_votes(path, ground_truth="exclude")
    assert len(excluded.votes) == 8 and excluded.ground_truth_ignored == 3 and not excluded.gold
    gold = read_votes(path, ground_truth="gold")
    assert gold.votes == excluded.votes and gold.gold == {"1": "a", "2": "b", "3": "a"}
    code, out, _ = run(capsys, "agreement", str(path), "--json", "--bootstrap", "0", "--ground-truth", "gold")
    data = json.loads(out)
    assert code == 0 and data["alpha"] == pytest.approx(kripp(gold.votes, "nominal", "ab".index), abs=1e-9)
    assert data["gold"]["per_annotator"] == [
        {"annotator": "7", "items": 3, "correct": 2, "accuracy": 2 / 3},
        {"annotator": "8", "items": 3, "correct": 1, "accuracy": 1 / 3},
    ]
    assert data["gold"]["majority"] == {"items": 3, "correct": 1, "ties": 1, "accuracy": 1 / 3}
    fitted = dawid_skene(gold.votes)
    correct = sum(fitted.aggregate_of(item) == label for item, label in gold.gold.items())
    assert data["gold"]["dawid_skene"] == {"items": 3, "correct": correct, "accuracy": correct / 3}
    code, out, _ = run(capsys, "agreement", str(path), "--bootstrap", "0", "--ground-truth", "gold")
    assert "against gold (3 items" in out and "1 tied" in out
    assert f"{'Dawid-Skene':<20} {3:>7} {correct:>8}" in out
    code, out, _ = run(capsys, "agreement", str(path), "--bootstrap", "0", "--ground-truth", "exclude")
    assert code == 0 and "also left out: 3 ground-truth annotations" in out and "against gold" not in out
    jsonl = write(tmp_path, '{"item": 1, "annotator": "a", "label": "x"}\n', "votes.jsonl")
    code, _, err = run(capsys, "agreement", str(jsonl), "--ground-truth", "gold")
    assert code == 2 and "Label Studio export" in err


def test_score_against_gold_counts_a_tie_apart() -> None:
    votes = [("1", "a", "x"), ("1", "b", "y"), ("2", "a", "x"), ("2", "b", "x"), ("3", "a", "z")]
    scored = score_against_gold(votes, {"1": "x", "2": "y"})
    assert scored["majority"] == {"items": 2, "correct": 0, "ties": 1, "accuracy": 0.0}


def test_jsonl_duplicates_error_first_or_last(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        ("1", "a", "x"),
        ("1", "b", "x"),
        ("1", "a", "y"),
        ("2", "a", "y"),
        ("2", "b", "x"),
        ("1", "a", "z"),
    ]
    path = write(
        tmp_path,
        "".join(json.dumps(dict(zip(("item", "annotator", "label"), r, strict=True))) + "\n" for r in rows),
        "votes.jsonl",
    )
    code, _, err = run(capsys, "agreement", str(path))
    assert code == 2 and "line 3" in err and "--duplicates first" in err
    first = read_votes(path, duplicates="first")
    assert first.votes == [("1", "a", "x"), ("1", "b", "x"), ("2", "a", "y"), ("2", "b", "x")]
    assert first.duplicates_ignored == 2
    last = read_votes(path, duplicates="last")
    assert last.votes == [("1", "a", "z"), ("1", "b", "x"), ("2", "a", "y"), ("2", "b", "x")]
    code, out, _ = run(capsys, "agreement", str(path), "--json", "--duplicates", "last", "--bootstrap", "0")
    data = json.loads(out)
    assert code == 0 and data["source"]["duplicates_ignored"] == 2
    assert data["alpha"] == pytest.approx(kripp(last.votes, "nominal", "xyz".index), abs=1e-9)
