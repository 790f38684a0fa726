"""Slow clients against the deployed service: gunicorn with service/gunicorn.conf.py, default threads.

A client that sends its request head, or a declared 60 KB body, a piece at a time used to hold one
of the worker's 16 threads for as long as it kept trickling: 16 of them stopped the service. Here
more slow connections than the worker has threads stay open while ordinary requests (a probe, the
API, Label Studio's webhook) are answered at once, and the server closes every slow connection,
with a 408, once its request is overdue (``DYNAVAL_RECEIVE_TIMEOUT_S``, a few seconds here).

Every connection and thread here is bounded in time, and the service binds to 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import requests

from dynaval.entrypoints.serving import CHUNKED_PAST_LIMIT_BYTES
from tests.fixtures.service import WEBHOOK_SECRET, WRITER_TOKEN, deployed_environment, free_port
from tests.support.gunicorn_service import HOST, REPO_ROOT, GunicornService

RECEIVE_TIMEOUT_S = 6.0
PIECE_EVERY_S = 0.5
DECLARED_BODY = 60 * 1024
BODY_LIMIT = 64 * 1024  # DYNAVAL_MAX_BODY_BYTES here: the slow bodies fit it, the large ones do not
HOOK = {"action": "PROJECT_UPDATED", "project": {"id": 1}}


def default_threads() -> int:
    """The thread count service/gunicorn.conf.py gives a worker when DYNAVAL_THREADS is unset."""
    saved = os.environ.pop("DYNAVAL_THREADS", None)
    try:
        return int(runpy.run_path(str(REPO_ROOT / "service" / "gunicorn.conf.py"))["threads"])
    finally:
        if saved is not None:
            os.environ["DYNAVAL_THREADS"] = saved


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GunicornService]:
    folder = tmp_path_factory.mktemp("slow-clients")
    port = free_port()
    # One worker, its default thread count: what a slow client used to exhaust.
    env = deployed_environment(
        folder,
        port,
        DYNAVAL_RECEIVE_TIMEOUT_S=str(RECEIVE_TIMEOUT_S),
        DYNAVAL_RATE_LIMIT="",
        DYNAVAL_ANONYMOUS_RATE_LIMIT="",
        DYNAVAL_MAX_BODY_BYTES=str(BODY_LIMIT),
    )
    with GunicornService(env, port, folder / "gunicorn.log") as running:
        yield running


# ------------------------------------------------------------------------------ raw HTTP helpers


def connect(service: GunicornService) -> socket.socket:
    sock = socket.create_connection((HOST, int(service.url.rsplit(":", 1)[1])), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, object]:
        value: dict[str, object] = json.loads(self.body)
        return value


def read_answer(sock: socket.socket, pending: bytearray | None = None) -> Answer:
    """One HTTP response (interim 1xx ones skipped) from ``sock``; what follows stays in ``pending``."""
    buffer = pending if pending is not None else bytearray()
    while True:
        while b"\r\n\r\n" not in buffer:
            data = sock.recv(65536)
            assert data, f"the connection closed before an answer: {bytes(buffer)!r}"
            buffer += data
        head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(rest) < length:
            data = sock.recv(65536)
            assert data, "the connection closed in the middle of an answer"
            rest += data
        buffer[:] = rest[length:]
        if status >= 200:
            return Answer(status, headers, rest[:length])


def read_to_end(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (or resets it)."""
    out = bytearray()
    with contextlib.suppress(ConnectionResetError):
        while data := sock.recv(65536):
            out += data
    return bytes(out)


def assert_error(answer: Answer, status: int, code: str, field: str | None) -> None:
    assert answer.status == status, answer
    error = answer.json()["error"]
    assert isinstance(error, dict) and set(error) == {"code", "message", "field"}, error
    assert (error["code"], error["field"]) == (code, field), error
    assert answer.headers.get("connection") == "close", answer.headers


# ---------------------------------------------------------------------------------- slow clients


@dataclass
class SlowClient:
    """A connection that sends its request a piece every ``PIECE_EVERY_S``, never finishing it."""

    sock: socket.socket
    opened: float
    piece: bytes
    received: bytes = b""
    closed_after_s: float | None = None
    reader: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:  # until the server closes the connection (the socket's timeout bounds it)
        with contextlib.suppress(OSError):
            self.received = read_to_end(self.sock)
        self.closed_after_s = time.monotonic() - self.opened

    @property
    def open(self) -> bool:
        return self.reader.is_alive()


