"""Reconcile: a round's whole Label Studio project read back and applied, against Label Studio's export.

Reconcile (``POST /api/rounds/<id>/sync``, ``dynaval sync``, every ``DYNAVAL_RECONCILE_INTERVAL_S``)
reads the round's whole project with one export request and makes the stored annotations of every
task equal Label Studio's, deciding again each candidate whose votes changed
(``service_layer/validation/vote_reading.py``, in chunks of 50 candidates a transaction). This script
measures, in one run, on this machine:

1. A real Label Studio (a temporary data directory) and the service under gunicorn
   (``service/gunicorn.conf.py`` with its defaults; SQLite unless ``--database-url``; no scheduled
   reconcile), the tiny test model.
2. Seeding (not timed): a lead creates a round (3 votes a candidate); ``--tasks`` tasks are
   imported into its project in bulk, each with ``--votes`` real annotations by distinct
   annotators (a fifth of them against the writer's label), and their candidates are written
   straight into the service's database, in validation, with no vote stored.
3. ``--repeats`` times, in this order:
   - **Label Studio's export**: the project's export with the service's key, the request reconcile
     makes (``GET /api/projects/<id>/export?exportType=JSON&download_all_tasks=true``), read whole;
   - **cold reconcile**: the service's stored votes and decisions of the round are removed (not
     timed), then ``POST /api/rounds/<id>/sync``: every vote is new (every webhook was lost), every
     candidate is decided;
   - **warm reconcile**: ``POST /sync`` again: every vote is stored already and nothing changes
     (the scheduled reconcile's usual case).
   Goal: each reconcile <= 1.5x Label Studio's export time (medians). The CPU time both servers
   spent is printed beside it: on a shared machine it varies far less than the time.
4. Everything is stopped and removed at the end, also on error or Ctrl-C.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/reconcile.py              # 10,000 tasks x 3 votes
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/reconcile.py --scale 0.1  # a quick run
"""

from __future__ import annotations

import argparse
import contextlib
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import (
    BenchmarkError,
    Gunicorn,
    LabelStudioServer,
    Secrets,
    ServiceClient,
    add_database_argument,
    backend_name,
    create_round,
    free_port,
    label_studio_cpu_seconds,
    machine_state,
    median,
    run_main,
    seed_tasks,
    service_database,
    service_environment,
    start_gunicorn,
    start_label_studio,
    status_counts,
    tiny_model,
    verdict,
)
from sqlalchemy import delete, update
from sqlmodel import col, select

from dynaval.adapters.db.database import Database
from dynaval.adapters.db.orm import AnnotationRow, CandidateRow, DecisionRow

GOAL_RATIO = 1.5


@dataclass
class Timed:
    seconds: float
    label_studio_cpu_s: float
    service_cpu_s: float = 0.0
    answer: dict[str, Any] | None = None
    size: int = 0


def export_project(server: LabelStudioServer, project_id: int) -> Timed:
    """Label Studio's export of the whole project, the request reconcile makes, read whole."""
    ls_cpu = label_studio_cpu_seconds(server)
    began = time.perf_counter()
    data = b"".join(
        server.client.projects.exports.download_sync(
            project_id,
            export_type="JSON",
            download_all_tasks=True,
            request_options={"timeout_in_seconds": 1800},
        )
    )
    seconds = time.perf_counter() - began
    return Timed(seconds, label_studio_cpu_seconds(server) - ls_cpu, size=len(data))


def reconcile(client: ServiceClient, service: Gunicorn, server: LabelStudioServer, round_id: int) -> Timed:
    ls_cpu, cpu = label_studio_cpu_seconds(server), service.cpu_seconds()
    began = time.perf_counter()
    answer = client.call("POST", f"/api/rounds/{round_id}/sync", timeout=1800)
    seconds = time.perf_counter() - began
    return Timed(
        seconds, label_studio_cpu_seconds(server) - ls_cpu, service.cpu_seconds() - cpu, answer=answer
    )


def forget_votes(database: Database, round_id: int, overlap: int) -> None:
    """Back to the state after seeding: no vote stored, no decision, never read (not timed)."""
    with database.unit_of_work() as session:
        ids = select(CandidateRow.id).where(CandidateRow.round_id == round_id)
        session.execute(delete(DecisionRow).where(col(DecisionRow.candidate_id).in_(ids)))
        session.execute(delete(AnnotationRow).where(col(AnnotationRow.round_id) == round_id))
        session.execute(
            update(CandidateRow)
            .where(col(CandidateRow.round_id) == round_id)
            .values(
                status="in_validation",
                decision=None,
                decided_at=None,
                label_studio_read_at=None,
                wanted_votes=overlap,
                version=0,
            )
        )
        session.commit()


