"""What the benchmarks that run the deployed service share.

- Child processes (gunicorn with ``service/gunicorn.conf.py``, ``dynaval worker``) started with the
  script's interpreter, stopped by their PID (and by the kernel if the script dies), with their CPU
  time and memory read from ``/proc``; :class:`MemorySampler` keeps the peak RSS of process trees.
- A fresh database per run (:func:`service_database`): SQLite in the scratch folder, or a new
  PostgreSQL database dropped at the end.
- The service's environment (:func:`service_environment`), its API as a lead
  (:class:`ServiceClient`), a round created through it (:func:`create_round`).
- Seeding: tasks imported into a Label Studio project in bulk with real annotations
  (:func:`import_tasks`), and their candidates written straight into the service's database
  (:func:`insert_candidates`, :func:`candidate_row`); what the votes of a round look like once
  stored (:func:`stored_votes`, :func:`status_counts`).
- Realistic webhook bodies made from payloads captured from Label Studio (:class:`PayloadFactory`)
  and the load generator that posts them (:func:`send_load`).
- The service in this process for the benchmarks that time its pages without a server
  (:func:`in_process_services`, :class:`InProcessApp`, :func:`timed`).
- :func:`run_main`: SIGTERM and Ctrl-C end a run through the same clean-up as an error.

A benchmark opens everything it starts on one :class:`contextlib.ExitStack`, so servers, temporary
folders and databases are removed however the run ends.
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
import re
import secrets
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING, Any, TypeVar, overload
from urllib.parse import urlsplit

import requests

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # for tests.support (the tiny model, the payload capture)
    sys.path.insert(0, str(REPO_ROOT))

from sqlalchemy import func, insert  # noqa: E402
from sqlmodel import col, select  # noqa: E402

# The one place the benchmarks import the Label Studio server helper from.
from tests.support.label_studio_server import (  # noqa: E402
    Annotator,
    LabelStudioServer,
    free_port,
)

from dynaval.adapters.db.database import Database  # noqa: E402
from dynaval.adapters.db.orm import AnnotationRow, CandidateRow, as_utc  # noqa: E402

if TYPE_CHECKING:
    from dynaval.service_layer.dashboard.figures_cache import FiguresCache
    from dynaval.service_layer.services import Services

__all__ = ["Annotator", "LabelStudioServer", "free_port"]

HOST = "127.0.0.1"
DYNAVAL_COMMAND = Path(sys.executable).parent / "dynaval"
"""The installed `dynaval` command (run with this interpreter by :class:`ChildProcess`)."""
WEBHOOK_PATH = "/webhooks/label-studio"
SECRET_HEADER = "X-Dynaval-Webhook-Secret"
LABELS = ("positive", "negative", "neutral")
_WORD_LINES = (
    "the film was good bad great awful boring wonderful service staff food hotel room phone",
    "battery screen price day time book app update train flight meeting game weather team",
)
WORDS = tuple(" ".join(_WORD_LINES).split())
IMPORT_BATCH = 1000
"""Tasks per bulk import when seeding Label Studio."""
IDLE_RECONNECT_S = 1.0
"""A load client idle this long opens a new connection (gunicorn closes idle ones after 2 s)."""


T = TypeVar("T")


class BenchmarkError(RuntimeError):
    pass


# ---------------------------------------------------------------------------------------- figures


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:,.0f} MiB"


def machine_state() -> str:
    """The machine the figures come from: cores and the load average when asked."""
    one, five, _ = os.getloadavg()
    return f"{os.cpu_count()} CPUs, load average {one:.1f} (1 min), {five:.1f} (5 min)"


# ---------------------------------------------------------------------------------------- /proc


def process_tree(root: int) -> list[int]:
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


def process_cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def tree_cpu_seconds(root: int | None) -> float:
    """CPU time (user + system) of ``root`` and its live descendants so far."""
    return sum(process_cpu_seconds(pid) for pid in process_tree(root)) if root is not None else 0.0


def _status_kib(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def tree_rss_bytes(root: int | None) -> int:
    """Resident memory of ``root`` and its descendants now (the sum of their VmRSS)."""
    return sum(_status_kib(pid, "VmRSS") for pid in process_tree(root)) * 1024 if root is not None else 0


def tree_peak_rss_bytes(root: int | None) -> int:
    """The largest peak RSS (VmHWM) of any one process of the tree so far."""
    if root is None:
        return 0
    return max((_status_kib(pid, "VmHWM") for pid in process_tree(root)), default=0) * 1024


def own_peak_rss_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


class MemorySampler:
    """Samples the summed RSS of some process trees (``name -> root pid``) every ``interval_s``,
    keeping each tree's peak over the whole run and over the current phase (:meth:`phase`)."""

    def __init__(self, roots: Mapping[str, Callable[[], int | None]], interval_s: float = 0.5) -> None:
        self._roots = dict(roots)
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self.peak: dict[str, int] = dict.fromkeys(self._roots, 0)
        self.phase_peak: dict[str, int] = dict.fromkeys(self._roots, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def sample(self) -> dict[str, int]:
        now = {name: tree_rss_bytes(root()) for name, root in self._roots.items()}
        with self._lock:
            for name, value in now.items():
                self.peak[name] = max(self.peak[name], value)
                self.phase_peak[name] = max(self.phase_peak[name], value)
        return now

    def phase(self) -> dict[str, int]:
        """The peaks since the last call (a new phase starts)."""
        self.sample()
        with self._lock:
            peaks = dict(self.phase_peak)
            self.phase_peak = dict.fromkeys(self._roots, 0)
        return peaks

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.sample()


# ---------------------------------------------------------------------------------------- processes


def _die_with_parent() -> None:  # runs in the child between fork and exec
    """Linux: SIGTERM the child when this script dies without cleaning up."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class ChildProcess:
    """A command run with this interpreter, its output in ``log_path``, stopped by its PID."""

    def __init__(self, args: Sequence[str], env: Mapping[str, str], log_path: Path) -> None:
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("ab")
        self._process = subprocess.Popen(
            [sys.executable, *args],
            cwd=REPO_ROOT,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process.poll() is None else None

    def check_running(self, what: str) -> None:
        if self._process.poll() is not None:
            raise BenchmarkError(f"{what} exited (status {self._process.returncode}):\n{self.log_tail()}")

    def cpu_seconds(self) -> float:
        """CPU time (user + system) of the process and its children so far (Linux /proc)."""
        return tree_cpu_seconds(self._process.pid)

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


class Gunicorn(ChildProcess):
    """``gunicorn -c service/gunicorn.conf.py`` on ``HOST:port``."""

    def __init__(self, env: Mapping[str, str], port: int, log_path: Path) -> None:
        self.url = f"http://{HOST}:{port}"
        config = str(REPO_ROOT / "service" / "gunicorn.conf.py")
        super().__init__(
            ["-m", "gunicorn", "-c", config], {**env, "DYNAVAL_BIND": f"{HOST}:{port}"}, log_path
        )

    def wait_healthy(self, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check_running("gunicorn")
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.25)
        raise BenchmarkError(f"gunicorn did not answer /health within {timeout_s:.0f} s:\n{self.log_tail()}")


def label_studio_cpu_seconds(server: LabelStudioServer) -> float:
    """CPU time (user + system) of Label Studio's processes so far (Linux /proc)."""
    return tree_cpu_seconds(server.pid)


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


def backend_name(database_url: str) -> str:
    return "PostgreSQL" if database_url.startswith("postgresql") else "SQLite"


def add_database_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        default=None,
        help="default: SQLite in a temporary folder; a PostgreSQL URL: a fresh database on that server, "
        "dropped at the end (e.g. postgresql://postgres@127.0.0.1:5432)",
    )