def open_slow_clients(service: GunicornService, count: int) -> list[SlowClient]:
    clients = []
    for i in range(count):
        sock = connect(service)
        sock.settimeout(RECEIVE_TIMEOUT_S + 15)
        opened = time.monotonic()
        if i % 2:  # a head that never ends
            sock.sendall(b"GET /api/rounds HTTP/1.1\r\nHost: dynaval\r\n")
            piece = b"X-Slow: a\r\n"
        else:  # a complete head declaring a 60 KB body, then the body a little at a time
            sock.sendall(
                b"POST /api/rounds/1/candidates HTTP/1.1\r\nHost: dynaval\r\n"
                b"Authorization: Bearer " + WRITER_TOKEN.encode() + b"\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % DECLARED_BODY
            )
            piece = b"a" * 100
        clients.append(SlowClient(sock, opened, piece))
    return clients


def keep_trickling(clients: list[SlowClient], stop: threading.Event) -> None:
    """A piece to every open slow connection every PIECE_EVERY_S, until ``stop`` or a hard limit."""
    give_up = time.monotonic() + RECEIVE_TIMEOUT_S + 20
    while not stop.is_set() and time.monotonic() < give_up:
        for client in clients:
            if client.open:
                with contextlib.suppress(OSError):  # the server closed it meanwhile
                    client.sock.send(client.piece)
        stop.wait(PIECE_EVERY_S)


def test_more_slow_clients_than_threads_hold_no_thread_and_are_closed_at_the_deadline(
    service: GunicornService,
) -> None:
    threads = default_threads()
    assert threads == 16  # the documented default
    clients = open_slow_clients(service, threads + 8)
    stop = threading.Event()
    trickler = threading.Thread(target=keep_trickling, args=(clients, stop), daemon=True)
    trickler.start()
    try:
        time.sleep(2 * PIECE_EVERY_S)  # every slow client has sent a few pieces by now
        first_deadline = min(c.opened for c in clients) + RECEIVE_TIMEOUT_S
        http = requests.Session()
        writer = {"Authorization": f"Bearer {WRITER_TOKEN}"}
        hook = {"X-Dynaval-Webhook-Secret": WEBHOOK_SECRET}
        answers = []
        for _ in range(3):
            answers.append(http.get(service.url + "/health", timeout=RECEIVE_TIMEOUT_S))
            answers.append(http.get(service.url + "/api/rounds", headers=writer, timeout=RECEIVE_TIMEOUT_S))
            answers.append(
                http.post(
                    service.url + "/webhooks/label-studio", json=HOOK, headers=hook, timeout=RECEIVE_TIMEOUT_S
                )
            )
            # A new connection each time as well, not only the session's kept-alive one.
            answers.append(requests.get(service.url + "/health", timeout=RECEIVE_TIMEOUT_S))
        answered_at = time.monotonic()
        assert [a.status_code for a in answers] == [200] * len(answers), [a.text for a in answers]
        # All answered while every slow connection was still open and trickling.
        late_s = answered_at - first_deadline
        assert late_s < 0, f"answered {late_s:.1f} s after the first slow request was due"
        assert all(c.open for c in clients), [c.closed_after_s for c in clients]

        for client in clients:
            client.reader.join(timeout=RECEIVE_TIMEOUT_S + 15)
    finally:
        stop.set()
        trickler.join(timeout=5)
        for client in clients:
            client.sock.close()
    for client in clients:
        # Closed by the server, after the deadline (its main loop looks once a second), with a 408.
        assert client.closed_after_s is not None, "still open"
        closed_s = client.closed_after_s
        assert RECEIVE_TIMEOUT_S - 0.5 <= closed_s <= RECEIVE_TIMEOUT_S + 5, closed_s
        head, _, body = client.received.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 "), client.received
        error = json.loads(body)["error"]
        assert error["code"] == "request_timeout" and str(int(RECEIVE_TIMEOUT_S)) in error["message"], error
        assert error["field"] == ("body" if client.piece.startswith(b"a") else None), error
    # The service still answers, and logged one line per slow connection closed.
    assert requests.get(service.url + "/health", timeout=5).status_code == 200
    assert service.log_tail(200).count("its request was not received within") >= len(clients)


