"""Three simulated rounds, sentiment, NLI and drawn digits, against a real Label Studio and the
real service (``scripts/demo``).

Writers post candidates concurrently (each with their own token; a collector submits some for a
writer of its own front end; the digits round's candidates are drawings, sent as the writers' page
sends them), four annotator users vote in Label Studio (most agree with
the writers, some do not, two flag a spam text), disagreements are escalated and settled, and the
round dataset is exported. Each round is then frozen, released as version 1.0.0 (``dynaval release
create``) and verified (``dynaval release verify``); ``release: <path>`` names each. Both servers then
stay up, with their URLs and credentials printed,
until Ctrl-C (or stop at once with ``--exit``).
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR = REPO_ROOT / ".dynaval" / "models"
"""The default models, built once by ``scripts/demo`` and kept between runs."""
if str(REPO_ROOT) not in sys.path:  # for tests.support: the Label Studio harness is development tooling
    sys.path.insert(0, str(REPO_ROOT))

from tests.support.drawings import data_url, draw_digit, png_bytes  # noqa: E402
from tests.support.label_studio_server import (  # noqa: E402
    DEFAULT_ANNOTATOR_PASSWORD,
    LabelStudioServer,
    LabelStudioServerError,
    free_port,
    port_is_free,
)

from dynaval.adapters.label_config import LabelConfigCatalog  # noqa: E402

ANNOTATOR_ACCURACY = (0.9, 0.8, 0.8, 0.75)
"""How often each simulated annotator picks the writer's label (seeded, so runs repeat)."""

SPAM = "Buy cheap watches now at my shop, best prices, click the link!!!"

