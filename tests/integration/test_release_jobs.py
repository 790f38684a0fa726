"""A release built as a job, on both databases: the request is checked before it is queued, one
build per release name runs at a time, the worker's build reports its steps, and the job's result
names the release it stored."""

from __future__ import annotations

import random
from typing import Any

import pytest

from dynaval.domain.errors import Conflict, InvalidInput, NotFound
from dynaval.domain.jobs.job import Job, JobState
from dynaval.service_layer.jobs import jobs
from dynaval.service_layer.jobs.ports import JobReporter
from dynaval.service_layer.releases import catalog, release_jobs
from dynaval.service_layer.releases.releases import ReleaseRequest
from dynaval.service_layer.services import Services
from tests.support.release_seed import seed_frozen_round

SENTIMENT = ("positive", "negative", "neutral")


def test_a_release_job_is_checked_queued_built_and_names_its_release(services: Services) -> None:
    assert services.database is not None
    seeded = seed_frozen_round(
        services.database, task_type="sentiment", labels=SENTIMENT, fields=["text"], accepted=30, writers=10,
        rng=random.Random(3), name="round one",
    )  # fmt: skip
    request = ReleaseRequest(round_ids=[seeded.round_id], version="1.0.0", created_by="lead")

    # Checked before anything is queued: an unknown round, a bad version, a bad name.
    round_id = seeded.round_id
    for bad, error, field in (
        (ReleaseRequest(round_ids=[999], version="1.0.0", created_by="lead"), NotFound, "round_id"),
        (ReleaseRequest(round_ids=[round_id], version="1.0", created_by="lead"), InvalidInput, "version"),
        (
            ReleaseRequest(round_ids=[round_id], version="1.0.0", created_by="lead", name="A"),
            InvalidInput,
            "name",
        ),
    ):
        with pytest.raises(error) as refused:
            release_jobs.submit_release(services, bad)
        assert refused.value.field == field
    assert jobs.list_jobs(services) == []

    job = release_jobs.submit_release(services, request)
    assert (job.kind, job.key, job.state) == ("release", "release:dynaval-sentiment", JobState.QUEUED)
    with pytest.raises(Conflict, match="is queued") as busy:  # one build per release name at a time
        release_jobs.submit_release(services, ReleaseRequest(round_ids=[seeded.round_id], version="1.1.0",
                                                              created_by="lead"))  # fmt: skip
    assert busy.value.field == "name"

    steps: list[str] = []
    build = services.job_work[job.kind]

    def watched(running: Job, reporter: JobReporter) -> dict[str, Any]:
        class Watching:
            def step(self, name: str, total: int | None = None) -> None:
                steps.append(name)
                reporter.step(name, total)

            def advance(self, done: int, total: int | None = None) -> None:
                reporter.advance(done, total)

            def say(self, line: str) -> None:
                reporter.say(line)

        return build(running, Watching())

    services.job_work[job.kind] = watched
    assert job.id is not None
    done = jobs.run_job(services, job.id)
    assert done is not None and done.state is JobState.DONE, done
    assert steps == [
        "reading the examples", "counting each round's figures", "placing the examples", "writing the splits",
        "writing the manifest and the card",
    ]  # fmt: skip
    assert done.result is not None
    named = done.result["release"]
    stored = catalog.get_release(services, named["id"])
    assert (named["name"], named["version"], named["content_hash"]) == (
        stored.name, stored.version, stored.content_hash,
    )  # fmt: skip
    assert named["url"] == f"/api/releases/{stored.id}" and stored.created_by == "lead"
    # Built once: the same version again is refused at once, naming it.
    with pytest.raises(Conflict) as again:
        release_jobs.submit_release(services, request)
    assert again.value.field == "version"
