"""Scale: one DynaSent-sized round, every phase timed, on this machine.

120,000 candidates and 600,000 votes (5 a candidate), with the scheduled reconcile on. Phases, in
the order a round lives them, each timed on its own, with the peak RSS of every process:

1. **score**: ``--writers`` writers post the candidates through the API in batches of
   ``--batch`` (``POST /api/rounds/<id>/candidates/batch``), back to back; the round's model
   scores each (``--model``: the default MiniLM sentiment model, built once into
   ``.dynaval/models/`` if missing, or the tiny test model). The round validates every candidate
   (``validate_non_fooling``), as DynaSent did. No task-queue consumer runs yet, so nothing is
   pushed during this phase.
2. **push**: ``dynaval worker`` starts (the task queue's consumer, beside the service, as a
   deployment that runs it apart would) and pushes the queued candidates into the round's Label
   Studio project; timed from its start until every candidate is ``in_validation``.
3. **seeding (not timed, not counted)**: annotators' work cannot be sped up, and Label Studio adds
   annotations to existing tasks only one POST at a time (about 75 ms of its CPU each), so the
   votes are imported instead: the same tasks, each with ``--votes`` real annotations by distinct
   annotators of a pool of ``--annotators`` (a fifth against the writer's label, 1 % flagged), are
   imported in bulk into a second project of the same labelling config, and the round and its
   candidates are pointed at that project and its tasks (one UPDATE). Label Studio now holds
   every vote; the service holds none.
4. **ingest**: one realistic webhook per vote (copies of payloads captured from this Label
   Studio, 4.4 KB, each naming its task, annotator and label), ``--clients`` senders back to back;
   the votes of each block of 1,000 tasks come shuffled together (annotators work on the same
   tasks at once). The service answers each, and its worker reads the named tasks back from Label
   Studio and decides them. Timed until the last webhook is answered.
5. **decide**: from the last webhook until every candidate holds its 5 votes read back from Label
   Studio and a final decision, with no task waiting to be read.
6. **round alpha with CI**: ``GET /api/rounds/<id>/agreement`` (1,000 bootstrap resamples), first call.
7. **dashboard first view**: the lead's page of the round (``/dashboard/rounds/<id>``), first view.
8. **export**: the round dataset, ``GET /api/rounds/<id>/dataset?format=jsonl``, read whole.
9. **release**: the lead closes and freezes the round and builds its release
   (``POST /api/releases``, a job ``dynaval worker`` runs), timed until the job is done. The
   release's near-duplicate check is the lexical one: the worker runs with
   ``DYNAVAL_NEAR_DUPLICATE_SEMANTIC=false`` unless ``--semantic`` (the service keeps the default,
   so each submission is checked semantically too).

Between the phases (8 before the release: ``--no-reconcile-on-demand`` leaves it out), an
on-demand reconcile (``POST /api/rounds/<id>/sync``) of the whole round, not counted.
The scheduled reconcile runs every ``--reconcile-interval`` seconds (the service's default, 300)
throughout; the votes each read stored are counted by source.

Two floors are measured in the same run, each while the service is idle:

- **the model alone** (after 1): the round's model, loaded bare with transformers, scores
  ``--floor-texts`` of the round's own texts in batches of 32 (the service's micro-batch), cut at
  the service's 256 tokens; once with every core for torch and once with one (the harness runs the
  service with ``OMP_NUM_THREADS=1``). Goal: scoring through the service at 0.9x or more of it.
- **Label Studio answering the same reads** (after 5): the JSON export of ``--floor-tasks`` of the
  round's tasks, 200 task ids a request (the worker's largest read), one request after another,
  each task once; only the answers are timed. The service's worker is paused (SIGSTOP) meanwhile,
  and Label Studio first finishes what it was answering (a scheduled reconcile's export). Goal:
  votes read back and decided by the service (over ingest and decide) at 0.8x or more of it.

Goals: phases 1, 2 and 4 to 9 in at most 30 minutes on one 2-core machine; score and ingest beside
their floors as above; the rest (push, decide, alpha with CI, dashboard, export, release) in at most
3 minutes together. Everything is stopped and removed at the end, also on error or Ctrl-C.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/scale.py                # 120,000 candidates
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/scale.py --scale 0.02   # 2,400: a quick run
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness import (
    DYNAVAL_COMMAND,
    REPO_ROOT,
    WEBHOOK_PATH,
    BenchmarkError,
    ChildProcess,
    LabelStudioServer,
    Lazy,
    MemorySampler,
    PayloadFactory,
    RoundTask,
    Secrets,
    ServiceClient,
    Vote,
    add_database_argument,
    annotated_task,
    backend_name,
    capture_payloads,
    create_project,
    create_round,
    free_port,
    import_tasks,
    label_studio_cpu_seconds,
    machine_state,
    make_text,
    mib,
    own_peak_rss_bytes,
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
    webhook_headers,
)
from sqlalchemy import bindparam, func, update
from sqlmodel import col, select

from dynaval.adapters.db.database import Database
from dynaval.adapters.db.orm import AnnotationRow, CandidateRow, RoundRow, TaskCheckRow
from dynaval.adapters.predictor import MAX_TOKENS
from dynaval.service_layer.validation.label_studio_port import READ_BATCH_SIZE

GOAL_S = 30 * 60.0
REST_GOAL_S = 3 * 60.0
"""Push, decide, alpha with CI, dashboard, export and release, together."""
SCORE_GOAL_RATIO = 0.9
"""Scoring through the service over the model's own batched throughput on the same texts."""
INGEST_GOAL_RATIO = 0.8
"""Votes read back and decided by the service over Label Studio's own rate of answering the same reads."""
MODEL_BATCH = 32
"""The service's micro-batch (``ModelRegistry.max_batch``): the floor's forward passes are this size."""
FINAL = ("accepted", "rejected", "flagged")
DISAGREE_SHARE = 0.2
FLAG_SHARE = 0.01
NEWLINE = b"\n"
SHUFFLE_BLOCK = 1000
"""Tasks whose votes come shuffled together."""


