"""The regression suite, the model catalog, evaluation and the gate, on SQLite and PostgreSQL, with
real (tiny) transformers models over a real release built from a seeded database.

The models ignore their input (``always``): A answers "positive", B "negative", A2 is another
"positive" model (other weights, another hash) and so keeps every case A passes. The seeded round's
model was wrong on every example (the seed makes every accepted example a fooling one).
"""

from __future__ import annotations

import json
import random
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import select

from dynaval.adapters.predictor import hash_model_folder
from dynaval.domain.errors import InvalidInput
from dynaval.domain.jobs.job import JobState
from dynaval.domain.releases.release import SplitRule
from dynaval.entrypoints.cli import main as cli
from dynaval.service_layer.jobs import jobs
from dynaval.service_layer.regression import evaluation, gate, model_catalog
from dynaval.service_layer.regression import suite as regression_suite
from dynaval.service_layer.releases.releases import ReleaseRequest, create_release
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation import rounds
from tests.fixtures.service import EXPORTER_TOKEN, LEAD_TOKEN, cli_environment
from tests.support.label_studio_copy import LabelStudioCopy
from tests.support.release_seed import seed_frozen_round
from tests.support.tiny_model import build_tiny_model

SENTIMENT = ["positive", "negative", "neutral"]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("regression-models")
    return {
        "A": build_tiny_model(root / "model-a", always="positive"),
        "B": build_tiny_model(root / "model-b", always="negative"),
        "A2": build_tiny_model(root / "model-a2", always="positive", seed=1),
    }


@pytest.fixture
def release_dir(services: Services) -> Path:
    assert services.database is not None
    round_id = seed_frozen_round(
        services.database, task_type="sentiment", labels=SENTIMENT, fields=["text"], accepted=120,
        writers=30, rng=random.Random(7), weak_share=0.0, name="round one",
    ).round_id  # fmt: skip
    made = create_release(
        services,
        ReleaseRequest(round_ids=[round_id], version="1.0.0", created_by="test lead", rule=SplitRule()),
    )
    return Path(made.folder)


def suite_rows(root: Path) -> list[dict[str, Any]]:
    rows = []
    for split in ("dev_r1", "test_r1"):
        with (root / "jsonl" / f"{split}.jsonl").open() as handle:
            rows += [json.loads(line) | {"split": split} for line in handle]
    return rows


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_release_puts_its_dev_and_test_examples_in_the_suite(services: Services, release_dir: Path) -> None:
    rows = suite_rows(release_dir)
    cases = regression_suite.list_cases(services)
    assert {c.id for c in cases} == {r["example_id"] for r in rows} and len(rows) > 10
    by_id = {r["example_id"]: r for r in rows}
    for c in cases:
        assert c.split == by_id[c.id]["split"] and c.label == by_id[c.id]["label"]
        assert c.inputs == {"text": by_id[c.id]["text"]}
        assert c.source == "release:dynaval-sentiment@1.0.0"
        assert c.round_model_prediction == by_id[c.id]["model_prediction"] != c.label
        assert not c.suspect and not c.confirmed and c.retired_at is None
    added = {c.added_at for c in cases}  # all at the release's storing
    assert len(added) == 1 and None not in added
    assert regression_suite.sync_suite(services) == 0  # idempotent: nothing more to take


