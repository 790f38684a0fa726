"""Jobs over HTTP: a lead starts long work (training) as a job, answered ``202`` with the job's URL
in ``Location``, and lists, reads and cancels jobs."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, g, jsonify, url_for

from dynaval.domain.jobs.job import Job
from dynaval.entrypoints.api.openapi import documented
from dynaval.entrypoints.api.request_bodies import app_services, checked_body
from dynaval.entrypoints.api.schemas import EvaluateRequest, TrainRequest
from dynaval.entrypoints.auth import Role, requires
from dynaval.entrypoints.guards import query_int
from dynaval.model_training.training_job import TrainingOrder, submit_training
from dynaval.service_layer.jobs import jobs as job_cases
from dynaval.service_layer.regression import suite_jobs

jobs = Blueprint("jobs", __name__)
JOBS_LIMIT = 200


def accepted_job(job: Job) -> Any:
    """``202 Accepted`` with the queued job, its URL in ``Location``."""
    response = jsonify(job.to_dict())
    response.status_code = 202
    response.headers["Location"] = url_for("jobs.get_job", job_id=job.id)
    return response


@jobs.post("/api/models/train")
@documented(
    summary="A lead trains a model on releases' train splits, as a job (202, its URL in Location)",
    body=TrainRequest,
    responses={
        202: "The queued job (watch it at Location: GET /api/jobs/<id>)",
        403: "Not a lead",
        409: "Another active job trains a model of this name",
        422: "Invalid field (an unknown release, a base that is no model, an image task type)",
    },
)
@requires(Role.LEAD)
def train_model() -> Any:
    order = TrainingOrder(**checked_body(TrainRequest).model_dump())
    return accepted_job(submit_training(app_services(), order, by=g.caller.name))


@jobs.post("/api/models/evaluate")
@documented(
    summary="A lead runs a model over the regression suite, as a job (202, its URL in Location)",
    body=EvaluateRequest,
    responses={
        202: "The queued job; its result: accuracy overall, per split and per label",
        403: "Not a lead",
        409: "An evaluation of this model folder is queued or running",
        422: "Invalid field (no model folder)",
    },
)
@requires(Role.LEAD)
def evaluate_model() -> Any:
    body = checked_body(EvaluateRequest)
    return accepted_job(suite_jobs.submit_evaluation(app_services(), body.model, by=g.caller.name))


@jobs.get("/api/jobs")
@documented(
    summary="The latest jobs, newest first, with their kind, state and progress",
    query={"limit": {"type": "integer", "minimum": 1, "maximum": JOBS_LIMIT, "default": 50}},
    responses={200: "OK", 403: "Not a lead", 422: "Invalid query"},
)
@requires(Role.LEAD)
def list_jobs() -> Any:
    limit = query_int("limit", 50, minimum=1, maximum=JOBS_LIMIT)
    return jsonify({"jobs": [job.to_dict() for job in job_cases.list_jobs(app_services(), limit)]})


@jobs.get("/api/jobs/<int:job_id>")
@documented(
    summary="One job: kind, state, progress (step, done/total, rate, remaining), result or error",
    responses={200: "OK", 403: "Not a lead", 404: "No such job"},
)
@requires(Role.LEAD)
def get_job(job_id: int) -> Any:
    return jsonify(job_cases.get_job(app_services(), job_id).to_dict())


@jobs.post("/api/jobs/<int:job_id>/cancel")
@documented(
    summary="A lead stops a job: a queued one at once, a running one at its next report",
    responses={
        200: "The job (cancelled, or running with cancel_requested)",
        403: "Not a lead",
        404: "No such job",
        409: "The job has finished",
    },
)
@requires(Role.LEAD)
def cancel_job(job_id: int) -> Any:
    return jsonify(job_cases.cancel_job(app_services(), job_id, by=g.caller.name).to_dict())
