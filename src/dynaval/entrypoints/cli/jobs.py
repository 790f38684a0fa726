"""``dynaval jobs``: list, show, cancel and wait for the jobs the service's workers run (training)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import closing
from typing import Any

from dynaval.entrypoints.cli.common import CommandError, open_services, operator_name, progress_bar

WAIT_POLL_S = 1.0


def _describe(job: Any) -> str:
    progress = job.progress
    where = ""
    if progress is not None and job.active:
        counted = f" {progress.done}/{progress.total}" if progress.total is not None else ""
        where = f"  {progress.step}{counted}"
    outcome = f"  {job.error}" if job.error else ""
    if job.result and "model" in job.result:
        outcome = f"  model {job.result['model']['hash']} ({job.result['model']['name']})"
    if job.result and "release" in job.result:
        outcome = f"  release id {job.result['release']['id']}"
    if job.result and "shipped" in job.result:  # a retraining run
        outcome += "  shipped" if job.result["shipped"] else f"  not shipped: {job.result.get('reason', '')}"
    if job.result and "passed" in job.result:
        outcome = f"  gate {'passed' if job.result['passed'] else 'failed'}"
    return f"{job.id}  {job.kind}  {job.subject}  {job.state}{where}{outcome}"


def _print_job(job: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(job.to_dict(), indent=2, ensure_ascii=False))
        return
    print(_describe(job))
    for line in job.log:
        print(f"  | {line}")
    if job.result:
        print(json.dumps(job.result, indent=2, ensure_ascii=False))


def cmd_jobs_list(args: argparse.Namespace) -> int:
    from dynaval.service_layer.jobs.jobs import list_jobs

    with closing(open_services()) as services:
        found = list_jobs(services, args.limit)
    if args.json:
        print(json.dumps({"jobs": [job.to_dict() for job in found]}, indent=2, ensure_ascii=False))
        return 0
    for job in found:
        print(_describe(job))
    if not found:
        print("no job yet")
    return 0


def cmd_jobs_show(args: argparse.Namespace) -> int:
    from dynaval.service_layer.jobs.jobs import get_job

    with closing(open_services()) as services:
        _print_job(get_job(services, args.job_id), args.json)
    return 0


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    from dynaval.service_layer.jobs.jobs import cancel_job

    with closing(open_services()) as services:
        job = cancel_job(services, args.job_id, by=operator_name())
    print(f"job {job.id}: {'cancelled' if not job.active else 'asked to stop at its next report'}")
    return 0


def cmd_jobs_wait(args: argparse.Namespace) -> int:
    """Follow the job with a progress bar per step until it ends: exit 0 when done, 1 otherwise."""
    with closing(open_services()) as services:
        return follow_job(services, args.job_id, timeout=args.timeout, as_json=args.json)


def follow_job(services: Any, job_id: int, *, timeout: float | None, as_json: bool) -> int:
    """Follow a job with a progress bar per step (on a terminal) until it ends, then print it: 0
    when it is done, 1 when it failed or was cancelled; past ``timeout`` a :class:`CommandError`."""
    from dynaval.domain.jobs.job import JobState
    from dynaval.service_layer.jobs.jobs import get_job

    deadline = None if timeout is None else time.monotonic() + timeout
    job = get_job(services, job_id)
    bar: Any = None
    step = None
    shown = sys.stderr.isatty()  # a bar per step on a terminal; a script reads the final state
    try:
        while job.active:
            progress = job.progress
            if shown and progress is not None and progress.step != step:
                if bar is not None:
                    bar.close()
                step = progress.step
                bar = progress_bar(progress.total, "it", step)
            if bar is not None and progress is not None:
                bar.total = progress.total
                bar.n = progress.done
                bar.refresh()
            if deadline is not None and time.monotonic() > deadline:
                raise CommandError(
                    f"job {job.id} is still {job.state} after {timeout:g} s; "
                    f"wait again with `dynaval jobs wait {job.id}`"
                )
            time.sleep(WAIT_POLL_S)
            job = get_job(services, job_id)
    finally:
        if bar is not None:
            bar.close()
    _print_job(job, as_json)
    return 0 if job.state is JobState.DONE else 1


def add_jobs_commands(commands: Any) -> None:
    jobs = commands.add_parser(
        "jobs",
        help="long work the service's workers run (training): list, show, cancel, wait",
        description="Jobs run on the task queue's workers (the service's embedded worker, or "
        "`dynaval worker`). A lead starts one with the API (POST /api/models/train).",
    )
    job_commands = jobs.add_subparsers(dest="jobs_command", required=True, metavar="JOBS_COMMAND")
    listing = job_commands.add_parser("list", help="the latest jobs, newest first")
    listing.add_argument("--limit", type=int, default=50, help="how many (default 50, at most 200)")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(run=cmd_jobs_list)
    for name, run, says in (
        ("show", cmd_jobs_show, "one job: state, progress, log, result or error"),
        ("cancel", cmd_jobs_cancel, "stop a job (a running one stops at its next report)"),
        ("wait", cmd_jobs_wait, "follow a job with a progress bar until it ends (exit 1 unless done)"),
    ):
        command = job_commands.add_parser(name, help=says)
        command.add_argument("job_id", type=int, help="the job's id")
        if name != "cancel":
            command.add_argument("--json", action="store_true")
        if name == "wait":
            command.add_argument(
                "--timeout", type=float, default=None, help="give up after this many seconds"
            )
        command.set_defaults(run=run)