def test_accepted_captures_of_frozen_rounds_join_the_suite(services: Services) -> None:
    from sqlalchemy import insert, update

    from dynaval.adapters.db.orm import CandidateRow, CaptureRow, RoundRow

    assert services.database is not None
    frozen = seed_frozen_round(
        services.database, task_type="sentiment", labels=SENTIMENT, fields=["text"], accepted=3,
        rejected=1, writers=2, rng=random.Random(11), name="captures",
    )  # fmt: skip
    open_ = seed_frozen_round(
        services.database, task_type="sentiment", labels=SENTIMENT, fields=["text"], accepted=2,
        writers=2, rng=random.Random(12), name="captures, not frozen", annotation_base=10**6,
    )  # fmt: skip
    at = datetime(2026, 11, 30, tzinfo=UTC)
    with services.database.engine.begin() as connection:
        connection.execute(update(RoundRow).where(RoundRow.id == open_.round_id).values(state="closed"))
        # Every candidate of both rounds is a capture: the frozen round's rejected one too.
        candidates = connection.execute(
            select(CandidateRow.id, CandidateRow.round_id, CandidateRow.writer_label)
        ).all()
        assert len(candidates) == 6
        connection.execute(
            insert(CaptureRow),
            [
                {"candidate_id": c, "round_id": r, "source": "monitoring", "observed_output": "positive",
                 "model_name": "prod", "model_version": "7", "observed_at": at, "reference": None,
                 "reporter": "monitor", "reported_at": at}
                for c, r, _label in candidates
            ],
        )  # fmt: skip
    labels = {c: label for c, _r, label in candidates}
    assert regression_suite.sync_suite(services) == 3  # the frozen round's accepted ones
    cases = regression_suite.list_cases(services)
    assert {c.id for c in cases} == set(frozen.candidate_ids)  # the accepted ones
    for c in cases:
        assert c.split == "capture" and c.source == "capture:monitoring" and c.round_id == frozen.round_id
        assert c.label == labels[c.id]
    assert regression_suite.sync_suite(services) == 0

    # A capture round is never released: in a train split its cases would become training data.
    with services.database.engine.begin() as connection:
        connection.execute(update(RoundRow).where(RoundRow.id == frozen.round_id).values(kind="capture"))
    with pytest.raises(InvalidInput) as refused:
        create_release(
            services,
            ReleaseRequest(round_ids=[frozen.round_id], version="1.0.0", created_by="lead", rule=SplitRule()),
        )
    assert refused.value.field == "rounds" and "capture round" in refused.value.message