# ---------------------------------------------------------------------------------------- the service


@dataclass(frozen=True)
class Secrets:
    """Fresh tokens and secrets of one run."""

    lead: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    writer: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    webhook: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    pseudonym: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    signing: str = field(default_factory=lambda: secrets.token_urlsafe(24))


def service_environment(
    *,
    scratch: Path,
    database_url: str,
    server: LabelStudioServer,
    port: int,
    keys: Secrets,
    model_dir: Path,
    workers: int = 1,
    threads: int = 16,
    **extra: str,
) -> dict[str, str]:
    """The service's environment: this machine's, the run's secrets and ``DYNAVAL_*`` overrides
    (``extra``: ``RECONCILE_INTERVAL_S="0"`` sets ``DYNAVAL_RECONCILE_INTERVAL_S``). Rate limits
    are off: the scripts poll and submit as one caller."""
    env = {
        **os.environ,
        "DYNAVAL_WORKERS": str(workers),
        "DYNAVAL_THREADS": str(threads),
        "DYNAVAL_LOG_LEVEL": "warning",
        "DYNAVAL_DATA_DIR": str(scratch / "data"),
        "DYNAVAL_DATABASE_URL": database_url,
        "DYNAVAL_LABEL_STUDIO_URL": server.url,
        "DYNAVAL_LABEL_STUDIO_API_KEY": server.api_key,
        "DYNAVAL_PUBLIC_URL": f"http://{HOST}:{port}",
        "DYNAVAL_WRITER_TOKENS": f"bench-writer={keys.writer}",
        "DYNAVAL_LEAD_TOKENS": f"bench-lead={keys.lead}",
        "DYNAVAL_WEBHOOK_SECRET": keys.webhook,
        "DYNAVAL_PSEUDONYM_SECRET": keys.pseudonym,
        "DYNAVAL_SIGNING_SECRET": keys.signing,
        "DYNAVAL_DEFAULT_MODEL_DIR": str(model_dir),
        "OMP_NUM_THREADS": "1",
        "DYNAVAL_RATE_LIMIT": "",
        "DYNAVAL_ANONYMOUS_RATE_LIMIT": "",
        "DYNAVAL_SCORING_LIMIT": "",
    }
    env.update({f"DYNAVAL_{name}": value for name, value in extra.items()})
    return env


