"""The task queue across processes: the service enqueues, a separate ``dynaval worker`` does the work.

With ``DYNAVAL_QUEUE_URL`` pointing at the machine's Redis (127.0.0.1:6379) and no consumer in the
service process, candidates stay queued until a ``dynaval worker`` process (as on another machine)
pushes them into the real Label Studio; a burst of candidates enqueues one push, not one each.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from dynaval.bootstrap import bootstrap
from dynaval.entrypoints.app import create_app
from tests.e2e.test_faults_push import (
    body_of,
    create_round,
    project_tasks,
    service_env,
    sqlite_settings,
    submit,
    wait_until,
)
from tests.fixtures.service import LiveService
from tests.support.label_studio_server import LabelStudioServer, free_port
from tests.support.redis_queues import REDIS_URL, redis_queue_name

pytestmark = pytest.mark.labelstudio


@pytest.fixture
def queue_name() -> Iterator[str]:
    """A queue of this test's own on the shared Redis, deleted afterwards."""
    with redis_queue_name("dynavaltest") as name:
        yield name


def test_a_separate_worker_process_does_the_pushes_through_redis(
    label_studio_server: LabelStudioServer, tmp_path: Path, tiny_model_dir: Path, queue_name: str
) -> None:
    port = free_port()
    settings = sqlite_settings(
        tmp_path,
        label_studio_server,
        tiny_model_dir,
        port,
        queue_url=REDIS_URL,
        queue_name=queue_name,
        embedded_worker=False,
    )
    services = bootstrap(settings)
    live = LiveService(app=create_app(services), services=services, port=port)
    live.start_listening()
    worker: subprocess.Popen[bytes] | None = None
    try:
        round_id, project_id = create_round(live.call, "queued")
        ids = submit(live.call, round_id, 20, "queue")
        # No consumer yet: the work waits in Redis, one push for the whole burst.
        assert services.task_queue.pending_count() == 1
        assert {body_of(live.call("GET", f"/api/candidates/{c}"))["status"] for c in ids} == {"queued"}

        env = service_env(
            tmp_path,
            label_studio_server,
            tiny_model_dir,
            port,
            DYNAVAL_QUEUE_URL=REDIS_URL,
            DYNAVAL_QUEUE_NAME=queue_name,
        )
        log = (tmp_path / "worker.log").open("wb")
        worker = subprocess.Popen(
            [sys.executable, "-m", "dynaval.entrypoints.cli", "worker", "--workers", "2"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until(
            lambda: all(
                body_of(live.call("GET", f"/api/candidates/{c}"))["status"] == "in_validation" for c in ids
            ),
            90,
            f"the worker to push every candidate (log: {tmp_path / 'worker.log'})",
        )
        assert project_tasks(label_studio_server, project_id) == Counter(dict.fromkeys(ids, 1))
        assert services.task_queue.pending_count() == 0
        # SIGTERM: the worker finishes what it runs and exits cleanly.
        os.killpg(worker.pid, signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, (tmp_path / "worker.log").read_text()[-2000:]
        worker = None
    finally:
        if worker is not None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=30)
        live.close()