# (text, the writer's label, the label careful annotators would give; None: not a real example)
SENTIMENT: list[tuple[str, str, str | None]] = [
    ("I expected to hate it, and yet I loved every minute.", "positive", "positive"),
    ("Not bad at all, honestly better than the original.", "positive", "positive"),
    ("The food was so good I forgot to complain about the wait.", "positive", "positive"),
    ("I can't say I didn't enjoy it.", "positive", "positive"),
    ("Hard to find anything wrong with this phone.", "positive", "positive"),
    ("The reviews said awful, but they were wrong.", "positive", "positive"),
    ("Crème brûlée to die for, merci! 😍", "positive", "positive"),
    ("这部电影比我想象的好多了。", "positive", "positive"),
    ("Great, another update that breaks everything.", "negative", "negative"),
    ("What a wonderful way to waste two hours.", "negative", "negative"),
    ("The hotel was lovely, if you like cockroaches.", "negative", "negative"),
    ("Oh sure, the delivery was only three weeks late.", "negative", "negative"),
    ("I wanted to like it, I really did.", "negative", "negative"),
    ("The best thing about the film was the ending, because it ended.", "negative", "negative"),
    ("Five stars for the packaging, zero for what was inside.", "negative", "negative"),
    ("Nothing works, but the logo is pretty.", "negative", "negative"),
    ("The meeting was moved from Tuesday to Thursday.", "neutral", "neutral"),
    ("The film is two hours long and in French.", "neutral", "neutral"),
    ("The store opens at nine on weekdays.", "neutral", "neutral"),
    ("Terrible weather, but the concert was amazing.", "positive", "positive"),
    ("Amazing views, shame about the food poisoning.", "negative", "negative"),
    # Writers who are wrong about their own example: validators should reject these.
    ("The package weighs two kilograms.", "negative", "neutral"),
    ("The phone comes in black and silver.", "positive", "neutral"),
    ("It was the third sequel in the series.", "negative", "neutral"),
    ("The staff were friendly and the room was spotless.", "negative", "positive"),
    (SPAM, "negative", None),
]
PREMISES = (
    "The bakery on the corner sold out of bread by eight in the morning.",
    "Maria missed the last train, so she took a taxi home from the station.",
    "Three of the five solar panels on the school roof were damaged in the storm.",
)
# NLI: (premise, hypothesis, the writer's label, the label careful annotators would give, the
# writer's rationale or None).
NLI: list[tuple[str, str, str, str | None, str | None]] = [
    (PREMISES[0], "The bakery had no bread left later that morning.", "entailment", "entailment",
     "Sold out by eight means none left after eight."),
    (PREMISES[0], "The bakery opens at six.", "neutral", "neutral", "Opening time is never said."),
    (PREMISES[0], "Nobody bought bread at the bakery that day.", "contradiction", "contradiction", None),
    (PREMISES[1], "Maria got home without the train.", "entailment", "entailment",
     "She took a taxi instead of the train."),
    (PREMISES[1], "Maria caught the last train.", "contradiction", "contradiction", "She missed it."),
    (PREMISES[1], "The taxi was expensive.", "neutral", "neutral", None),
    (PREMISES[2], "Most of the panels were damaged.", "entailment", "entailment", "Three of five is most."),
    (PREMISES[2], "Every panel on the roof survived the storm.", "contradiction", "contradiction", None),
    # Writers who are wrong about their own example: validators should reject these.
    (PREMISES[2], "The storm happened at night.", "contradiction", "neutral", "Storms are at night."),
    (PREMISES[0], "The bakery sells cakes.", "entailment", "neutral", None),
]  # fmt: skip
# Digits: (the digit drawn, the writer's label, the label careful annotators would give; None: a
# scribble, not a digit). Drawn by tests/support/drawings.py, each with a seed of its own: some of
# them fool the default digits model, trained on scanned digits and not on drawings.
DIGITS: list[tuple[str, str, str | None]] = [
    *((str(d % 10), str(d % 10), str(d % 10)) for d in range(20)),
    # Writers who are wrong about their own drawing: validators should reject these.
    ("1", "7", "1"),
    ("3", "8", "3"),
]
WRITERS = ("writer-ana", "writer-bo", "writer-carmen", "writer-dev")
"""The demo's writers, each with a token of their own (the token says who submits)."""
COLLECTOR = "collector-form"
"""The demo's collector: an outside collection front end that submits for writers it names."""
EXPORTER = "exporter-script"
"""The demo's exporter: a script that reads round datasets, agreement reports and releases."""
REPORTER = "reporter-monitoring"
"""The demo's reporter: production monitoring that reports failures to capture rounds."""
COLLECTED_WRITER = "field-writer-1"
"""The writer of the collector's front end whose candidates it submits (every fifth one)."""


CLIENT_KEEPALIVE_S = 5.0
"""The demo's connection pool closes a connection idle this long (below the service's keep-alive)."""
ATTEMPTS = 4
RETRY_AFTER_MAX_S = 10.0


class DemoError(Exception):
    """A failure the demo reports as one line (and exits 1)."""


