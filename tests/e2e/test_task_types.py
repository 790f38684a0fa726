"""Task types beyond sentiment, through the whole loop against the real Label Studio.

NLI (premise and hypothesis read by the model as a pair, an optional rationale) with three
annotators covering accept, reject, escalate and flag, and its export field by field; a model whose
labels differ in case, one that lacks the task's labels; and a third task type whose labelling
config is written here, in the test, to show that a task type is its XML file and nothing else.
"""

from __future__ import annotations

import html
import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from label_studio_sdk import LabelStudio

from dynaval.domain.provenance import pseudonym, writer_pseudonym
from dynaval.domain.task_type import TaskType
from tests.fixtures.service import (
    LEAD_TOKEN,
    OTHER_WRITER_TOKEN,
    PSEUDONYM_SECRET,
    WRITER_NAME,
    WRITER_TOKEN,
    LiveService,
    running_service,
)
from tests.support.tiny_model import build_tiny_model
from tests.support.waiting import wait_for, wait_verified

pytestmark = pytest.mark.labelstudio

REPO_ROOT = Path(__file__).resolve().parents[2]
NLI = ("entailment", "neutral", "contradiction")
# Written here, not shipped: two input fields and two labels.
PARAPHRASE_XML = """<View>
  <Text name="first" value="$first"/>
  <Text name="second" value="$second"/>
  <Choices name="label" toName="second" choice="single-radio">
    <Choice value="same"/>
    <Choice value="different"/>
  </Choices>
  <Choices name="flag" toName="second" choice="single"><Choice value="flag"/></Choices>
  <TextArea name="flag_reason" toName="second" maxSubmissions="1"/>
</View>
"""


@pytest.fixture
def task_service(
    database_url: str,
    tmp_path: Path,
    label_studio_server: Any,
    label_studio_annotators: list[Any],
    tiny_model_dir: Path,
) -> Iterator[LiveService]:
    """The service with a folder of labelling configs (the shipped ones and the test's own), and the
    writer linked by email to the fourth annotator's Label Studio user (a writer who annotates)."""
    configs = tmp_path / "label_config"
    configs.mkdir()
    for name in ("sentiment", "nli"):
        shutil.copy(REPO_ROOT / "label_config" / f"{name}.xml", configs / f"{name}.xml")
    (configs / "paraphrase.xml").write_text(PARAPHRASE_XML, encoding="utf-8")
    with running_service(
        database_url, tmp_path / "data", label_studio_server, tiny_model_dir,
        label_config_dir=configs,
        writer_label_studio_users=[f"{WRITER_NAME}={label_studio_annotators[3].email.upper()}"],
    ) as live:  # fmt: skip
        yield live


class Loop:
    """One round of the live service: submit, wait for Label Studio, vote, read back."""

    def __init__(self, service: LiveService, label_studio: Any, annotators: list[Any], task: str) -> None:
        self.service = service
        self.ls_server = label_studio
        self.ls = LabelStudio(base_url=label_studio.url, api_key=label_studio.api_key)
        self.annotators = dict(zip("ABC", annotators, strict=False))
        self.task_type: TaskType = service.services.catalog.get(task)
        self.round_id = 0

    def create(self, model: Path, name: str) -> dict[str, Any]:
        response = self.service.call(
            "POST", "/api/rounds", json={"name": name, "task": self.task_type.name, "model": str(model)}
        )
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        self.round_id = body["id"]
        return body

    def submit(self, inputs: dict[str, str], label: str, **extra: Any) -> dict[str, Any]:
        response = self.service.call(
            "POST",
            f"/api/rounds/{self.round_id}/candidates",
            token=WRITER_TOKEN,
            json={"inputs": inputs, "writer_label": label, **extra},
        )
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        return body

    def candidate(self, candidate_id: str) -> dict[str, Any]:
        wait_verified(self.service.call, self.round_id)
        response = self.service.call("GET", f"/api/candidates/{candidate_id}")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def task_id(self, candidate_id: str) -> int:
        wait_for(
            f"candidate {candidate_id} in Label Studio",
            lambda: self.candidate(candidate_id)["status"] == "in_validation",
            timeout_s=30.0,
        )
        return int(self.candidate(candidate_id)["label_studio_task_id"])

    def vote(self, task_id: int, who: str, label: str | None, flag_reason: str | None = None) -> None:
        self.ls_server.annotate(
            task_id, self.annotators[who].id, label, flag_reason=flag_reason, task_type=self.task_type
        )

    def wait_overlap(self, task_id: int, overlap: int) -> None:
        wait_for(
            f"task {task_id} overlap {overlap}",
            lambda: int(self.ls.tasks.get(id=task_id).overlap) == overlap,
            timeout_s=30.0,
        )

    def dataset(self, fmt: str) -> bytes:
        response = self.service.call("GET", f"/api/rounds/{self.round_id}/dataset?format={fmt}")
        assert response.status_code == 200, response.text
        return response.content


