"""Evaluation and the gate as jobs: ``POST /api/models/evaluate`` and ``POST /api/gate`` check what
they are given (a model folder, a baseline that exists, a flip tolerance) and queue the work; a
worker runs the model over the suite (and, for the gate, compares and records the run), and the
job's result is what ``dynaval evaluate --json`` and ``dynaval gate --json`` print. One job per
model folder at a time."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from dynaval.domain.jobs.job import Job, JobKind
from dynaval.domain.regression.gate import check_max_flips
from dynaval.service_layer.jobs import jobs
from dynaval.service_layer.jobs.ports import JobReporter, JobWork
from dynaval.service_layer.regression import evaluation, gate
from dynaval.service_layer.regression.model_catalog import model_folder
from dynaval.service_layer.services import Services


def _key(kind: JobKind, folder: Path) -> str:
    """One job of a kind per model folder at a time (by its path: a key has no room for one)."""
    return f"{kind}:{hashlib.sha256(str(folder).encode()).hexdigest()[:32]}"


def submit_evaluation(services: Services, model: str, *, by: str) -> Job:
    folder = model_folder(services, model, field="model")
    return jobs.submit_job(
        services,
        kind=JobKind.EVALUATE,
        key=_key(JobKind.EVALUATE, folder),
        params={"model": str(folder)},
        by=by,
    )


def submit_gate(services: Services, candidate: str, *, baseline: str | None, max_flips: int, by: str) -> Job:
    """Queue a gate run once its inputs are known to be there (422 naming the one that is not)."""
    check_max_flips(max_flips)
    folder = model_folder(services, candidate, field="candidate")
    baseline = gate.check_baseline(services, baseline)
    params = {"candidate": str(folder), "baseline": baseline, "max_flips": max_flips}
    return jobs.submit_job(
        services, kind=JobKind.GATE, key=_key(JobKind.GATE, folder), params=params, by=by, field="candidate"
    )


def evaluation_work(services: Services) -> JobWork:
    def work(job: Job, reporter: JobReporter) -> dict[str, Any]:
        reporter.step("loading the model")
        # Suspects are marked too, as after every evaluation.
        return evaluation.evaluate(services, job.params["model"], progress=reporter).report()

    return work


def gate_work(services: Services) -> JobWork:
    def work(job: Job, reporter: JobReporter) -> dict[str, Any]:
        params = job.params
        reporter.step("evaluating what is missing and comparing on the suite")
        outcome = gate.run_gate(
            services,
            Path(params["candidate"]),
            baseline=params["baseline"],
            max_flips=params["max_flips"],
            by=job.created_by,
        )
        return outcome.to_dict()

    return work