def test_gate_fails_with_the_flips_listed_for_a_model_that_loses_cases(
    services: Services,
    release_dir: Path,
    models: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli_environment(services, monkeypatch)
    rows = suite_rows(release_dir)
    positive = sorted(r["example_id"] for r in rows if r["label"] == "positive")
    assert positive

    code, out, _ = run(capsys, "models", "register", str(models["A"]), "--name", "model A")
    hash_a = out.strip()
    assert code == 0 and hash_a == hash_model_folder(models["A"])
    assert run(capsys, "models", "register", str(models["A"]))[1].strip() == hash_a  # idempotent
    assert [m.hash for m in model_catalog.list_models(services)] == [hash_a]

    code, _, err = run(capsys, "gate", "--candidate", str(models["B"]))
    assert code == 2 and "no model is shipped" in err and "Traceback" not in err

    code, out, _ = run(capsys, "models", "ship", "--model", hash_a, "--reason", "first release")
    assert code == 0 and "shipped" in out
    code, out, _ = run(capsys, "models", "list", "--json")
    (listed,) = json.loads(out)["models"]
    assert listed["shipped"] and listed["shipped_reason"] == "first release" and listed["name"] == "model A"

    code, out, _ = run(capsys, "evaluate", "--model", str(models["A"]), "--json")
    report = json.loads(out)
    assert code == 0 and report["cases"] == len(rows)
    assert report["overall"]["correct"] == len(positive)
    assert set(report["by_split"]) == {"dev_r1", "test_r1"}
    for figures in report["by_split"].values():
        assert figures["round_model"]["accuracy"] == 0.0  # the round's model was fooled by each
        low, high = figures["model"]["ci95"]
        assert low <= figures["model"]["accuracy"] <= high
    assert report["by_label"]["positive"]["model"]["accuracy"] == 1.0
    assert report["by_label"]["negative"]["model"]["accuracy"] == 0.0

    # B loses every positive case A passed: the gate fails and lists each of them.
    code, out, _ = run(capsys, "gate", "--candidate", str(models["B"]))
    assert code == 1 and out.startswith("gate FAIL")
    flip_lines = [line for line in out.splitlines() if line.strip().startswith("flip ")]
    assert sorted(line.split()[1] for line in flip_lines) == positive
    assert all("label positive, baseline positive, candidate negative" in line for line in flip_lines)
    assert "McNemar (exact binomial)" in out or "McNemar (chi-square" in out

    code, out, _ = run(capsys, "gate", "--candidate", str(models["B"]), "--json")
    data = json.loads(out)
    assert code == 1 and data["passed"] is False and len(data["negative_flips"]) == len(positive)
    flip = data["negative_flips"][0]
    assert set(flip) >= {
        "case_id",
        "round_id",
        "inputs",
        "label",
        "baseline_prediction",
        "candidate_prediction",
    }
    negative = sum(1 for r in rows if r["label"] == "negative")
    assert data["positive_flips"] == negative
    assert data["mcnemar"]["p_value"] is not None
    assert {s: f["change"] for s, f in data["per_round"].items()}.keys() == {"dev_r1", "test_r1"}

    # A2 keeps every case A passed; B passes with enough tolerance.
    code, out, _ = run(capsys, "gate", "--candidate", str(models["A2"]), "--json")
    kept = json.loads(out)
    assert code == 0 and kept["passed"] and kept["negative_flips"] == [] and kept["positive_flips"] == 0
    assert run(capsys, "gate", "--candidate", str(models["B"]), "--max-flips", str(len(positive)))[0] == 0
    assert run(capsys, "gate", "--candidate", str(models["B"]), "--baseline", str(models["A2"]))[0] == 1

    # Bad input: exit 2 with one line.
    for argv in (
        ("gate", "--candidate", str(release_dir)),  # no model there
        ("gate", "--candidate", str(models["B"]), "--baseline", "sha256:" + "0" * 64),
        ("gate", "--candidate", str(models["B"]), "--max-flips", "-1"),
    ):
        code, _, err = run(capsys, *argv)
        assert code == 2 and len(err.strip().splitlines()) == 1, (argv, err)

    # The recorded runs, and a case's history: A passed it first, B flipped it.
    runs = gate.gate_runs(services)
    assert [r["passed"] for r in runs] == [False, True, True, False, False]  # newest first
    assert len(runs[0]["negative_flips"]) == len(positive) and runs[0]["baseline"].startswith("model ")
    code, out, _ = run(capsys, "suite", "case", "--case", positive[0], "--json")
    history = json.loads(out)["history"]
    assert history["first_passed"]["model"] == hash_a
    assert [f["model"] for f in history["flipped_by"]] == [hash_model_folder(models["B"])]
    code, out, _ = run(capsys, "suite", "case", "--case", positive[0])
    assert "flipped right to wrong by: sha256:" in out


def test_evaluate_a_release_folder_and_refuse_one_that_fails_verification(
    services: Services,
    release_dir: Path,
    models: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli_environment(services, monkeypatch)
    code, out, _ = run(capsys, "evaluate", "--model", str(models["A"]), "--release", str(release_dir))
    assert code == 0 and "dev_r1:" in out and "test_r1:" in out and "round's own model" in out
    tampered = tmp_path / "tampered"
    shutil.copytree(release_dir, tampered)
    (tampered / "jsonl" / "dev_r1.jsonl").write_text("")
    code, _, err = run(capsys, "evaluate", "--model", str(models["A"]), "--release", str(tampered))
    assert code == 2 and "fails release verification" in err


def test_retiring_is_logged_and_suspects_are_marked_after_three_models(
    services: Services,
    release_dir: Path,
    models: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli_environment(services, monkeypatch)
    rows = suite_rows(release_dir)
    neutral = {r["example_id"] for r in rows if r["label"] == "neutral"}
    evaluation.evaluate(services, models["A"])
    evaluation.evaluate(services, models["B"])
    assert regression_suite.list_cases(services, suspect=True) == []  # two models are not enough
    done = evaluation.evaluate(services, models["A2"])
    assert done.suspects_marked == len(neutral)  # no model answers "neutral"
    code, out, _ = run(capsys, "suite", "list", "--suspect", "--json")
    assert {c["id"] for c in json.loads(out)["cases"]} == neutral

    retired_id = sorted(neutral)[0]
    code, out, _ = run(capsys, "suite", "retire", "--case", retired_id, "--reason", "label is wrong")
    assert code == 0 and "retired" in out
    with services.uow(read_only=True) as uow:
        (event,) = uow.audit.of_candidate(retired_id)
    assert event.action == "retire_case" and event.reason == "label is wrong" and event.by.startswith("cli")
    code, out, _ = run(capsys, "suite", "list", "--retired", "--json")
    (retired,) = json.loads(out)["cases"]
    assert retired["id"] == retired_id and retired["retired_reason"] == "label is wrong"
    again = evaluation.evaluate(services, models["A"])
    assert retired_id not in again.results and len(again.results) == len(rows) - 1
    code, _, err = run(capsys, "suite", "retire", "--case", retired_id, "--reason", "twice")
    assert code == 2 and "retired already" in err
    assert run(capsys, "suite", "retire", "--case", "no-such-case", "--reason", "x")[0] == 2


def test_a_suspect_mark_clears_when_a_later_model_gets_the_case_right(
    services: Services, release_dir: Path, models: dict[str, Path], tmp_path: Path
) -> None:
    neutral = {r["example_id"] for r in suite_rows(release_dir) if r["label"] == "neutral"}
    for key in ("A", "B", "A2"):
        evaluation.evaluate(services, models[key])
    assert {c.id for c in regression_suite.list_cases(services, suspect=True)} == neutral
    evaluation.evaluate(services, build_tiny_model(tmp_path / "neutral", always="neutral"))
    assert regression_suite.list_cases(services, suspect=True) == []  # a model got them right


def test_the_gate_compares_the_folder_as_it_is_now_and_never_passes_on_nothing(
    services: Services, release_dir: Path, models: dict[str, Path], tmp_path: Path
) -> None:
    rows = suite_rows(release_dir)
    positive = {r["example_id"] for r in rows if r["label"] == "positive"}
    a_hash = evaluation.evaluate(services, models["A"]).model.hash
    # One process (as POST /api/gate is): a folder that passed, then replaced by a model that loses
    # every positive case, is evaluated again as what it holds now, and fails.
    folder = tmp_path / "candidate"
    shutil.copytree(models["A2"], folder)
    assert gate.run_gate(services, folder, baseline=a_hash, by="lead").result.passed
    shutil.rmtree(folder)
    build_tiny_model(folder, always="negative", seed=3)
    replaced = gate.run_gate(services, folder, baseline=a_hash, by="lead").result
    assert not replaced.passed and {f.case.id for f in replaced.negative_flips} == positive

    # A folder that does not load is refused naming the candidate, and nothing is registered.
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}", encoding="utf-8")
    before = {m.hash for m in model_catalog.list_models(services)}
    with pytest.raises(InvalidInput) as refused:
        gate.run_gate(services, broken, baseline=a_hash, by="lead")
    assert refused.value.field == "candidate" and "\n" not in refused.value.message
    assert {m.hash for m in model_catalog.list_models(services)} == before

    # A baseline with no result and no folder left: nothing to compare, so no pass.
    gone = tmp_path / "gone"
    shutil.copytree(models["B"], gone)
    (gone / "marker.txt").write_text("another hash", encoding="utf-8")
    gone_hash = model_catalog.register_model(services, gone).hash
    shutil.rmtree(gone)
    with pytest.raises(InvalidInput) as nothing:
        gate.run_gate(services, models["A2"], baseline=gone_hash, by="lead")
    assert nothing.value.field == "baseline" and "nothing to compare" in nothing.value.message


class ProjectMaker(LabelStudioCopy):
    """Our Label Studio port's fake, making projects and webhooks too (a round's creation asks)."""

    def create_project(self, *, title: str, label_config: str, overlap: int) -> int:
        return self.project_id

    def register_webhook(self, *, project_id: int, url: str, secret: str) -> int:
        return 1


def test_a_round_registers_its_pinned_model(services: Services, models: dict[str, Path]) -> None:
    services.label_studio = ProjectMaker(project_id=77)  # type: ignore[assignment]
    rounds.create_round(services, name="round with A", task="sentiment", model=str(models["A"]), policy=None)
    (model,) = model_catalog.list_models(services)
    assert model.hash == hash_model_folder(models["A"]) and model.folder == str(models["A"])


def ran(services: Services, answer: Any) -> dict[str, Any]:
    """The result of the job a route queued (``202``), run here: this app has no worker."""
    assert answer.status_code == 202, answer.json
    assert answer.headers["Location"] == f"/api/jobs/{answer.json['id']}"
    job = jobs.run_job(services, answer.json["id"])
    assert job is not None and job.state is JobState.DONE and job.result is not None, job
    return job.result


def test_post_gate(app: Flask, services: Services, release_dir: Path, models: dict[str, Path]) -> None:
    client = app.test_client()
    lead = {"Authorization": f"Bearer {LEAD_TOKEN}"}
    exporter = {"Authorization": f"Bearer {EXPORTER_TOKEN}"}

    answer = client.post("/api/gate", json={"candidate": str(models["B"])}, headers=lead)
    assert answer.status_code == 422 and answer.json["error"]["field"] == "baseline"
    answer = client.post("/api/gate", json={"candidate": "model-b"}, headers=lead)
    assert answer.status_code == 422 and answer.json["error"]["field"] == "candidate"
    answer = client.post("/api/gate", json={"candidate": str(models["B"]), "max_flips": -1}, headers=lead)
    assert answer.status_code == 422 and answer.json["error"]["field"] == "max_flips"
    answer = client.post("/api/gate", json={"candidate": str(models["B"])}, headers=exporter)
    assert answer.status_code == 403

    answer = client.post(
        "/api/gate", json={"candidate": str(models["B"]), "baseline": str(models["A"])}, headers=lead
    )
    body = ran(services, answer)
    positive = {r["example_id"] for r in suite_rows(release_dir) if r["label"] == "positive"}
    assert body["passed"] is False and {f["case_id"] for f in body["negative_flips"]} == positive
    assert body["positive_flips"] > 0 and set(body["per_round"]) == {"dev_r1", "test_r1"}
    assert body["mcnemar"]["p_value"] is not None and isinstance(body["gate_run_id"], int)
    hash_a = hash_model_folder(models["A"])
    answer = client.post("/api/gate", json={"candidate": str(models["A2"]), "baseline": hash_a}, headers=lead)
    assert ran(services, answer)["passed"] is True
    # Checked before anything is queued: an unknown baseline hash, a baseline folder that is no model.
    for baseline in ("sha256:" + "0" * 64, "/no/such/model"):
        refused = client.post(
            "/api/gate", json={"candidate": str(models["A2"]), "baseline": baseline}, headers=lead
        )
        assert refused.status_code == 422 and refused.json["error"]["field"] == "baseline"
    # The same model's evaluation, as a job of its own.
    evaluated = ran(
        services, client.post("/api/models/evaluate", json={"model": str(models["A2"])}, headers=lead)
    )
    assert evaluated["model"]["hash"] == hash_model_folder(models["A2"]) and set(evaluated["by_split"]) == {
        "dev_r1", "test_r1",
    }  # fmt: skip
    refused = client.post("/api/models/evaluate", json={"model": "relative/folder"}, headers=lead)
    assert refused.status_code == 422 and refused.json["error"]["field"] == "model"
    # One gate of a candidate folder at a time: a second, while the first waits, is refused.
    waiting = client.post("/api/gate", json={"candidate": str(models["B"]), "baseline": hash_a}, headers=lead)
    assert waiting.status_code == 202
    twice = client.post("/api/gate", json={"candidate": str(models["B"]), "baseline": hash_a}, headers=lead)
    assert twice.status_code == 409 and twice.json["error"]["field"] == "candidate"
    cancelled = client.post(f"/api/jobs/{waiting.json['id']}/cancel", headers=lead)
    assert cancelled.status_code == 200 and cancelled.json["state"] == "cancelled"

    runs = client.get("/api/gate-runs", headers=lead).json["gate_runs"]
    assert [r["passed"] for r in runs] == [True, False]
    listed = client.get("/api/models", headers=exporter).json["models"]
    assert {m["hash"] for m in listed} >= {hash_a} and all("folder" not in m for m in listed)
    assert "folder" in client.get("/api/models", headers=lead).json["models"][0]