def test_an_nli_round_goes_through_the_loop_and_exports_every_field(
    task_service: LiveService,
    label_studio_server: Any,
    label_studio_annotators: list[Any],
    tmp_path: Path,
) -> None:
    # The tiny model always answers "neutral", with its labels spelt in capitals: matched by case.
    model = build_tiny_model(
        tmp_path / "nli-model", labels=("ENTAILMENT", "NEUTRAL", "CONTRADICTION"), always="NEUTRAL"
    )
    loop = Loop(task_service, label_studio_server, label_studio_annotators, "nli")
    assert loop.task_type.data_fields == ("premise", "hypothesis")
    created = loop.create(model, "nli round")
    assert created["labels"] == list(NLI) and created["task"] == "nli"

    premise = "A woman in a red coat is feeding ducks at the edge of a frozen pond."
    cases = {
        "accept": ({"premise": premise, "hypothesis": "Someone is outdoors in winter."}, "entailment"),
        "reject": ({"premise": premise, "hypothesis": "The woman is swimming."}, "entailment"),
        "escalate_accept": ({"premise": premise, "hypothesis": "The ducks are hungry."}, "contradiction"),
        "escalate_reject": (
            {"premise": "Two men play chess in a park.", "hypothesis": "Nobody plays."},
            "entailment",
        ),
        "flag": ({"premise": "asdf qwer", "hypothesis": "zxcv"}, "contradiction"),
        "not_fooled": ({"premise": premise, "hypothesis": "The woman likes ducks."}, "neutral"),
    }
    rationale = "The model ignores that a frozen pond means it is cold: «winter»."
    ids: dict[str, str] = {}
    for kind, (inputs, label) in cases.items():
        extra = {"rationale": rationale} if kind == "accept" else {}
        body = loop.submit(inputs, label, **extra)
        ids[kind] = body["id"]
        assert body["inputs"] == inputs and list(body["inputs"]) == ["premise", "hypothesis"]
        assert body["model_prediction"] == "neutral"  # the model's NEUTRAL, as the task names it
        assert set(body["model_probabilities"]) == set(NLI)
        assert body["fooled"] is (label != "neutral")
        assert body["rationale"] == (rationale if kind == "accept" else None)

    tasks = {kind: loop.task_id(ids[kind]) for kind in cases if kind != "not_fooled"}
    for kind, task_id in tasks.items():
        data = loop.ls.tasks.get(id=task_id).data
        # Validators see the premise, then the hypothesis; never the writer's label, rationale or the model.
        assert data == {"candidate_id": ids[kind], **cases[kind][0]}

    def label_of(kind: str) -> str:
        return cases[kind][1]

    def other(label: str) -> str:
        return "neutral" if label != "neutral" else "entailment"

    loop.vote(tasks["accept"], "A", label_of("accept"))
    loop.vote(tasks["accept"], "B", label_of("accept"))
    loop.vote(tasks["reject"], "A", "contradiction")
    loop.vote(tasks["reject"], "B", "contradiction")
    for kind, third in (("escalate_accept", label_of("escalate_accept")), ("escalate_reject", "neutral")):
        loop.vote(tasks[kind], "A", label_of(kind))
        loop.vote(tasks[kind], "B", other(label_of(kind)))
        assert loop.candidate(ids[kind])["status"] == "escalated"
        loop.wait_overlap(tasks[kind], 3)
        loop.vote(tasks[kind], "C", third)
    loop.vote(tasks["flag"], "A", None, flag_reason="Not English")
    loop.vote(tasks["flag"], "B", None, flag_reason="Gibberish")

    statuses = {kind: loop.candidate(ids[kind])["status"] for kind in cases}
    assert statuses == {
        "accept": "accepted",
        "reject": "rejected",
        "escalate_accept": "accepted",
        "escalate_reject": "rejected",
        "flag": "flagged",
        "not_fooled": "not_fooled",
    }
    assert loop.candidate(ids["reject"])["decision"]["validators_label"] == "contradiction"

    # The export, field by field: the accepted ones, in submission order.
    records = [json.loads(line) for line in loop.dataset("jsonl").decode().splitlines()]
    assert [r["example_id"] for r in records] == [ids["accept"], ids["escalate_accept"]]
    annotator = {
        who: pseudonym(PSEUDONYM_SECRET, "annotator", str(a.id)) for who, a in loop.annotators.items()
    }
    for record, kind in zip(records, ("accept", "escalate_accept"), strict=True):
        api = loop.candidate(ids[kind])
        assert record["task_type"] == "nli"
        assert record["round"] == {"id": loop.round_id, "name": "nli round", "state": "open"}
        assert record["inputs"] == cases[kind][0]  # keys sorted, as every JSON object of the export
        assert record["writer_label"] == label_of(kind)
        assert record["rationale"] == (rationale if kind == "accept" else None)
        assert record["writer"] == writer_pseudonym(PSEUDONYM_SECRET, WRITER_NAME, None)
        assert record["collected_by"] is None
        assert record["submitted_at"] == api["submitted_at"]
        assert record["model"]["name"] == "nli-model" and record["model"]["hash"] == created["model_hash"]
        assert record["model"]["prediction"] == "neutral" and record["model"]["fooled"] is True
        assert record["model"]["probabilities"] == api["model_probabilities"]
        assert record["model"]["signature"] == api["model_signature"]
        assert record["label_studio"] == {
            "project_id": created["label_studio_project_id"],
            "task_id": tasks[kind],
        }
        votes = {v["annotator"]: v["label"] for v in record["votes"]}
        if kind == "accept":
            assert votes == {annotator["A"]: "entailment", annotator["B"]: "entailment"}
        else:
            assert votes == {
                annotator["A"]: "contradiction",
                annotator["B"]: "neutral",
                annotator["C"]: "contradiction",
            }
        assert record["decision"]["outcome"] == "accepted" and record["decision"]["override"] is None
        assert record["agreement"]["majority_label"] == label_of(kind)
    table = pq.read_table(io.BytesIO(loop.dataset("parquet")))
    assert table.column_names[:5] == ["example_id", "task_type", "text", "writer_label", "rationale"]
    assert table.column("rationale").to_pylist() == [rationale, None]
    assert [json.loads(v) for v in table.column("inputs").to_pylist()] == [
        cases["accept"][0],
        cases["escalate_accept"][0],
    ]

    # Leads see the rationale on the dashboard's candidate page.
    client = task_service.app.test_client()
    page = client.get("/dashboard/login").get_data(as_text=True)
    csrf = page.split('name="csrf_token" value="')[1].split('"')[0]
    assert client.post("/dashboard/login", data={"token": LEAD_TOKEN, "csrf_token": csrf}).status_code == 303
    shown = client.get(f"/dashboard/candidates/{ids['accept']}").get_data(as_text=True)
    assert 'data-testid="prov-rationale">' + html.escape(rationale, quote=False) in shown


