"""Schemathesis over every operation of ``/openapi.json``, against the live service and a real Label Studio.

Requests are generated from the document (valid ones, and invalid ones that break it on purpose),
sent as a lead, and to the webhook with its secret. Half of the generated requests have their ids
swapped for real ones (an open round, a candidate pushed to Label Studio, its project and task), so
the use cases behind the 404s are reached too. Every answer must be below 500, and every refusal
must carry ``{"error": {"code", "message", "field"}}`` with a message that says something.

Bounded and deterministic: 30 examples per operation and generation mode, derandomised (about a
minute per database on 2 cores); ``DYNAVAL_FUZZ_EXAMPLES=300`` searches ten times longer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import Case, CheckContext, GenerationMode, Response

from tests.fixtures.service import LEAD_TOKEN, WEBHOOK_SECRET, WRITER_TOKEN, LiveService
from tests.support.waiting import wait_for

pytestmark = pytest.mark.labelstudio

EXAMPLES_PER_OPERATION = int(os.environ.get("DYNAVAL_FUZZ_EXAMPLES", "30"))
HEADERS = {"Authorization": f"Bearer {LEAD_TOKEN}", "X-Dynaval-Webhook-Secret": WEBHOOK_SECRET}


@dataclass(frozen=True)
class RealIds:
    round_id: int
    candidate_id: str
    project_id: int
    task_id: int


@pytest.fixture
def real_ids(live_service: LiveService) -> RealIds:
    """An open round with one fooled candidate already imported into its Label Studio project."""
    created = live_service.call("POST", "/api/rounds", json={"name": "fuzzed", "task": "sentiment"})
    assert created.status_code == 201, created.text
    round_ = created.json()
    # The tiny model always answers "neutral": a "positive" candidate fools it and is pushed.
    submitted = live_service.call(
        "POST",
        f"/api/rounds/{round_['id']}/candidates",
        token=WRITER_TOKEN,
        json={"text": "A fine day for a walk.", "writer_label": "positive"},
    )
    assert submitted.status_code == 201, submitted.text
    candidate_id = submitted.json()["id"]

    def task_id() -> int | None:
        value = live_service.call("GET", f"/api/candidates/{candidate_id}").json()["label_studio_task_id"]
        return int(value) if value is not None else None

    wait_for("the candidate's push to Label Studio", lambda: task_id() is not None)
    return RealIds(
        round_id=round_["id"],
        candidate_id=candidate_id,
        project_id=round_["label_studio_project_id"],
        task_id=task_id() or 0,
    )


REAL_VALUES = {"task": "sentiment", "model": "default", "writer_label": "positive", "label": "negative"}


def with_real_values(body: object) -> None:
    """Put values that exist where a body names a task type, a model or a label (strings only, so
    a wrong type stays wrong)."""
    stack = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key in REAL_VALUES and isinstance(value, str):
                    node[key] = REAL_VALUES[key]
                else:
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)


def with_real_ids(case: Case, ids: RealIds) -> Case:
    """The same request with the ids and names it holds replaced by ones that exist."""
    real = {"round_id": ids.round_id, "candidate_id": ids.candidate_id}
    if case.path_parameters:
        for name in real.keys() & case.path_parameters.keys():
            case.path_parameters[name] = real[name]
    body = case.body
    if case.operation.path == "/webhooks/label-studio" and isinstance(body, dict):
        if isinstance(body.get("project"), dict):
            body["project"]["id"] = ids.project_id
        if isinstance(body.get("annotation"), dict):
            body["annotation"]["task"] = ids.task_id
    else:
        with_real_values(body)
    return case


def refusals_name_the_error(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    """Every 4xx answers ``{"error": {"code", "message", "field"}}`` with a message that says something."""
    if not 400 <= response.status_code < 500:
        return None
    body = response.json()
    assert isinstance(body, dict) and set(body) == {"error"}, f"not an error document: {body!r}"
    error = body["error"]
    assert isinstance(error, dict) and set(error) == {"code", "message", "field"}, f"error keys: {error!r}"
    assert isinstance(error["code"], str) and error["code"], f"empty code: {error!r}"
    assert isinstance(error["message"], str) and error["message"].strip(), f"empty message: {error!r}"
    assert error["field"] is None or isinstance(error["field"], str), f"field: {error!r}"
    return True


def no_server_error(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    assert response.status_code < 500, f"{response.status_code}: {response.text[:500]}"
    return True


def test_no_generated_request_gets_a_server_error_and_every_refusal_names_its_field(
    live_service: LiveService, real_ids: RealIds
) -> None:
    schema = schemathesis.openapi.from_url(f"{live_service.url}/openapi.json")
    failures: list[str] = []
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(
                max_examples=EXAMPLES_PER_OPERATION,
                derandomize=True,
                database=None,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                report_multiple_bugs=False,
            )
            @given(case=operation.as_strategy(generation_mode=mode), real=st.booleans())
            def exercise(case: Case, real: bool) -> None:
                if real:
                    with_real_ids(case, real_ids)
                response = case.call(headers=HEADERS, timeout=60)
                case.validate_response(response, checks=[no_server_error, refusals_name_the_error])

            try:
                exercise()
            except Unsatisfiable:
                # Nothing in the operation can be made invalid (GET /health takes no input).
                assert mode is GenerationMode.NEGATIVE, operation.label
            except (Exception, BaseExceptionGroup) as exc:  # schemathesis reports a FailureGroup
                failures.append(f"{operation.label} ({mode.value}): {exc}")
    assert operations >= 15, "the document lost operations"
    assert failures == [], "\n\n".join(failures)
