"""Webhook ingest of the deployed service, verification included, against Label Studio's own rate.

A webhook is only a hint: the service answers it at once and reads the task it names back from
Label Studio, with its own key, in small batches (``DYNAVAL_VERIFY_DELAY_S`` gathers them). Label
Studio sends one webhook per annotation, synchronously inside the annotation request, so the
service must keep up with the rate at which Label Studio itself creates annotations, and the
reading back must cost Label Studio little. This script measures, in one run, on this machine:

1. A real Label Studio (a temporary data directory) and the dynaval service under gunicorn
   (``service/gunicorn.conf.py`` with its defaults, a free loopback port, the tiny test model). A
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
import copy
import ctypes
import gc
import http.client
import json
import os
import random
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import IO, Any
from urllib.parse import urlsplit

import requests

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # for tests.support (the tiny model, the payload capture)
    sys.path.insert(0, str(REPO_ROOT))

from sqlmodel import col, select  # noqa: E402
from tests.support.label_studio_server import Annotator, LabelStudioServer, free_port  # noqa: E402
from tests.support.webhook_proxy import capture_payloads  # noqa: E402

from dynaval.adapters.database import Database  # noqa: E402
from dynaval.adapters.orm import AnnotationRow, CandidateRow, as_utc  # noqa: E402

HOST = "127.0.0.1"
WEBHOOK_PATH = "/webhooks/label-studio"
SECRET_HEADER = "X-Dynaval-Webhook-Secret"
GOAL_VERIFIED_RATIO = 10.0
GOAL_RATIO = 30.0
GOAL_P99_MS = 25.0
DISAGREE_SHARE = 0.2
VOTES_PER_TASK = 2  # the round's first votes: a task's one imported vote leaves it in validation
IMPORT_BATCH = 1000
_WORD_LINES = (
    "the film was good bad great awful boring wonderful service staff food hotel room phone",
    "battery screen price day time book app update train flight meeting game weather team",
)
WORDS = tuple(" ".join(_WORD_LINES).split())


class BenchmarkError(RuntimeError):
    pass


# ---------------------------------------------------------------------------------------- figures


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


@dataclass
class LoadRun:
    seconds: float
    latencies: list[float]
    errors: int
    error_samples: list[str]
    sent: int
    server_cpu_s: float = 0.0
    load_average: float = 0.0
    began_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def cpu_ms_per_request(self) -> float:
        return self.server_cpu_s / self.sent * 1000 if self.sent else float("nan")

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds > 0 else 0.0

    @property
    def p50_ms(self) -> float:
        return percentile(self.latencies, 50) * 1000 if self.latencies else float("nan")

    @property
    def p99_ms(self) -> float:
        return percentile(self.latencies, 99) * 1000 if self.latencies else float("nan")


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


# ---------------------------------------------------------------------------------------- processes


def _die_with_parent() -> None:  # runs in the child between fork and exec
    """Linux: SIGTERM gunicorn when this script dies without cleaning up."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Gunicorn:
    """``gunicorn -c service/gunicorn.conf.py`` as a child process, stopped by its PID."""

    def __init__(self, env: dict[str, str], port: int, log_path: Path) -> None:
        self.url = f"http://{HOST}:{port}"
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("ab")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", str(REPO_ROOT / "service" / "gunicorn.conf.py")],
            cwd=REPO_ROOT,
            env={**env, "DYNAVAL_BIND": f"{HOST}:{port}"},
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )

    def wait_healthy(self, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise BenchmarkError(f"gunicorn exited at start:\n{self.log_tail()}")
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.25)
        raise BenchmarkError(f"gunicorn did not answer /health within {timeout_s:.0f} s:\n{self.log_tail()}")

    def cpu_seconds(self) -> float:
        """CPU time (user + system) of the gunicorn master and its workers so far (Linux /proc)."""
        return sum(_process_cpu_seconds(pid) for pid in _process_tree(self._process.pid))

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 30.0) -> None:
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=timeout_s)
        self._log.close()