def test_a_model_without_the_tasks_labels_is_refused_naming_model_and_what_is_missing(
    task_service: LiveService, tiny_model_dir: Path
) -> None:
    response = task_service.call(
        "POST",
        "/api/rounds",
        json={"name": "nli with a sentiment model", "task": "nli", "model": str(tiny_model_dir)},
    )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "model"
    assert "missing entailment, contradiction" in error["message"]
    listed = task_service.call("GET", "/api/rounds").json()["rounds"]
    assert listed == []  # nothing was made


def test_a_pair_longer_than_the_model_reads_is_refused_naming_its_longer_field(
    task_service: LiveService, label_studio_server: Any, label_studio_annotators: list[Any], tmp_path: Path
) -> None:
    """The tiny model reads 128 tokens: a premise and hypothesis past that together are refused
    (the model would judge a cut pair), naming the field to shorten; nothing is stored."""
    model = build_tiny_model(tmp_path / "nli-model", labels=("entailment", "neutral", "contradiction"))
    loop = Loop(task_service, label_studio_server, label_studio_annotators, "nli")
    loop.create(model, "nli round")
    url = f"/api/rounds/{loop.round_id}/candidates"
    long_premise = {"premise": " ".join(["pond"] * 100), "hypothesis": " ".join(["duck"] * 30)}
    long_hypothesis = {"premise": "A pond.", "hypothesis": " ".join(["duck"] * 130)}
    for inputs, field in ((long_premise, "inputs.premise"), (long_hypothesis, "inputs.hypothesis")):
        body = {"inputs": inputs, "writer_label": "entailment"}
        response = task_service.call("POST", url, token=WRITER_TOKEN, json=body)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["field"] == field
        assert "(premise and hypothesis together)" in error["message"]
        assert "reads at most 128" in error["message"]
    mine = f"/api/rounds/{loop.round_id}/my-candidates"
    assert task_service.call("GET", mine, token=WRITER_TOKEN).json()["candidates"] == []
    # Within the model's reach (95 + 30 words, with [CLS] and two [SEP]: 128 tokens), it is taken.
    fits = {"premise": " ".join(["pond"] * 95), "hypothesis": " ".join(["duck"] * 30)}
    assert loop.submit(fits, "entailment")["inputs"] == fits


