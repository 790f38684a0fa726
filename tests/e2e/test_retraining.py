"""The loop turns by itself, against the real Label Studio, on SQLite and PostgreSQL, tried as a new
user would: a lead sets a sentiment retraining policy with N = 10; writers fool the round's model,
Label Studio users validate, and the tenth accepted example starts a job that places the writers,
trains on the train writers' examples, evaluates on the suite, gates against the round's model and
ships it by opening the next round on it; with ``swap``, the open round's model is replaced
instead, each candidate keeping the hash of the model that scored it. A third policy trains from a
worse base (a shipped model with two labels swapped) and sees the gate refuse it: nothing shipped,
the round untouched, the flipped cases named. The MNIST example turns the same way: ten drawn
digits that fool the digits model retrain it, and the next round answers drawings with the
retrained image classifier.

Round one is seeded as a frozen, released round (its dev and test splits are the suite); the live
round's model is the tiny model that always answers "neutral", so every positive or negative
example fools it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dynaval.domain.images.image import ImageUpload
from dynaval.domain.provenance import verify_prediction
from dynaval.service_layer.dataset_records.round_dataset import provenance_record
from dynaval.service_layer.images import stored_images
from dynaval.service_layer.regression.model_catalog import ship_model
from tests.e2e.test_task_types import Loop
from tests.fixtures.service import SIGNING_SECRET, WRITER_TOKEN, LiveService, running_service
from tests.support.drawings import data_url, draw_digit, png_bytes
from tests.support.jobs import built_release, finished_job
from tests.support.release_seed import seed_frozen_round
from tests.support.tiny_model import build_tiny_model

pytestmark = pytest.mark.labelstudio

SENTIMENT = ("positive", "negative", "neutral")
RUN_WAIT_S = 300.0
FOOLING = [
    ("The soup arrived cold, yet somehow it was the best thing I ate all week.", "positive"),
    ("Not once did the staff forget our order, which surprised me.", "positive"),
    ("I expected to hate the sequel and walked out grinning.", "positive"),
    ("The battery died twice before lunch, a new record for this phone.", "negative"),
    ("Great, another update that moves every button I use.", "negative"),
    ("The hotel pool was lovely, if you enjoy swimming with leaves and wasps.", "negative"),
    ("My grandmother's recipe finally worked after six failed attempts.", "positive"),
    ("Customer service kept me on hold for ninety minutes, then hung up.", "negative"),
    ("Against all odds the cheap headphones outlast my expensive ones.", "positive"),
    ("The museum's new wing is a maze of empty rooms and broken screens.", "negative"),
]


@pytest.fixture
def live(
    database_url: str, tmp_path: Path, label_studio_server: Any, tiny_model_dir: Path
) -> Iterator[LiveService]:
    with running_service(database_url, tmp_path / "data", label_studio_server, tiny_model_dir) as service:
        yield service


def released_first_round(live: LiveService) -> None:
    """Round one, frozen and released: its dev and test examples become the suite."""
    database = live.services.database
    assert database is not None
    seeded = seed_frozen_round(
        database, task_type="sentiment", labels=SENTIMENT, fields=["text"], accepted=60, writers=20,
        rng=random.Random(11), name="sentiment round 1", annotation_base=10**8,
    )  # fmt: skip
    built_release(
        live, live.call("POST", "/api/releases", json={"rounds": [seeded.round_id], "version": "1.0.0"})
    )


def put_policy(live: LiveService, body: dict[str, Any]) -> Any:
    return live.call("PUT", "/api/task-types/sentiment/retraining", json=body)


def fool_and_validate(loop: Loop, examples: list[tuple[str, str]]) -> list[str]:
    """Each example submitted by a writer, fooling the model, and accepted by two annotators."""
    ids = []
    for text, label in examples:
        body = loop.submit({"text": text}, label)
        assert body["fooled"] is True, body
        ids.append(body["id"])
    for candidate_id, (_text, label) in zip(ids, examples, strict=True):
        task_id = loop.task_id(candidate_id)
        loop.vote(task_id, "A", label)
        loop.vote(task_id, "B", label)
    for candidate_id in ids:
        assert loop.candidate(candidate_id)["status"] == "accepted"
    return ids


def finished_run(live: LiveService) -> dict[str, Any]:
    """The policy's run, once its job ended."""
    deadline = time.monotonic() + RUN_WAIT_S
    while True:
        view: dict[str, Any] = live.call("GET", "/api/task-types/sentiment/retraining").json()
        runs = view["runs"]
        if runs and runs[0]["state"] not in ("queued", "running"):
            return view
        assert time.monotonic() < deadline, f"no finished run after {RUN_WAIT_S} s: {view}"
        time.sleep(0.5)


