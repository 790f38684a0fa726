"""Webhook ingest of the deployed service against Label Studio's own annotation rate.

Label Studio sends one webhook per annotation, synchronously inside the annotation request, so the
service only has to keep up with the rate at which Label Studio itself creates annotations. This
script measures both in one run, on this machine:

1. A real Label Studio (a temporary data directory) and the dynaval service under gunicorn
   (``service/gunicorn.conf.py`` with its defaults, a free loopback port, the tiny test model). A
   lead creates a round that asks for 3 votes per task from the start, writers submit
   ``--candidates`` candidates in batches, the service's background worker pushes them to Label
   Studio (status ``in_validation``).
2. Label Studio's annotation POST rate: ``--ls-annotations`` annotations created one after the other
   through the SDK by 3 annotators, on a separate project with the same labelling config and no
   webhook (so nothing of ours is timed there). Reported: median latency and overall rate.
3. The service's webhook ingest: one real payload of each action (ANNOTATION_CREATED / _UPDATED) is
   captured from Label Studio through a throwaway webhook to a recording proxy
   (``tests/support/webhook_proxy.py``); many are made from it for the round's real tasks, with
   distinct annotation ids and annotators. A warm-up first gives each task its 3 annotators. After
   it, about 80 % are ANNOTATION_CREATED (a further annotator's first annotation of a task, up to 7
   annotators per task, as an annotator usually annotates a task once) and 20 % ANNOTATION_UPDATED
   (an earlier annotation edited, 20 % of labels against the writer's); a task with all its
   annotators gets updates only. They are sent to ``POST /webhooks/label-studio`` by ``--clients``
   threads on keep-alive connections (``http.client``: the load generator shares the machine, so it
   must cost little), ``--requests`` in all (or until ``--time-cap``). Each measurement runs
   ``--repeats`` times; the medians of requests/s, p50 and p99 are reported, with the ratio service
   rate / Label Studio annotation rate (goal: >= 30x, no errors). Those clients send back to back,
   so their requests queue and their latency says how long the queue is. The latency goal (p99 <= 25
   ms) is measured at the throughput goal instead: ``--repeats`` steady runs of ``--paced-seconds``
   each at 30x Label Studio's measured rate (open loop: each request is due at a fixed time and its
   latency counts from then, waiting for a client thread included). A last run with one client
   (``--single-requests``) gives the latency without queueing, which is what an annotation request
   waits for at Label Studio's real pace. The gunicorn processes' CPU time per webhook is printed
   too: unlike the rates, it hardly depends on what else the machine runs.
4. Everything is stopped and removed at the end, also on error or Ctrl-C: gunicorn, Label Studio,
   the temporary folder and the PostgreSQL database the script created.

    .venv/bin/python benchmarks/webhook_ingest.py          # SQLite, 1 worker x 8 threads
    .venv/bin/python benchmarks/webhook_ingest.py --workers 4 \\
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
from collections.abc import Iterator, Sequence
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

from tests.support.webhook_proxy import capture_payloads  # noqa: E402

from dynaval.devtools.label_studio_server import Annotator, LabelStudioServer, free_port  # noqa: E402

HOST = "127.0.0.1"
WEBHOOK_PATH = "/webhooks/label-studio"
SECRET_HEADER = "X-Dynaval-Webhook-Secret"
GOAL_RATIO = 30.0
GOAL_P99_MS = 25.0
UPDATED_SHARE = 0.2
DISAGREE_SHARE = 0.2
ANNOTATORS_PER_TASK = 3  # the round's overlap: votes each task gets in the warm-up
# A task's annotators in all: after the warm-up, an ANNOTATION_CREATED is a further annotator's
# first annotation (an escalation), until the task has this many; then its webhooks are updates.
MAX_ANNOTATORS_PER_TASK = 7
SUBMIT_BATCH = 100
# Synthetic annotation ids start far above anything this Label Studio hands out.
SYNTHETIC_ID_BASE = 10_000_000
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
    writer: str
    session: requests.Session = field(default_factory=requests.Session)

    def call(self, method: str, path: str, *, token: str | None = None, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {token or self.lead}"}
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
    annotators: tuple[int, ...]


def make_text(rng: random.Random, index: int) -> str:
    return f"Review {index}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18))) + "."


def set_up_round(
    client: ServiceClient, n: int, annotator_pool: Sequence[int], rng: random.Random, timeout_s: float
) -> tuple[int, int, list[RoundTask]]:
    """Create a round, submit ``n`` fooling candidates, wait until all are in Label Studio."""
    # Three votes asked for from the start, and no more (the default asks for 2, then a third when
    # they disagree): the measured webhooks then never make the service raise a task's overlap in
    # Label Studio, a PATCH that costs Label Studio about a quarter of a second of CPU on this
    # machine and would take it from the service under test.
    round_body = {
        "name": "webhook ingest bench",
        "task": "sentiment",
        "model": "default",
        "policy": {"min_votes": ANNOTATORS_PER_TASK, "max_votes": ANNOTATORS_PER_TASK},
    }
    created = client.call("POST", "/api/rounds", json=round_body)
    round_id, project_id = int(created["id"]), int(created["label_studio_project_id"])
    candidate_ids: list[str] = []
    for first in range(0, n, SUBMIT_BATCH):
        # The tiny model always answers "neutral": positive and negative writers fool it.
        batch = [
            {
                "text": make_text(rng, index),
                "writer_label": rng.choice(["positive", "negative"]),
                "writer_id": f"writer-{index % 7}",
            }
            for index in range(first, min(n, first + SUBMIT_BATCH))
        ]
        path = f"/api/rounds/{round_id}/candidates/batch"
        answer = client.call("POST", path, token=client.writer, json={"candidates": batch})
        candidate_ids.extend(str(c["id"]) for c in answer["candidates"])
    deadline = time.monotonic() + timeout_s
    while True:
        summary = client.call("GET", f"/api/rounds/{round_id}")
        in_validation = int(summary["counts"]["by_status"].get("in_validation", 0))
        if in_validation >= n:
            break
        if time.monotonic() > deadline:
            raise BenchmarkError(f"only {in_validation} of {n} candidates reached Label Studio in time")
        time.sleep(0.25)
    tasks: list[RoundTask] = []
    pool = len(annotator_pool)
    for index, candidate_id in enumerate(candidate_ids):
        body = client.call("GET", f"/api/candidates/{candidate_id}")
        annotators = tuple(annotator_pool[(index + k) % pool] for k in range(MAX_ANNOTATORS_PER_TASK))
        tasks.append(
            RoundTask(
                candidate_id=candidate_id,
                task_id=int(body["label_studio_task_id"]),
                text=str(body["inputs"]["text"]),
                writer_label=str(body["writer_label"]),
                annotators=annotators,
            )
        )
    return round_id, project_id, tasks


def wait_escalations_applied(
    client: ServiceClient,
    server: LabelStudioServer,
    project_id: int,
    tasks: Sequence[RoundTask],
    timeout_s: float,
) -> bool:
    """True once every task's overlap in Label Studio covers the votes its candidate wants."""
    wanted = {
        t.task_id: int(client.call("GET", f"/api/candidates/{t.candidate_id}")["wanted_votes"]) for t in tasks
    }
    deadline = time.monotonic() + timeout_s
    while True:
        overlaps = {
            int(task.id): int(task.overlap or 0) for task in server.client.tasks.list(project=project_id)
        }
        pending = sum(1 for task_id, want in wanted.items() if overlaps.get(task_id, 0) < want)
        if pending == 0:
            return True
        if time.monotonic() > deadline:
            print(f"  warning: {pending} escalations still pending after {timeout_s:.0f} s", flush=True)
            return False
        time.sleep(1.0)


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
    began = time.perf_counter()
    for task_id, annotator in jobs[3 : 3 + k]:
        started = time.perf_counter()
        server.annotate(task_id, annotator.id, rng.choice(["positive", "negative", "neutral"]))
        latencies.append(time.perf_counter() - started)
    return LabelStudioRate(latencies=latencies, seconds=time.perf_counter() - began)