def test_a_task_type_written_in_the_test_goes_through_the_whole_loop(
    task_service: LiveService,
    label_studio_server: Any,
    label_studio_annotators: list[Any],
    tmp_path: Path,
) -> None:
    model = build_tiny_model(tmp_path / "pair-model", labels=("same", "different"), always="different")
    loop = Loop(task_service, label_studio_server, label_studio_annotators, "paraphrase")
    assert loop.task_type.data_fields == ("first", "second") and loop.task_type.labels == (
        "same",
        "different",
    )
    created = loop.create(model, "paraphrase round")
    assert created["labels"] == ["same", "different"]

    missing = task_service.call(
        "POST", f"/api/rounds/{loop.round_id}/candidates", token=WRITER_TOKEN,
        json={"inputs": {"first": "A cat sat."}, "writer_label": "same"},
    )  # fmt: skip
    assert missing.status_code == 422 and missing.json()["error"]["field"] == "inputs.second"
    unknown = task_service.call(
        "POST", f"/api/rounds/{loop.round_id}/candidates", token=WRITER_TOKEN,
        json={"inputs": {"first": "A cat sat.", "second": "A cat.", "third": "x"}, "writer_label": "same"},
    )  # fmt: skip
    assert unknown.status_code == 422 and unknown.json()["error"]["field"] == "inputs.third"

    same = loop.submit(
        {"first": "The cat sat on the mat.", "second": "A cat was sitting on the mat."}, "same"
    )
    wrong = loop.submit({"first": "It rained all day.", "second": "The sun shone all day."}, "same")
    kept = loop.submit({"first": "I like tea.", "second": "I like coffee."}, "different")
    assert same["fooled"] and wrong["fooled"] and not kept["fooled"]
    same_task, wrong_task = loop.task_id(same["id"]), loop.task_id(wrong["id"])
    same_inputs = {"first": "The cat sat on the mat.", "second": "A cat was sitting on the mat."}
    assert loop.ls.tasks.get(id=same_task).data == {"candidate_id": same["id"], **same_inputs}
    loop.vote(same_task, "A", "same")
    loop.vote(same_task, "B", "same")
    loop.vote(wrong_task, "A", "different")
    loop.vote(wrong_task, "B", "different")
    assert loop.candidate(same["id"])["status"] == "accepted"
    assert loop.candidate(wrong["id"])["status"] == "rejected"
    records = [json.loads(line) for line in loop.dataset("jsonl").decode().splitlines()]
    assert [(r["example_id"], r["task_type"], r["inputs"]) for r in records] == [
        (
            same["id"],
            "paraphrase",
            {"first": "The cat sat on the mat.", "second": "A cat was sitting on the mat."},
        )
    ]