def run(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    keys = Secrets()
    n_tasks = max(1, round(args.tasks * args.scale))
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dynaval-reconcile-bench-")))
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
        )
        print(f"starting the service under gunicorn ({args.workers} x {args.threads}, {backend}) ...")
        service = start_gunicorn(stack, env, port, scratch / "gunicorn.log")
        database = Database(database_url)
        stack.callback(database.dispose)
        client = ServiceClient(service.url, keys.lead)

        annotators = server.create_annotators(max(args.votes, args.annotators))
        policy = {"min_votes": args.votes, "max_votes": args.votes, "gold_rate": 0}
        round_id, project_id = create_round(client, "reconcile bench", policy)
        print(f"seeding: {n_tasks} tasks with {args.votes} real annotations each, in bulk ...", flush=True)
        began = time.perf_counter()
        seed_tasks(
            server,
            database,
            round_id,
            project_id,
            annotators,
            n_tasks,
            rng,
            votes_per_task=args.votes,
            overlap=args.votes,
        )
        print(f"  seeded in {time.perf_counter() - began:.1f} s (not timed)")
        votes = n_tasks * args.votes

        exports: list[Timed] = []
        cold: list[Timed] = []
        warm: list[Timed] = []
        for repeat in range(1, args.repeats + 1):
            exports.append(export_project(server, project_id))
            forget_votes(database, round_id, args.votes)
            cold.append(reconcile(client, service, server, round_id))
            warm.append(reconcile(client, service, server, round_id))
            stored = (cold[-1].answer or {}).get("added_or_updated")
            changed = (warm[-1].answer or {}).get("added_or_updated")
            if stored != votes or changed != 0:
                raise BenchmarkError(
                    f"reconcile stored {stored} votes (expected {votes}), then changed {changed} (expected 0)"
                )
            print(
                f"repeat {repeat}: Label Studio export {exports[-1].seconds:.1f} s "
                f"({exports[-1].size / 2**20:.0f} MiB); cold reconcile {cold[-1].seconds:.1f} s "
                f"(service CPU {cold[-1].service_cpu_s:.1f} s); warm reconcile {warm[-1].seconds:.1f} s "
                f"(service CPU {warm[-1].service_cpu_s:.1f} s); {machine_state()}",
                flush=True,
            )
        counts = status_counts(database, round_id)

        export_s = median(t.seconds for t in exports)
        cold_s = median(t.seconds for t in cold)
        warm_s = median(t.seconds for t in warm)
        print()
        print(
            f"=== reconcile, {backend}, gunicorn {args.workers} worker(s) x {args.threads} threads, "
            f"{n_tasks} tasks x {args.votes} annotations, {machine_state()} ==="
        )
        print(
            f"  Label Studio export   {export_s:.1f} s (median of {len(exports)}: "
            + ", ".join(f"{t.seconds:.1f}" for t in exports)
            + f"; {exports[-1].size / 2**20:.0f} MiB; its CPU "
            f"{median(t.label_studio_cpu_s for t in exports):.1f} s)"
        )
        for name, runs in (("cold reconcile", cold), ("warm reconcile", warm)):
            print(
                f"  {name:21} {median(t.seconds for t in runs):.1f} s (median of {len(runs)}: "
                + ", ".join(f"{t.seconds:.1f}" for t in runs)
                + f"; service CPU {median(t.service_cpu_s for t in runs):.1f} s, "
                f"Label Studio CPU {median(t.label_studio_cpu_s for t in runs):.1f} s)"
            )
        print(f"  decisions             {counts}")
        export_cpu = median(t.label_studio_cpu_s for t in exports)
        for name, seconds, runs in (("cold", cold_s, cold), ("warm", warm_s, warm)):
            ratio = seconds / export_s
            cpu = median(t.label_studio_cpu_s + t.service_cpu_s for t in runs)
            print(
                f"  {name} / LS export      {ratio:.2f}x   "
                f"goal <= {GOAL_RATIO:.1f}x: {verdict(ratio <= GOAL_RATIO)}   "
                f"(CPU of Label Studio and the service: {cpu / export_cpu:.2f}x the export's)"
            )
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=10_000, help="tasks in the round's project")
    parser.add_argument("--votes", type=int, default=3, help="annotations per task")
    parser.add_argument("--annotators", type=int, default=6, help="annotators the votes come from")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies --tasks")
    parser.add_argument("--workers", type=int, default=1, help="gunicorn workers")
    parser.add_argument("--threads", type=int, default=16, help="gunicorn threads per worker")
    add_database_argument(parser)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if min(args.tasks, args.votes, args.annotators, args.repeats) < 1 or args.scale <= 0:
        parser.error("counts and --scale must be positive")
    return run_main("reconcile", run, args)


if __name__ == "__main__":
    raise SystemExit(main())