def test_a_request_sent_slowly_but_within_the_deadline_is_answered(service: GunicornService) -> None:
    body = json.dumps(HOOK).encode()
    request = (
        b"POST /webhooks/label-studio HTTP/1.1\r\nHost: dynaval\r\nContent-Type: application/json\r\n"
        b"X-Dynaval-Webhook-Secret: " + WEBHOOK_SECRET.encode() + b"\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body) + body
    )
    with connect(service) as sock:
        for at in range(0, len(request), len(request) // 4 + 1):
            sock.sendall(request[at : at + len(request) // 4 + 1])
            time.sleep(0.3)
        answer = read_answer(sock)
    assert answer.status == 200, answer


def test_kept_alive_pipelined_chunked_and_expect_continue_requests_are_served(
    service: GunicornService,
) -> None:
    health = b"GET /health HTTP/1.1\r\nHost: dynaval\r\n\r\n"
    hook = json.dumps(HOOK).encode()
    hook_head = (
        b"POST /webhooks/label-studio HTTP/1.1\r\nHost: dynaval\r\nContent-Type: application/json\r\n"
        b"X-Dynaval-Webhook-Secret: " + WEBHOOK_SECRET.encode() + b"\r\n"
    )
    with connect(service) as sock:
        pending = bytearray()
        for _ in range(3):  # one connection, kept alive
            sock.sendall(health)
            assert read_answer(sock, pending).status == 200
        # Two requests in one write, and one cut in the middle of its head.
        sock.sendall(health + health + health[:10])
        assert read_answer(sock, pending).status == 200
        assert read_answer(sock, pending).status == 200
        time.sleep(0.3)
        sock.sendall(health[10:])
        assert read_answer(sock, pending).status == 200
        # A chunked body, in pieces.
        sock.sendall(hook_head + b"Transfer-Encoding: chunked\r\n\r\n5\r\n" + hook[:5] + b"\r\n")
        time.sleep(0.3)
        sock.sendall(b"%x\r\n" % (len(hook) - 5) + hook[5:] + b"\r\n0\r\n\r\n")
        answer = read_answer(sock, pending)
        assert answer.status == 200, answer
        # Expect: 100-continue: the body goes only after the interim answer.
        sock.sendall(hook_head + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(hook))
        interim = bytearray()
        while b"\r\n\r\n" not in interim:
            interim += sock.recv(1024)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), interim
        pending[:] = interim[len(b"HTTP/1.1 100 Continue\r\n\r\n") :]
        sock.sendall(hook)
        answer = read_answer(sock, pending)
        assert answer.status == 200, answer
        assert b"100 Continue" not in answer.body and not pending  # one interim answer, not two
        sock.sendall(health)
        assert read_answer(sock, pending).status == 200


def test_a_head_or_body_over_the_limit_is_refused_and_the_connection_closed(service: GunicornService) -> None:
    with connect(service) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: dynaval\r\nX-Big: " + b"a" * (70 * 1024) + b"\r\n\r\n")
        answer = read_answer(sock)
        assert_error(answer, 431, "too_large", "headers")
        assert read_to_end(sock) == b""
    limit = BODY_LIMIT
    post = (
        b"POST /api/rounds/1/candidates HTTP/1.1\r\nHost: dynaval\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + WRITER_TOKEN.encode() + b"\r\n"
    )
    with connect(service) as sock:  # declared too large: refused from the header, nothing waited for
        sock.sendall(post + b"Content-Length: %d\r\n\r\n" % (limit * 4) + b"a" * 1000)
        assert_error(read_answer(sock), 413, "too_large", "body")
        assert read_to_end(sock) == b""
    with connect(service) as sock:  # chunked, too large, and the rest never sent
        past = limit + CHUNKED_PAST_LIMIT_BYTES + 1
        sock.sendall(post + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % (past * 2) + b"a" * past)
        assert_error(read_answer(sock), 413, "too_large", "body")
        assert read_to_end(sock) == b""
