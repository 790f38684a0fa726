"""Training as a job, over HTTP and from the command line, on both databases: a lead posts a
training request and gets ``202`` with the job's URL; the service's own worker (a real task-queue
consumer) verifies the release, fine-tunes a tiny BERT on its train split on the CPU, registers the
model and records the result; the lead watches its progress, lists jobs, cancels one (its partial
output is removed) and follows one with ``dynaval jobs wait``.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dynaval.bootstrap import bootstrap
from dynaval.domain.images.image import ImageUpload
from dynaval.entrypoints.cli.main import main
from dynaval.service_layer.images import stored_images
from tests.e2e.test_dashboard_pages import PageIds
from tests.fixtures.service import (
    WRITER_TOKEN,
    LiveService,
    cli_environment,
    free_port,
    listening,
    make_settings,
)
from tests.support.drawings import draw_digit, png_bytes
from tests.support.jobs import built_release
from tests.support.release_seed import seed_frozen_round
from tests.support.tiny_image_model import build_tiny_image_model

SENTIMENT = ("positive", "negative", "neutral")
WAIT_S = 240.0


@pytest.fixture
def training_service(database_url: str, tmp_path: Path) -> Iterator[LiveService]:
    """The service with its embedded worker, over a released frozen round; Label Studio is never
    called (nothing is live)."""
    port = free_port()
    settings = make_settings(
        database_url=database_url,
        data_dir=tmp_path / "data",
        label_studio_url="http://127.0.0.1:9",
        label_studio_api_key="unused-label-studio-key",
        public_url=f"http://127.0.0.1:{port}",
        model_dir=tmp_path,
        job_heartbeat_s=0.5,
    )
    with listening(bootstrap(settings), port, start_background=True) as live:
        yield live


def released(live: LiveService) -> int:
    database = live.services.database
    assert database is not None
    seeded = seed_frozen_round(
        database, task_type="sentiment", labels=SENTIMENT, fields=["text"], accepted=60, writers=20,
        rng=random.Random(5), name="round one",
    )  # fmt: skip
    made = built_release(
        live, live.call("POST", "/api/releases", json={"rounds": [seeded.round_id], "version": "1.0.0"})
    )
    release_id: int = made["id"]
    return release_id


def wait_for(live: LiveService, job_id: int, *, until: tuple[str, ...]) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        job: dict[str, Any] = live.call("GET", f"/api/jobs/{job_id}").json()
        if job["state"] in until:
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} is still {job['state']} after {WAIT_S} s: {job}")


def assert_refused(response: Any, status: int, field: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"]["field"] == field, response.text


def test_a_lead_trains_a_model_as_a_job_and_watches_it(
    training_service: LiveService, tiny_model_dir_mixed: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    live = training_service
    release_id = released(live)
    order = {"releases": [release_id], "base": str(tiny_model_dir_mixed), "name": "model-b", "epochs": 2}

    answer = live.call("POST", "/api/models/train", json=order)
    assert answer.status_code == 202, answer.text
    job = answer.json()
    assert answer.headers["Location"] == f"/api/jobs/{job['id']}"
    assert (job["kind"], job["state"]) == ("train", "queued") and job["created_by"].startswith("lead")
    assert job["params"]["base_folder"] == str(tiny_model_dir_mixed)

    seen_steps: set[str] = set()
    deadline = time.monotonic() + WAIT_S
    while (current := live.call("GET", answer.headers["Location"]).json())["state"] in ("queued", "running"):
        if current["progress"]:
            seen_steps.add(current["progress"]["step"])
        assert time.monotonic() < deadline, current
        time.sleep(0.05)
    assert current["state"] == "done", current
    assert current["attempts"] == 1 and current["error"] is None
    assert seen_steps, "the job's progress was never seen while it ran"
    assert seen_steps <= {
        "starting", "verifying the releases", "evaluating the base model on dev", "training",
        "evaluating the trained model on dev", "registering the model",
    }  # fmt: skip
    result = current["result"]
    model = result["model"]
    assert model["name"] == "model-b" and model["hash"].startswith("sha256:")
    assert list(result["trained_on"]) == ["train_r1"] and result["trained_on"]["train_r1"] > 0
    assert [dev["split"] for dev in result["dev"]] == ["dev_r1"]
    folder = Path(model["folder"])
    assert folder.parent == live.services.settings.data_dir / "models" / "trained"
    assert folder.name == f"model-b-{job['id']}" and (folder / "README.md").is_file()
    assert any(line.startswith("training on ") for line in current["log"])
    # The model is registered by its hash: the gate and the rounds can name it now.
    registered = {m["hash"]: m for m in live.call("GET", "/api/models").json()["models"]}
    assert registered[model["hash"]]["name"] == "model-b"

    # The dashboard's Models page lists it with its outcome.
    shown = live.call("GET", "/dashboard/models")
    assert shown.status_code == 200
    ids = PageIds(shown.text)
    assert ids.text(f"job-{job['id']}").startswith(f"#{job['id']} train model-b done")
    assert f"model model-b {model['hash'][:19]}" in ids.text(f"job-{job['id']}")
    assert "done - release dynaval-sentiment 1.0.0" in ids.text(f"job-{job['id'] - 1}")  # the release's build

    listed = live.call("GET", "/api/jobs").json()["jobs"]  # newest first: the training, then the release
    assert [(j["id"], j["kind"]) for j in listed] == [(job["id"], "train"), (job["id"] - 1, "release")]
    assert_refused(live.call("POST", f"/api/jobs/{job['id']}/cancel"), 409, "job_id")  # finished

    # The same from the command line: list, show, and wait (done: exit 0).
    cli_environment(live.services, monkeypatch)
    assert main(["jobs", "list", "--json"]) == 0
    assert [j["id"] for j in json.loads(capsys.readouterr().out)["jobs"]] == [job["id"], job["id"] - 1]
    assert main(["jobs", "wait", str(job["id"]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["result"]["model"]["hash"] == model["hash"]
    assert main(["jobs", "show", "999999"]) == 2
    assert "job_id: no job 999999" in capsys.readouterr().err


def test_a_running_training_is_cancelled_and_leaves_nothing(
    training_service: LiveService, tiny_model_dir_mixed: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    live = training_service
    release_id = released(live)
    order = {"releases": [release_id], "base": str(tiny_model_dir_mixed), "name": "slow", "epochs": 100}
    job = live.call("POST", "/api/models/train", json=order).json()
    # One active job per name: a second request for "slow" waits for the first to end.
    assert_refused(live.call("POST", "/api/models/train", json=order), 409, "name")

    deadline = time.monotonic() + WAIT_S
    while (current := live.call("GET", f"/api/jobs/{job['id']}").json())["progress"] is None or current[
        "progress"
    ]["step"] != "training":
        assert current["state"] in ("queued", "running") and time.monotonic() < deadline, current
        time.sleep(0.05)
    asked = live.call("POST", f"/api/jobs/{job['id']}/cancel")
    assert asked.status_code == 200 and asked.json()["cancel_requested"] is True
    stopped = wait_for(live, job["id"], until=("cancelled", "done", "failed"))
    assert stopped["state"] == "cancelled" and stopped["result"] is None
    assert "cancelled" in PageIds(live.call("GET", "/dashboard/models").text).text(f"job-{job['id']}")
    trained = live.services.settings.data_dir / "models" / "trained"
    assert not trained.exists() or list(trained.iterdir()) == []  # no model, no scratch folder
    assert live.call("GET", "/api/models").json()["models"] == [] or all(
        m["name"] != "slow" for m in live.call("GET", "/api/models").json()["models"]
    )
    # The name is free again.
    again = live.call("POST", "/api/models/train", json={**order, "epochs": 1})
    assert again.status_code == 202, again.text
    wait_for(live, again.json()["id"], until=("done", "failed"))

    cli_environment(live.services, monkeypatch)
    assert main(["jobs", "wait", str(job["id"])]) == 1  # it did not finish
    assert "cancelled" in capsys.readouterr().out


def test_a_training_request_is_checked_before_anything_is_queued(
    training_service: LiveService, tiny_model_dir_mixed: Path, tiny_nli_model_dir: Path
) -> None:
    live = training_service
    release_id = released(live)
    base = str(tiny_model_dir_mixed)

    def train(**body: Any) -> Any:
        return live.call("POST", "/api/models/train", json={"releases": [release_id], "base": base,
                                                            "name": "b", **body})  # fmt: skip

    assert_refused(train(releases=[999]), 422, "releases")
    assert_refused(train(releases=[]), 422, "releases")
    assert_refused(train(name="Model B"), 422, "name")
    assert_refused(train(name="b\n"), 422, "name")
    assert_refused(train(base="relative/folder"), 422, "base")
    assert_refused(train(base="/no/such/folder"), 422, "base")
    assert_refused(train(base="sha256:" + "0" * 64), 422, "base")
    assert_refused(train(epochs=0), 422, "epochs")
    assert_refused(train(learning_rate=0), 422, "learning_rate")
    assert_refused(train(unknown=1), 422, "unknown")
    empty = live.call("POST", "/api/models/train", data="{}", headers={"Content-Type": "application/json"})
    assert_refused(empty, 422, "releases")
    assert_refused(live.call("POST", "/api/models/train", token=WRITER_TOKEN, json={}), 403, "Authorization")
    assert_refused(live.call("GET", "/api/jobs", token=WRITER_TOKEN), 403, "Authorization")
    assert_refused(live.call("GET", "/api/jobs/999999"), 404, "job_id")
    assert_refused(live.call("GET", "/api/jobs?limit=0"), 422, "limit")
    listed = live.call("GET", "/api/jobs").json()["jobs"]
    assert [j["kind"] for j in listed] == ["release"]  # no training was queued
    # What only training can find fails the job, saying so: a base model with the wrong labels.
    failed = train(base=str(tiny_nli_model_dir), name="nli-base")
    assert failed.status_code == 202, failed.text
    ended = wait_for(live, failed.json()["id"], until=("done", "failed"))
    assert ended["state"] == "failed" and "labels" in ended["error"] and "(base)" in ended["error"], ended


def test_a_digits_model_is_retrained_as_a_job_on_drawn_digits(
    training_service: LiveService, tmp_path: Path
) -> None:
    """The MNIST example's retraining, as a job: drawings released from a digits round train the
    image classifier further, and the new model is registered for the gate."""
    live = training_service
    services = live.services
    assert services.database is not None
    digits = [str(d) for d in range(10)]

    def drawing(i: int, label: str) -> dict[str, str]:
        png = png_bytes(draw_digit(label, random.Random(500 + i)))
        stored = stored_images.checked_image(services.images, ImageUpload(png), field="image")
        stored_images.keep(services.images, [stored])
        return {"image": stored.ref}

    seeded = seed_frozen_round(
        services.database, task_type="digits", labels=digits, fields=["image"], accepted=40, writers=15,
        rng=random.Random(8), name="digits one", make_inputs=drawing,
    )  # fmt: skip
    made = built_release(
        live, live.call("POST", "/api/releases", json={"rounds": [seeded.round_id], "version": "1.0.0"})
    )
    base = build_tiny_image_model(tmp_path / "digits-base", digits, seed=4)
    order = {"releases": [made["id"]], "base": str(base), "name": "digits-b", "epochs": 2}
    answer = live.call("POST", "/api/models/train", json=order)
    assert answer.status_code == 202, answer.text
    done = wait_for(live, answer.json()["id"], until=("done", "failed"))
    assert done["state"] == "done", done
    assert done["result"]["trained_on"]["train_r1"] > 0 and done["result"]["dev"][0]["split"] == "dev_r1"
    registered = {m["hash"]: m["name"] for m in live.call("GET", "/api/models").json()["models"]}
    assert registered[done["result"]["model"]["hash"]] == "digits-b"
    assert (Path(done["result"]["model"]["folder"]) / "preprocessor_config.json").is_file()
