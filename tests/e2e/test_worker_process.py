"""The deployed service reads webhooks' tasks back in a process of its own.

``gunicorn -c service/gunicorn.conf.py``, as deployed, with a real Label Studio: the master starts
one ``dynaval worker`` beside its HTTP workers (the queue's consumer: pushes and read-backs), starts
it again when it dies, and stops it with itself. While the worker is down, webhooks are still
answered and their tasks wait; the worker reads them when it is back.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.test_faults_push import body_of, create_round, service_env, submit, wait_until
from tests.e2e.test_task_queue import REDIS_URL, queue_name  # noqa: F401 (a fixture)
from tests.fixtures.service import LEAD_TOKEN
from tests.support.gunicorn_service import GunicornService
from tests.support.label_studio_server import Annotator, LabelStudioServer, free_port

pytestmark = pytest.mark.labelstudio


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def deployed(
    label_studio_server: LabelStudioServer,
    tmp_path: Path,
    tiny_model_dir: Path,
    queue_name: str,  # noqa: F811
) -> Iterator[tuple[GunicornService, Callable[..., requests.Response]]]:
    """The service under gunicorn with its defaults as to the queue's consumer; the queue on Redis
    (a stopped worker then holds no lock the answering needs)."""
    port = free_port()
    env = service_env(
        tmp_path,
        label_studio_server,
        tiny_model_dir,
        port,
        DYNAVAL_QUEUE_URL=REDIS_URL,
        DYNAVAL_QUEUE_NAME=queue_name,
        DYNAVAL_WORKERS="1",
        DYNAVAL_THREADS="4",
        DYNAVAL_LOG_LEVEL="info",
    )
    with GunicornService(env, port, tmp_path / "gunicorn.log") as service, requests.Session() as http:

        def call(method: str, path: str, *, token: str = LEAD_TOKEN, **kwargs: Any) -> requests.Response:
            headers = {"Authorization": f"Bearer {token}"}
            return http.request(method, service.url + path, headers=headers, timeout=60, **kwargs)

        yield service, call


def one_worker_process(service: GunicornService) -> int:
    found: list[int] = []

    def started() -> bool:
        found[:] = service.worker_process_pids()
        return len(found) == 1

    wait_until(started, 60, f"one `dynaval worker` beside gunicorn's workers:\n{service.log_tail()}")
    return found[0]


def test_the_master_runs_the_queue_consumer_in_a_worker_process_that_reads_votes_back(
    deployed: tuple[GunicornService, Callable[..., requests.Response]],
    label_studio_server: LabelStudioServer,
    label_studio_annotators: list[Annotator],
) -> None:
    service, call = deployed
    worker = one_worker_process(service)
    assert len(service.worker_pids()) == 1 and worker not in service.worker_pids()

    round_id, _project_id = create_round(call, "worker process")
    ids = submit(call, round_id, 2, "read back")
    candidate = {c: body_of(call("GET", f"/api/candidates/{c}")) for c in ids}
    wait_until(
        lambda: all(body_of(call("GET", f"/api/candidates/{c}"))["status"] == "in_validation" for c in ids),
        90,
        "the worker process to push the candidates",
    )
    candidate = {c: body_of(call("GET", f"/api/candidates/{c}")) for c in ids}

    def votes(candidate_id: str) -> int:
        return len(body_of(call("GET", f"/api/candidates/{candidate_id}"))["votes"])

    def waiting() -> int:
        return int(body_of(call("GET", f"/api/rounds/{round_id}"))["verification"]["tasks_waiting"])

    # The worker is stopped (as if hung): the webhook is still answered, and its task waits.
    first, second = ids
    os.kill(worker, signal.SIGSTOP)
    try:
        label_studio_server.annotate(
            candidate[first]["label_studio_task_id"], label_studio_annotators[0], "positive"
        )
        wait_until(lambda: waiting() == 1, 30, "the webhook's task to wait for the worker")
        time.sleep(2.0)  # several read-back delays: no one else reads it
        assert votes(first) == 0 and waiting() == 1
    finally:
        os.kill(worker, signal.SIGCONT)
    wait_until(lambda: votes(first) == 1, 60, "the worker, back, to read the vote")
    wait_until(lambda: waiting() == 0, 30, "the read to settle the task")

    # A worker that dies is started again, and the new one reads back.
    os.kill(worker, signal.SIGKILL)
    wait_until(
        lambda: service.worker_process_pids() not in ([], [worker]), 60, "the master to start a new worker"
    )
    [restarted] = service.worker_process_pids()
    label_studio_server.annotate(
        candidate[second]["label_studio_task_id"], label_studio_annotators[1], "negative"
    )
    wait_until(lambda: votes(second) == 1, 60, "the new worker to read the vote")

    # Stopping gunicorn stops its worker, whose running tasks finish first.
    service.stop()
    wait_until(lambda: not alive(restarted), 30, "the worker to stop with gunicorn")


def test_threads_in_each_http_worker_when_asked_or_none_when_the_consumer_runs_elsewhere(
    label_studio_server: LabelStudioServer, tmp_path: Path, tiny_model_dir: Path
) -> None:
    for setting, wanted in (
        ({"DYNAVAL_WORKER_PROCESS": "false"}, 0),
        ({"DYNAVAL_EMBEDDED_WORKER": "false"}, 0),
    ):
        port = free_port()
        env = service_env(tmp_path, label_studio_server, tiny_model_dir, port, DYNAVAL_WORKERS="2", **setting)
        with GunicornService(env, port, tmp_path / "gunicorn.log") as service:
            time.sleep(1.0)  # the master starts its worker when it is ready: it would be there by now
            assert len(service.worker_process_pids()) == wanted, setting
            assert len(service.worker_pids()) == 2