def _process_tree(root: int) -> list[int]:
    """``root`` and its descendants, from /proc (only ``root`` where /proc is missing)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _process_cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


@contextlib.contextmanager
def service_database(database_url: str | None, scratch: Path) -> Iterator[str]:
    """The SQLAlchemy URL the service uses.

    None: a SQLite file in the scratch folder. A PostgreSQL URL: a fresh database
    ``dynaval_bench_<hex>`` created on that server (the URL's database is only used to connect)
    and dropped afterwards. Any other URL is used as given.
    """
    if database_url is None:
        yield f"sqlite:///{scratch / 'dynaval.sqlite3'}"
        return
    from sqlalchemy.engine import make_url

    url = make_url(database_url)
    if url.get_backend_name() != "postgresql":
        yield database_url
        return
    import psycopg

    admin = url.set(drivername="postgresql", database=url.database or "postgres")
    admin_dsn = admin.render_as_string(hide_password=False)
    name = f"dynaval_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_dsn, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url.set(drivername="postgresql+psycopg", database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        print(f"dropped PostgreSQL database {name}", flush=True)


# ---------------------------------------------------------------------------------------- the service


@dataclass
class ServiceClient:
    url: str
    lead: str
    session: requests.Session = field(default_factory=requests.Session)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.lead}"}
        response = self.session.request(method, self.url + path, headers=headers, timeout=120, **kwargs)
        if response.status_code >= 400:
            raise BenchmarkError(f"{method} {path} answered {response.status_code}: {response.text[:300]}")
        return response.json()


@dataclass(frozen=True)
class RoundTask:
    candidate_id: str
    task_id: int
    text: str
    writer_label: str
    annotator: int


def make_text(rng: random.Random, index: int) -> str:
    return f"Review {index}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18))) + "."


def create_round(client: ServiceClient) -> tuple[int, int]:
    """A lead creates the round: its Label Studio project and webhook, through the API."""
    created = client.call(
        "POST",
        "/api/rounds",
        json={
            "name": "webhook ingest bench",
            "task": "sentiment",
            "model": "default",
            "policy": {"min_votes": VOTES_PER_TASK, "max_votes": VOTES_PER_TASK, "gold_rate": 0},
        },
    )
    return int(created["id"]), int(created["label_studio_project_id"])


def seed_tasks(
    server: LabelStudioServer,
    database: Database,
    round_id: int,
    project_id: int,
    annotators: Sequence[Annotator],
    n: int,
    rng: random.Random,
) -> list[RoundTask]:
    """``n`` tasks in the round's project, each with one real annotation, and their candidates in
    the service's database (in validation, no vote stored yet). Label Studio sends no webhook for
    an import: the votes reach the service only when the script sends their webhooks."""
    drafts = []
    for _ in range(n):
        writer_label = rng.choice(["positive", "negative"])
        vote = writer_label if rng.random() >= DISAGREE_SHARE else "neutral"
        drafts.append(
            (str(uuid.uuid4()), make_text(rng, len(drafts)), writer_label, vote, rng.choice(annotators).id)
        )
    tasks: list[RoundTask] = []
    ls = server.client
    for first in range(0, n, IMPORT_BATCH):
        batch = drafts[first : first + IMPORT_BATCH]
        request = [
            {
                "data": {"candidate_id": candidate_id, "text": text},
                "annotations": [{"result": server.annotation_result(vote), "completed_by": annotator}],
            }
            for candidate_id, text, _label, vote, annotator in batch
        ]
        imported = ls.projects.import_tasks(id=project_id, request=request, return_task_ids=True)
        task_ids = [int(t) for t in imported.task_ids or []]
        if len(task_ids) != len(batch):
            raise BenchmarkError(f"Label Studio returned {len(task_ids)} task ids for {len(batch)} tasks")
        tasks.extend(
            RoundTask(candidate_id, task_id, text, label, annotator)
            for (candidate_id, text, label, _vote, annotator), task_id in zip(batch, task_ids, strict=True)
        )
    with database.unit_of_work() as session:
        session.add_all(
            CandidateRow(
                id=task.candidate_id,
                round_id=round_id,
                inputs={"text": task.text},
                writer_label=task.writer_label,
                writer_id=f"writer-{index % 7}",
                status="in_validation",
                model_prediction="neutral",
                model_probabilities={"positive": 0.1, "negative": 0.1, "neutral": 0.8},
                fooled=True,
                label_studio_task_id=task.task_id,
                wanted_votes=VOTES_PER_TASK,
                label_studio_overlap=VOTES_PER_TASK,
            )
            for index, task in enumerate(tasks)
        )
        session.commit()
    return tasks


def stored_votes(database: Database, candidate_ids: Sequence[str]) -> dict[str, datetime]:
    """When each of these candidates' vote was stored (read back), for those that have one."""
    found: dict[str, datetime] = {}
    with database.reading() as session:
        for first in range(0, len(candidate_ids), 500):
            chunk = list(candidate_ids[first : first + 500])
            rows = session.exec(
                select(AnnotationRow.candidate_id, AnnotationRow.received_at).where(
                    col(AnnotationRow.candidate_id).in_(chunk)
                )
            ).all()
            found.update((candidate_id, as_utc(received_at)) for candidate_id, received_at in rows)
    return found


def wait_stored(database: Database, tasks: Sequence[RoundTask], timeout_s: float) -> dict[str, datetime]:
    ids = [t.candidate_id for t in tasks]
    deadline = time.monotonic() + timeout_s
    while True:
        stored = stored_votes(database, ids)
        if len(stored) == len(ids):
            return stored
        if time.monotonic() > deadline:
            raise BenchmarkError(
                f"only {len(stored)} of {len(ids)} votes were read back within {timeout_s:.0f} s"
            )
        time.sleep(0.05)


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


def label_studio_cpu_seconds(server: LabelStudioServer) -> float:
    """CPU time (user + system) of Label Studio's processes so far (Linux /proc)."""
    pid = server.pid
    return sum(_process_cpu_seconds(p) for p in _process_tree(pid)) if pid is not None else 0.0


# ---------------------------------------------------------------------------------------- payloads


class PayloadFactory:
    """Realistic webhook bodies made from the captured ones (4.4 KB or so), for the round's tasks."""

    def __init__(self, captured: dict[str, Any], project_id: int) -> None:
        self._captured = captured
        self._project_id = project_id
        self.sizes: list[int] = []

    def body(self, task: RoundTask, rng: random.Random, *, action: str = "ANNOTATION_CREATED") -> bytes:
        payload = copy.deepcopy(self._captured[action])
        payload["project"]["id"] = self._project_id
        annotation = payload["annotation"]
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        annotation.update(
            id=rng.randrange(1, 2**31),  # the service reads the task, whatever the annotation says
            task=task.task_id,
            project=self._project_id,
            completed_by=task.annotator,
            created_at=stamp,
            updated_at=stamp,
            lead_time=round(rng.uniform(2.0, 60.0), 3),
        )
        if "unique_id" in annotation:
            annotation["unique_id"] = str(uuid.uuid4())
        for region in annotation.get("result") or []:
            if region.get("from_name") == "label":
                region["id"] = secrets.token_urlsafe(7)[:10]
                region["value"] = {"choices": [task.writer_label]}
        task_body = payload.get("task")
        if isinstance(task_body, dict):
            task_body.update(id=task.task_id, project=self._project_id, updated_at=stamp)
            task_body["data"] = {"candidate_id": task.candidate_id, "text": task.text}
        data = json.dumps(payload, separators=(", ", ": ")).encode()
        self.sizes.append(len(data))
        return data

    def mix(self, tasks: Sequence[RoundTask], n: int, rng: random.Random) -> list[bytes]:
        """``n`` bodies over ``tasks`` in random order, 80 % ANNOTATION_CREATED, 20 % _UPDATED."""
        return [
            self.body(
                rng.choice(tasks),
                rng,
                action="ANNOTATION_UPDATED" if rng.random() < 0.2 else "ANNOTATION_CREATED",
            )
            for _ in range(n)
        ]


# ---------------------------------------------------------------------------------------- load


def send_load(
    url: str,
    secret: str,
    bodies: Sequence[bytes],
    clients: int,
    time_cap_s: float,
    *,
    rate: float | None = None,
    on_sent: Callable[[int], object] | None = None,
) -> LoadRun:
    """POST every body once from ``clients`` threads (keep-alive sessions); stop at the time cap.

    Without ``rate`` the clients send back to back and a latency counts from the request's start.
    With ``rate`` the load is open loop, as Label Studio's annotators would send, only faster:
    request i is due at ``start + i / rate`` and its latency counts from that moment, so a request
    that had to wait for a free client thread is charged for the wait (no coordinated omission).
    ``on_sent(i)`` is called as body ``i`` is sent.
    """
    target = urlsplit(url)
    headers = {"Content-Type": "application/json", SECRET_HEADER: secret}
    next_index = iter(range(len(bodies)))
    take = threading.Lock()
    barrier = threading.Barrier(clients + 1)
    start = [0.0]
    results: list[tuple[list[float], int, list[str]]] = []

    def client() -> None:
        latencies: list[float] = []
        errors = 0
        samples: list[str] = []
        # http.client, not requests: a tenth of the client CPU per request, which this machine's
        # 2 cores would otherwise take from the service under test.
        connection = http.client.HTTPConnection(target.hostname or HOST, target.port, timeout=30)
        try:
            barrier.wait()
            while True:
                with take:
                    index = next(next_index, None)
                if index is None:
                    break
                if rate is None:
                    if time.perf_counter() - start[0] > time_cap_s:
                        break
                    counted_from = time.perf_counter()
                else:
                    counted_from = start[0] + index / rate
                    if counted_from - start[0] > time_cap_s:
                        break
                    time.sleep(max(0.0, counted_from - time.perf_counter()))
                if on_sent is not None:
                    on_sent(index)
                try:
                    connection.request("POST", target.path, body=bodies[index], headers=headers)
                    response = connection.getresponse()
                    answer = response.read()
                    ok = response.status == 200
                    detail = f"HTTP {response.status}: {answer[:200].decode(errors='replace')}"
                except (OSError, http.client.HTTPException) as exc:
                    connection.close()  # reconnects on the next request
                    ok, detail = False, f"{type(exc).__name__}: {exc}"
                if ok:
                    latencies.append(time.perf_counter() - counted_from)
                else:
                    errors += 1
                    if len(samples) < 3:
                        samples.append(detail)
        finally:
            connection.close()
        results.append((latencies, errors, samples))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    # This process's own garbage collections (its heap holds the payloads and Label Studio's client)
    # would pause every sender at once, and a paced run charges such a pause to the service.
    gc.collect()
    gc.disable()
    try:
        for thread in threads:
            thread.start()
        start[0] = time.perf_counter() + (0.05 if rate is not None else 0.0)  # paced: threads ready first
        began_at = datetime.now(UTC) + timedelta(seconds=start[0] - time.perf_counter())
        barrier.wait()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - start[0]
    finally:
        gc.enable()
    latencies = [value for r in results for value in r[0]]
    errors = sum(r[1] for r in results)
    samples = [s for r in results for s in r[2]][:5]
    return LoadRun(seconds, latencies, errors, samples, sent=len(latencies) + errors, began_at=began_at)


# ---------------------------------------------------------------------------------------- main


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    lead = secrets.token_urlsafe(24)
    webhook_secret = secrets.token_urlsafe(24)
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dynaval-webhook-bench-")))
        from tests.support.tiny_model import build_tiny_model

        model_dir = build_tiny_model(scratch / "tiny-model", always="neutral")
        database_url = stack.enter_context(service_database(args.database_url, scratch))
        backend = "PostgreSQL" if database_url.startswith("postgresql") else "SQLite"

        print("starting Label Studio ...", flush=True)
        server = LabelStudioServer(data_dir=scratch / "label-studio")
        stack.callback(server.stop)
        server.start()
        label_config = server.task_type.label_config

        port = free_port()
        env = {
            **os.environ,
            "DYNAVAL_WORKERS": str(args.workers),
            "DYNAVAL_THREADS": str(args.threads),
            "DYNAVAL_LOG_LEVEL": "warning",
            "DYNAVAL_DATA_DIR": str(scratch / "data"),
            "DYNAVAL_DATABASE_URL": database_url,
            "DYNAVAL_LABEL_STUDIO_URL": server.url,
            "DYNAVAL_LABEL_STUDIO_API_KEY": server.api_key,
            "DYNAVAL_PUBLIC_URL": f"http://{HOST}:{port}",
            "DYNAVAL_WRITER_TOKENS": secrets.token_urlsafe(24),
            "DYNAVAL_LEAD_TOKENS": lead,
            "DYNAVAL_WEBHOOK_SECRET": webhook_secret,
            "DYNAVAL_PSEUDONYM_SECRET": secrets.token_urlsafe(24),
            "DYNAVAL_SIGNING_SECRET": secrets.token_urlsafe(24),
            "DYNAVAL_DEFAULT_MODEL_DIR": str(model_dir),
            "DYNAVAL_RECONCILE_INTERVAL_S": "0",
            "OMP_NUM_THREADS": "1",
            "DYNAVAL_RATE_LIMIT": "",  # the webhook is never limited; the set-up polls as the lead
            "DYNAVAL_SCORING_LIMIT": "",
        }
        print(
            f"starting the service under gunicorn ({args.workers} x {args.threads}, {backend}) ...",
            flush=True,
        )
        service = Gunicorn(env, port, scratch / "gunicorn.log")
        stack.callback(service.stop)
        service.wait_healthy()
        client = ServiceClient(service.url, lead)
        database = Database(database_url)
        stack.callback(database.dispose)

        annotators = server.create_annotators(3)
        round_id, project_id = create_round(client)
        total = args.burst + args.ack_tasks + round(args.pace_seconds * 40)
        print(f"round {round_id}: importing {total} tasks, each with one real vote ...", flush=True)
        began = time.perf_counter()
        seeded = seed_tasks(server, database, round_id, project_id, annotators, total, rng)
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
        try:
            captured = capture_payloads(server, annotators[0].id)
        except RuntimeError as exc:
            raise BenchmarkError(str(exc)) from exc
        factory = PayloadFactory(captured, project_id)
        url = service.url + WEBHOOK_PATH

        # The answering tasks' votes are read back once, untimed: later reads of them change nothing.
        warm = send_load(url, webhook_secret, [factory.body(t, rng) for t in ack_tasks], args.clients, 600)
        if warm.errors:
            raise BenchmarkError(f"warm-up errors: {warm.error_samples}")
        wait_stored(database, ack_tasks, timeout_s=600)

        # 3. Verified ingest: a burst of webhooks for fresh tasks, timed until every vote is stored.
        print(f"verified ingest: {len(burst_tasks)} webhooks for fresh tasks, back to back ...", flush=True)
        ls_cpu_before = label_studio_cpu_seconds(server)
        burst = send_load(url, webhook_secret, [factory.body(t, rng) for t in burst_tasks], args.clients, 600)
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
            webhook_secret,
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
            result = send_load(url, webhook_secret, bodies, args.clients, args.time_cap)
            result.server_cpu_s = service.cpu_seconds() - cpu_before
            result.load_average = os.getloadavg()[0]
            runs.append(result)
            print(
                f"run {repeat}: {result.sent} webhooks in {result.seconds:.2f} s: {result.rate:.0f}/s, "
                f"p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} ms, errors {result.errors}; "
                f"gunicorn CPU {result.cpu_ms_per_request:.1f} ms/webhook (reading back included), "
                f"load average {result.load_average:.1f}",
                flush=True,
            )
        paced_rate = GOAL_RATIO * ls_rate.rate
        paced_runs: list[LoadRun] = []
        for repeat in range(1, args.repeats + 1):
            bodies = factory.mix(ack_tasks, max(200, round(paced_rate * args.paced_seconds)), rng)
            paced_runs.append(
                send_load(url, webhook_secret, bodies, args.clients, args.time_cap, rate=paced_rate)
            )
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
                    send_load(url, webhook_secret, bodies, args.clients, args.time_cap, rate=steady_rate),
                )
            )
        alone = send_load(
            url, webhook_secret, factory.mix(ack_tasks, args.single_requests, rng), 1, args.time_cap
        )

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
            "(answering and reading back)"
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
        "--database-url",
        default=None,
        help="default: SQLite in a temporary folder; a PostgreSQL URL: a fresh database on that server, "
        "dropped at the end (e.g. postgresql://postgres@127.0.0.1:5432)",
    )
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
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return run(args)
    except KeyboardInterrupt:
        print("interrupted; everything was stopped and removed", file=sys.stderr)
        return 130
    except BenchmarkError as exc:
        print(f"webhook_ingest: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