def start_label_studio(stack: contextlib.ExitStack, scratch: Path) -> LabelStudioServer:
    print("starting Label Studio ...", flush=True)
    server = LabelStudioServer(data_dir=scratch / "label-studio")
    stack.callback(server.stop)
    server.start()
    return server


def start_gunicorn(
    stack: contextlib.ExitStack, env: Mapping[str, str], port: int, log_path: Path
) -> Gunicorn:
    service = Gunicorn(env, port, log_path)
    stack.callback(service.stop)
    service.wait_healthy()
    return service


def tiny_model(scratch: Path, *, always: str | None = "neutral") -> Path:
    """The test suite's tiny classifier (a second to build): the model's cost is not measured."""
    from tests.support.tiny_model import build_tiny_model

    return build_tiny_model(scratch / "tiny-model", always=always)


@dataclass
class ServiceClient:
    url: str
    token: str
    session: requests.Session = field(default_factory=requests.Session)

    def call(self, method: str, path: str, *, timeout: float = 120.0, **kwargs: Any) -> Any:
        response = self.request(method, path, timeout=timeout, **kwargs)
        return response.json()

    def request(self, method: str, path: str, *, timeout: float = 120.0, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.token}"}
        response = self.session.request(method, self.url + path, headers=headers, timeout=timeout, **kwargs)
        if response.status_code >= 400:
            raise BenchmarkError(f"{method} {path} answered {response.status_code}: {response.text[:300]}")
        return response


def create_round(client: ServiceClient, name: str, policy: Mapping[str, Any]) -> tuple[int, int]:
    """A lead creates the round (its Label Studio project and webhook) through the API; returns
    the round's id and its project's."""
    created = client.call(
        "POST", "/api/rounds", json={"name": name, "task": "sentiment", "model": "default", "policy": policy}
    )
    return int(created["id"]), int(created["label_studio_project_id"])


# ---------------------------------------------------------------------------------------- in process

IN_PROCESS_LEAD_TOKEN = "benchmark-lead-token-0123456789"


