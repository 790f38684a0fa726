"""The supervisor that keeps gunicorn's ``dynaval worker`` running, on real child processes (a
sleeping Python in place of the worker: what is tested is the starting, restarting and stopping)."""

from __future__ import annotations

import itertools
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dynaval.entrypoints.worker_process import WorkerProcess, worker_process_wanted

SLEEPER = (sys.executable, "-c", "import time; time.sleep(120)")


def wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, True),
        ({"DYNAVAL_EMBEDDED_WORKER": "true"}, True),
        ({"DYNAVAL_EMBEDDED_WORKER": "false"}, False),
        ({"DYNAVAL_EMBEDDED_WORKER": "0"}, False),
        ({"DYNAVAL_WORKER_PROCESS": "false"}, False),
        ({"DYNAVAL_WORKER_PROCESS": " Off "}, False),
        ({"DYNAVAL_WORKER_PROCESS": "true", "DYNAVAL_EMBEDDED_WORKER": "yes"}, True),
    ],
)
def test_the_worker_process_runs_unless_no_consumer_or_threads_are_asked_for(
    environ: dict[str, str], wanted: bool
) -> None:
    assert worker_process_wanted(environ) is wanted


def test_a_worker_that_dies_is_started_again_and_stop_ends_it() -> None:
    worker = WorkerProcess(SLEEPER, stop_timeout_s=5, pauses_s=(0.05, 0.2))
    worker.start()
    try:
        wait_for(lambda: worker.pid is not None)
        first = worker.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: worker.pid not in (None, first))
        second = worker.pid
        assert second is not None and alive(second)
    finally:
        worker.stop()
    assert worker.pid is None
    assert not alive(second)
    time.sleep(0.3)  # longer than the longest pause: nothing is started after the stop
    assert worker.pid is None


def test_a_worker_that_keeps_failing_is_started_again_after_longer_pauses(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    # Each start writes its own time (the monotonic clock is the machine's, shared by processes).
    command = (
        sys.executable,
        "-c",
        f"import time; open({str(starts)!r}, 'a').write(f'{{time.monotonic()}}\\n')",
    )
    worker = WorkerProcess(command, stop_timeout_s=5, pauses_s=(0.05, 0.4))
    worker.start()
    try:
        wait_for(lambda: starts.exists() and len(starts.read_text().split()) >= 6, timeout_s=30)
    finally:
        worker.stop()
    seen = [float(x) for x in starts.read_text().split()]
    gaps = [b - a for a, b in itertools.pairwise(seen)]
    # Pauses of 0.05, 0.1, 0.2, 0.4 and then 0.4 s, the longest (each gap adds a Python's start).
    assert all(gap >= pause for gap, pause in zip(gaps, (0.05, 0.1, 0.2, 0.4, 0.4), strict=False)), gaps
    assert gaps[0] < gaps[3], gaps


def test_stop_before_start_and_twice_is_harmless() -> None:
    worker = WorkerProcess(SLEEPER, stop_timeout_s=5)
    worker.stop()
    worker.stop()
    assert worker.pid is None