@dataclass
class Phase:
    name: str
    seconds: float
    detail: str
    service_rss: int = 0
    label_studio_rss: int = 0
    counted: bool = True
    group: str = "rest"
    """Which goal it counts toward: ``score`` and ``ingest`` against their floors, ``rest`` together
    against :data:`REST_GOAL_S`."""


def default_model() -> Path:
    """The default MiniLM sentiment model, built once into the repository's ``.dynaval/models``."""
    folder = REPO_ROOT / ".dynaval" / "models" / "sentiment-default"
    if not (folder / "config.json").is_file():
        print(f"building the default model into {folder} (once; not timed) ...", flush=True)
        import subprocess

        subprocess.run(
            [sys.executable, str(DYNAVAL_COMMAND), "model", "build-default", "--out", str(folder)],
            check=True,
            cwd=REPO_ROOT,
        )
    return folder


def batch_body(rng: random.Random, first: int, n: int) -> bytes:
    return json.dumps(
        {
            "candidates": [
                {"text": make_text(rng, i), "writer_label": rng.choice(["positive", "negative"])}
                for i in range(first, first + n)
            ]
        }
    ).encode()


def round_candidates(database: Database, round_id: int) -> list[tuple[str, str, str]]:
    """(id, text, writer label) of the round's candidates, in the order they were stored."""
    with database.reading() as session:
        rows = session.exec(
            select(CandidateRow.id, CandidateRow.inputs, CandidateRow.writer_label)
            .where(CandidateRow.round_id == round_id)
            .order_by(col(CandidateRow.submitted_at), col(CandidateRow.id))
        ).all()
    return [(cid, inputs["text"], label) for cid, inputs, label in rows]


def plan_votes(
    rng: random.Random, candidates: list[tuple[str, str, str]], annotators: list[int], votes: int
) -> list[list[Vote]]:
    plan = []
    for _cid, _text, writer_label in candidates:
        task_votes = []
        for annotator in rng.sample(annotators, votes):
            label = writer_label if rng.random() >= DISAGREE_SHARE else rng.choice(["neutral", "positive"])
            flag = "unclear" if rng.random() < FLAG_SHARE else None
            task_votes.append(Vote(annotator, label, flag))
        plan.append(task_votes)
    return plan