def in_process_services(
    folder: Path, database_url: str | None = None, *, near_duplicate_semantic: bool = True
) -> Services:
    """The service's objects in this process, over ``database_url`` (default: a SQLite file in
    ``folder``) with its data in ``folder``: no worker, no reconciliation, Label Studio never called.
    A lead signs in with :data:`IN_PROCESS_LEAD_TOKEN`. ``near_duplicate_semantic=False`` leaves the
    encoder out (a reindex then stores band keys only)."""
    # Imported here: the benchmarks that start the service in a child process do not load it.
    from dynaval.bootstrap import bootstrap
    from dynaval.settings import Settings

    settings = Settings(
        data_dir=folder,
        database_url=database_url or f"sqlite:///{folder / 'dynaval.sqlite3'}",
        lead_tokens=[f"bench={IN_PROCESS_LEAD_TOKEN}"],
        writer_tokens=["benchmark-writer-token-0123456789"],
        webhook_secret="benchmark-webhook-secret-0123456",
        pseudonym_secret="benchmark-pseudonym-secret-01234",
        signing_secret="benchmark-signing-secret-0123456",
        label_studio_url="http://127.0.0.1:9",
        embedded_worker=False,
        reconcile_interval_s=0,
        near_duplicate_semantic=near_duplicate_semantic,
    )
    return bootstrap(settings)


class InProcessApp:
    """The app over ``services`` without a server or background worker, asked as a lead through
    Flask's test client; ``cache`` is its dashboard figures cache."""

    def __init__(self, services: Services) -> None:
        from dynaval.entrypoints.app import create_app

        self.app = create_app(services, start_background=False)
        self.cache: FiguresCache = self.app.extensions["dynaval_dashboard_figures"]
        self._client = self.app.test_client()
        self._headers = {"Authorization": f"Bearer {IN_PROCESS_LEAD_TOKEN}"}

    def get(self, path: str) -> Callable[[], bytes]:
        """A call that asks for ``path`` and reads the whole answer (which must be a 200)."""

        def call() -> bytes:
            response = self._client.get(path, headers=self._headers)
            assert response.status_code == 200, (path, response.status_code, response.get_data()[:300])
            return response.get_data()

        return call

    def close(self) -> None:
        from dynaval.entrypoints.app import shutdown

        shutdown(self.app)