def _wait(what: str, check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise DemoError(f"timed out waiting for {what}")


def _pick_port(preferred: int) -> int:
    return preferred if port_is_free(preferred) else free_port()


class Service:
    """The dynaval service under gunicorn (the deployable in service/), as a child process."""

    def __init__(self, env: dict[str, str], port: int, log_path: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self._log = log_path.open("ab")
        gunicorn = Path(sys.executable).with_name("gunicorn")
        self._process = subprocess.Popen(
            [str(gunicorn), "-c", str(REPO_ROOT / "service" / "gunicorn.conf.py")],
            env={**env, "DYNAVAL_BIND": f"127.0.0.1:{port}"},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_healthy(self) -> None:
        def up() -> bool:
            if self._process.poll() is not None:
                raise DemoError(f"the dynaval service exited at start; see {self.log_path}")
            try:
                return httpx.get(self.url + "/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        _wait("the dynaval service", up, timeout_s=120)

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
        self._log.close()


def _retry_after_s(response: httpx.Response) -> float:
    try:
        return min(max(float(response.headers.get("Retry-After", "1")), 0.1), RETRY_AFTER_MAX_S)
    except ValueError:  # an HTTP date, or junk: wait a second
        return 1.0


def _call(api: httpx.Client, method: str, path: str, token: str, *, repeatable: bool, **kwargs: Any) -> Any:
    """Send a request, again when that is safe: after a 429 (refused before anything ran), after a
    connection that could not be made (nothing was sent), and for a repeatable request after a 503
    or a connection lost mid-request. Any other failure is a DemoError that says what failed."""
    for attempt in range(1, ATTEMPTS + 1):
        last = attempt == ATTEMPTS
        try:
            response = api.request(method, path, headers={"Authorization": f"Bearer {token}"}, **kwargs)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            if last:
                raise DemoError(f"{method} {path}: cannot connect to the service ({exc})") from None
        except httpx.TransportError as exc:
            if last or not repeatable:
                raise DemoError(
                    f"{method} {path}: the connection failed ({type(exc).__name__}: {exc})"
                ) from None
        else:
            status = response.status_code
            if (status == 429 or (status == 503 and repeatable)) and not last:
                time.sleep(_retry_after_s(response))
                continue
            if status >= 400:
                raise DemoError(f"{method} {path} answered {status}: {response.text[:500]}")
            try:
                return response.json()
            except ValueError:
                raise DemoError(f"{method} {path} answered {status} with no JSON body") from None
        time.sleep(0.5 * attempt)
    raise AssertionError("unreachable: the last attempt returns or raises")


@dataclass(frozen=True)
class Item:
    """One simulated candidate: its inputs, the writer's label, the label careful annotators would
    give (None: not a real example, flagged), and the writer's rationale."""

    inputs: dict[str, str]
    label: str
    truth: str | None
    rationale: str | None = None


def sentiment_items() -> list[Item]:
    return [Item({"text": text}, label, truth) for text, label, truth in SENTIMENT]


def nli_items() -> list[Item]:
    return [
        Item({"premise": premise, "hypothesis": hypothesis}, label, truth, rationale)
        for premise, hypothesis, label, truth, rationale in NLI
    ]


def digit_items() -> list[Item]:
    """The drawings as a writers' page sends them: a 28x28 grey PNG as a data URL."""
    return [
        Item({"image": data_url(png_bytes(draw_digit(drawn, random.Random(4000 + i))))}, label, truth)
        for i, (drawn, label, truth) in enumerate(DIGITS)
    ]


def run_round(
    api: httpx.Client,
    *,
    task: str,
    name: str,
    items: list[Item],
    lead: str,
    writers: dict[str, str],
    collector: str,
    server: LabelStudioServer,
    annotators: list[Any],
    rng: random.Random,
    model: str | None = None,
    existing: int | None = None,
) -> dict[str, Any]:
    """One round of ``task`` (pinned on the ``model`` folder, else the task's default model; or the
    ``existing`` open round, one a retraining policy opened): writers submit ``items``, annotators
    vote in Label Studio, the disagreements get a third and fourth vote; returns the round's summary."""

    def call(method: str, path: str, token: str, *, repeatable: bool | None = None, **kwargs: Any) -> Any:
        """One API call; ``repeatable``: sending it twice changes nothing (default: GET only)."""
        repeatable = method == "GET" if repeatable is None else repeatable
        return _call(api, method, path, token, repeatable=repeatable, **kwargs)

    if existing is not None:
        round_body = call("GET", f"/api/rounds/{existing}", lead)
    else:
        created: dict[str, Any] = {"name": name, "task": task}
        if model is not None:
            created["model"] = model
        round_body = call("POST", "/api/rounds", lead, json=created)
    round_id = round_body["id"]
    # The annotators answer in the task type's own controls (the harness writes Label Studio's result).
    task_type = LabelConfigCatalog(REPO_ROOT / "label_config").get(task)

    def submit(numbered: tuple[int, Item]) -> dict[str, Any]:
        index, item = numbered
        body: dict[str, Any] = {"inputs": item.inputs, "writer_label": item.label}
        if item.rationale is not None:
            body["rationale"] = item.rationale
        if index % 5 == 4:  # the collector names the writer; a writer's own token names them
            token = collector
            body["writer_id"] = COLLECTED_WRITER
        else:
            token = writers[WRITERS[index % len(WRITERS)]]
        result: dict[str, Any] = call("POST", f"/api/rounds/{round_id}/candidates", token, json=body)
        return result

    with ThreadPoolExecutor(max_workers=8) as pool:  # several writers at once: micro-batched
        submitted = list(pool.map(submit, enumerate(items)))
    fooled = [c for c in submitted if c["fooled"]]
    truth = {c["id"]: item.truth for c, item in zip(submitted, items, strict=True)}

    def candidate(cid: str) -> dict[str, Any]:
        result: dict[str, Any] = call("GET", f"/api/candidates/{cid}", lead)
        return result

    _wait(
        "the pushes to Label Studio", lambda: all(candidate(c["id"])["label_studio_task_id"] for c in fooled)
    )

    def vote(cid: str, who: int) -> None:
        task_id = candidate(cid)["label_studio_task_id"]
        right = truth[cid]
        if right is None:
            server.annotate(
                task_id, annotators[who].id, None, flag_reason="spam, not a real example", task_type=task_type
            )
            return
        if rng.random() < ANNOTATOR_ACCURACY[who]:
            label = right
        else:
            label = rng.choice([lab for lab in round_body["labels"] if lab != right])
        lead_time_s = round(rng.uniform(3, 30), 1)
        server.annotate(task_id, annotators[who].id, label, lead_time_s=lead_time_s, task_type=task_type)

    def read_back() -> None:
        """Wait until the service has read every task a webhook named back from Label Studio."""
        _wait(
            "the votes read back from Label Studio",
            lambda: call("GET", f"/api/rounds/{round_id}", lead)["verification"]["tasks_waiting"] == 0,
        )

    for c in fooled:
        vote(c["id"], 0)
        vote(c["id"], 1)
    ever_escalated: set[str] = set()
    for who in (2, 3):
        read_back()
        waiting = [c["id"] for c in fooled if candidate(c["id"])["status"] in ("escalated", "in_validation")]
        ever_escalated.update(cid for cid in waiting if candidate(cid)["status"] == "escalated")
        time.sleep(2)  # let the task queue raise the tasks' overlap in Label Studio
        for cid in waiting:
            vote(cid, who)
    call("POST", f"/api/rounds/{round_id}/sync", lead, repeatable=True)  # a reconcile: idempotent
    summary: dict[str, Any] = call("GET", f"/api/rounds/{round_id}", lead)
    for c in fooled:
        if any(h["outcome"] == "escalated" for h in candidate(c["id"])["history"]):
            ever_escalated.add(c["id"])
    summary["ever_escalated"] = len(ever_escalated)
    return summary


def run_rounds(
    service_url: str, lead: str, writers: dict[str, str], collector: str, server: LabelStudioServer
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A sentiment round, a short NLI round and a round of drawn digits, with the same four
    annotators: the summaries and the annotators."""
    annotators = server.create_annotators(4)
    rng = random.Random(7)
    # The pool drops a connection idle for 5 s, well before the service's keep-alive (120 s,
    # service/gunicorn.conf.py) ends it: the demo never reuses a connection the server is closing.
    api = httpx.Client(
        base_url=service_url, timeout=60, limits=httpx.Limits(keepalive_expiry=CLIENT_KEEPALIVE_S)
    )
    summaries = []
    for task, name, items in (
        ("sentiment", "demo round 1 (sentiment)", sentiment_items()),
        ("nli", "demo round 2 (NLI)", nli_items()),
        ("digits", "demo round 3 (drawn digits)", digit_items()),
    ):
        print(f"running a simulated {task} round ...", flush=True)
        summaries.append(
            run_round(api, task=task, name=name, items=items, lead=lead, writers=writers, collector=collector,
                      server=server, annotators=annotators, rng=rng)
        )  # fmt: skip
    return summaries, [{"email": a.email, "id": a.id} for a in annotators]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/demo", description=__doc__)
    parser.add_argument("--exit", action="store_true", help="stop both servers after the round")
    parser.add_argument("--port", type=int, default=8000, help="the service's port (default 8000, else free)")
    parser.add_argument("--label-studio-port", type=int, default=8080)
    parser.add_argument(
        "--models", type=Path, default=MODELS_DIR,
        help="the folder of the default models, sentiment-default, nli-default and digits-default "
        "(built by scripts/demo)",
    )  # fmt: skip
    parser.add_argument(
        "--work-dir", type=Path, default=REPO_ROOT / ".dynaval" / "demo",
        help="the demo's folder: database, Label Studio, the service's data, exports (emptied first)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    demo_dir = args.work_dir.resolve()
    return guarded("demo", demo_dir, lambda: run_demo(args, demo_dir))


def guarded(prefix: str, demo_dir: Path, run: Callable[[], int]) -> int:
    """Run a demo; a user sees one line, never a traceback: what failed, and where the details are."""
    try:
        return run()
    except (DemoError, LabelStudioServerError) as exc:  # their messages say what to do
        print(f"{prefix}: {exc}", file=sys.stderr)
    except httpx.RequestError as exc:
        print(f"{prefix}: {_describe(exc)}", file=sys.stderr)
    except KeyboardInterrupt:  # a second Ctrl-C while the servers stop
        print(f"{prefix}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        where = _write_traceback(demo_dir)
        print(f"{prefix}: {_describe(exc)}{where}", file=sys.stderr)
    return 1


def _describe(exc: Exception) -> str:
    if isinstance(exc, httpx.RequestError):
        return f"{exc.request.method} {exc.request.url} failed: {type(exc).__name__}: {exc}"
    return f"{type(exc).__name__}: {exc}"


def _write_traceback(demo_dir: Path) -> str:
    """Write the traceback being handled to the demo's folder; the text naming it, or ""."""
    path = demo_dir / "error.log"
    try:
        path.write_text(traceback.format_exc(), encoding="utf-8")
    except OSError:
        return ""
    return f" (details: {path})"


def run_demo(args: argparse.Namespace, demo_dir: Path) -> int:
    try:
        with servers_up(demo_dir, args.models.resolve(), args.port, args.label_studio_port) as up:
            summaries, annotators = run_rounds(up.service.url, up.lead, up.writers, up.collector, up.server)
            for summary in summaries:
                print_summary(summary, export_round(up.env, summary["id"], demo_dir))
            for summary in summaries:
                freeze_round(up.service.url, up.lead, summary["id"])
                print_release(release_round(up.env, summary, demo_dir))
            print_access(up.service.url, up.server, annotators, up.tokens)
            if not args.exit:
                keep_running()
    except KeyboardInterrupt:
        pass
    return 0


@dataclass(frozen=True)
class Tokens:
    """A fresh token for every role of the demo (each writer has one of their own)."""

    lead: str
    collector: str
    exporter: str
    reporter: str
    writers: dict[str, str]

    @classmethod
    def fresh(cls) -> Tokens:
        def new() -> str:
            return secrets.token_urlsafe(24)

        return cls(new(), new(), new(), new(), {name: new() for name in WRITERS})


@dataclass(frozen=True)
class Running:
    """The demo's servers, up, and the environment and tokens they were started with."""

    env: dict[str, str]
    server: LabelStudioServer
    service: Service
    tokens: Tokens

    @property
    def lead(self) -> str:
        return self.tokens.lead

    @property
    def collector(self) -> str:
        return self.tokens.collector

    @property
    def writers(self) -> dict[str, str]:
        return self.tokens.writers


@contextmanager
def servers_up(demo_dir: Path, models_dir: Path, port: int, label_studio_port: int) -> Iterator[Running]:
    """Empty ``demo_dir``, make fresh tokens, start Label Studio and the service (on the preferred
    ports, else free ones); both are stopped on the way out, whatever happened. Everything the
    demo's service writes (its database, releases, task queue) lies in ``demo_dir``, so a second
    run starts as clean as the first; only the default models in ``models_dir`` are kept."""
    shutil.rmtree(demo_dir, ignore_errors=True)  # every demo starts from a clean round
    demo_dir.mkdir(parents=True)
    tokens = Tokens.fresh()
    service_port = _pick_port(port)
    env = demo_env(demo_dir, models_dir, service_port, tokens)
    server = LabelStudioServer(data_dir=demo_dir / "label-studio", port=_pick_port(label_studio_port))
    service: Service | None = None
    try:
        print("starting Label Studio ...", flush=True)
        server.start()
        env["DYNAVAL_LABEL_STUDIO_URL"] = server.url
        env["DYNAVAL_LABEL_STUDIO_API_KEY"] = server.api_key
        print("starting the dynaval service ...", flush=True)
        service = Service(env, service_port, demo_dir / "service.log")
        service.wait_healthy()
        yield Running(env, server, service, tokens)
    finally:
        _stop("the dynaval service", service.stop if service is not None else None)
        _stop("Label Studio", server.stop)


def demo_env(demo_dir: Path, models_dir: Path, service_port: int, tokens: Tokens) -> dict[str, str]:
    """The service's and the command line's environment: the demo's own data folder and database,
    the default models built once, and a fresh token or secret for everything."""
    return {
        **os.environ,
        "DYNAVAL_DATA_DIR": str(demo_dir / "data"),
        "DYNAVAL_DEFAULT_MODEL_DIR": str(models_dir / "sentiment-default"),  # nli-default beside it
        "DYNAVAL_DATABASE_URL": f"sqlite:///{demo_dir / 'dynaval.sqlite3'}",
        "DYNAVAL_LEAD_TOKENS": tokens.lead,
        "DYNAVAL_WRITER_TOKENS": ",".join(f"{name}={token}" for name, token in tokens.writers.items()),
        "DYNAVAL_COLLECTOR_TOKENS": f"{COLLECTOR}={tokens.collector}",
        "DYNAVAL_EXPORTER_TOKENS": f"{EXPORTER}={tokens.exporter}",
        "DYNAVAL_REPORTER_TOKENS": f"{REPORTER}={tokens.reporter}",
        "DYNAVAL_WEBHOOK_SECRET": secrets.token_urlsafe(24),
        "DYNAVAL_PSEUDONYM_SECRET": secrets.token_urlsafe(24),
        "DYNAVAL_SIGNING_SECRET": secrets.token_urlsafe(24),
        "DYNAVAL_PUBLIC_URL": f"http://127.0.0.1:{service_port}",
        "HF_HUB_OFFLINE": "1",
    }


def keep_running() -> None:
    """Keep both servers up until Ctrl-C (or SIGTERM)."""
    print("\nBoth servers keep running; press Ctrl-C to stop them.", flush=True)
    # Explicit handlers: a shell starting us in the background would leave SIGINT ignored.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    while True:
        time.sleep(3600)


def _stop(what: str, stop: Callable[[], None] | None) -> None:
    """Stop one server; a failure to stop is one line, and does not hide why the demo ended."""
    if stop is None:
        return
    try:
        stop()
    except Exception as exc:
        print(f"demo: stopping {what} failed: {_describe(exc)}", file=sys.stderr)


def export_round(env: dict[str, str], round_id: int, demo_dir: Path) -> Path:
    """``dynaval export`` of the round into the demo's folder; the file's path."""
    out = demo_dir / f"round-{round_id}.jsonl"
    exported = _cli(env, "export", "--round", str(round_id), "--format", "jsonl", "--out", str(out))
    if exported.returncode != 0:
        raise DemoError(f"export failed: {exported.stderr.strip()}")
    return out


def freeze_round(service_url: str, lead: str, round_id: int) -> None:
    """Close the round and freeze it: its decisions become final. A candidate still waiting for
    votes (an annotator who never came back) ends as unvalidated, with the reason logged."""
    with httpx.Client(base_url=service_url, timeout=60) as api:
        state = _call(api, "GET", f"/api/rounds/{round_id}", lead, repeatable=True)["state"]
        if state == "open":
            _call(api, "POST", f"/api/rounds/{round_id}/close", lead, repeatable=False)
        _call(
            api,
            "POST",
            f"/api/rounds/{round_id}/freeze",
            lead,
            repeatable=False,
            json={"force": True, "reason": "the demo's round is over"},
        )


def _cli(env: dict[str, str], *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dynaval.entrypoints.cli", *command],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def release_round(env: dict[str, str], summary: dict[str, Any], demo_dir: Path) -> tuple[Path, str]:
    """Release ``1.0.0`` of the frozen round (``dynaval release create``), then check the copy with
    ``dynaval release verify``; the release's folder and what the build printed."""
    out = demo_dir / f"release-{summary['task']}-1.0.0"
    made = _cli(env, "release", "create", "--rounds", str(summary["id"]), "--version", "1.0.0",
                "--out", str(out), "--license", "cc-by-4.0")  # fmt: skip
    if made.returncode != 0:
        raise DemoError(f"release failed: {made.stderr.strip()}")
    verified = _cli(env, "release", "verify", str(out))
    if verified.returncode != 0:
        raise DemoError(f"release verify failed: {verified.stdout.strip()} {verified.stderr.strip()}")
    return out, made.stdout


def print_release(made: tuple[Path, str]) -> None:
    out, printed = made
    print(f"\n=== {out.name} ===")
    for line in printed.splitlines():
        if not line.startswith("release: "):
            print(line)
    print("verified: every check passed (dynaval release verify)")
    print(f"release: {out}")


def print_summary(summary: dict[str, Any], out: Path) -> None:
    counts = summary["counts"]
    by_status = counts["by_status"]
    agreement = summary["agreement"]
    alpha = agreement["alpha"]
    alpha_text = f"{alpha:.3f}" if alpha is not None else f"undefined ({agreement['undefined_reason']})"
    print(f"\n=== round {summary['id']}: {summary['name']} ===")
    rows = [
        ("candidates", counts["collected"]),
        ("fooled the model", counts["fooled"]),
        ("accepted", by_status.get("accepted", 0)),
        ("rejected", by_status.get("rejected", 0)),
        ("escalated (needed a third vote)", summary["ever_escalated"]),
        ("flagged for a lead", by_status.get("flagged", 0)),
        ("still in validation", counts["still_in_validation"]),
        ("MER / VMER", f"{summary['mer']:.2f} / {summary['vmer']:.2f}"),
        ("round alpha (nominal)", alpha_text),
    ]
    for name, value in rows:
        print(f"  {name:<34} {value}")
    print(f"\nround dataset: {out}")


def print_access(
    service_url: str, server: LabelStudioServer, annotators: list[dict[str, Any]], tokens: Tokens
) -> None:
    print("\n=== running ===")
    print(f"  dynaval service   {service_url}   (API: {service_url}/openapi.json)")
    print(f"    dashboard       {service_url}/dashboard   (sign in with the lead token)")
    print(f"    writer page     {service_url}/write   (sign in with a writer token)")
    print("                    (pick the digits round to draw a digit and watch the model guess)")
    print(f"  Label Studio      {server.url}")
    print(f"    admin           {server.admin_email} / {server.admin_password}")
    for annotator in annotators:
        print(f"    annotator       {annotator['email']} / {DEFAULT_ANNOTATOR_PASSWORD}")
    # Scripts read these: one credential a line, single spaces, the token last.
    print("\n=== tokens ===")
    print(f"lead token {tokens.lead}")
    for name, token in tokens.writers.items():
        print(f"writer token {name} {token}")
    print(f"collector token {tokens.collector}")
    print(f"exporter token {tokens.exporter}")
    print(f"reporter token {tokens.reporter}")


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
