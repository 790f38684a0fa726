"""A release built as a job: ``POST /api/releases`` checks the request (rounds, their state and task
type, the name, the version) and queues the build; a worker builds it with the progress of each
step, and the job's result names the release. One build per release name at a time."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from dynaval.domain.jobs.job import Job, JobKind
from dynaval.domain.releases.release import SplitRule
from dynaval.service_layer.jobs import jobs
from dynaval.service_layer.jobs.ports import JobReporter, JobWork
from dynaval.service_layer.releases.releases import ReleaseRequest, check_request, create_release
from dynaval.service_layer.services import Services


def submit_release(services: Services, request: ReleaseRequest) -> Job:
    """Check the request and queue its build (409 naming ``name`` while this release name builds)."""
    name = check_request(services, request)
    params = {
        "rounds": list(request.round_ids),
        "version": request.version,
        "name": name,
        "license": request.license,
        "rule": asdict(request.rule),
    }
    return jobs.submit_job(
        services, kind=JobKind.RELEASE, key=f"release:{name}", params=params, by=request.created_by
    )


def release_work(services: Services) -> JobWork:
    """The work of a :attr:`JobKind.RELEASE` job, bound to ``services`` (by the composition root)."""

    def work(job: Job, reporter: JobReporter) -> dict[str, Any]:
        params = job.params
        rule = dict(params["rule"])
        rule["shares"] = tuple(rule["shares"])
        request = ReleaseRequest(
            round_ids=list(params["rounds"]),
            version=params["version"],
            created_by=job.created_by,
            name=params["name"],
            license=params["license"],
            rule=SplitRule(**rule),
        )
        made = create_release(services, request, progress=reporter)
        return {
            "release": {
                "id": made.id,
                "name": made.name,
                "version": made.version,
                "content_hash": made.content_hash,
                "url": f"/api/releases/{made.id}",
            }
        }

    return work