# ---------------------------------------------------------------------------------------- payloads


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class _Made:
    annotation_id: int
    annotator: int
    created_at: str


class PayloadFactory:
    """Realistic webhook bodies made from the captured ones, for the round's real tasks."""

    def __init__(
        self, captured: dict[str, Any], project_id: int, tasks: Sequence[RoundTask], labels: Sequence[str]
    ) -> None:
        self._captured = captured
        self._project_id = project_id
        self._tasks = list(tasks)
        self._labels = list(labels)
        self._next_id = SYNTHETIC_ID_BASE
        self._clock = datetime.now(UTC)
        self._made: dict[int, list[_Made]] = {t.task_id: [] for t in tasks}
        self._counts: dict[int, int] = {t.task_id: 0 for t in tasks}
        self._annotated: dict[int, set[int]] = {t.task_id: set() for t in tasks}
        self.sizes: list[int] = []
        self.made = {"ANNOTATION_CREATED": 0, "ANNOTATION_UPDATED": 0}

    def _tick(self) -> str:
        self._clock += timedelta(microseconds=997)
        return _iso(self._clock)

    def _label(self, task: RoundTask, rng: random.Random) -> str:
        if rng.random() >= DISAGREE_SHARE:
            return task.writer_label
        return rng.choice([label for label in self._labels if label != task.writer_label])

    def body(
        self, action: str, task: RoundTask, made: _Made, updated_at: str, label: str, rng: random.Random
    ) -> bytes:
        payload = copy.deepcopy(self._captured[action])
        payload["project"]["id"] = self._project_id
        annotation = payload["annotation"]
        annotation["id"] = made.annotation_id
        annotation["task"] = task.task_id
        annotation["project"] = self._project_id
        annotation["completed_by"] = made.annotator
        annotation["created_at"] = made.created_at
        annotation["updated_at"] = updated_at
        annotation["lead_time"] = round(rng.uniform(2.0, 60.0), 3)
        annotation["was_cancelled"] = False
        if "unique_id" in annotation:
            annotation["unique_id"] = str(uuid.uuid4())
        for region in annotation.get("result") or []:
            if region.get("from_name") == "label":
                region["id"] = secrets.token_urlsafe(7)[:10]
                region["value"] = {"choices": [label]}
        if "updated_by" in annotation:
            annotation["updated_by"] = made.annotator
        task_body = payload.get("task")
        if isinstance(task_body, dict):
            self._counts[task.task_id] += 1
            task_body["id"] = task.task_id
            task_body["project"] = self._project_id
            task_body["data"] = {"candidate_id": task.candidate_id, "text": task.text}
            task_body["total_annotations"] = min(self._counts[task.task_id], ANNOTATORS_PER_TASK)
            task_body["is_labeled"] = self._counts[task.task_id] >= 2
            task_body["updated_at"] = updated_at
        data = json.dumps(payload, separators=(", ", ": ")).encode()
        self.made[action] += 1
        self.sizes.append(len(data))
        return data

    def created(self, task: RoundTask, annotator: int, rng: random.Random) -> bytes:
        self._annotated[task.task_id].add(annotator)
        self._next_id += 1
        stamp = self._tick()
        made = _Made(annotation_id=self._next_id, annotator=annotator, created_at=stamp)
        self._made[task.task_id].append(made)
        return self.body("ANNOTATION_CREATED", task, made, stamp, self._label(task, rng), rng)

    def updated(self, task: RoundTask, rng: random.Random) -> bytes:
        made = rng.choice(self._made[task.task_id])
        return self.body("ANNOTATION_UPDATED", task, made, self._tick(), self._label(task, rng), rng)

    def warm_up(self, rng: random.Random) -> list[bytes]:
        """Each task's annotators vote once: every candidate gets its full set of ballots."""
        bodies = []
        for k in range(ANNOTATORS_PER_TASK):
            for task in self._tasks:
                bodies.append(self.created(task, task.annotators[k], rng))
        return bodies

    def mix(self, n: int, rng: random.Random) -> list[bytes]:
        """``n`` bodies over tasks in random order: about 80 % ANNOTATION_CREATED (a further
        annotator's first annotation of the task) and 20 % ANNOTATION_UPDATED (an earlier annotation
        edited). A task that has all its annotators gets updates only: an annotator usually
        annotates a task once (Label Studio would take more), so a candidate ends with a handful."""
        bodies = []
        order = list(self._tasks)
        for i in range(n):
            if i % len(order) == 0:
                rng.shuffle(order)
            task = order[i % len(order)]
            newcomers = [a for a in task.annotators if a not in self._annotated[task.task_id]]
            if newcomers and rng.random() >= UPDATED_SHARE:
                bodies.append(self.created(task, rng.choice(newcomers), rng))
            else:
                bodies.append(self.updated(task, rng))
        return bodies


