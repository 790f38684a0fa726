"""Webhook ingest of the deployed service, verification included, against Label Studio's own rate.

A webhook is only a hint: the service answers it at once and reads the task it names back from
Label Studio, with its own key, in small batches (``DYNAVAL_VERIFY_DELAY_S`` gathers them). Label
Studio sends one webhook per annotation, synchronously inside the annotation request, so the
service must keep up with the rate at which Label Studio itself creates annotations, and the
reading back must cost Label Studio little. This script measures, in one run, on this machine:

1. A real Label Studio (a temporary data directory) and the dynaval service under gunicorn
   (``service/gunicorn.conf.py`` with its defaults, a free loopback port, the tiny test model),
   reading back in a ``dynaval worker`` process beside it (``--read-back worker``, as gunicorn's
   master runs it) or in threads inside gunicorn's worker (``--read-back embedded``). A
   lead creates a round; the script imports its tasks into the round's Label Studio project in
   bulk, each with one real annotation (as an annotator's vote), and writes the matching
   candidates into the service's database (``in_validation``, holding no vote yet), so that each
   webhook's read-back finds one new vote: the work a real annotation brings.
2. Label Studio's annotation POST rate: ``--ls-annotations`` annotations created one after the
   other through the SDK on a separate project without a webhook, with Label Studio's CPU time
   per annotation.
3. **Verified ingest**: ``--burst`` webhooks for as many fresh tasks, sent back to back by
   ``--clients`` threads; timed until every one of those votes was read back, stored and decided.
   Goal: >= 10x Label Studio's annotation rate.
4. **At Label Studio's pace**: webhooks for fresh tasks at Label Studio's measured rate for
   ``--pace-seconds``: the delay from each webhook to its vote being stored (p50, p99), and Label
   Studio's CPU time spent on the reads per webhook, next to its CPU time per annotation POST:
   what verification costs Label Studio.
5. **Answering the webhook**: one real payload of each action is captured from Label Studio (a
   recording proxy, ``tests/support/webhook_proxy.py``) and many are made from it for tasks whose
   votes the service already holds (their read-back changes nothing, but is made). Capacity:
   ``--clients`` threads back to back, ``--requests`` per run, ``--repeats`` runs; latency: steady
   open-loop runs at 30x Label Studio's rate (and ``--paced-ladder`` multiples), each request's
   latency counted from the moment it was due. Goal: >= 30x, p99 <= 25 ms at 30x.
6. Everything is stopped and removed at the end, also on error or Ctrl-C: gunicorn, Label Studio,
   the temporary folder and the PostgreSQL database the script created.

    .venv/bin/python benchmarks/webhook_ingest.py          # SQLite, 1 worker x 8 threads
    .venv/bin/python benchmarks/webhook_ingest.py --workers 2 \\
        --database-url postgresql://postgres@127.0.0.1:5432    # a fresh database there, dropped after

Label Studio runs from ``$DYNAVAL_LABEL_STUDIO_VENV`` (default ``.cache/label-studio/venv-<version>``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from harness import (
    DYNAVAL_COMMAND,
    WEBHOOK_PATH,
    Annotator,
    BenchmarkError,
    ChildProcess,
    LabelStudioServer,
    LoadRun,
    PayloadFactory,
    Secrets,
    ServiceClient,
    add_database_argument,
    backend_name,
    capture_payloads,
    create_round,
    free_port,
    label_studio_cpu_seconds,
    make_text,
    percentile,
    run_main,
    seed_tasks,
    send_load,
    service_database,
    service_environment,
    start_gunicorn,
    start_label_studio,
    tiny_model,
    wait_stored,
    webhook_headers,
)

from dynaval.adapters.db.database import Database

GOAL_VERIFIED_RATIO = 10.0
GOAL_RATIO = 30.0
GOAL_P99_MS = 25.0
DISAGREE_SHARE = 0.2
READ_BACK_WHERE = {"worker": "a `dynaval worker` process", "embedded": "gunicorn's worker"}
VOTES_PER_TASK = 2  # the round's first votes: a task's one imported vote leaves it in validation


@dataclass
class LabelStudioRate:
    latencies: list[float]
    seconds: float
    cpu_s_per_annotation: float

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds

    @property
    def median_ms(self) -> float:
        return statistics.median(self.latencies) * 1000


# ---------------------------------------------------------------------------------------- Label Studio


def measure_label_studio(
    server: LabelStudioServer, label_config: str, annotators: Sequence[Annotator], k: int, rng: random.Random
) -> LabelStudioRate:
    """``k`` annotation POSTs, one after the other, on a project with no webhook."""
    ls = server.client
    project = ls.projects.create(
        title="bench: annotation rate",
        label_config=label_config,
        maximum_annotations=len(annotators),
        show_overlap_first=True,
        overlap_cohort_percentage=100,
    )
    assert project.id is not None
    n_tasks = -(-(k + 3) // len(annotators))
    imported = ls.projects.import_tasks(
        id=project.id,
        request=[{"candidate_id": str(uuid.uuid4()), "text": make_text(rng, i)} for i in range(n_tasks)],
        return_task_ids=True,
    )
    task_ids = [int(t) for t in imported.task_ids or []]
    jobs = [(task_id, annotator) for task_id in task_ids for annotator in annotators]
    for task_id, annotator in jobs[:3]:  # untimed warm-up
        server.annotate(task_id, annotator.id, "positive")
    latencies: list[float] = []
    cpu_before = label_studio_cpu_seconds(server)
    began = time.perf_counter()
    for task_id, annotator in jobs[3 : 3 + k]:
        started = time.perf_counter()
        server.annotate(task_id, annotator.id, rng.choice(["positive", "negative", "neutral"]))
        latencies.append(time.perf_counter() - started)
    seconds = time.perf_counter() - began
    return LabelStudioRate(
        latencies, seconds, (label_studio_cpu_seconds(server) - cpu_before) / len(latencies)
    )


# ---------------------------------------------------------------------------------------- main


def run(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    keys = Secrets()
    webhook_secret = keys.webhook
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dynaval-webhook-bench-")))
        model_dir = tiny_model(scratch)
        database_url = stack.enter_context(service_database(args.database_url, scratch))
        backend = backend_name(database_url)
        server = start_label_studio(stack, scratch)
        label_config = server.task_type.label_config

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
            EMBEDDED_WORKER="true" if args.read_back == "embedded" else "false",
        )
        print(
            f"starting the service under gunicorn ({args.workers} x {args.threads}, {backend}), "
            f"reading back in {READ_BACK_WHERE[args.read_back]} ...",
            flush=True,
        )
        service = start_gunicorn(stack, env, port, scratch / "gunicorn.log")
        worker: ChildProcess | None = None
        if args.read_back == "worker":
            worker = ChildProcess([str(DYNAVAL_COMMAND), "worker"], env, scratch / "worker.log")
            stack.callback(worker.stop)
        client = ServiceClient(service.url, keys.lead)
        database = Database(database_url)
        stack.callback(database.dispose)

        annotators = server.create_annotators(3)
        round_id, project_id = create_round(
            client,
            "webhook ingest bench",
            {"min_votes": VOTES_PER_TASK, "max_votes": VOTES_PER_TASK, "gold_rate": 0},
        )
        total = args.burst + args.ack_tasks + round(args.pace_seconds * 40)
        print(f"round {round_id}: importing {total} tasks, each with one real vote ...", flush=True)
        began = time.perf_counter()
        seeded = seed_tasks(
            server,
            database,
            round_id,
            project_id,
            annotators,
            total,
            rng,
            disagree_share=DISAGREE_SHARE,
            overlap=VOTES_PER_TASK,
        )
        burst_tasks = seeded[: args.burst]
        ack_tasks = seeded[args.burst : args.burst + args.ack_tasks]
        pace_tasks = seeded[args.burst + args.ack_tasks :]
        print(f"  {len(seeded)} tasks in {time.perf_counter() - began:.1f} s")

        print(f"Label Studio: {args.ls_annotations} annotation POSTs, sequential, no webhook ...", flush=True)
        ls_rate = measure_label_studio(server, label_config, annotators, args.ls_annotations, rng)
        print(
            f"  {ls_rate.rate:.1f} annotations/s, median {ls_rate.median_ms:.0f} ms, "
            f"Label Studio CPU {ls_rate.cpu_s_per_annotation * 1000:.0f} ms per annotation"
        )

        print("capturing real webhook payloads ...", flush=True)
        captured = capture_payloads(server, annotators[0].id)
        factory = PayloadFactory(captured, project_id)
        url = service.url + WEBHOOK_PATH
        hooks = webhook_headers(webhook_secret)

        # The answering tasks' votes are read back once, untimed: later reads of them change nothing.
        warm = send_load(url, hooks, [factory.body(t, rng) for t in ack_tasks], args.clients, 600)
        if warm.errors:
            raise BenchmarkError(f"warm-up errors: {warm.error_samples}")
        wait_stored(database, ack_tasks, timeout_s=600)

        # 3. Verified ingest: a burst of webhooks for fresh tasks, timed until every vote is stored.
        print(f"verified ingest: {len(burst_tasks)} webhooks for fresh tasks, back to back ...", flush=True)
        ls_cpu_before = label_studio_cpu_seconds(server)
        burst = send_load(url, hooks, [factory.body(t, rng) for t in burst_tasks], args.clients, 600)
        stored = wait_stored(database, burst_tasks, timeout_s=900)
        verified_s = (max(stored.values()) - burst.began_at).total_seconds()
        verified_rate = len(burst_tasks) / verified_s
        burst_ls_cpu = (label_studio_cpu_seconds(server) - ls_cpu_before) / len(burst_tasks)
        print(
            f"  answered at {burst.rate:.0f}/s; every vote read back and stored after {verified_s:.1f} s: "
            f"{verified_rate:.0f} votes/s; Label Studio CPU {burst_ls_cpu * 1000:.1f} ms per vote read back"
        )

        # 4. At Label Studio's own pace: the delay to each stored vote, and what the reads cost it.
        pace = ls_rate.rate
        n_pace = min(len(pace_tasks), max(10, round(pace * args.pace_seconds)))
        print(f"at Label Studio's pace: {n_pace} webhooks at {pace:.1f}/s ...", flush=True)
        idle_before = label_studio_cpu_seconds(server)
        time.sleep(3.0)
        idle_cpu_per_s = (label_studio_cpu_seconds(server) - idle_before) / 3.0
        ls_cpu_before = label_studio_cpu_seconds(server)
        paced_tasks = pace_tasks[:n_pace]
        sent_at: dict[str, datetime] = {}
        bodies = []
        for task in paced_tasks:
            bodies.append(factory.body(task, rng))
        at_pace = send_load(
            url,
            hooks,
            bodies,
            1,
            600,
            rate=pace,
            on_sent=lambda i: sent_at.setdefault(paced_tasks[i].candidate_id, datetime.now(UTC)),
        )
        stored = wait_stored(database, paced_tasks, timeout_s=300)
        window_s = (max(stored.values()) - min(sent_at.values())).total_seconds()
        reads_cpu = label_studio_cpu_seconds(server) - ls_cpu_before - idle_cpu_per_s * window_s
        reads_cpu_per_vote = max(0.0, reads_cpu) / n_pace
        delays = [(stored[c] - sent_at[c]).total_seconds() for c in sent_at]
        print(
            f"  delay to the stored vote p50 {percentile(delays, 50):.2f} s, "
            f"p99 {percentile(delays, 99):.2f} s; "
            f"Label Studio CPU {reads_cpu_per_vote * 1000:.1f} ms per vote read back "
            f"({reads_cpu_per_vote / ls_rate.cpu_s_per_annotation:.1%} of an annotation's)"
        )

        # 5. Answering the webhook: capacity, and latency at steady multiples of Label Studio's rate.
        runs: list[LoadRun] = []
        for repeat in range(1, args.repeats + 1):
            bodies = factory.mix(ack_tasks, args.requests, rng)
            cpu_before = service.cpu_seconds()
            result = send_load(url, hooks, bodies, args.clients, args.time_cap)
            result.server_cpu_s = service.cpu_seconds() - cpu_before
            if worker is not None:
                worker.check_running("dynaval worker")
            result.load_average = os.getloadavg()[0]
            runs.append(result)
            print(
                f"run {repeat}: {result.sent} webhooks in {result.seconds:.2f} s: {result.rate:.0f}/s, "
                f"p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} ms, errors {result.errors}; "
                f"gunicorn CPU {result.cpu_ms_per_request:.1f} ms/webhook"
                f"{' (reading back included)' if worker is None else ''}, "
                f"load average {result.load_average:.1f}",
                flush=True,
            )
        paced_rate = GOAL_RATIO * ls_rate.rate
        paced_runs: list[LoadRun] = []
        for repeat in range(1, args.repeats + 1):
            bodies = factory.mix(ack_tasks, max(200, round(paced_rate * args.paced_seconds)), rng)
            paced_runs.append(send_load(url, hooks, bodies, args.clients, args.time_cap, rate=paced_rate))
            print(
                f"steady run {repeat} at {paced_rate:.0f}/s ({GOAL_RATIO:.0f}x Label Studio): "
                f"p50 {paced_runs[-1].p50_ms:.1f} ms, p99 {paced_runs[-1].p99_ms:.1f} ms, "
                f"errors {paced_runs[-1].errors}",
                flush=True,
            )
        ladder: list[tuple[float, LoadRun]] = []
        for multiple in args.paced_ladder:
            steady_rate = multiple * ls_rate.rate
            bodies = factory.mix(ack_tasks, max(200, round(steady_rate * args.paced_seconds)), rng)
            ladder.append(
                (
                    multiple,
                    send_load(url, hooks, bodies, args.clients, args.time_cap, rate=steady_rate),
                )
            )
        alone = send_load(url, hooks, factory.mix(ack_tasks, args.single_requests, rng), 1, args.time_cap)

        backlog = client.call("GET", f"/api/rounds/{round_id}")["verification"]
        rate = statistics.median(r.rate for r in runs)
        paced_p50 = statistics.median(r.p50_ms for r in paced_runs)
        paced_p99 = statistics.median(r.p99_ms for r in paced_runs)
        errors = sum(
            r.errors for r in [warm, burst, at_pace, *runs, *paced_runs, alone, *(x for _, x in ladder)]
        )
        verified_ratio = verified_rate / ls_rate.rate
        ratio = rate / ls_rate.rate
        print()
        print(
            f"=== webhook ingest, {backend}, gunicorn {args.workers} worker(s) x {args.threads} threads, "
            f"reading back in {READ_BACK_WHERE[args.read_back]}, "
            f"{args.clients} clients, {os.cpu_count()} CPUs ==="
        )
        print(
            f"  Label Studio               {ls_rate.rate:.1f} annotations/s "
            f"(median POST {ls_rate.median_ms:.0f} ms, {len(ls_rate.latencies)} sequential), "
            f"CPU {ls_rate.cpu_s_per_annotation * 1000:.0f} ms per annotation"
        )
        print(
            f"  verified ingest            {verified_rate:.0f} votes/s "
            f"({len(burst_tasks)} webhooks answered, "
            f"read back from Label Studio and decided in {verified_s:.1f} s)"
        )
        print(
            f"  at Label Studio's pace     vote stored p50 {percentile(delays, 50):.2f} s, "
            f"p99 {percentile(delays, 99):.2f} s after its webhook ({n_pace} webhooks at {pace:.1f}/s)"
        )
        print(
            f"  what reading back costs LS {reads_cpu_per_vote * 1000:.1f} ms CPU per vote at its pace "
            f"({reads_cpu_per_vote / ls_rate.cpu_s_per_annotation:.1%} of an annotation POST's "
            f"{ls_rate.cpu_s_per_annotation * 1000:.0f} ms); "
            f"{burst_ls_cpu * 1000:.1f} ms per vote in the burst"
        )
        print(
            f"  webhooks answered          {rate:.0f}/s back to back (median of {len(runs)}: "
            + ", ".join(f"{r.rate:.0f}" for r in runs)
            + f"), payloads {min(factory.sizes)}-{max(factory.sizes)} bytes"
        )
        print(
            f"  gunicorn CPU               "
            f"{statistics.median(r.cpu_ms_per_request for r in runs):.1f} ms per webhook "
            + ("(answering and reading back)" if worker is None else "(answering; the worker reads back)")
        )
        print(
            f"  latency at {GOAL_RATIO:.0f}x LS         p50 {paced_p50:.1f} ms, p99 {paced_p99:.1f} ms "
            f"(medians of {len(paced_runs)} steady runs at {paced_rate:.0f}/s; p99 each: "
            + ", ".join(f"{r.p99_ms:.1f}" for r in paced_runs)
            + ")"
        )
        for multiple, steady in ladder:
            print(
                f"  steady at {multiple:>4g}x LS         "
                f"p50 {steady.p50_ms:.1f} ms, p99 {steady.p99_ms:.1f} ms"
            )
        print(f"  one client at a time       p50 {alone.p50_ms:.1f} ms, p99 {alone.p99_ms:.1f} ms")
        print(f"  backlog at the end         {backlog['tasks_waiting']} tasks waiting to be read back")
        print(f"  errors                     {errors} (all answers must be 200)")
        print(
            f"  verified / LS              {verified_ratio:.1f}x   goal >= {GOAL_VERIFIED_RATIO:.0f}x: "
            f"{'met' if verified_ratio >= GOAL_VERIFIED_RATIO else 'NOT met'}"
        )
        print(
            f"  answered / LS              {ratio:.1f}x   goal >= {GOAL_RATIO:.0f}x: "
            f"{'met' if ratio >= GOAL_RATIO else 'NOT met'}"
        )
        print(
            f"  p99 at {GOAL_RATIO:.0f}x LS's rate      {paced_p99:.1f} ms   goal <= {GOAL_P99_MS:.0f} ms: "
            f"{'met' if paced_p99 <= GOAL_P99_MS else 'NOT met'}"
        )
        return 1 if errors else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--burst", type=int, default=2000, help="webhooks of fresh tasks in the verified-ingest burst"
    )
    parser.add_argument("--ack-tasks", type=int, default=1000, help="tasks the answering runs name")
    parser.add_argument(
        "--pace-seconds", type=float, default=20.0, help="length of the run at Label Studio's pace"
    )
    parser.add_argument(
        "--ls-annotations", type=int, default=60, help="timed annotation POSTs to Label Studio"
    )
    parser.add_argument("--requests", type=int, default=2000, help="webhooks per back-to-back run")
    parser.add_argument("--clients", type=int, default=8, help="concurrent client threads")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--time-cap", type=float, default=60.0, help="seconds at most per run")
    parser.add_argument("--workers", type=int, default=1, help="gunicorn workers")
    parser.add_argument("--threads", type=int, default=8, help="gunicorn threads per worker")
    parser.add_argument(
        "--read-back",
        choices=sorted(READ_BACK_WHERE),
        default="worker",
        help="where Label Studio's copy is read back: a `dynaval worker` process beside gunicorn "
        "(the default, as service/gunicorn.conf.py runs it), or threads inside gunicorn's worker",
    )
    add_database_argument(parser)
    parser.add_argument("--single-requests", type=int, default=300, help="webhooks of the one-client run")
    parser.add_argument("--paced-seconds", type=float, default=10.0, help="length of each steady run")
    parser.add_argument(
        "--paced-ladder",
        type=lambda text: [float(x) for x in text.split(",") if x],
        default=[5.0, 10.0, 20.0],
        help="further steady runs at these multiples of LS's rate (comma-separated)",
    )
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    counts = (
        args.burst,
        args.ack_tasks,
        args.ls_annotations,
        args.requests,
        args.single_requests,
        args.clients,
    )
    if min(*counts, args.repeats) < 1 or args.pace_seconds <= 0:
        parser.error("counts and durations must be positive")
    return run_main("webhook_ingest", run, args)


if __name__ == "__main__":
    raise SystemExit(main())
