"""Releases end to end, against the real Label Studio: two NLI rounds are written by several writers,
validated by annotators in Label Studio, closed and frozen; release 1.0.0 of round one is made over
HTTP, downloaded as one archive, verified offline by ``dynaval release verify`` and loaded with
``datasets.load_dataset``; release 2.0.0 of both rounds extends it, keeps round one's splits byte
for byte and every writer's split kind. A writer who also annotates voted on their own example: the
vote never counted and is not in the release. Runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_cli import GOOD_SECRETS, clean_environment, run_dynaval
from tests.e2e.test_task_types import Loop, task_service
from tests.fixtures.service import COLLECTOR_TOKEN, LiveService
from tests.support.jobs import built_release
from tests.support.tiny_model import build_tiny_model
from tests.support.waiting import wait_for

pytestmark = pytest.mark.labelstudio

NLI = ("entailment", "neutral", "contradiction")
__all__ = ["task_service"]  # the fixture: the writer is linked to the fourth annotator's account


class WritersLoop(Loop):
    """The loop, with the collector submitting for named writers (so there are many of them)."""

    def submit_for(self, writer: str, inputs: dict[str, str], label: str) -> str:
        response = self.service.call(
            "POST",
            f"/api/rounds/{self.round_id}/candidates",
            token=COLLECTOR_TOKEN,
            json={"inputs": inputs, "writer_label": label, "writer_id": writer},
        )
        assert response.status_code == 201, response.text
        assert response.json()["fooled"], response.text
        return str(response.json()["id"])


SIGHTS = (
    "a red kite", "a brass band", "a fire truck", "a juggler on stilts", "a marching drummer",
    "a float shaped like a whale", "a clown on a unicycle", "a horse carriage", "a dragon puppet",
    "a pipe organ on wheels", "a choir of children", "a giant balloon", "a vintage tractor",
    "a fencing duel", "a troupe of acrobats", "a police motorcycle", "a flock of pigeons", "a magician",
    "a flower garland", "a steam locomotive model", "a samba dancer", "a knight in armour",
    "a pirate ship float", "a fireworks display", "a chess champion", "a beekeeper", "a tiny robot",
    "a snow sculpture", "a violin duet", "a hot dog stand", "a mountain goat", "a rowing team",
)  # fmt: skip
"""What each example's hypothesis says was seen, one each: hypotheses that differ by a number only
("saw event 1") are semantic near-duplicates (MiniLM cosine above 0.8) and would all be one cluster at
release; these stay below 0.7."""


def run_round(
    loop: WritersLoop, model: Path, name: str, writers: list[str], own: bool = False, first_sight: int = 0
) -> list[str]:
    """Two examples per writer, both accepted by annotators A and B; returns the candidate ids."""
    loop.create(model, name)
    ids = []
    for n, writer in enumerate(writers):
        for k in range(2):
            premise = f"{name}: {writer} watched a parade number {k} in the old town."
            hypothesis = f"{writer} saw {SIGHTS[first_sight + 2 * n + k]}."
            label = NLI[0] if (n + k) % 2 else NLI[2]
            ids.append(loop.submit_for(writer, {"premise": premise, "hypothesis": hypothesis}, label))
    if own:  # the writer with a token writes one; they also annotate it, as Label Studio user D
        body = loop.submit({"premise": f"{name}: a cat sleeps.", "hypothesis": "A dog barks."}, NLI[2])
        ids.append(body["id"])
    for candidate_id in ids:
        task = loop.task_id(candidate_id)
        label = loop.candidate(candidate_id)["writer_label"]
        loop.vote(task, "A", label)
        loop.vote(task, "B", label)
        if own and candidate_id == ids[-1]:
            loop.vote(task, "D", label)
    for candidate_id in ids:
        wait_for(
            f"{candidate_id} accepted",
            lambda c=candidate_id: loop.candidate(c)["status"] == "accepted",
            timeout_s=60.0,
        )
    assert loop.service.call("POST", f"/api/rounds/{loop.round_id}/close").status_code == 200
    frozen = loop.service.call("POST", f"/api/rounds/{loop.round_id}/freeze")
    assert frozen.status_code == 200, frozen.text
    return ids


def download(service: LiveService, release_id: int, into: Path) -> Path:
    response = service.call("GET", f"/api/releases/{release_id}/download")
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == "application/x-tar"
    with tarfile.open(fileobj=io.BytesIO(response.content), mode="r:") as archive:
        names = archive.getnames()
        archive.extractall(into, filter="data")
    roots = {name.split("/")[0] for name in names}
    assert len(roots) == 1
    return into / roots.pop()


def jsonl_rows(root: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted((root / "jsonl").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            yield path.stem, json.loads(line)


def test_two_rounds_are_frozen_released_verified_and_loaded(
    task_service: LiveService,
    label_studio_server: Any,
    label_studio_annotators: list[Any],
    tmp_path: Path,
) -> None:
    import datasets

    model = build_tiny_model(tmp_path / "nli-model", labels=NLI, always="neutral")
    loop = WritersLoop(task_service, label_studio_server, label_studio_annotators, "nli")
    loop.annotators["D"] = label_studio_annotators[3]  # the writer's own Label Studio user
    first_writers = [f"writer-{n}" for n in range(6)]
    round_one = run_round(loop, model, "release round one", first_writers, own=True)
    round_one_id = loop.round_id

    made = task_service.call("POST", "/api/releases", json={"rounds": [round_one_id], "version": "1.0.0"})
    first = built_release(task_service, made)  # built as a job by the service's worker
    assert first["version"] == "1.0.0" and first["content_hash"].startswith("sha256:")
    assert first["manifest"]["content_hash"] == first["content_hash"]
    assert first["manifest"]["task_type"] == "nli" and first["manifest"]["parent"] is None
    [round_figures] = first["manifest"]["rounds"]
    assert round_figures["counts"]["accepted"] == len(round_one)
    assert round_figures["alpha_all_validated"]["alpha"] is not None
    listed = task_service.call("GET", "/api/releases").json()["releases"]
    assert [(r["id"], r["version"]) for r in listed] == [(first["id"], "1.0.0")]
    again = task_service.call("POST", "/api/releases", json={"rounds": [round_one_id], "version": "1.0.0"})
    assert again.status_code == 409 and again.json()["error"]["field"] == "version"

    root = download(task_service, first["id"], tmp_path / "download-1")
    env = clean_environment(**GOOD_SECRETS)
    verified = run_dynaval("release", "verify", str(root), env=env, cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    loaded = datasets.load_dataset(str(root))
    assert set(loaded) <= {"train_r1", "dev_r1", "test_r1"} and "train_r1" in loaded
    features = loaded["train_r1"].features
    assert features["label"].names == list(NLI)
    assert {"premise", "hypothesis", "votes", "writer", "model_hash", "decision_outcome"} <= set(features)
    assert sum(d.num_rows for d in loaded.values()) + first["manifest"]["withheld"]["count"] == len(round_one)

    rows = dict((row["example_id"], (split, row)) for split, row in jsonl_rows(root))
    _, own = rows[round_one[-1]]
    assert own["writer_annotator"] is not None
    assert own["writer_annotator"] not in {v["annotator"] for v in own["votes"]}  # D's vote is not there
    assert len(own["votes"]) == 2
    for _split, row in rows.values():
        assert row["premise"] and row["hypothesis"] and row["rationale"] is None
        assert all(v["counted"] for v in row["votes"])

    # Round two: the same writers and three new ones.
    round_two = run_round(
        loop, model, "release round two", [*first_writers, "writer-6", "writer-7", "writer-8"], first_sight=12
    )
    made = task_service.call(
        "POST",
        "/api/releases",
        json={"rounds": [round_one_id, loop.round_id], "version": "2.0.0", "license": "cc-by-4.0"},
    )
    second = built_release(task_service, made)
    assert second["manifest"]["parent"] == {"version": "1.0.0", "content_hash": first["content_hash"]}
    root_two = download(task_service, second["id"], tmp_path / "download-2")
    verified = run_dynaval("release", "verify", str(root_two), env=env, cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    for path in (root / "jsonl").glob("*_r1.jsonl"):  # round one's splits, byte for byte
        assert (root_two / "jsonl" / path.name).read_bytes() == path.read_bytes()
    kinds: dict[str, set[str]] = {}
    for split, row in jsonl_rows(root_two):
        kinds.setdefault(row["writer"], set()).add(split.split("_r")[0])
    assert all(len(k) == 1 for k in kinds.values()), kinds  # sticky: one kind per writer, both rounds
    assert len({row["example_id"] for _s, row in jsonl_rows(root_two)}) + second["manifest"]["withheld"][
        "count"
    ] == len(round_one) + len(round_two)
    loaded = datasets.load_dataset(str(root_two))
    assert any(name.endswith("_r2") for name in loaded)

    page = task_service.call("GET", "/dashboard/releases").text
    assert "dynaval-nli 2.0.0" in page and "dynaval-nli 1.0.0" in page
    card = task_service.call("GET", f"/dashboard/releases/{second['id']}").text
    assert "<table>" in card and "Never train on a dev or test split" in card and "cc-by-4.0" in card