def steps(view: dict[str, Any]) -> list[str]:
    return [event["step"] for event in reversed(view["events"])]


def test_ten_validated_failures_retrain_gate_and_open_the_next_round_on_the_new_model(
    live: LiveService, label_studio_server: Any, label_studio_annotators: list[Any], tiny_model_dir: Path
) -> None:
    released_first_round(live)
    loop = Loop(live, label_studio_server, label_studio_annotators, "sentiment")
    first = loop.create(tiny_model_dir, "sentiment round 2")

    # Bad settings are refused naming the field, and change nothing.
    for body, field in (
        ({"every": 0}, "every"),
        ({"every": 10, "ship": "later"}, "ship"),
        ({"every": 10, "learning_rate": 0}, "learning_rate"),
        ({"ship": "next_round"}, "every"),
        ({"every": 10, "colour": "red"}, "colour"),
    ):
        refused = put_policy(live, body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["field"] == field, refused.text
    assert live.call("GET", "/api/task-types/sentiment/retraining").json()["on"] is False
    assert live.call("GET", "/api/task-types/unknown/retraining").status_code == 404

    set_ = put_policy(live, {"every": 10, "ship": "next_round", "epochs": 2, "seed": 3})
    assert set_.status_code == 200, set_.text
    view = set_.json()
    assert view["on"] is True and view["new_examples"] == 0 and view["due"] is False
    assert view["policy"]["every"] == 10 and view["waiting_for"].startswith("10 more accepted examples")

    fool_and_validate(loop, FOOLING[:9])
    view = live.call("GET", "/api/task-types/sentiment/retraining").json()
    assert view["new_examples"] == 9 and view["runs"] == []  # nine: not yet
    fool_and_validate(loop, FOOLING[9:])

    view = finished_run(live)
    run = view["runs"][0]
    assert run["kind"] == "retrain" and run["state"] == "done", run
    result = run["result"]
    assert result["shipped"] is True, result
    assert result["gate"]["passed"] is True and result["replaces"]["model"] == first["model"]["hash"]
    trained = result["trained"]["examples"]
    assert trained["trained_on"] >= 1 and trained["held_out"] >= 1 and trained["near_held_out"] == 0
    assert steps(view) == ["policy-set", "triggered", "trained", "gated", "shipped"]
    assert view["new_examples"] == 0  # the count starts again from the run

    # Round two is closed; the next round is open on the new model, and writers see it.
    rounds = {r["id"]: r for r in live.call("GET", "/api/rounds").json()["rounds"]}
    assert rounds[first["id"]]["state"] == "closed"
    nxt = rounds[result["next_round"]["id"]]
    assert nxt["state"] == "open" and nxt["task"] == "sentiment"
    assert nxt["model"]["hash"] == result["model"]["hash"] != first["model"]["hash"]
    assert nxt["policy"] == first["policy"]
    seen = live.call("GET", "/api/rounds", token=WRITER_TOKEN).json()["rounds"]
    assert any(r["id"] == nxt["id"] and r["state"] == "open" for r in seen)
    models = {m["hash"]: m for m in live.call("GET", "/api/models").json()["models"]}
    assert models[result["model"]["hash"]]["shipped"] is True
    assert "retraining policy of sentiment" in models[result["model"]["hash"]]["shipped_reason"]


def test_the_gate_refuses_a_worse_model_and_nothing_ships(
    live: LiveService,
    label_studio_server: Any,
    label_studio_annotators: list[Any],
    tiny_model_dir: Path,
    tmp_path: Path,
) -> None:
    released_first_round(live)
    loop = Loop(live, label_studio_server, label_studio_annotators, "sentiment")
    # A lead once shipped a model with two labels swapped (it answers "positive" where the round's
    # model answers "neutral"), pinned by a round since closed; the policy trains from the shipped one.
    swapped = build_tiny_model(tmp_path / "swapped", always="positive")
    old = loop.create(swapped, "sentiment round 2 (swapped labels)")
    assert live.call("POST", f"/api/rounds/{old['id']}/close").status_code == 200
    ship_model(live.services, old["model"]["hash"], by="lead", reason="shipped before anyone gated it")
    first = loop.create(tiny_model_dir, "sentiment round 3")
    set_ = put_policy(live, {"every": 10, "base": "shipped", "epochs": 1, "seed": 3})
    assert set_.status_code == 200, set_.text
    fool_and_validate(loop, FOOLING)

    view = finished_run(live)
    result = view["runs"][0]["result"]
    assert view["runs"][0]["state"] == "done" and result["shipped"] is False, result
    assert result["trained"]["base"] == old["model"]["hash"]
    assert result["gate"]["passed"] is False and result["gate"]["negative_flips"]
    flipped = [flip["case_id"] for flip in result["gate"]["negative_flips"]]
    assert result["reason"].startswith(f"the gate refused it: {len(flipped)} suite cases")
    assert flipped[0] in result["reason"]
    assert steps(view) == ["policy-set", "triggered", "trained", "gated", "kept"]
    assert view["events"][0]["detail"]["reason"] == result["reason"]

    rounds = {r["id"]: r for r in live.call("GET", "/api/rounds").json()["rounds"]}
    assert rounds[first["id"]]["state"] == "open"
    assert rounds[first["id"]]["model"]["hash"] == first["model"]["hash"]
    assert [r["id"] for r in rounds.values() if r["state"] == "open"] == [first["id"]]
    models = {m["hash"]: m for m in live.call("GET", "/api/models").json()["models"]}
    assert models[result["model"]["hash"]]["shipped"] is False


def test_the_mnist_example_drawn_digits_retrain_the_digits_model_and_the_next_round_runs_on_it(
    live: LiveService,
    label_studio_server: Any,
    label_studio_annotators: list[Any],
    tiny_image_model_dir: Path,
) -> None:
    services = live.services
    assert services.database is not None
    digits = [str(d) for d in range(10)]

    def drawing(i: int, label: str) -> dict[str, str]:
        stored = stored_images.checked_image(
            services.images, ImageUpload(png_bytes(draw_digit(label, random.Random(500 + i)))), field="image"
        )
        stored_images.keep(services.images, [stored])
        return {"image": stored.ref}

    seeded = seed_frozen_round(
        services.database, task_type="digits", labels=digits, fields=["image"], accepted=40, writers=15,
        rng=random.Random(8), name="digits round 1", make_inputs=drawing, annotation_base=10**8,
    )  # fmt: skip
    built_release(
        live, live.call("POST", "/api/releases", json={"rounds": [seeded.round_id], "version": "1.0.0"})
    )
    loop = Loop(live, label_studio_server, label_studio_annotators, "digits")
    first = loop.create(tiny_image_model_dir, "digits round 2")  # the model answers "3" to everything
    set_ = live.call("PUT", "/api/task-types/digits/retraining", json={"every": 10, "epochs": 2, "seed": 5})
    assert set_.status_code == 200, set_.text

    # Ten digits drawn by a writer, none a 3: each fools the model, and two annotators agree.
    ids = []
    drawn = [str(d) for d in (0, 1, 2, 4, 5, 6, 7, 8, 9, 7)]
    for n, label in enumerate(drawn):
        body = loop.submit({"image": data_url(png_bytes(draw_digit(label, random.Random(900 + n))))}, label)
        assert body["fooled"] is True and body["model_prediction"] == "3", body
        ids.append(body["id"])
    for candidate_id, label in zip(ids, drawn, strict=True):
        task_id = loop.task_id(candidate_id)
        loop.vote(task_id, "A", label)
        loop.vote(task_id, "B", label)

    deadline = time.monotonic() + RUN_WAIT_S
    while True:
        view = live.call("GET", "/api/task-types/digits/retraining").json()
        if view["runs"] and view["runs"][0]["state"] not in ("queued", "running"):
            break
        assert time.monotonic() < deadline, view
        time.sleep(0.5)
    run = view["runs"][0]
    assert run["state"] == "done", run
    result = run["result"]
    assert (
        result["trained"]["examples"]["trained_on"] > 0
        and result["trained"]["examples"]["near_held_out"] == 0
    )
    assert result["gate"]["passed"] is True and result["shipped"] is True, result
    assert steps(view) == ["policy-set", "triggered", "trained", "gated", "shipped"]
    folder = Path(result["model"]["folder"])
    assert (folder / "preprocessor_config.json").is_file()  # an image classifier, as the round needs

    # The next round runs on the retrained model: a drawing gets its answer there.
    nxt = live.call("GET", f"/api/rounds/{result['next_round']['id']}").json()
    assert nxt["state"] == "open" and nxt["input_kind"] == "image"
    assert nxt["model"]["hash"] == result["model"]["hash"] != first["model"]["hash"]
    asked = live.call(
        "POST",
        f"/api/rounds/{nxt['id']}/predict",
        token=WRITER_TOKEN,
        json={"inputs": {"image": data_url(png_bytes(draw_digit("1", random.Random(77))))}},
    )
    assert asked.status_code == 200, asked.text
    assert set(asked.json()["probabilities"]) == set(digits)
    assert live.call("GET", f"/api/rounds/{first['id']}").json()["state"] == "closed"


def test_swap_replaces_the_open_rounds_model_and_each_candidate_keeps_the_model_that_scored_it(
    live: LiveService, label_studio_server: Any, label_studio_annotators: list[Any], tiny_model_dir: Path
) -> None:
    released_first_round(live)
    loop = Loop(live, label_studio_server, label_studio_annotators, "sentiment")
    first = loop.create(tiny_model_dir, "sentiment round 2")
    set_ = put_policy(live, {"every": 10, "ship": "swap", "epochs": 2, "seed": 3})
    assert set_.status_code == 200 and set_.json()["policy"]["ship"] == "swap", set_.text
    before = fool_and_validate(loop, FOOLING)

    view = finished_run(live)
    result = view["runs"][0]["result"]
    assert view["runs"][0]["state"] == "done" and result["shipped"] is True, result
    assert result["swapped_round"] == {
        "id": first["id"],
        "name": first["name"],
        "replaced": first["model"]["hash"],
    }
    assert "next_round" not in result
    assert steps(view) == ["policy-set", "triggered", "trained", "gated", "shipped"]
    new_hash = result["model"]["hash"]

    # The same round, still open, now on the new model (writers see it); no round was opened.
    rounds = live.call("GET", "/api/rounds", token=WRITER_TOKEN).json()["rounds"]
    assert [(r["id"], r["state"], r["model"]["hash"]) for r in rounds if r["state"] == "open"] == [
        (first["id"], "open", new_hash)
    ]
    # A candidate submitted now is scored by the new model; those before keep the old one's hash.
    after = loop.submit({"text": "The refund took a month, but the apology letter was charming."}, "positive")
    records = {c: provenance_record(live.services, c) for c in [*before, after["id"]]}
    assert {records[c]["model"]["hash"] for c in before} == {first["model"]["hash"]}
    assert records[after["id"]]["model"]["hash"] == new_hash
    for record in records.values():  # each signature verifies against the model that scored it
        model = record["model"]
        assert verify_prediction(
            SIGNING_SECRET,
            model["signature"],
            model["hash"],
            record["inputs"],
            model["prediction"],
            model["probabilities"],
        )
    # The round's figures say which model each MER was measured against.
    summary = live.call("GET", f"/api/rounds/{first['id']}").json()
    by_model = [(m["model"]["hash"], m["collected"], m["fooled"]) for m in summary["by_model"]]
    assert by_model == [(first["model"]["hash"], 10, 10), (new_hash, 1, int(after["fooled"]))]
    assert summary["by_model"][0]["mer"] == 1.0 and summary["model"]["hash"] == new_hash

    page = live.call("GET", "/dashboard/models")
    assert page.status_code == 200 and f"swapped into round #{first['id']}" in page.text, page.text[:500]

    # A lead starts a run at once, whatever the count: 202 with the job's URL; a second waits.
    started = live.call("POST", "/api/task-types/sentiment/retraining/run")
    assert started.status_code == 202 and started.headers["Location"] == f"/api/jobs/{started.json()['id']}"
    again = live.call("POST", "/api/task-types/sentiment/retraining/run")
    assert again.status_code == 409 and again.json()["error"]["field"] == "task_type", again.text
    manual = finished_job(live, started)
    assert manual["state"] == "done" and manual["result"]["replaces"]["model"] == new_hash, manual
    # The Models page shows the runs: the swap, then the run the lead started.
    models_page = live.call("GET", "/dashboard/models")
    assert models_page.status_code == 200, models_page.text[:500]
    assert f"#{manual['id']} done: model " in models_page.text