def timed(call: Callable[[], object]) -> float:
    """The seconds ``call`` takes."""
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def timed_cpu(call: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU seconds of this process (the CPU time is the steadier on a shared machine)."""
    started, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - started, time.process_time() - cpu


# ---------------------------------------------------------------------------------------- seeding


def make_text(rng: random.Random, index: int) -> str:
    return f"Review {index}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18))) + "."


@dataclass(frozen=True)
class RoundTask:
    """A candidate and its Label Studio task; ``annotator`` cast its (first) vote."""

    candidate_id: str
    task_id: int
    text: str
    writer_label: str
    annotator: int


@dataclass(frozen=True)
class Vote:
    annotator: int
    label: str
    flag_reason: str | None = None


def create_project(server: LabelStudioServer, title: str, overlap: int) -> int:
    """A project of the sentiment config, made as the service makes a round's."""
    project = server.client.projects.create(
        title=title,
        label_config=server.task_type.label_config,
        maximum_annotations=overlap,
        show_overlap_first=True,
        overlap_cohort_percentage=100,
    )
    assert project.id is not None
    return int(project.id)


def import_tasks(
    server: LabelStudioServer,
    project_id: int,
    tasks: Sequence[Mapping[str, Any]],
    *,
    batch: int = IMPORT_BATCH,
    progress: Callable[[int], None] | None = None,
) -> list[int]:
    """Import ``tasks`` (request items: plain data, or ``{"data": ..., "annotations": [...]}``) in
    bulk requests of ``batch``; returns their task ids in order. Label Studio sends no webhook for
    an import."""
    ids: list[int] = []
    for first in range(0, len(tasks), batch):
        request = list(tasks[first : first + batch])
        imported = server.client.projects.import_tasks(id=project_id, request=request, return_task_ids=True)
        task_ids = [int(t) for t in imported.task_ids or []]
        if len(task_ids) != len(request):
            raise BenchmarkError(f"Label Studio returned {len(task_ids)} task ids for {len(request)} tasks")
        ids.extend(task_ids)
        if progress is not None:
            progress(len(ids))
    return ids


def annotated_task(
    server: LabelStudioServer, candidate_id: str, text: str, votes: Iterable[Vote]
) -> dict[str, Any]:
    """An import request item: the task's data as the service pushes it, and real annotations."""
    return {
        "data": {"candidate_id": candidate_id, "text": text},
        "annotations": [
            {
                "result": server.annotation_result(v.label, flag_reason=v.flag_reason),
                "completed_by": v.annotator,
            }
            for v in votes
        ],
    }


def candidate_row(
    *,
    candidate_id: str,
    round_id: int,
    text: str,
    writer_label: str,
    writer_id: str,
    status: str,
    task_id: int | None = None,
    overlap: int = 0,
    submitted_at: datetime | None = None,
) -> dict[str, Any]:
    """A candidate row as the service stores it once scored by a model that said ``neutral``
    (so a writer's ``positive`` or ``negative`` fooled it): ``queued``, or ``in_validation``
    with its task and no vote yet. Every row has the same keys (one bulk insert)."""
    now = submitted_at or datetime.now(UTC)
    in_validation = task_id is not None
    return {
        "id": candidate_id,
        "round_id": round_id,
        "inputs": {"text": text},
        "writer_label": writer_label,
        "writer_id": writer_id,
        "submitted_by": writer_id,
        "status": status,
        "model_prediction": "neutral",
        "model_probabilities": {"positive": 0.1, "negative": 0.1, "neutral": 0.8},
        "model_signature": "0" * 64,
        "fooled": writer_label != "neutral",
        "submitted_at": now,
        "scored_at": now,
        "pushed_at": now if in_validation else None,
        "label_studio_task_id": task_id,
        "wanted_votes": overlap if in_validation else 0,
        "label_studio_overlap": overlap if in_validation else 0,
        "version": 0,
    }


def insert_candidates(database: Database, rows: Sequence[Mapping[str, Any]], chunk: int = 5000) -> None:
    """Write candidate rows straight into the service's database (Core bulk inserts)."""
    for first in range(0, len(rows), chunk):
        with database.unit_of_work() as session:
            session.execute(insert(CandidateRow), [dict(r) for r in rows[first : first + chunk]])
            session.commit()


def seed_tasks(
    server: LabelStudioServer,
    database: Database,
    round_id: int,
    project_id: int,
    annotators: Sequence[Annotator],
    n: int,
    rng: random.Random,
    *,
    votes_per_task: int = 1,
    disagree_share: float = 0.2,
    overlap: int = 2,
    progress: Callable[[int], None] | None = None,
) -> list[RoundTask]:
    """``n`` tasks in the round's project, each with ``votes_per_task`` real annotations by
    distinct annotators (a share ``disagree_share`` of them against the writer's label), and
    their candidates in the service's database (in validation, asking for ``overlap`` votes, no
    vote stored yet). The votes reach the service only when it reads the tasks back."""
    if votes_per_task > len(annotators):
        raise BenchmarkError(f"{votes_per_task} votes per task need as many annotators")
    drafts = []
    for index in range(n):
        writer_label = rng.choice(["positive", "negative"])
        voters = rng.sample(list(annotators), votes_per_task)
        votes = [Vote(a.id, writer_label if rng.random() >= disagree_share else "neutral") for a in voters]
        drafts.append((str(uuid.uuid4()), make_text(rng, index), writer_label, votes))
    task_ids = import_tasks(
        server,
        project_id,
        [annotated_task(server, cid, text, votes) for cid, text, _label, votes in drafts],
        progress=progress,
    )
    tasks = [
        RoundTask(cid, task_id, text, label, votes[0].annotator)
        for (cid, text, label, votes), task_id in zip(drafts, task_ids, strict=True)
    ]
    insert_candidates(
        database,
        [
            candidate_row(
                candidate_id=t.candidate_id,
                round_id=round_id,
                text=t.text,
                writer_label=t.writer_label,
                writer_id=f"writer-{index % 7}",
                status="in_validation",
                task_id=t.task_id,
                overlap=overlap,
            )
            for index, t in enumerate(tasks)
        ],
    )
    return tasks


def stored_votes(database: Database, candidate_ids: Sequence[str]) -> dict[str, datetime]:
    """When each of these candidates' (latest) vote was stored (read back), for those that have one."""
    found: dict[str, datetime] = {}
    with database.reading() as session:
        for first in range(0, len(candidate_ids), 500):
            chunk = list(candidate_ids[first : first + 500])
            rows = session.exec(
                select(AnnotationRow.candidate_id, func.max(AnnotationRow.received_at))
                .where(col(AnnotationRow.candidate_id).in_(chunk))
                .group_by(col(AnnotationRow.candidate_id))
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


def status_counts(database: Database, round_id: int) -> dict[str, int]:
    """The round's candidates by status."""
    with database.reading() as session:
        rows = session.exec(
            select(CandidateRow.status, func.count())
            .where(CandidateRow.round_id == round_id)
            .group_by(col(CandidateRow.status))
        ).all()
    return {status: int(count) for status, count in rows}


def wait_for(condition: Callable[[], bool], *, timeout_s: float, what: str, interval_s: float = 0.1) -> float:
    """Poll ``condition`` until it holds; returns the seconds it took (BenchmarkError after the
    timeout)."""
    began = time.perf_counter()
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise BenchmarkError(f"{what} did not happen within {timeout_s:.0f} s")
        time.sleep(interval_s)
    return time.perf_counter() - began


# ---------------------------------------------------------------------------------------- payloads


_SLOT = re.compile(r'"@@N:(\w+)@@"|@@S:(\w+)@@')


class _Template:
    """A JSON body with slots: numbers (``"@@N:name@@"``) and string contents (``@@S:name@@``),
    filled by joining strings (some microseconds, where a deep copy and ``json.dumps`` of a 4 KB
    payload cost a hundred times that; the load generator shares the service's cores)."""

    def __init__(self, payload: Any) -> None:
        text = json.dumps(payload, separators=(", ", ": "))
        self._parts: list[str] = []
        self._slots: list[tuple[str, bool]] = []
        last = 0
        for match in _SLOT.finditer(text):
            self._parts.append(text[last : match.start()])
            number, string = match.groups()
            self._slots.append((number or string, number is not None))
            last = match.end()
        self._parts.append(text[last:])

    def render(self, values: Mapping[str, object]) -> bytes:
        out = [self._parts[0]]
        for (name, is_number), part in zip(self._slots, self._parts[1:], strict=True):
            value = values[name]
            out.append(str(value) if is_number else json.dumps(str(value))[1:-1])
            out.append(part)
        return "".join(out).encode()


class PayloadFactory:
    """Realistic webhook bodies made from the captured ones (4.4 KB or so), for the round's tasks.

    Everything a real webhook of another task would change is changed: the annotation's id, task,
    annotator, times, lead time and unique id, the label region's id and choice, the task's id,
    data and update time. The service reads only the project and the task from it."""

    def __init__(self, captured: Mapping[str, Any], project_id: int) -> None:
        self._templates = {
            action: self._template(payload, project_id) for action, payload in captured.items()
        }
        self.sizes: list[int] = []

    @staticmethod
    def _template(captured: Any, project_id: int) -> _Template:
        payload = copy.deepcopy(captured)
        payload["project"]["id"] = project_id
        annotation = payload["annotation"]
        annotation.update(
            id="@@N:annotation_id@@",
            task="@@N:task_id@@",
            project=project_id,
            completed_by="@@N:annotator@@",
            created_at="@@S:stamp@@",
            updated_at="@@S:stamp@@",
            lead_time="@@N:lead_time@@",
        )
        if "unique_id" in annotation:
            annotation["unique_id"] = "@@S:unique_id@@"
        for region in annotation.get("result") or []:
            if region.get("from_name") == "label":
                region["id"] = "@@S:region_id@@"
                region["value"] = {"choices": ["@@S:label@@"]}
        task_body = payload.get("task")
        if isinstance(task_body, dict):
            task_body.update(id="@@N:task_id@@", project=project_id, updated_at="@@S:stamp@@")
            task_body["data"] = {"candidate_id": "@@S:candidate_id@@", "text": "@@S:text@@"}
        return _Template(payload)

    def body(
        self,
        task: RoundTask,
        rng: random.Random,
        *,
        action: str = "ANNOTATION_CREATED",
        annotator: int | None = None,
        label: str | None = None,
    ) -> bytes:
        data = self._templates[
            action
        ].render(
            {
                "annotation_id": rng.randrange(1, 2**31),  # the service reads the task, whatever this says
                "task_id": task.task_id,
                "annotator": task.annotator if annotator is None else annotator,
                "stamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "lead_time": round(rng.uniform(2.0, 60.0), 3),
                "unique_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                "region_id": secrets.token_urlsafe(7)[:10],
                "label": task.writer_label if label is None else label,
                "candidate_id": task.candidate_id,
                "text": task.text,
            }
        )
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


def capture_payloads(server: LabelStudioServer, annotator_id: int) -> dict[str, dict[str, Any]]:
    """One real payload of ANNOTATION_CREATED and _UPDATED, recorded from Label Studio."""
    from tests.support.webhook_proxy import capture_payloads as capture

    try:
        return capture(server, annotator_id)
    except RuntimeError as exc:
        raise BenchmarkError(str(exc)) from exc


class Lazy(Sequence[T]):
    """``n`` items made as they are asked for (``make(i)``), never held in memory at once: the
    bodies of a long load, the requests of a large import."""

    def __init__(self, n: int, make: Callable[[int], T]) -> None:
        self._n = n
        self._make = make

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...

    def __getitem__(self, index: int | slice) -> T | Sequence[T]:
        if isinstance(index, slice):
            return [self._make(i) for i in range(*index.indices(self._n))]
        if not 0 <= index < self._n:
            raise IndexError(index)
        return self._make(index)


# ---------------------------------------------------------------------------------------- load


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


def webhook_headers(secret: str) -> dict[str, str]:
    """The headers of Label Studio's webhook to the service."""
    return {"Content-Type": "application/json", SECRET_HEADER: secret}


def send_load(
    url: str,
    headers: Mapping[str, str],
    bodies: Sequence[bytes],
    clients: int,
    time_cap_s: float,
    *,
    rate: float | None = None,
    on_sent: Callable[[int], object] | None = None,
    ok_status: int = 200,
) -> LoadRun:
    """POST every body once from ``clients`` threads (keep-alive sessions); stop at the time cap.
    An answer other than ``ok_status`` counts as an error.

    Without ``rate`` the clients send back to back and a latency counts from the request's start.
    With ``rate`` the load is open loop, as Label Studio's annotators would send, only faster:
    request i is due at ``start + i / rate`` and its latency counts from that moment, so a request
    that had to wait for a free client thread is charged for the wait (no coordinated omission).
    ``on_sent(i)`` is called as body ``i`` is sent.
    """
    target = urlsplit(url)
    headers = dict(headers)
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
        connection = http.client.HTTPConnection(target.hostname or HOST, target.port, timeout=120)
        last_used = float("inf")
        try:
            barrier.wait()
            last_used = time.perf_counter()
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
                body = bodies[index]
                if time.perf_counter() - last_used > IDLE_RECONNECT_S:
                    connection.close()  # the server may have closed an idle keep-alive connection
                if on_sent is not None:
                    on_sent(index)
                try:
                    connection.request("POST", target.path, body=body, headers=headers)
                    response = connection.getresponse()
                    answer = response.read()
                    ok = response.status == ok_status
                    detail = f"HTTP {response.status}: {answer[:200].decode(errors='replace')}"
                except (OSError, http.client.HTTPException) as exc:
                    connection.close()  # reconnects on the next request
                    ok, detail = False, f"{type(exc).__name__}: {exc}"
                last_used = time.perf_counter()
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


def run_main(name: str, run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a benchmark: SIGTERM ends it like Ctrl-C, through the clean-up of its ExitStack."""
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return run(args)
    except KeyboardInterrupt:
        print("interrupted; everything was stopped and removed", file=sys.stderr)
        return 130
    except BenchmarkError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