# ---------------------------------------------------------------------------------------- load


def send_load(
    url: str,
    secret: str,
    bodies: Sequence[bytes],
    clients: int,
    time_cap_s: float,
    *,
    rate: float | None = None,
) -> LoadRun:
    """POST every body once from ``clients`` threads (keep-alive sessions); stop at the time cap.

    Without ``rate`` the clients send back to back and a latency counts from the request's start.
    With ``rate`` the load is open loop, as Label Studio's annotators would send, only faster:
    request i is due at ``start + i / rate`` and its latency counts from that moment, so a request
    that had to wait for a free client thread is charged for the wait (no coordinated omission).
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
        barrier.wait()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - start[0]
    finally:
        gc.enable()
    latencies = [value for r in results for value in r[0]]
    errors = sum(r[1] for r in results)
    samples = [s for r in results for s in r[2]][:5]
    return LoadRun(seconds, latencies, errors, samples, sent=len(latencies) + errors)


# ---------------------------------------------------------------------------------------- main


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    lead, writer = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
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
            "DYNAVAL_WRITER_TOKENS": writer,
            "DYNAVAL_LEAD_TOKENS": lead,
            "DYNAVAL_WEBHOOK_SECRET": webhook_secret,
            "DYNAVAL_PSEUDONYM_SECRET": secrets.token_urlsafe(24),
            "DYNAVAL_SIGNING_SECRET": secrets.token_urlsafe(24),
            "DYNAVAL_DEFAULT_MODEL_DIR": str(model_dir),
            "DYNAVAL_RECONCILE_INTERVAL_S": "0",
            "OMP_NUM_THREADS": "1",
            # The set-up reads each of the round's candidates as the lead and posts them all at once;
            # the webhook is never limited.
            "DYNAVAL_RATE_LIMIT": "",
            "DYNAVAL_SCORING_LIMIT": "",
        }
        print(
            f"starting the service under gunicorn ({args.workers} x {args.threads}, {backend}) ...",
            flush=True,
        )
        service = Gunicorn(env, port, scratch / "gunicorn.log")
        stack.callback(service.stop)
        service.wait_healthy()
        client = ServiceClient(service.url, lead, writer)

        annotators = server.create_annotators(3)
        pool = [a.id for a in annotators] + [100_000 + i for i in range(9)]
        print(f"creating a round with {args.candidates} candidates and pushing them ...", flush=True)
        began = time.perf_counter()
        round_id, project_id, tasks = set_up_round(client, args.candidates, pool, rng, timeout_s=300)
        print(
            f"  round {round_id}: {len(tasks)} tasks in Label Studio "
            f"after {time.perf_counter() - began:.1f} s"
        )

        print(f"Label Studio: {args.ls_annotations} annotation POSTs, sequential, no webhook ...", flush=True)
        ls_rate = measure_label_studio(server, label_config, annotators, args.ls_annotations, rng)
        print(
            f"  {ls_rate.rate:.1f} annotations/s overall, median {ls_rate.median_ms:.0f} ms, "
            f"p90 {percentile(ls_rate.latencies, 90) * 1000:.0f} ms"
        )

        print("capturing real webhook payloads ...", flush=True)
        try:
            captured = capture_payloads(server, annotators[0].id)
        except RuntimeError as exc:
            raise BenchmarkError(str(exc)) from exc
        sizes = {action: len(json.dumps(body)) for action, body in captured.items()}
        project_keys = len(captured["ANNOTATION_CREATED"].get("project", {}))
        print(f"  sizes {sizes} bytes, project object with {project_keys} keys")
        factory = PayloadFactory(captured, project_id, tasks, ["positive", "negative", "neutral"])

        url = service.url + WEBHOOK_PATH
        warm = factory.warm_up(rng)
        print(
            f"warm-up: {len(warm)} webhooks (each task gets its {ANNOTATORS_PER_TASK} annotators) ...",
            flush=True,
        )
        warm_run = send_load(url, webhook_secret, warm, args.clients, args.time_cap)
        print(
            f"  {warm_run.rate:.0f} req/s, p50 {warm_run.p50_ms:.1f} ms, p99 {warm_run.p99_ms:.1f} ms, "
            f"errors {warm_run.errors}"
        )
        if warm_run.errors:
            raise BenchmarkError(f"warm-up errors: {warm_run.error_samples}")
        print("  waiting for the background worker's escalations to reach Label Studio ...", flush=True)
        wait_escalations_applied(client, server, project_id, tasks, timeout_s=400)

        runs: list[LoadRun] = []
        for repeat in range(1, args.repeats + 1):
            bodies = factory.mix(args.requests, rng)
            cpu_before = service.cpu_seconds()
            result = send_load(url, webhook_secret, bodies, args.clients, args.time_cap)
            result.server_cpu_s = service.cpu_seconds() - cpu_before
            result.load_average = os.getloadavg()[0]
            runs.append(result)
            capped = " (time cap)" if result.sent < len(bodies) else ""
            print(
                f"run {repeat}: {result.sent} requests in {result.seconds:.2f} s{capped}: "
                f"{result.rate:.0f} req/s, "
                f"p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} ms, errors {result.errors}; "
                f"gunicorn CPU {result.cpu_ms_per_request:.1f} ms/webhook, "
                f"load average {result.load_average:.1f}",
                flush=True,
            )
            for sample in result.error_samples:
                print(f"  error: {sample}")

        # The latency goal at the throughput goal: a steady 30x Label Studio's annotation rate.
        paced_rate = GOAL_RATIO * ls_rate.rate
        paced_runs: list[LoadRun] = []
        for repeat in range(1, args.repeats + 1):
            bodies = factory.mix(max(200, round(paced_rate * args.paced_seconds)), rng)
            cpu_before = service.cpu_seconds()
            paced = send_load(url, webhook_secret, bodies, args.clients, args.time_cap, rate=paced_rate)
            paced.server_cpu_s = service.cpu_seconds() - cpu_before
            paced_runs.append(paced)
            print(
                f"paced run {repeat} at {paced_rate:.0f}/s ({GOAL_RATIO:.0f}x Label Studio): "
                f"{paced.sent} requests, {paced.rate:.0f} req/s answered, p50 {paced.p50_ms:.1f} ms, "
                f"p99 {paced.p99_ms:.1f} ms, errors {paced.errors}",
                flush=True,
            )

        # At Label Studio's real pace webhooks arrive one at a time: the latency without queueing.
        alone = send_load(url, webhook_secret, factory.mix(args.single_requests, rng), 1, args.time_cap)
        print(
            f"one client, {alone.sent} requests: p50 {alone.p50_ms:.1f} ms, p99 {alone.p99_ms:.1f} ms, "
            f"errors {alone.errors}",
            flush=True,
        )

        # Where the latency goal holds: steady runs at lower multiples of Label Studio's rate.
        ladder: list[tuple[float, LoadRun]] = []
        for multiple in args.paced_ladder:
            steady_rate = multiple * ls_rate.rate
            bodies = factory.mix(max(200, round(steady_rate * args.paced_seconds)), rng)
            steady = send_load(url, webhook_secret, bodies, args.clients, args.time_cap, rate=steady_rate)
            ladder.append((multiple, steady))
            print(
                f"steady run at {multiple:g}x Label Studio ({steady_rate:.0f}/s): "
                f"p50 {steady.p50_ms:.1f} ms, p99 {steady.p99_ms:.1f} ms, errors {steady.errors}",
                flush=True,
            )

        summary = client.call("GET", f"/api/rounds/{round_id}")
        rate = statistics.median(r.rate for r in runs)
        p50 = statistics.median(r.p50_ms for r in runs)
        p99 = statistics.median(r.p99_ms for r in runs)
        errors = (
            sum(r.errors for r in [*runs, *paced_runs, *(run for _, run in ladder)])
            + warm_run.errors
            + alone.errors
        )
        paced_p50 = statistics.median(r.p50_ms for r in paced_runs)
        paced_p99 = statistics.median(r.p99_ms for r in paced_runs)
        ratio = rate / ls_rate.rate
        sizes_sent = factory.sizes
        print()
        print(
            f"=== webhook ingest, {backend}, gunicorn {args.workers} worker(s) x {args.threads} threads, "
            f"{args.clients} clients, {os.cpu_count()} CPUs ==="
        )
        print(
            f"  payloads               {min(sizes_sent)}-{max(sizes_sent)} bytes "
            f"(median {statistics.median(sizes_sent):.0f}); after the warm-up "
            f"{factory.made['ANNOTATION_CREATED'] - len(warm)} created, "
            f"{factory.made['ANNOTATION_UPDATED']} updated"
        )
        print(
            f"  Label Studio           {ls_rate.rate:.1f} annotations/s "
            f"(median POST {ls_rate.median_ms:.0f} ms, "
            f"{len(ls_rate.latencies)} sequential)"
        )
        print(
            f"  service                {rate:.0f} webhooks/s (median of {len(runs)}: "
            + ", ".join(f"{r.rate:.0f}" for r in runs)
            + ")"
        )
        print(
            f"  latency at full load   p50 {p50:.1f} ms, p99 {p99:.1f} ms (medians; {args.clients} clients "
            "sending back to back, so requests queue)"
        )
        print(
            f"  latency at {GOAL_RATIO:.0f}x LS     p50 {paced_p50:.1f} ms, p99 {paced_p99:.1f} ms "
            f"(medians of {len(paced_runs)} steady runs at {paced_rate:.0f} webhooks/s)"
        )
        cpu_ms = statistics.median(r.cpu_ms_per_request for r in runs)
        load = statistics.median(r.load_average for r in runs)
        print(
            f"  gunicorn CPU           {cpu_ms:.1f} ms per webhook (all workers; database server not "
            f"included); 1-min load average {load:.1f} on {os.cpu_count()} CPUs"
        )
        print(
            f"  one client at a time   p50 {alone.p50_ms:.1f} ms, p99 {alone.p99_ms:.1f} ms "
            f"(no queueing: the latency Label Studio's annotation request waits for)"
        )
        for multiple, steady in ladder:
            print(
                f"  steady at {multiple:>4g}x LS     p50 {steady.p50_ms:.1f} ms, p99 {steady.p99_ms:.1f} ms "
                f"({steady.sent} webhooks at {multiple * ls_rate.rate:.0f}/s)"
            )
        print(f"  errors                 {errors} (all answers must be 200)")
        print(
            f"  round after the load   {summary['annotations']} annotations stored, "
            f"by status {summary['counts']['by_status']}"
        )
        met_ratio, met_p99 = ratio >= GOAL_RATIO, paced_p99 <= GOAL_P99_MS
        print(
            f"  ratio service / LS     {ratio:.1f}x   goal >= {GOAL_RATIO:.0f}x: "
            f"{'met' if met_ratio else 'NOT met'}"
        )
        print(
            f"  p99 at {GOAL_RATIO:.0f}x LS's rate  {paced_p99:.1f} ms   goal <= {GOAL_P99_MS:.0f} ms: "
            f"{'met' if met_p99 else 'NOT met'}"
        )
        return 1 if errors else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--candidates", type=int, default=1000, help="candidates (Label Studio tasks) in the round"
    )
    parser.add_argument(
        "--ls-annotations", type=int, default=60, help="timed annotation POSTs to Label Studio"
    )
    parser.add_argument("--requests", type=int, default=2000, help="webhooks per measured run")
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
    parser.add_argument(
        "--single-requests", type=int, default=300, help="webhooks of the one-client latency run"
    )
    parser.add_argument(
        "--paced-seconds", type=float, default=10.0, help="length of each steady run at 30x LS's rate"
    )
    parser.add_argument(
        "--paced-ladder",
        type=lambda text: [float(x) for x in text.split(",") if x],
        default=[5.0, 10.0, 20.0],
        help="further steady runs at these multiples of LS's rate (comma-separated)",
    )
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    counts = (args.candidates, args.ls_annotations, args.requests, args.single_requests, args.clients)
    if min(*counts, args.repeats) < 1:
        parser.error("counts must be at least 1")
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
