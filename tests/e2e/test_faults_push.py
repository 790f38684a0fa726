"""Pushing under faults, against a real Label Studio: Label Studio down while candidates arrive, and
the service killed with SIGKILL in the middle of a bulk push. Either way every candidate ends up in
Label Studio exactly once."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlmodel import select

from dynaval.adapters.db.orm import CandidateRow, RoundRow, as_utc
from dynaval.bootstrap import bootstrap
from dynaval.entrypoints.app import create_app
from dynaval.settings import Settings
from tests.fixtures.service import (
    LEAD_TOKEN,
    PSEUDONYM_SECRET,
    SIGNING_SECRET,
    WEBHOOK_SECRET,
    WRITER_TOKEN,
    LiveService,
    make_settings,
)
from tests.support.fault_report import record_scenario
from tests.support.label_studio_server import LabelStudioServer, free_port

pytestmark = pytest.mark.labelstudio
REPO_ROOT = Path(__file__).resolve().parents[2]
LABELS = ("positive", "negative", "neutral")
ALL_VALIDATED = {"validate_non_fooling": True}
"""Every candidate goes to Label Studio, whatever the model said: these tests count pushed tasks."""


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


def body_of(response: requests.Response, status: int = 200) -> Any:
    """The JSON body of an answer that must have ``status``; any other answer fails the test with
    what the service said (a 429 or a 503 body has none of the fields the caller wants)."""
    request = response.request
    assert response.status_code == status, (
        f"{request.method} {request.path_url} answered {response.status_code}, not {status}: "
        f"{response.text[:500]}"
    )
    return response.json()


def project_tasks(server: LabelStudioServer, project_id: int) -> Counter[str]:
    """How many tasks of the project carry each candidate id."""
    tasks = server.client.tasks.list(project=project_id, page_size=1000)
    return Counter(str(dict(t.data).get("candidate_id")) for t in tasks)


def submit(call: Callable[..., requests.Response], round_id: int, n: int, prefix: str) -> list[str]:
    ids = []
    for i in range(n):
        body = {
            "text": f"{prefix} example number {i}, quite good",
            "writer_label": LABELS[i % 3],
        }
        response = call("POST", f"/api/rounds/{round_id}/candidates", json=body, token=WRITER_TOKEN)
        ids.append(body_of(response, 201)["id"])
    return ids


def create_round(call: Callable[..., requests.Response], name: str) -> tuple[int, int]:
    """A round that validates every candidate; returns its id and its Label Studio project id."""
    created = call(
        "POST",
        "/api/rounds",
        json={"name": name, "task": "sentiment", "model": "default", "policy": ALL_VALIDATED},
    )
    round_body = body_of(created, 201)
    return round_body["id"], round_body["label_studio_project_id"]


def sqlite_settings(
    tmp_path: Path, server: LabelStudioServer, model_dir: Path, port: int, **overrides: Any
) -> Settings:
    """The test settings on a SQLite file in ``tmp_path``, wired to ``server``, served on ``port``."""
    return make_settings(
        database_url=f"sqlite:///{tmp_path / 'dynaval.sqlite3'}",
        data_dir=tmp_path / "data",
        label_studio_url=server.url,
        label_studio_api_key=server.api_key,
        public_url=f"http://127.0.0.1:{port}",
        model_dir=model_dir,
        **overrides,
    )


# ------------------------------------------------------------------ Label Studio down while candidates arrive


@pytest.fixture
def own_label_studio(tmp_path: Path) -> Iterator[LabelStudioServer]:
    """A Label Studio of this test's own on a fixed port, so it can be stopped and started again."""
    server = LabelStudioServer(tmp_path / "label-studio", port=free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_label_studio_down_while_candidates_arrive(
    own_label_studio: LabelStudioServer, tmp_path: Path, tiny_model_dir: Path
) -> None:
    port = free_port()
    settings = sqlite_settings(
        tmp_path,
        own_label_studio,
        tiny_model_dir,
        port,
        label_studio_timeout_s=1,
        push_retry_base_s=0.5,
        push_retry_max_s=2.0,
    )
    services = bootstrap(settings)
    live = LiveService(app=create_app(services, start_background=True), services=services, port=port)
    live.start_listening()
    try:
        round_id, project_id = create_round(live.call, "ls down")

        own_label_studio.stop()
        ids = submit(live.call, round_id, 12, "down")
        outage_began = time.monotonic()

        def push_failures() -> int:
            with services.database.unit_of_work() as session:
                round_row = session.get(RoundRow, round_id)
                assert round_row is not None
                return round_row.push_failures

        # The push is tried again and again, each time after a longer wait (a failed attempt itself
        # takes up to the Label Studio timeout: the stopped server's port may still accept).
        wait_until(lambda: push_failures() >= 3, 60, "three failed pushes while Label Studio is down")
        outage_s = time.monotonic() - outage_began
        failures = push_failures()
        with services.database.unit_of_work() as session:
            rows = session.exec(select(CandidateRow).where(CandidateRow.round_id == round_id)).all()
            round_row = session.get(RoundRow, round_id)
            assert round_row is not None and round_row.push_retry_at is not None
            retry_in_s = (as_utc(round_row.push_retry_at) - datetime.now(UTC)).total_seconds()
        # Accepted and kept while Label Studio is down, and a wait before the next try.
        assert sorted(r.id for r in rows) == sorted(ids)
        assert {r.status for r in rows} == {"queued"}
        assert body_of(live.call("GET", "/health"))["status"] == "ok"
        assert retry_in_s <= settings.push_retry_max_s
        # Without backoff the worker would retry back to back, once per failed attempt's timeout.
        assert failures <= 2 + outage_s / settings.push_retry_base_s

        own_label_studio.start()
        wait_until(
            lambda: all(
                body_of(live.call("GET", f"/api/candidates/{c}"))["status"] == "in_validation" for c in ids
            ),
            60,
            "every candidate to be pushed once Label Studio is back",
        )
        tasks = project_tasks(own_label_studio, project_id)
        record_scenario(
            "Label Studio down while candidates arrive",
            candidates_sent=len(ids),
            outage_s=round(outage_s, 1),
            push_failures_during_outage=failures,
            tasks_expected=len(ids),
            tasks_found=sum(tasks.values()),
            duplicate_tasks=sum(n - 1 for n in tasks.values() if n > 1),
        )
        assert tasks == Counter(dict.fromkeys(ids, 1))
        with services.database.unit_of_work() as session:
            round_row = session.get(RoundRow, round_id)
            assert round_row is not None and (round_row.push_failures, round_row.push_retry_at) == (0, None)
    finally:
        live.close()


# ------------------------------------------------------------------ SIGKILL in the middle of a bulk push


class ServiceProcess:
    """gunicorn (service/gunicorn.conf.py, one worker) in its own process group, so SIGKILL takes all."""

    def __init__(self, env: dict[str, str], port: int, log_path: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.env = {**env, "DYNAVAL_BIND": f"127.0.0.1:{port}", "DYNAVAL_WORKERS": "1"}
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "-c", str(REPO_ROOT / "service" / "gunicorn.conf.py")],
                cwd=REPO_ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_until(self._healthy, 120, f"the service to answer /health (log: {self.log_path})")

    def _healthy(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"the service exited: {self.log_path.read_text()[-2000:]}")
        with contextlib.suppress(requests.RequestException):
            return requests.get(self.url + "/health", timeout=2).status_code == 200
        return False

    def kill(self) -> None:
        """SIGKILL the whole process group: no cleanup, no lease released, nothing flushed."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
            self.process = None

    def call(self, method: str, path: str, *, token: str = LEAD_TOKEN, **kwargs: Any) -> requests.Response:
        return requests.request(
            method, self.url + path, headers={"Authorization": f"Bearer {token}"}, timeout=60, **kwargs
        )


def service_env(
    tmp_path: Path, server: LabelStudioServer, model_dir: Path, port: int, **extra: str
) -> dict[str, str]:
    """``sqlite_settings`` as the environment of a service process (gunicorn, the worker)."""
    settings = sqlite_settings(tmp_path, server, model_dir, port)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAVAL_")}
    env.update(
        {
            # The limiter is off in the tests' settings, since tests poll faster than any client
            # (tests/e2e/test_limits.py tests it). Left out here, the service ran with the default
            # 600/minute, and the lead's polling plus one read per candidate could run out.
            "DYNAVAL_RATE_LIMIT": settings.rate_limit,
            "DYNAVAL_ANONYMOUS_RATE_LIMIT": settings.anonymous_rate_limit,
            "DYNAVAL_VERIFY_DELAY_S": str(settings.verify_delay_s),
            "DYNAVAL_DATABASE_URL": str(settings.database_url),
            "DYNAVAL_DATA_DIR": str(settings.data_dir),
            "DYNAVAL_LABEL_STUDIO_URL": settings.label_studio_url,
            "DYNAVAL_LABEL_STUDIO_API_KEY": settings.label_studio_api_key,
            "DYNAVAL_PUBLIC_URL": settings.public_url,
            "DYNAVAL_DEFAULT_MODEL_DIR": str(model_dir),
            "DYNAVAL_WRITER_TOKENS": WRITER_TOKEN,
            "DYNAVAL_LEAD_TOKENS": LEAD_TOKEN,
            "DYNAVAL_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "DYNAVAL_PSEUDONYM_SECRET": PSEUDONYM_SECRET,
            "DYNAVAL_SIGNING_SECRET": SIGNING_SECRET,
            "DYNAVAL_RECONCILE_INTERVAL_S": "0",
            "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": str(REPO_ROOT / "src"),
            **extra,
        }
    )
    return env


def test_sigkill_in_the_middle_of_a_bulk_push_then_restart(
    label_studio_server: LabelStudioServer, tmp_path: Path, tiny_model_dir: Path
) -> None:
    port = free_port()
    base = service_env(tmp_path, label_studio_server, tiny_model_dir, port)
    log = tmp_path / "service.log"
    total = 400
    # First the candidates pile up with the background worker off, so that one bulk push has them all.
    quiet = ServiceProcess({**base, "DYNAVAL_EMBEDDED_WORKER": "false"}, port, log)
    quiet.start()
    try:
        round_id, project_id = create_round(quiet.call, "sigkill")
        ids = submit(quiet.call, round_id, total, "killed")
    finally:
        quiet.stop()
    assert project_tasks(label_studio_server, project_id) == Counter()

    pushing = ServiceProcess(
        {
            **base,
            # Small batches: a push of 400 takes some seconds, so the kill lands in its middle
            # (with batches of 50 a push of 400 could end between two polls of Label Studio).
            "DYNAVAL_PUSH_BATCH_SIZE": "10",
            "DYNAVAL_PUSH_LEASE_S": "3",
        },
        port,
        log,
    )
    pushing.start()
    try:
        wait_until(
            lambda: sum(project_tasks(label_studio_server, project_id).values()) > 0, 60, "the push to start"
        )
    finally:
        pushing.kill()
    at_kill = sum(project_tasks(label_studio_server, project_id).values())
    time.sleep(1.0)  # an import Label Studio was still working on when the service died lands now
    after_kill = sum(project_tasks(label_studio_server, project_id).values())
    assert 0 < after_kill < total, "the kill must land in the middle of the bulk push"

    restarted = ServiceProcess({**base, "DYNAVAL_PUSH_LEASE_S": "3"}, port, log)
    restarted.start()
    try:

        def by_status() -> dict[str, int]:
            round_body = body_of(restarted.call("GET", f"/api/rounds/{round_id}"))
            return dict(round_body["counts"]["by_status"])

        wait_until(
            lambda: by_status().get("queued", 0) == 0,
            120,
            "every candidate to be pushed after the restart",
        )
        tasks = project_tasks(label_studio_server, project_id)
        statuses = by_status()  # one read, not one per candidate
    finally:
        restarted.stop()
    record_scenario(
        "SIGKILL in the middle of a bulk push",
        candidates_sent=total,
        tasks_when_killed=at_kill,
        tasks_after_kill=after_kill,
        tasks_expected=total,
        tasks_found=sum(tasks.values()),
        duplicate_tasks=sum(n - 1 for n in tasks.values() if n > 1),
        missing_tasks=sum(1 for c in ids if tasks[c] == 0),
    )
    assert tasks == Counter(dict.fromkeys(ids, 1))
    assert statuses == {"in_validation": total}