def repoint(database: Database, round_id: int, project_id: int, task_ids: dict[str, int]) -> None:
    """The round and its candidates now use the seeded project and its tasks."""
    with database.unit_of_work() as session:
        session.execute(
            update(RoundRow).where(col(RoundRow.id) == round_id).values(label_studio_project_id=project_id)
        )
        table: Any = CandidateRow.__table__  # type: ignore[attr-defined]
        session.connection().execute(
            update(table)
            .where(table.c.id == bindparam("b_id"))
            .values(label_studio_task_id=bindparam("b_task")),
            [{"b_id": cid, "b_task": task} for cid, task in task_ids.items()],
        )
        session.commit()


def waiting_reads(database: Database, round_id: int) -> int:
    with database.reading() as session:
        return int(
            session.exec(
                select(func.count()).select_from(TaskCheckRow).where(TaskCheckRow.round_id == round_id)
            ).one()
        )


def votes_by_source(database: Database, round_id: int) -> dict[str, int]:
    with database.reading() as session:
        rows = session.exec(
            select(AnnotationRow.source, func.count())
            .where(AnnotationRow.round_id == round_id)
            .group_by(col(AnnotationRow.source))
        ).all()
    return {str(source): int(count) for source, count in rows}


@dataclass
class Floor:
    """A phase's floor, measured in the same run: the rate of the part of the work the service
    cannot go below, done bare."""

    what: str
    rate: float
    unit: str
    detail: str


