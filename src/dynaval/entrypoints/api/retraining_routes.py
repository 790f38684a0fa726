"""A task type's retraining policy over HTTP: a lead reads it (with where its count stands, its
runs and its audit log), sets it, and starts a run at once."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, g, jsonify

from dynaval.entrypoints.api.job_routes import accepted_job
from dynaval.entrypoints.api.openapi import documented
from dynaval.entrypoints.api.request_bodies import app_services, checked_body
from dynaval.entrypoints.api.schemas import RetrainingPolicyRequest
from dynaval.entrypoints.auth import Role, requires
from dynaval.service_layer.retraining import policies

retraining = Blueprint("retraining", __name__)


@retraining.get("/api/task-types/<task_type>/retraining")
@documented(
    summary="A task type's retraining policy, whether it is due (or what it waits for), its runs, its log",
    responses={200: "OK", 403: "Not a lead", 404: "No such task type"},
)
@requires(Role.LEAD)
def get_policy(task_type: str) -> Any:
    return jsonify(policies.policy_view(app_services(), task_type))


@retraining.put("/api/task-types/<task_type>/retraining")
@documented(
    summary='A lead sets a task type\'s retraining policy ({"every": null} turns it off)',
    body=RetrainingPolicyRequest,
    responses={
        200: "The policy as set, with where its count stands",
        403: "Not a lead",
        404: "No such task type",
        422: "Invalid field",
    },
)
@requires(Role.LEAD)
def put_policy(task_type: str) -> Any:
    body = checked_body(RetrainingPolicyRequest).model_dump()
    services = app_services()
    policies.set_policy(services, task_type, body, by=g.caller.name)
    return jsonify(policies.policy_view(services, task_type))


@retraining.post("/api/task-types/<task_type>/retraining/run")
@documented(
    summary="A lead starts a retraining run now, whatever the count (202, its URL in Location)",
    responses={
        202: "The queued run (watch it at Location: GET /api/jobs/<id>)",
        403: "Not a lead",
        404: "No such task type",
        409: "A run is active, or the task type has no open adversarial round",
    },
)
@requires(Role.LEAD)
def run_now(task_type: str) -> Any:
    return accepted_job(policies.start_run_now(app_services(), task_type, by=g.caller.name))
