"""Suspect regression cases re-validated through a real Label Studio: three models fail two cases,
which become suspect; a lead sends them back (POST /api/suite/revalidate); the validators see the
inputs only; one is rejected (through the webhooks) and one accepted (through a reconcile after
webhooks were lost); once the lead freezes the round, its decisions final, the rejected case is
retired by the system (logged) and the accepted one confirmed.

The service runs on PostgreSQL (the open re-validation of a case is unique by a partial index there)
with a default model folder that does not exist: a revalidation round needs none.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from label_studio_sdk import LabelStudio

from dynaval.domain.regression.suite import RegressionCase
from dynaval.entrypoints.cli import main as cli
from dynaval.service_layer.regression import evaluation
from tests.fixtures.service import (
    EXPORTER_TOKEN,
    POSTGRES_ADMIN_URL,
    LiveService,
    cli_environment,
    running_service,
)
from tests.support.release_seed import seed_suite as seeded_suite
from tests.support.tiny_model import build_tiny_model
from tests.support.waiting import wait_for, wait_verified

pytestmark = pytest.mark.labelstudio


@pytest.fixture
def service(tmp_path: Path, label_studio_server: Any) -> Iterator[LiveService]:
    name = f"dynaval_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        with running_service(
            f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}",
            tmp_path / "data",
            label_studio_server,
            tmp_path / "no-model-here",
        ) as live:
            yield live
    finally:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def seed_suite(service: LiveService) -> dict[str, RegressionCase]:
    """Six cases of a frozen round (two of each label), taken into the suite as a source would."""
    return {c.id: c for c in seeded_suite(service.services, seed=21, annotation_base=10**9)}


def test_suspects_are_revalidated_blind_and_settled_by_the_validators(
    service: LiveService,
    label_studio_server: Any,
    label_studio_annotators: list[Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ls = LabelStudio(base_url=label_studio_server.url, api_key=label_studio_server.api_key)
    annotators = dict(zip("AB", label_studio_annotators, strict=False))
    cases = seed_suite(service)
    neutral = sorted(c.id for c in cases.values() if c.label == "neutral")

    # Three models, none of which ever answers "neutral": the two neutral cases become suspect.
    models = [
        build_tiny_model(tmp_path / "a", always="positive"),
        build_tiny_model(tmp_path / "b", always="negative"),
        build_tiny_model(tmp_path / "a2", always="positive", seed=1),
    ]
    marked = [evaluation.evaluate(service.services, m).suspects_marked for m in models]
    assert marked == [0, 0, 2]
    queue = service.call("GET", "/api/suite/suspects").json()["cases"]
    assert sorted(c["id"] for c in queue) == neutral
    assert {c["revalidation_state"] for c in queue} == {"not_sent"}

    # Only a lead sends; a bad body is refused naming the field.
    refused = service.call("POST", "/api/suite/revalidate", token=EXPORTER_TOKEN, json={})
    assert refused.status_code == 403
    unknown = service.call("POST", "/api/suite/revalidate", json={"cases": ["no-such-case"]})
    assert unknown.status_code == 422 and unknown.json()["error"]["field"] == "cases"
    not_suspect = next(c for c in cases if c not in neutral)
    answer = service.call("POST", "/api/suite/revalidate", json={"cases": [not_suspect]})
    assert answer.status_code == 409 and not_suspect in answer.json()["error"]["message"]

    sent = service.call("POST", "/api/suite/revalidate", json={"name": "suspects, second look"})
    assert sent.status_code == 201, sent.text
    body = sent.json()
    assert sorted(body["cases"]) == neutral and len(body["rounds"]) == 1
    round_id = int(body["rounds"][0]["id"])
    shown = service.call("GET", f"/api/rounds/{round_id}").json()
    assert shown["kind"] == "revalidation" and shown["name"] == "suspects, second look"
    assert shown["model"] is None

    # The CLI: a case under re-validation is refused (exit 2, one line); none left to send is fine.
    cli_environment(service.services, monkeypatch)
    monkeypatch.setenv("DYNAVAL_LABEL_STUDIO_URL", label_studio_server.url)
    monkeypatch.setenv("DYNAVAL_LABEL_STUDIO_API_KEY", label_studio_server.api_key)
    capsys.readouterr()  # what building the models printed
    assert cli.main(["suite", "revalidate", "--case", neutral[0]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "under re-validation already" in err and "Traceback" not in err
    assert cli.main(["suite", "revalidate", "--case", "no-such-case"]) == 2
    assert "no case" in capsys.readouterr().err
    assert cli.main(["suite", "revalidate"]) == 0
    assert "0 cases sent" in capsys.readouterr().out

    # The background worker pushes them into the round's Label Studio project.
    queue = {c["id"]: c for c in service.call("GET", "/api/suite/suspects").json()["cases"]}
    candidate_of = {case_id: queue[case_id]["revalidation"]["candidate_id"] for case_id in neutral}

    def candidate(case_id: str) -> dict[str, Any]:
        wait_verified(service.call, round_id)
        response = service.call("GET", f"/api/candidates/{candidate_of[case_id]}")
        assert response.status_code == 200, response.text
        found: dict[str, Any] = response.json()
        return found

    wait_for(
        "both cases in Label Studio",
        lambda: all(candidate(c)["status"] == "in_validation" for c in neutral),
        timeout_s=60.0,
    )
    task_of = {c: int(candidate(c)["label_studio_task_id"]) for c in neutral}
    for case_id, task_id in task_of.items():
        task = ls.tasks.get(id=task_id)
        # Blind: the inputs and the candidate's own id only. Neither the old label nor anything of
        # the case (its id, round, split, source) is in what Label Studio holds.
        assert task.data == {"candidate_id": candidate_of[case_id], "text": cases[case_id].inputs["text"]}
        whole = json.dumps(task.model_dump(mode="json"))
        for hidden in ('"neutral"', case_id, "dev_r1", "release:", "suspect"):
            assert hidden not in whole, hidden

    rejected_case, confirmed_case = neutral

    def vote(case_id: str, who: str, label: str) -> None:
        label_studio_server.annotate(task_of[case_id], annotators[who].id, label)

    # Both validators say "positive": the label does not hold (read through the webhooks).
    vote(rejected_case, "A", "positive")
    vote(rejected_case, "B", "positive")
    assert candidate(rejected_case)["status"] == "rejected"
    # Both say "neutral" while the service hears no webhook: a reconcile decides it.
    service.stop_listening()
    try:
        vote(confirmed_case, "A", "neutral")
        vote(confirmed_case, "B", "neutral")
    finally:
        service.start_listening()
    synced = service.call("POST", f"/api/rounds/{round_id}/sync")
    assert synced.status_code == 200, synced.text
    assert candidate(confirmed_case)["status"] == "accepted"
    # While the round is open a decision may still change: both cases wait, still suspect.
    waiting = {
        c["id"]: c["revalidation_state"] for c in service.call("GET", "/api/suite/suspects").json()["cases"]
    }
    assert waiting == dict.fromkeys(neutral, "under_revalidation")

    # The lead freezes the round: its decisions are final, and they settle the cases.
    assert service.call("POST", f"/api/rounds/{round_id}/close").status_code == 200
    frozen = service.call("POST", f"/api/rounds/{round_id}/freeze", json={})
    assert frozen.status_code == 200, frozen.text
    assert service.call("GET", "/api/suite/suspects").json()["cases"] == []
    with service.services.uow(read_only=True) as uow:
        case = uow.regression.case(rejected_case)
        event = uow.audit.of_candidate(rejected_case)[-1]
    assert case.retired and case.retired_by == "system"
    assert f"round {round_id}" in (case.retired_reason or "")
    assert candidate_of[rejected_case] in (case.retired_reason or "")
    assert (event.action, event.by, event.reason) == ("retire_case", "system", case.retired_reason)
    audit = service.call("GET", f"/api/rounds/{case.round_id}/audit").json()
    assert [e["action"] for e in audit["events"] if e["candidate_id"] == rejected_case] == [
        "send_to_revalidation",
        "retire_case",
    ]
    with service.services.uow(read_only=True) as uow:
        case = uow.regression.case(confirmed_case)
        event = uow.audit.of_candidate(confirmed_case)[-1]
    assert case.confirmed and not case.suspect and not case.retired
    assert (event.action, event.by) == ("confirm_case", "system")

    # Settling again changes nothing; a fourth model failing the confirmed case does not mark it again.
    assert cli.main(["suite", "settle"]) == 0
    assert "confirmed 0, retired 0, unresolved 0" in capsys.readouterr().out
    assert evaluation.evaluate(service.services, models[0]).suspects_marked == 0
    listed = service.call("GET", "/api/suite/suspects").json()["cases"]
    assert listed == []


def test_a_lead_sends_ticked_suspects_from_the_models_page(
    service: LiveService, label_studio_server: Any, tmp_path: Path
) -> None:
    """The models page's form sends the ticked suspect cases, as the API does; a form with none
    ticked, or a case already under re-validation, is refused on the page and sends nothing."""
    ls = LabelStudio(base_url=label_studio_server.url, api_key=label_studio_server.api_key)
    cases = seed_suite(service)
    neutral = sorted(c.id for c in cases.values() if c.label == "neutral")
    for folder, label, seed in (("a", "positive", 0), ("b", "negative", 0), ("c", "positive", 1)):
        evaluation.evaluate(service.services, build_tiny_model(tmp_path / folder, always=label, seed=seed))

    def page() -> str:
        shown = service.call("GET", "/dashboard/models")
        assert shown.status_code == 200, shown.text
        return shown.text

    def states() -> dict[str, str]:
        queue = service.call("GET", "/api/suite/suspects").json()["cases"]
        return {c["id"]: c["revalidation_state"] for c in queue}

    html = page()
    for case_id in neutral:  # each suspect is ticked, ready to send
        assert f'name="cases" value="{case_id}" checked' in html
    assert html.count(">not sent<") == 2

    url = "/dashboard/models/revalidate"
    nothing = service.call("POST", url, data={"name": "a second look"}, allow_redirects=False)
    assert nothing.status_code == 422 and "tick at least one suspect case" in nothing.text
    assert states() == dict.fromkeys(neutral, "not_sent")

    first, second = neutral
    sent = service.call("POST", url, data={"cases": [first], "name": "a second look"}, allow_redirects=False)
    assert sent.status_code == 303 and sent.headers["Location"].endswith("/dashboard/models#suspects")
    assert states() == {first: "under_revalidation", second: "not_sent"}
    queue = {c["id"]: c for c in service.call("GET", "/api/suite/suspects").json()["cases"]}
    round_id = int(queue[first]["revalidation"]["round_id"])
    shown = service.call("GET", f"/api/rounds/{round_id}").json()
    assert shown["kind"] == "revalidation" and shown["name"] == "a second look"
    html = page()
    assert f'value="{first}"' not in html and f'name="cases" value="{second}" checked' in html
    assert f">round {round_id}</a>" in html

    again = service.call("POST", url, data={"cases": [first]}, allow_redirects=False)
    assert again.status_code == 409 and first in again.text
    assert states() == {first: "under_revalidation", second: "not_sent"}
    wait_for(
        "the sent case in Label Studio",
        lambda: len(list(ls.tasks.list(project=int(shown["label_studio_project_id"])))) == 1,
        timeout_s=60.0,
    )