def model_floor(model_dir: Path, texts: list[str], max_tokens: int) -> list[Floor]:
    """The model's own batched throughput on ``texts`` (a sample of the round's): tokenizer and
    forward pass in batches of :data:`MODEL_BATCH`, cut at ``max_tokens`` as the service cuts, no
    service around it; once with every core for torch and once with one (the service's setting,
    ``OMP_NUM_THREADS=1``, leaves the other core to the requests)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(str(model_dir), local_files_only=True).eval()
    before = torch.get_num_threads()
    floors = []
    try:
        for threads in (os.cpu_count() or 1, 1):
            torch.set_num_threads(threads)
            began = time.perf_counter()
            with torch.inference_mode():
                for first in range(0, len(texts), MODEL_BATCH):
                    batch = tokenizer(
                        texts[first : first + MODEL_BATCH],
                        padding=True,
                        truncation=True,
                        max_length=max_tokens,
                        return_tensors="pt",
                    )
                    torch.softmax(model(**batch).logits, dim=-1).tolist()
            seconds = time.perf_counter() - began
            floors.append(
                Floor(
                    f"model alone, {threads} torch thread{'s' if threads > 1 else ''}",
                    len(texts) / seconds,
                    "texts/s",
                    f"{len(texts)} of the round's texts in batches of {MODEL_BATCH}, {seconds:.1f} s",
                )
            )
    finally:
        torch.set_num_threads(before)
    return floors


def label_studio_floor(server: LabelStudioServer, project_id: int, task_ids: list[int], batch: int) -> Floor:
    """Label Studio's own rate of answering the reads the service makes to verify votes: the
    project's JSON export restricted to ``batch`` task ids (``ids[]``), one request after another
    as the worker sends them, over ``task_ids``; only the answer is timed (nothing parsed)."""
    annotations = 0
    cpu = label_studio_cpu_seconds(server)
    began = time.perf_counter()
    for first in range(0, len(task_ids), batch):
        chunk = task_ids[first : first + batch]
        body = b"".join(
            server.client.projects.exports.download_sync(
                project_id,
                export_type="JSON",
                download_all_tasks=True,
                request_options={
                    "timeout_in_seconds": 600,
                    "additional_query_parameters": {"ids[]": [str(t) for t in chunk]},
                },
            )
        )
        annotations += sum(len(task.get("annotations") or []) for task in json.loads(body))
    seconds = time.perf_counter() - began
    cpu = label_studio_cpu_seconds(server) - cpu
    if annotations == 0:
        raise BenchmarkError("Label Studio answered the floor's reads with no annotation")
    return Floor(
        "Label Studio answering the same reads",
        annotations / seconds,
        "votes/s",
        f"{len(task_ids)} tasks in reads of {batch}, {annotations} votes, {seconds:.1f} s; "
        f"Label Studio CPU {cpu / annotations * 1000:.2f} ms per vote",
    )


@contextlib.contextmanager
def paused(pid: int | None, server: LabelStudioServer, *, idle_timeout_s: float = 600.0) -> Iterator[None]:
    """The process ``pid`` (the service's worker) stopped (SIGSTOP) until the block ends, and Label
    Studio left to finish what it was answering for it (a scheduled reconcile's export) until it
    spends under 5 % of a core: a floor measured meanwhile has Label Studio to itself."""
    if pid is None:
        raise BenchmarkError("dynaval worker is not running")
    os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + idle_timeout_s
        while True:
            cpu = label_studio_cpu_seconds(server)
            time.sleep(1.0)
            if label_studio_cpu_seconds(server) - cpu < 0.05 or time.monotonic() > deadline:
                break
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def print_floor(floor: Floor) -> None:
    print(f"  floor: {floor.what}: {floor.rate:.0f} {floor.unit} ({floor.detail})", flush=True)


def ratio_line(what: str, rate: float, floor: Floor, goal: float) -> str:
    ratio = rate / floor.rate
    return (
        f"  {what:22} {rate:8.0f} {floor.unit} over the floor's {floor.rate:.0f} ({floor.what}): "
        f"{ratio:.2f}x   goal >= {goal:.1f}x: {verdict(ratio >= goal)}"
    )


def release_round(lead: ServiceClient, round_id: int, *, decided: bool, timeout_s: float) -> dict[str, Any]:
    """Close and freeze the round (forcing, with a reason, when not every candidate was decided) and
    build its release through the API, as a job; returns the job's result."""
    lead.call("POST", f"/api/rounds/{round_id}/close")
    freeze = {} if decided else {"force": True, "reason": "scale benchmark: decide did not finish"}
    lead.call("POST", f"/api/rounds/{round_id}/freeze", json=freeze)
    response = lead.request(
        "POST", "/api/releases", json={"rounds": [round_id], "version": "1.0.0", "name": "scale-bench"}
    )
    job_path = "/api/jobs/" + str(response.json()["id"])
    job: dict[str, Any] = {}

    def finished() -> bool:
        job.update(lead.call("GET", job_path))
        return job["state"] in ("done", "failed", "cancelled")

    wait_for(finished, timeout_s=timeout_s, what="the release job", interval_s=0.5)
    if job["state"] != "done":
        raise BenchmarkError(f"the release job ended {job['state']}: {job.get('error')}")
    result: dict[str, Any] = job.get("result") or {}
    return result


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    began = time.perf_counter()
    result = call()
    return time.perf_counter() - began, result


def run(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    keys = Secrets()
    n = int(max(args.batch, round(args.candidates * args.scale)))
    phases: list[Phase] = []
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dynaval-scale-bench-")))
        model_dir = default_model() if args.model == "default" else tiny_model(scratch, always=None)
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
            RECONCILE_INTERVAL_S=str(args.reconcile_interval),
            EMBEDDED_WORKER="false",
            LOG_LEVEL="info",
        )
        print(f"starting the service under gunicorn ({args.workers} x {args.threads}, {backend}) ...")
        service = start_gunicorn(stack, env, port, scratch / "gunicorn.log")
        database = Database(database_url)
        stack.callback(database.dispose)
        lead = ServiceClient(service.url, keys.lead)
        worker: list[ChildProcess] = []
        sampler = stack.enter_context(
            MemorySampler(
                {
                    "service": lambda: service.pid,
                    "worker": lambda: worker[0].pid if worker else None,
                    "label_studio": lambda: server.pid,
                }
            )
        )

        def phase(
            name: str, seconds: float, detail: str, *, counted: bool = True, group: str = "rest"
        ) -> None:
            peaks = sampler.phase()
            phases.append(
                Phase(
                    name,
                    seconds,
                    detail,
                    peaks["service"] + peaks["worker"],
                    peaks["label_studio"],
                    counted,
                    group,
                )
            )
            print(
                f"{name}: {seconds:.1f} s; {detail}; peak RSS service+worker "
                f"{mib(phases[-1].service_rss)}, Label Studio {mib(phases[-1].label_studio_rss)}; "
                f"{machine_state()}",
                flush=True,
            )

        annotators = [a.id for a in server.create_annotators(max(args.votes, args.annotators))]
        captured = capture_payloads(server, annotators[0])
        policy = {
            "min_votes": args.votes,
            "max_votes": args.votes,
            "gold_rate": 0,
            "validate_non_fooling": True,
        }
        round_id, _first_project = create_round(lead, "scale bench (DynaSent-sized)", policy)
        sampler.phase()

        # 1. score
        print(f"score: {n} candidates, {args.batch} a request, {args.writers} writers ...", flush=True)
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {keys.writer}"}
        batches = -(-n // args.batch)
        score_rng = random.Random(args.seed + 1)
        bodies = Lazy(
            batches, lambda i: batch_body(score_rng, i * args.batch, min(args.batch, n - i * args.batch))
        )
        submitted = send_load(
            f"{service.url}/api/rounds/{round_id}/candidates/batch",
            headers,
            bodies,
            args.writers,
            4 * 3600,
            ok_status=201,
        )
        if submitted.errors:
            raise BenchmarkError(f"{submitted.errors} batches refused: {submitted.error_samples}")
        counts = status_counts(database, round_id)
        if counts.get("queued", 0) != n:
            raise BenchmarkError(f"expected {n} queued candidates, found {counts}")
        phase(
            "score",
            submitted.seconds,
            f"{n / submitted.seconds:.0f} candidates/s, batch request p50 {submitted.p50_ms:.0f} ms, "
            f"p99 {submitted.p99_ms:.0f} ms",
            group="score",
        )
        score_rate = n / submitted.seconds
        candidates = round_candidates(database, round_id)
        sample = candidates[:: max(1, n // min(n, args.floor_texts))][: args.floor_texts]
        floor_texts = [text for _cid, text, _label in sample]
        print(f"score floor: the model alone on {len(floor_texts)} of the round's texts ...", flush=True)
        score_floors = model_floor(model_dir, floor_texts, MAX_TOKENS)
        for floor in score_floors:
            print_floor(floor)
        sampler.phase()  # the floor's run is no phase's

        # 2. push
        print("push: starting `dynaval worker` ...", flush=True)
        began = time.perf_counter()
        # The worker builds the release: its check is lexical unless --semantic (the service's
        # submissions keep the default, the semantic check on).
        worker_env = {**env, "DYNAVAL_NEAR_DUPLICATE_SEMANTIC": "true" if args.semantic else "false"}
        worker.append(ChildProcess([str(DYNAVAL_COMMAND), "worker"], worker_env, scratch / "worker.log"))
        stack.callback(worker[0].stop)

        def all_pushed() -> bool:
            worker[0].check_running("dynaval worker")
            return status_counts(database, round_id).get("in_validation", 0) == n

        wait_for(all_pushed, timeout_s=4 * 3600, what="the push", interval_s=1.0)
        push_s = time.perf_counter() - began
        phase("push", push_s, f"{n / push_s:.0f} candidates/s, worker start included")

        # 3. seeding (not timed)
        print(f"seeding: {n} tasks with {args.votes} annotations each into a second project ...", flush=True)
        began = time.perf_counter()
        plan = plan_votes(rng, candidates, annotators, args.votes)
        project_id = create_project(server, "scale bench: the round's tasks, with their votes", args.votes)
        task_ids = import_tasks(
            server,
            project_id,
            Lazy(n, lambda i: annotated_task(server, candidates[i][0], candidates[i][1], plan[i])),
            batch=args.seed_batch,
            progress=lambda done: (
                print(f"  {done} tasks", flush=True) if done % 20_000 < args.seed_batch else None
            ),
        )
        repoint(database, round_id, project_id, {c[0]: t for c, t in zip(candidates, task_ids, strict=True)})
        seeding_s = time.perf_counter() - began
        phase(
            "seeding",
            seeding_s,
            f"{n * args.votes} annotations imported ({n * args.votes / seeding_s:.0f}/s), not counted",
            counted=False,
        )

        # 4. ingest
        tasks = [
            RoundTask(cid, task, text, label, 0)
            for (cid, text, label), task in zip(candidates, task_ids, strict=True)
        ]
        order: list[tuple[int, int]] = []
        for first in range(0, n, SHUFFLE_BLOCK):
            block = [(i, v) for i in range(first, min(n, first + SHUFFLE_BLOCK)) for v in range(args.votes)]
            rng.shuffle(block)
            order.extend(block)
        factory = PayloadFactory(captured, project_id)
        body_rng = random.Random(args.seed + 2)

        def webhook(k: int) -> bytes:
            i, v = order[k]
            vote = plan[i][v]
            return factory.body(tasks[i], body_rng, annotator=vote.annotator, label=vote.label)

        print(f"ingest: {len(order)} webhooks, {args.clients} senders back to back ...", flush=True)
        ls_cpu = label_studio_cpu_seconds(server)
        sent = send_load(
            service.url + WEBHOOK_PATH,
            webhook_headers(keys.webhook),
            Lazy(len(order), webhook),
            args.clients,
            4 * 3600,
        )
        if sent.errors:
            raise BenchmarkError(f"{sent.errors} webhooks refused: {sent.error_samples}")
        phase(
            "ingest",
            sent.seconds,
            f"{len(order)} webhooks answered, {sent.rate:.0f}/s, "
            f"p50 {sent.p50_ms:.1f} ms, p99 {sent.p99_ms:.1f} ms",
            group="ingest",
        )

        # 5. decide
        def all_decided() -> bool:
            worker[0].check_running("dynaval worker")
            counts = status_counts(database, round_id)
            decided = sum(counts.get(s, 0) for s in FINAL)
            return bool(decided == n and waiting_reads(database, round_id) == 0)

        began = time.perf_counter()
        finished = True
        try:
            wait_for(all_decided, timeout_s=args.decide_timeout, what="every decision", interval_s=1.0)
        except BenchmarkError:
            finished = False  # measured as far as it got; the later phases run on the round as it is
        decide_s = time.perf_counter() - began
        counts = status_counts(database, round_id)
        sources = votes_by_source(database, round_id)
        stored = sum(sources.values())
        if finished and stored != n * args.votes:
            raise BenchmarkError(f"{stored} votes stored, expected {n * args.votes}")
        verified_s = sent.seconds + decide_s
        phase(
            "decide" if finished else "decide (NOT finished)",
            decide_s,
            f"{stored} of {n * args.votes} votes read back and decided, "
            f"{stored / verified_s:.0f} votes/s over ingest and decide (stored by {sources}); {counts}; "
            f"{waiting_reads(database, round_id)} tasks waiting to be read; Label Studio CPU "
            f"{(label_studio_cpu_seconds(server) - ls_cpu) / len(order) * 1000:.1f} ms per webhook",
        )
        verified_rate = stored / verified_s
        floor_tasks = task_ids[: min(n, args.floor_tasks)]
        print(f"ingest floor: Label Studio reading back {len(floor_tasks)} tasks ...", flush=True)
        with paused(worker[0].pid, server):  # its scheduled reconcile would share Label Studio
            ingest_floor = label_studio_floor(server, project_id, floor_tasks, READ_BATCH_SIZE)
        print_floor(ingest_floor)
        sampler.phase()

        # 6. round alpha with its CI
        seconds, report = timed(
            lambda: lead.call("GET", f"/api/rounds/{round_id}/agreement?bootstrap=1000", timeout=1800)
        )
        alpha = report.get("alpha") or report.get("round", {}).get("alpha")
        phase("round alpha with CI", seconds, f"alpha {json.dumps(alpha)[:160]}")

        # 7. dashboard first view
        seconds, _page = timed(
            lambda: lead.request("GET", f"/dashboard/rounds/{round_id}", timeout=1800).content
        )
        phase("dashboard first view", seconds, f"/dashboard/rounds/{round_id}, {len(_page)} bytes")

        # 8. export
        seconds, data = timed(
            lambda: lead.request("GET", f"/api/rounds/{round_id}/dataset?format=jsonl", timeout=1800).content
        )
        phase(
            "export",
            seconds,
            f"{data.count(NEWLINE)} accepted examples, {len(data) / 2**20:.0f} MiB of JSONL",
        )

        if args.reconcile_on_demand:  # an on-demand reconcile of the whole round, beside the goal
            seconds, synced = timed(lambda: lead.call("POST", f"/api/rounds/{round_id}/sync", timeout=3600))
            phase(
                "reconcile on demand",
                seconds,
                f"{synced.get('tasks')} tasks, {synced.get('annotations_seen')} annotations read, "
                f"{synced.get('added_or_updated')} changed",
                counted=False,
            )

        # 9. release: close, freeze, and build the round's release as a job (the lexical
        # near-duplicate check; the semantic one with --semantic)
        seconds, released = timed(lambda: release_round(lead, round_id, decided=finished, timeout_s=4 * 3600))
        phase("release", seconds, f"close, freeze, release job: {json.dumps(released)[:200]}")

        total = sum(p.seconds for p in phases if p.counted)
        rest = sum(p.seconds for p in phases if p.counted and p.group == "rest")
        print()
        print(
            f"=== scale: {n} candidates x {args.votes} votes, {backend}, "
            f"gunicorn {args.workers} x {args.threads} "
            f"+ dynaval worker, model {args.model}, reconcile every {args.reconcile_interval:g} s, "
            f"{machine_state()} ==="
        )
        for p in phases:
            mark = "" if p.counted else "   (not counted)"
            print(
                f"  {p.name:22} {p.seconds:8.1f} s   peak RSS service+worker {mib(p.service_rss):>10}, "
                f"Label Studio {mib(p.label_studio_rss):>10}{mark}"
            )
            print(f"  {'':22} {p.detail}")
        print(
            f"  peak RSS over the run: service {mib(sampler.peak['service'])}, "
            f"worker {mib(sampler.peak['worker'])}, "
            f"Label Studio {mib(sampler.peak['label_studio'])}, this script {mib(own_peak_rss_bytes())}"
        )
        print(f"  finished at {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
        print("  each phase beside its floor, measured in this run:")
        for floor in (*score_floors, ingest_floor):
            print_floor(floor)
        print(ratio_line("score", score_rate, score_floors[0], SCORE_GOAL_RATIO))
        print(ratio_line("score (1 thread)", score_rate, score_floors[1], SCORE_GOAL_RATIO))
        print(ratio_line("ingest (read back)", verified_rate, ingest_floor, INGEST_GOAL_RATIO))
        print(
            f"  {'the rest':22} {rest:8.1f} s (push, decide, alpha with CI, dashboard, export, release)   "
            f"goal <= {REST_GOAL_S / 60:.0f} min: {verdict(rest <= REST_GOAL_S)}"
        )
        print(
            f"  total of the counted phases {total / 60:.1f} min   "
            f"goal <= {GOAL_S / 60:.0f} min: {verdict(total <= GOAL_S)}"
        )
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--candidates", type=int, default=120_000)
    parser.add_argument("--votes", type=int, default=5, help="votes per candidate")
    parser.add_argument("--annotators", type=int, default=40, help="annotators the votes come from")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies --candidates")
    parser.add_argument("--model", choices=["default", "tiny"], default="default")
    parser.add_argument("--writers", type=int, default=8, help="writers submitting at once")
    parser.add_argument("--batch", type=int, default=100, help="candidates per batch request")
    parser.add_argument("--clients", type=int, default=8, help="webhook senders")
    parser.add_argument("--seed-batch", type=int, default=1000, help="tasks per seeding import")
    parser.add_argument(
        "--decide-timeout",
        type=float,
        default=4 * 3600,
        help="seconds to wait for every decision after the last webhook; then the later phases run "
        "on the round as it is, and the decide phase is marked NOT finished",
    )
    parser.add_argument(
        "--reconcile-interval", type=float, default=300.0, help="DYNAVAL_RECONCILE_INTERVAL_S"
    )
    parser.add_argument(
        "--reconcile-on-demand",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="end with POST /sync of the whole round (not counted)",
    )
    parser.add_argument("--workers", type=int, default=1, help="gunicorn workers")
    parser.add_argument("--threads", type=int, default=16, help="gunicorn threads per worker")
    parser.add_argument(
        "--floor-texts", type=int, default=2000, help="texts of the round the model's floor scores alone"
    )
    parser.add_argument(
        "--floor-tasks", type=int, default=10_000, help="tasks Label Studio's floor reads back"
    )
    parser.add_argument(
        "--semantic",
        action="store_true",
        help="the release also runs the semantic near-duplicate check (MiniLM over every row); without "
        "it the worker, which builds the release, runs with DYNAVAL_NEAR_DUPLICATE_SEMANTIC=false",
    )
    add_database_argument(parser)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    counts = (args.candidates, args.votes, args.annotators, args.writers, args.batch, args.clients)
    if min(*counts, args.floor_texts, args.floor_tasks) < 1:
        parser.error("counts must be positive")
    if args.scale <= 0 or args.votes > args.annotators:
        parser.error("--scale must be positive and --votes at most --annotators")
    return run_main("scale", run, args)


if __name__ == "__main__":
    raise SystemExit(main())
