"""Following a job a route queued (``202`` with its URL in ``Location``) until it ends."""

from __future__ import annotations

import time
from typing import Any

from tests.fixtures.service import LiveService

WAIT_S = 300.0


def finished_job(live: LiveService, answer: Any, *, wait_s: float = WAIT_S) -> dict[str, Any]:
    """The job ``answer`` (a ``202``) queued, once the service's worker ended it."""
    assert answer.status_code == 202, answer.text
    location = answer.headers["Location"]
    deadline = time.monotonic() + wait_s
    while True:
        job: dict[str, Any] = live.call("GET", location).json()
        if job["state"] not in ("queued", "running"):
            return job
        assert time.monotonic() < deadline, f"job still {job['state']} after {wait_s} s: {job}"
        time.sleep(0.1)


def built_release(live: LiveService, answer: Any) -> dict[str, Any]:
    """The release a ``POST /api/releases`` queued, with its manifest, once its job is done."""
    job = finished_job(live, answer)
    assert job["state"] == "done" and job["kind"] == "release", job
    release: dict[str, Any] = live.call("GET", job["result"]["release"]["url"]).json()
    return release
