"""`dynaval agreement` on exports made by a real Label Studio 1.23.2.

One module-scoped fixture builds one project whose labelling config has every kind of control
people use (a multi-choice ``Choices``, a ``Taxonomy``, a ``Rating``, a ``Number``, a span
``Labels`` control and a single ``Choices`` beside it), has four annotators annotate it through
their own API tokens (cancelled annotations, one annotator annotating a task twice, tasks left
unannotated, ground-truth marks from the admin), then exports it as JSON and JSON-MIN. Label Studio
1.23 can no longer export the old form with ``completions``; it is derived from the JSON export by
renaming the key, as older exports look. Every figure is checked against an independent
implementation fed with what the test posted (not with what dynaval read): the ``krippendorff``
package, and nltk's ``AnnotationTask`` with the MASI distance for set-valued answers, to 1e-9.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import krippendorff
import numpy as np
import pytest
from label_studio_sdk.client import LabelStudio
from nltk.metrics.agreement import AnnotationTask
from nltk.metrics.distance import masi_distance

from dynaval.entrypoints.cli.main import main
from tests.support.label_studio_server import Annotator, LabelStudioServer

pytestmark = pytest.mark.labelstudio

CONFIG = """<View>
  <Text name="text" value="$text"/>
  <Choices name="sentiment" toName="text" choice="single">
    <Choice value="pos"/><Choice value="neg"/><Choice value="neu"/>
  </Choices>
  <Choices name="tags" toName="text" choice="multiple">
    <Choice value="a"/><Choice value="b"/><Choice value="c"/><Choice value="d"/>
  </Choices>
  <Taxonomy name="topic" toName="text">
    <Choice value="A"><Choice value="A1"/><Choice value="A2"/></Choice>
    <Choice value="B"><Choice value="B1"/><Choice value="B2"/></Choice>
  </Taxonomy>
  <Rating name="stars" toName="text" maxRating="5"/>
  <Number name="score" toName="text" min="0" max="10"/>
  <Labels name="ner" toName="text"><Label value="PER"/><Label value="ORG"/></Labels>
</View>"""
TASKS = 14
UNANNOTATED = (12, 13)
GOLD_TASKS = range(6)
TREE = {"A": ["A1", "A2"], "B": ["B1", "B2"]}


@dataclass
class Posted:
    """What the test posted: every counted answer per control, as (task, annotator, value)."""

    answers: dict[str, list[tuple[str, str, Any]]] = field(default_factory=dict)
    gold: dict[str, str] = field(default_factory=dict)
    """Task -> the admin's ground-truth sentiment."""
    admin: str = ""

    def of(self, control: str, *, with_gold: bool = True) -> list[tuple[str, str, Any]]:
        return [v for v in self.answers[control] if with_gold or v[1] != self.admin]


@dataclass
class Exports:
    json: Path
    json_min: Path
    completions: Path
    posted: Posted


def own_client(server: LabelStudioServer, annotator: Annotator) -> LabelStudio:
    """A client with the annotator's own personal access token (made after a login, as in the UI)."""
    session = server.log_in(annotator)
    try:
        response = session.post(
            "/api/token/",
            headers={"X-CSRFToken": session.cookies.get("csrftoken") or "", "Referer": f"{server.url}/"},
        )
    finally:
        session.close()
    assert response.status_code in (200, 201), response.text
    return LabelStudio(base_url=server.url, api_key=str(response.json()["token"]))


def truth_of(task: int) -> dict[str, Any]:
    r = random.Random(task)
    top = r.choice(list(TREE))
    return {
        "sentiment": r.choice(["pos", "neg", "neu"]),
        "tags": sorted(r.sample("abcd", 1 + task % 3)),
        "topic": [[top, r.choice(TREE[top])]],
        "stars": 1 + task % 5,
        "score": float(task % 7),
    }


def random_answer(rng: random.Random, truth: dict[str, Any]) -> dict[str, Any]:
    """One annotator's answer to every control: the task's truth, with disagreement."""
    tags = set(truth["tags"])
    if rng.random() < 0.5:
        tags ^= {rng.choice("abcd")}
    paths = [list(p) for p in truth["topic"]]
    if rng.random() < 0.4:
        top = rng.choice(list(TREE))
        paths = [[top, rng.choice(TREE[top])]] + ([paths[0]] if rng.random() < 0.5 else [])
    return {
        "sentiment": truth["sentiment"] if rng.random() < 0.7 else rng.choice(["pos", "neg", "neu"]),
        "tags": sorted(tags or {"a"}),
        "topic": paths,
        "stars": min(5, max(1, truth["stars"] + rng.choice([-1, 0, 0, 1]))),
        "score": round(truth["score"] + rng.choice([-1.5, 0.0, 0.5, 1.0]), 1),
    }


