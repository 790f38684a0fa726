"""A webhook proxy that loses deliveries on purpose, or records them for a later replay.

Label Studio sends each webhook once, synchronously inside the annotation request, and forgets it
when the receiver fails. Put :class:`WebhookProxy` between Label Studio and the service (register
the round's webhook at ``proxy.url``) and it:

- forwards each delivery to ``target`` and relays the answer, except for a seeded random share
  (``drop_rate``) that it refuses, half by closing the connection without an answer, half with a
  503 (``target`` given);
- or only records each delivery and answers 200 (``target=None``), for a replay in any order.

Every delivery is kept (body, the headers worth replaying, what happened to it), in arrival order.
Label Studio delivers one at a time, in the order of the annotation requests, so with a fixed
seed the same requests lose the same webhooks.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import requests

if TYPE_CHECKING:
    from tests.support.label_studio_server import LabelStudioServer

HOST = "127.0.0.1"
# What a replay must send again; the rest (Host, Content-Length, ...) belongs to one connection.
_REPLAYED_HEADERS = ("content-type", "x-dynaval-webhook-secret")

FORWARDED = "forwarded"
RECORDED = "recorded"
CLOSED = "closed"  # refused: connection closed without an answer
REFUSED_503 = "503"  # refused: answered 503
DROPPED = frozenset({CLOSED, REFUSED_503})


@dataclass(frozen=True)
class Delivery:
    """One webhook as the proxy received it, and what it did with it."""

    index: int
    body: bytes
    headers: Mapping[str, str]
    fate: str
    status: int | None = None
    """The target's answer when forwarded (None otherwise, or when the target could not be reached)."""

    @property
    def payload(self) -> dict[str, Any]:
        value = json.loads(self.body)
        assert isinstance(value, dict)
        return value

    @property
    def action(self) -> str:
        return str(self.payload.get("action"))

    @property
    def dropped(self) -> bool:
        return self.fate in DROPPED


class WebhookProxy:
    """A ThreadingHTTPServer on 127.0.0.1 (``url``): forward with seeded faults, or record."""

    def __init__(self, *, target: str | None, drop_rate: float = 0.0, seed: int = 0) -> None:
        if not 0.0 <= drop_rate <= 1.0:
            raise ValueError("drop_rate must be between 0 and 1")
        if target is None and drop_rate:
            raise ValueError("a recording proxy (no target) drops nothing")
        self.target = target
        self.drop_rate = drop_rate
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._deliveries: list[Delivery] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the proxy is not started")
        return f"http://{HOST}:{self._server.server_address[1]}"

    def start(self) -> Self:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                proxy._handle(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="webhook-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ what it saw

    @property
    def deliveries(self) -> list[Delivery]:
        """Every delivery so far, in arrival order."""
        with self._lock:
            return list(self._deliveries)

    def count(self, *fates: str) -> int:
        return sum(1 for d in self.deliveries if d.fate in fates)

    # ------------------------------------------------------------------ internals

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length)
        headers = {k: v for k, v in handler.headers.items() if k.lower() in _REPLAYED_HEADERS}
        with self._lock:
            # One draw per delivery, in arrival order: the seed decides which deliveries are lost.
            index = len(self._deliveries)
            if self.target is None:
                fate = RECORDED
            elif self._rng.random() < self.drop_rate:
                fate = self._rng.choice((CLOSED, REFUSED_503))
            else:
                fate = FORWARDED
            # Reserve the slot now so that arrival order is kept even while forwarding.
            self._deliveries.append(Delivery(index=index, body=body, headers=headers, fate=fate))
        if fate == CLOSED:
            handler.close_connection = True  # no answer at all: the sender sees the connection drop
            return
        if fate == REFUSED_503:
            _answer(handler, 503, b'{"error": "dropped by the fault-injecting proxy"}')
            return
        if fate == RECORDED:
            _answer(handler, 200, b"{}")
            return
        assert self.target is not None
        try:
            response = requests.post(self.target, data=body, headers=headers, timeout=30)
        except requests.RequestException:
            with self._lock:
                self._deliveries[index] = Delivery(index=index, body=body, headers=headers, fate=fate)
            _answer(handler, 502, b'{"error": "the proxy could not reach the service"}')
            return
        with self._lock:
            self._deliveries[index] = Delivery(
                index=index, body=body, headers=headers, fate=fate, status=response.status_code
            )
        _answer(handler, response.status_code, response.content)


def _answer(handler: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def replay(url: str, deliveries: Iterable[Delivery], *, timeout_s: float = 30.0) -> list[int]:
    """POST each delivery's body again, one after the other, with its headers; return the statuses."""
    statuses = []
    with requests.Session() as session:
        for delivery in deliveries:
            response = session.post(
                url, data=delivery.body, headers=dict(delivery.headers), timeout=timeout_s
            )
            statuses.append(response.status_code)
    return statuses


def capture_payloads(
    server: LabelStudioServer, annotator_id: int, *, timeout_s: float = 15.0
) -> dict[str, dict[str, Any]]:
    """One real payload of ANNOTATION_CREATED and of ANNOTATION_UPDATED, as Label Studio sends them.

    A throwaway project of the sentiment config gets a webhook to a recording proxy, one task, and
    one annotation that is then changed; the round under test is left alone.
    """
    with WebhookProxy(target=None) as recorder:
        ls = server.client
        project = ls.projects.create(
            title="fault tests: payload capture",
            label_config=server.task_type.label_config,
            maximum_annotations=2,
            show_overlap_first=True,
            overlap_cohort_percentage=100,
        )
        assert project.id is not None
        ls.webhooks.create(
            url=recorder.url + "/hook",
            project=project.id,
            send_payload=True,
            send_for_all_actions=False,
            actions=["ANNOTATION_CREATED", "ANNOTATION_UPDATED"],
        )
        imported = ls.projects.import_tasks(
            id=project.id,
            request=[{"candidate_id": "capture", "text": "The staff were lovely and the room was clean."}],
            return_task_ids=True,
        )
        task_id = int((imported.task_ids or [])[0])
        annotation_id = server.annotate(task_id, annotator_id, "positive", lead_time_s=7.25)
        server.update_annotation(annotation_id, "negative")
        deadline = time.monotonic() + timeout_s
        by_action: dict[str, dict[str, Any]] = {}
        while len(by_action) < 2 and time.monotonic() < deadline:
            for delivery in recorder.deliveries:
                by_action.setdefault(delivery.action, delivery.payload)
            time.sleep(0.05)
    missing = {"ANNOTATION_CREATED", "ANNOTATION_UPDATED"} - set(by_action)
    if missing:
        raise RuntimeError(f"Label Studio sent no {', '.join(sorted(missing))} webhook to the recorder")
    return by_action
