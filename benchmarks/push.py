"""Push: queued candidates into the round's Label Studio project, against Label Studio's own import.

Fooled candidates wait ``queued`` until the task queue imports them into the round's Label Studio
project in bulk (``service_layer/validation/pushing.py``, ``DYNAVAL_PUSH_BATCH_SIZE`` a request) and marks
them ``in_validation``. This script measures, in one run, on this machine:

1. A real Label Studio (a temporary data directory) and the service under gunicorn
   (``service/gunicorn.conf.py`` with its defaults: one worker, 16 threads, the task queue's
   consumer inside it, SQLite unless ``--database-url``), the tiny test model (always ``neutral``,
   so a writer's ``positive`` or ``negative`` fools it).
2. **Backlog** (``--repeats`` times, alternating which goes first):
   - the service: a lead creates a round; ``--backlog`` candidates are written ``queued`` straight
     into the database (a backlog, as when Label Studio was down while they came); a writer then
     submits one more through the API, which asks the task queue for a push as any candidate
     does. Timed from that submission until the push has recorded every candidate's task (the
     latest ``pushed_at``): candidates per second from ``queued`` to ``in_validation``.
   - Label Studio: the same tasks (the data the push sends) imported into a fresh project of the
     same config, in requests of the push's batch size, one after the other: tasks per second.
   Goal: the push at >= 50 % of Label Studio's rate (medians of the repeats).
3. **Steady writers**: on a fresh round, ``--steady`` candidates posted through the API in batches
   of ``--steady-batch`` at ``--rate`` candidates per second; for every candidate the delay from
   its storing (``submitted_at``) to the push recording its task in Label Studio (``pushed_at``).
   Goal: p99 <= 2 s, the last batch included.
4. Everything is stopped and removed at the end, also on error or Ctrl-C.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/push.py               # 10,000 backlog, 5,000 steady
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/push.py --scale 0.1   # a quick run
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from harness import (
    BenchmarkError,
    Gunicorn,
    LabelStudioServer,
    Secrets,
    ServiceClient,
    add_database_argument,
    backend_name,
    candidate_row,
    create_project,
    create_round,
    free_port,
    import_tasks,
    insert_candidates,
    label_studio_cpu_seconds,
    machine_state,
    make_text,
    median,
    percentile,
    run_main,
    send_load,
    service_database,
    service_environment,
    start_gunicorn,
    start_label_studio,
    status_counts,
    tiny_model,
    verdict,
    wait_for,
)
from sqlalchemy import func
from sqlmodel import col, select

from dynaval.adapters.db.database import Database
from dynaval.adapters.db.orm import CandidateRow, as_utc

GOAL_RATIO = 0.5
GOAL_P99_S = 2.0
POLICY = {"min_votes": 3, "max_votes": 3, "gold_rate": 0}


@dataclass
class Rate:
    seconds: float
    count: int
    service_cpu_s: float = 0.0
    label_studio_cpu_s: float = 0.0

    @property
    def per_second(self) -> float:
        return self.count / self.seconds


def measure_push(
    client: ServiceClient,
    writer: ServiceClient,
    service: Gunicorn,
    server: LabelStudioServer,
    database: Database,
    rng: random.Random,
    n: int,
    repeat: int,
) -> tuple[Rate, list[dict[str, str]]]:
    """A fresh round with ``n`` queued candidates, pushed once one more is submitted; returns the
    rate and the tasks as the push sent them (for Label Studio's import of the same)."""
    round_id, _project_id = create_round(client, f"push bench {repeat}", POLICY)
    stored_at = datetime.now(UTC) - timedelta(hours=1)
    rows = []
    for i in range(n):
        rows.append(
            candidate_row(
                candidate_id=str(uuid.uuid4()),
                round_id=round_id,
                text=make_text(rng, i),
                writer_label=rng.choice(["positive", "negative"]),
                writer_id="bench-writer",
                status="queued",
                submitted_at=stored_at + timedelta(milliseconds=i),
            )
        )
    insert_candidates(database, rows)
    tasks = [{"candidate_id": r["id"], "text": r["inputs"]["text"]} for r in rows]
    service_cpu, ls_cpu = service.cpu_seconds(), label_studio_cpu_seconds(server)
    began = datetime.now(UTC)
    writer.call(
        "POST",
        f"/api/rounds/{round_id}/candidates",
        json={"text": make_text(rng, n), "writer_label": "positive"},
    )
    wait_for(
        lambda: status_counts(database, round_id).get("in_validation", 0) == n + 1,
        timeout_s=max(300.0, n * 0.2),
        what=f"the push of {n + 1} candidates",
        interval_s=0.2,
    )
    with database.reading() as session:
        last = session.exec(
            select(func.max(CandidateRow.pushed_at)).where(CandidateRow.round_id == round_id)
        ).one()
    if last is None:
        raise BenchmarkError("no candidate of the round was pushed")
    seconds = (as_utc(last) - began).total_seconds()
    return (
        Rate(
            seconds,
            n + 1,
            service.cpu_seconds() - service_cpu,
            label_studio_cpu_seconds(server) - ls_cpu,
        ),
        tasks,
    )


def measure_label_studio(server: LabelStudioServer, tasks: list[dict[str, str]], batch: int) -> Rate:
    """The same tasks imported into a fresh project, ``batch`` a request, one after the other."""
    project_id = create_project(server, "push bench: Label Studio import", POLICY["min_votes"])
    ls_cpu = label_studio_cpu_seconds(server)
    began = time.perf_counter()
    import_tasks(server, project_id, tasks, batch=batch)
    return Rate(
        time.perf_counter() - began, len(tasks), label_studio_cpu_s=label_studio_cpu_seconds(server) - ls_cpu
    )


@dataclass
class Steady:
    delays: list[float]
    last_batch: list[float]
    submit_p99_ms: float
    errors: int
    scoring: list[float]
    """From storing to scored (the model's answer, in the writer's request)."""
    pushing: list[float]
    """From scored (queued) to the task recorded in Label Studio."""

    def p(self, q: float) -> float:
        return percentile(self.delays, q)


def measure_steady(
    client: ServiceClient,
    service: Gunicorn,
    database: Database,
    writer_token: str,
    rng: random.Random,
    n: int,
    batch: int,
    rate: float,
) -> Steady:
    round_id, _project_id = create_round(client, "push bench: steady writers", POLICY)
    bodies = []
    for first in range(0, n, batch):
        bodies.append(
            json.dumps(
                {
                    "candidates": [
                        {"text": make_text(rng, i), "writer_label": rng.choice(["positive", "negative"])}
                        for i in range(first, min(n, first + batch))
                    ]
                }
            ).encode()
        )
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {writer_token}"}
    url = f"{service.url}/api/rounds/{round_id}/candidates/batch"
    run = send_load(url, headers, bodies, 4, n / rate + 600, rate=rate / batch, ok_status=201)
    if run.errors:
        raise BenchmarkError(f"{run.errors} batches refused: {run.error_samples}")
    wait_for(
        lambda: status_counts(database, round_id).get("in_validation", 0) == n,
        timeout_s=300,
        what=f"the push of the {n} steady candidates",
        interval_s=0.2,
    )
    with database.reading() as session:
        rows = session.exec(
            select(CandidateRow.submitted_at, CandidateRow.scored_at, CandidateRow.pushed_at)
            .where(CandidateRow.round_id == round_id)
            .order_by(col(CandidateRow.submitted_at))
        ).all()
    times = [
        (as_utc(stored), as_utc(scored), as_utc(pushed))
        for stored, scored, pushed in rows
        if scored and pushed
    ]
    delays = [(pushed - stored).total_seconds() for stored, _, pushed in times]
    return Steady(
        delays,
        delays[-batch:],
        run.p99_ms,
        run.errors,
        scoring=[(scored - stored).total_seconds() for stored, scored, _ in times],
        pushing=[(pushed - scored).total_seconds() for _, scored, pushed in times],
    )


def run(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    keys = Secrets()
    backlog = max(1, round(args.backlog * args.scale))
    steady = max(args.steady_batch, round(args.steady * args.scale))
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dynaval-push-bench-")))
        model_dir = tiny_model(scratch)
        database_url = stack.enter_context(service_database(args.database_url, scratch))
        backend = backend_name(database_url)
        server = start_label_studio(stack, scratch)
        port = free_port()
        env = service_environment(
            scratch=scratch,
            database_url=database_url,
            server=server,
            port=port,
            keys=keys,
            model_dir=model_dir,
            workers=args.workers,
            threads=args.threads,
            RECONCILE_INTERVAL_S="0",
            PUSH_BATCH_SIZE=str(args.push_batch),
        )
        print(f"starting the service under gunicorn ({args.workers} x {args.threads}, {backend}) ...")
        service = start_gunicorn(stack, env, port, scratch / "gunicorn.log")
        database = Database(database_url)
        stack.callback(database.dispose)
        client = ServiceClient(service.url, keys.lead)
        writer = ServiceClient(service.url, keys.writer)
        # Untimed warm-up: the first round, the model's first answer, the first import.
        measure_push(client, writer, service, server, database, rng, 10, 0)

        ours: list[Rate] = []
        theirs: list[Rate] = []
        for repeat in range(1, args.repeats + 1):
            if repeat % 2:
                pushed, tasks = measure_push(client, writer, service, server, database, rng, backlog, repeat)
                imported = measure_label_studio(server, tasks, args.push_batch)
            else:
                tasks = [
                    {"candidate_id": str(uuid.uuid4()), "text": make_text(rng, i)} for i in range(backlog)
                ]
                imported = measure_label_studio(server, tasks, args.push_batch)
                pushed, _ = measure_push(client, writer, service, server, database, rng, backlog, repeat)
            ours.append(pushed)
            theirs.append(imported)
            print(
                f"repeat {repeat}: push {pushed.count} in {pushed.seconds:.1f} s = {pushed.per_second:.0f}/s "
                f"(service CPU {pushed.service_cpu_s / pushed.count * 1000:.2f} ms, Label Studio CPU "
                f"{pushed.label_studio_cpu_s / pushed.count * 1000:.2f} ms per candidate); "
                f"Label Studio import {imported.count} in {imported.seconds:.1f} s = "
                f"{imported.per_second:.0f}/s (its CPU "
                f"{imported.label_studio_cpu_s / imported.count * 1000:.2f} ms per task); {machine_state()}",
                flush=True,
            )

        print(
            f"steady writers: {steady} candidates in batches of {args.steady_batch} "
            f"at {args.rate:g} candidates/s ...",
            flush=True,
        )
        flow = measure_steady(
            client, service, database, keys.writer, rng, steady, args.steady_batch, args.rate
        )

        ours_rate = median(r.per_second for r in ours)
        theirs_rate = median(r.per_second for r in theirs)
        ratio = ours_rate / theirs_rate
        p99 = flow.p(99)
        last = max(flow.last_batch)
        print()
        print(
            f"=== push, {backend}, gunicorn {args.workers} worker(s) x {args.threads} threads, "
            f"batches of {args.push_batch}, {machine_state()} ==="
        )
        print(
            f"  Label Studio bulk import    {theirs_rate:.0f} tasks/s (median of {len(theirs)}: "
            + ", ".join(f"{r.per_second:.0f}" for r in theirs)
            + f"; {backlog} tasks, {args.push_batch} a request)"
        )
        print(
            f"  push, queued -> in LS       {ours_rate:.0f} candidates/s (median of {len(ours)}: "
            + ", ".join(f"{r.per_second:.0f}" for r in ours)
            + f"; a backlog of {backlog} and one more submitted)"
        )
        print(
            f"  service CPU per candidate   {median(r.service_cpu_s / r.count for r in ours) * 1000:.2f} ms; "
            f"Label Studio CPU {median(r.label_studio_cpu_s / r.count for r in ours) * 1000:.2f} ms "
            f"during the push, {median(r.label_studio_cpu_s / r.count for r in theirs) * 1000:.2f} ms "
            "during its own import"
        )
        print(
            f"  steady writers              delay storing -> task in LS p50 {flow.p(50):.2f} s, "
            f"p99 {p99:.2f} s, max {max(flow.delays):.2f} s; last batch {last:.2f} s "
            f"({steady} candidates, {args.steady_batch} a batch at {args.rate:g}/s; "
            f"batch request p99 {flow.submit_p99_ms:.0f} ms)"
        )
        print(
            f"    of which                  storing -> scored p50 {percentile(flow.scoring, 50):.2f} s, "
            f"p99 {percentile(flow.scoring, 99):.2f} s (the model, in the writer's request); "
            f"scored -> task in LS p50 {percentile(flow.pushing, 50):.2f} s, "
            f"p99 {percentile(flow.pushing, 99):.2f} s (the push)"
        )
        print(
            f"  push / LS import            {ratio:.2f}x   "
            f"goal >= {GOAL_RATIO:.2f}x: {verdict(ratio >= GOAL_RATIO)}"
        )
        met = p99 <= GOAL_P99_S and last <= GOAL_P99_S
        print(
            f"  p99 delay (and last batch)  {p99:.2f} s ({last:.2f} s)   "
            f"goal <= {GOAL_P99_S:.0f} s: {verdict(met)}"
        )
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backlog", type=int, default=10_000, help="queued candidates per push")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--push-batch",
        type=int,
        default=500,
        help="DYNAVAL_PUSH_BATCH_SIZE, and Label Studio's import requests",
    )
    parser.add_argument("--steady", type=int, default=5000, help="candidates the steady writers submit")
    parser.add_argument("--steady-batch", type=int, default=100, help="candidates per batch request")
    parser.add_argument("--rate", type=float, default=50.0, help="candidates per second the writers submit")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies --backlog and --steady")
    parser.add_argument("--workers", type=int, default=1, help="gunicorn workers")
    parser.add_argument("--threads", type=int, default=16, help="gunicorn threads per worker")
    add_database_argument(parser)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if min(args.backlog, args.repeats, args.push_batch, args.steady, args.steady_batch) < 1 or args.rate <= 0:
        parser.error("counts and the rate must be positive")
    if args.scale <= 0:
        parser.error("--scale must be positive")
    return run_main("push", run, args)


if __name__ == "__main__":
    raise SystemExit(main())