def result(answer: dict[str, Any]) -> list[dict[str, Any]]:
    def region(name: str, kind: str, value: dict[str, Any]) -> dict[str, Any]:
        return {"from_name": name, "to_name": "text", "type": kind, "value": value}

    return [
        region("sentiment", "choices", {"choices": [answer["sentiment"]]}),
        region("tags", "choices", {"choices": answer["tags"]}),
        region("topic", "taxonomy", {"taxonomy": answer["topic"]}),
        region("stars", "rating", {"rating": answer["stars"]}),
        region("score", "number", {"number": answer["score"]}),
        region("ner", "labels", {"start": 0, "end": 4, "text": "task", "labels": ["ORG"]}),
    ]


def record(posted: Posted, task: str, who: str, answer: dict[str, Any]) -> None:
    """The answer replaces any earlier one of the same annotator on the task (the latest counts)."""
    for control in ("sentiment", "tags", "topic", "stars", "score"):
        rows = posted.answers.setdefault(control, [])
        rows[:] = [r for r in rows if (r[0], r[1]) != (task, who)]
        rows.append((task, who, answer[control]))


@pytest.fixture(scope="module")
def exports(
    label_studio_server: LabelStudioServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Exports:
    server = label_studio_server
    admin = server.client
    project = admin.projects.create(title="agreement exports", label_config=CONFIG)
    texts = [{"text": f"task {k}"} for k in range(TASKS)]
    imported = admin.projects.import_tasks(id=project.id, request=texts, return_task_ids=True)
    task_ids = [int(t) for t in imported.task_ids or []]
    rng = random.Random(17)
    posted = Posted(admin=str(server.admin_user_id))
    # Users of their own: a personal access token is made once per user, and the shared annotators
    # of the test session may need theirs elsewhere.
    for k, annotator in enumerate(server.create_annotators(4, prefix="exporter")):
        client = own_client(server, annotator)
        who = str(annotator.id)
        for t, task_id in enumerate(task_ids):
            if t in UNANNOTATED or (t + k) % 5 == 4:  # some tasks get three annotators, not four
                continue
            base = truth_of(t)
            answer = random_answer(rng, base)
            if k == 0 and t == 3:  # a cancelled (skipped) annotation, with a result: not a vote
                client.annotations.create(id=task_id, result=result(answer), was_cancelled=True)
                continue
            client.annotations.create(id=task_id, result=result(answer))
            record(posted, str(task_id), who, answer)
            if k == 1 and t in (4, 7):  # the same annotator annotates the task again: the latest counts
                again = random_answer(rng, base)
                client.annotations.create(id=task_id, result=result(again))
                record(posted, str(task_id), who, again)
    for t in GOLD_TASKS:  # the admin's ground-truth annotation
        gold = random_answer(random.Random(100 + t), truth_of(t))
        admin.annotations.create(id=task_ids[t], result=result(gold), ground_truth=True)
        record(posted, str(task_ids[t]), posted.admin, gold)
        posted.gold[str(task_ids[t])] = gold["sentiment"]
    folder = tmp_path_factory.mktemp("exports")
    paths = {}
    headers = {"Authorization": f"Token {server.api_key}"}
    for kind in ("JSON", "JSON_MIN"):
        response = httpx.get(
            f"{server.url}/api/projects/{project.id}/export",
            params={"exportType": kind, "download_all_tasks": "true"},
            headers=headers,
            timeout=60.0,
        )
        assert response.status_code == 200, response.text[:300]
        paths[kind] = folder / f"{kind.lower()}.json"
        paths[kind].write_bytes(response.content)
    tasks = json.loads(paths["JSON"].read_text(encoding="utf-8"))
    assert any(a.get("ground_truth") for task in tasks for a in task["annotations"])
    old = [{("completions" if k == "annotations" else k): v for k, v in task.items()} for task in tasks]
    paths["old"] = folder / "completions.json"
    paths["old"].write_text(json.dumps(old), encoding="utf-8")
    return Exports(paths["JSON"], paths["JSON_MIN"], paths["old"], posted)


def agreement(capsys: pytest.CaptureFixture[str], path: Path, *args: str) -> dict[str, Any]:
    code = main(["agreement", str(path), "--json", "--bootstrap", "0", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return dict(json.loads(out))


def refused(capsys: pytest.CaptureFixture[str], path: Path, *args: str) -> str:
    code = main(["agreement", str(path), *args])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    return err


def kripp(votes: list[tuple[str, str, Any]], level: str, code: Callable[[Any], float] = float) -> float:
    items = sorted({i for i, _, _ in votes})
    who = sorted({a for _, a, _ in votes})
    data = np.full((len(who), len(items)), np.nan)
    for item, annotator, value in votes:
        data[who.index(annotator), items.index(item)] = code(value)
    return float(krippendorff.alpha(reliability_data=data, level_of_measurement=level))


def nltk_masi(votes: list[tuple[str, str, frozenset[str]]]) -> float:
    return float(AnnotationTask(data=[(a, i, s) for i, a, s in votes], distance=masi_distance).alpha())


def test_single_choice_with_ground_truth_included_excluded_and_as_gold(
    exports: Exports, capsys: pytest.CaptureFixture[str]
) -> None:
    posted = exports.posted
    labels = ["neg", "neu", "pos"]
    for path in (exports.json, exports.completions):
        data = agreement(capsys, path, "--from-name", "sentiment")
        assert data["alpha"] == pytest.approx(
            kripp(posted.of("sentiment"), "nominal", labels.index), abs=1e-9
        )
        assert data["source"]["cancelled_ignored"] == 1 and data["source"]["superseded_ignored"] == 2
        assert data["source"]["votes_read"] == len(posted.of("sentiment"))
    without = posted.of("sentiment", with_gold=False)
    excluded = agreement(capsys, exports.json, "--from-name", "sentiment", "--ground-truth", "exclude")
    assert excluded["alpha"] == pytest.approx(kripp(without, "nominal", labels.index), abs=1e-9)
    assert excluded["source"]["ground_truth_ignored"] == len(GOLD_TASKS)
    gold = agreement(capsys, exports.json, "--from-name", "sentiment", "--ground-truth", "gold")
    assert gold["alpha"] == excluded["alpha"]
    rows = {row["annotator"]: row for row in gold["gold"]["per_annotator"]}
    for who in {a for _, a, _ in without}:
        mine = [label == posted.gold[item] for item, a, label in without if a == who and item in posted.gold]
        assert (rows[who]["items"], rows[who]["correct"]) == (len(mine), sum(mine))
    assert gold["gold"]["gold_items"] == len(GOLD_TASKS)
    assert gold["gold"]["majority"]["items"] == len(GOLD_TASKS)


def test_multi_choice_is_set_valued_with_masi_and_per_choice_alpha(
    exports: Exports, capsys: pytest.CaptureFixture[str]
) -> None:
    sets = [(i, a, frozenset(v)) for i, a, v in exports.posted.of("tags")]
    assert any(len(s) > 1 for _, _, s in sets)
    for path in (exports.json, exports.completions):
        data = agreement(capsys, path, "--from-name", "tags")
        assert data["level"] == "masi"
        assert data["alpha"] == pytest.approx(nltk_masi(sets), abs=1e-9)
        for row in data["per_choice"]:
            binary = [(i, a, float(row["choice"] in s)) for i, a, s in sets]
            assert row["alpha"] == pytest.approx(kripp(binary, "nominal"), abs=1e-9)
        assert [row["choice"] for row in data["per_choice"]] == ["a", "b", "c", "d"]


@pytest.mark.parametrize("depth", [None, 1])
def test_taxonomy_paths_cut_at_a_depth(
    exports: Exports, capsys: pytest.CaptureFixture[str], depth: int | None
) -> None:
    sets = [
        (i, a, frozenset(" / ".join(p[:depth]) for p in paths)) for i, a, paths in exports.posted.of("topic")
    ]
    assert any(len(s) > 1 for _, _, s in sets)
    args = ["--from-name", "topic"] + (["--taxonomy-depth", str(depth)] if depth else [])
    data = agreement(capsys, exports.json, *args)
    assert data["level"] == "masi" and data["alpha"] == pytest.approx(nltk_masi(sets), abs=1e-9)


def test_rating_and_number_are_numeric(exports: Exports, capsys: pytest.CaptureFixture[str]) -> None:
    stars, score = exports.posted.of("stars"), exports.posted.of("score")
    data = agreement(capsys, exports.json, "--from-name", "stars")
    assert data["level"] == "ordinal" and data["alpha"] == pytest.approx(kripp(stars, "ordinal"), abs=1e-9)
    data = agreement(capsys, exports.json, "--from-name", "stars", "--level", "interval")
    assert data["alpha"] == pytest.approx(kripp(stars, "interval"), abs=1e-9)
    data = agreement(capsys, exports.completions, "--from-name", "score")
    assert data["level"] == "interval" and data["alpha"] == pytest.approx(kripp(score, "interval"), abs=1e-9)


def test_spans_json_min_and_unchosen_controls_are_refused_by_name(
    exports: Exports, capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(capsys, exports.json, "--from-name", "ner")
    assert "ner (labels)" in err and "'ner' cannot be used" in err
    assert "usable: score, sentiment, stars, tags, topic" in err
    assert "pick one with --from-name" in refused(capsys, exports.json)
    err = refused(capsys, exports.json_min, "--from-name", "sentiment")
    assert "JSON-MIN" in err and "exportType=JSON" in err