def test_task_types_list_fields_labels_and_default_models_and_default_means_the_tasks_own(
    task_service: LiveService, tiny_model_dir: Path
) -> None:
    nli_default = task_service.services.settings.default_model_dir_for("nli")
    assert nli_default == tiny_model_dir.parent / "nli-default"
    shutil.rmtree(nli_default, ignore_errors=True)  # the database fixture's other run may have built it

    def listed(token: str) -> dict[str, dict[str, Any]]:
        response = task_service.call("GET", "/api/task-types", token=token)
        assert response.status_code == 200, response.text
        return {t["name"]: t for t in response.json()["task_types"]}

    seen = listed(WRITER_TOKEN)
    assert sorted(seen) == ["nli", "paraphrase", "sentiment"]
    assert seen["nli"]["labels"] == list(NLI)
    assert seen["nli"]["fields"] == [
        {"name": "premise", "in": "inputs", "required": True, "kind": "text"},
        {"name": "hypothesis", "in": "inputs", "required": True, "kind": "text"},
        {"name": "rationale", "in": "body", "required": False},
    ]
    assert seen["sentiment"]["fields"][0] == {
        "name": "text",
        "in": "inputs",
        "required": True,
        "kind": "text",
    }
    assert seen["sentiment"]["default_model"]["built"] is True  # the service's default: the tiny model
    assert seen["nli"]["default_model"] == {
        "built": False, "name": "nli-default", "build": "dynaval model build-default --task nli",
    }  # fmt: skip
    assert "folder" not in seen["sentiment"]["default_model"]  # a server path: leads only
    assert listed(LEAD_TOKEN)["nli"]["default_model"]["folder"] == str(nli_default)
    assert task_service.call("GET", "/api/task-types", token=None).status_code == 401

    refused = task_service.call("POST", "/api/rounds", json={"name": "n", "task": "nli", "model": "default"})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "model"
    assert "dynaval model build-default --task nli" in refused.json()["error"]["message"]

    build_tiny_model(nli_default, labels=NLI, always="entailment")
    assert listed(WRITER_TOKEN)["nli"]["default_model"]["built"] is True
    created = task_service.call("POST", "/api/rounds", json={"name": "n", "task": "nli", "model": "default"})
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["model"]["name"] == "nli-default" and body["fields"] == seen["nli"]["fields"]
    assert body["labels"] == list(NLI)


def test_a_writers_vote_on_their_own_example_never_counts_and_leads_see_it(
    task_service: LiveService,
    label_studio_server: Any,
    label_studio_annotators: list[Any],
    tmp_path: Path,
) -> None:
    model = build_tiny_model(tmp_path / "nli-model", labels=NLI, always="neutral")
    loop = Loop(task_service, label_studio_server, label_studio_annotators, "nli")
    loop.annotators["D"] = label_studio_annotators[3]  # the writer's own Label Studio user
    loop.create(model, "own votes")
    own = loop.submit({"premise": "It is raining.", "hypothesis": "The street is dry."}, "contradiction")
    task_id = loop.task_id(own["id"])
    loop.vote(task_id, "D", "contradiction")  # the writer, validating their own example
    loop.vote(task_id, "A", "contradiction")
    body = loop.candidate(own["id"])
    assert body["status"] == "in_validation"  # one counted vote of two
    writer_as_annotator = pseudonym(PSEUDONYM_SECRET, "annotator", str(label_studio_annotators[3].id))
    assert body["decision"]["own_vote_ignored"] == writer_as_annotator
    assert body["decision"]["votes_counted"] == 1
    loop.wait_overlap(task_id, 3)  # Label Studio is asked for one more annotation in its place
    loop.vote(task_id, "B", "contradiction")
    body = loop.candidate(own["id"])
    assert body["status"] == "accepted" and body["decision"]["votes_counted"] == 2

    client = task_service.app.test_client()
    page = client.get("/dashboard/login").get_data(as_text=True)
    csrf = page.split('name="csrf_token" value="')[1].split('"')[0]
    client.post("/dashboard/login", data={"token": LEAD_TOKEN, "csrf_token": csrf})
    shown = client.get(f"/dashboard/candidates/{own['id']}").get_data(as_text=True)
    assert 'data-testid="prov-own-vote"' in shown and writer_as_annotator in shown

    # Another writer's example: the same annotator's vote counts.
    inputs = {"premise": "It is sunny.", "hypothesis": "It is night."}
    other = task_service.call(
        "POST", f"/api/rounds/{loop.round_id}/candidates", token=OTHER_WRITER_TOKEN,
        json={"inputs": inputs, "writer_label": "contradiction"},
    )  # fmt: skip
    assert other.status_code == 201, other.text
    other_task = loop.task_id(other.json()["id"])
    loop.vote(other_task, "D", "contradiction")
    loop.vote(other_task, "A", "contradiction")
    counted = loop.candidate(other.json()["id"])
    assert counted["status"] == "accepted" and counted["decision"]["own_vote_ignored"] is None
