"""What a hostile pass found in the deployed service (gunicorn with service/gunicorn.conf.py), and
that it holds now.

- Requests without a valid credential (no token, made-up tokens) count against their address in a
  stricter bucket of their own: a flood of them no longer spends a signed-in lead's budget, nor a
  writer's, though all come from 127.0.0.1. A lead's dashboard session counts against the lead.
- Behind ``DYNAVAL_TRUSTED_PROXIES`` proxies, the client address is the one they forwarded; without
  it, ``X-Forwarded-For`` buys no fresh budget.
- Every answer the server gives is the API's JSON error with the security headers: gunicorn's own
  400 and 414 (they were HTML pages), the worker's 408 and 431 (they had no security headers).
- A 9 KB header is taken (the head limit is 64 KiB in all, as documented), and a full batch of the
  longest texts fits the body limit.

Every connection here is bounded in time, and the service binds to 127.0.0.1.
"""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from dynaval.entrypoints.headers import DATA_HEADERS
from dynaval.settings import Settings
from tests.e2e.test_slow_clients import Answer, connect, read_answer, read_to_end
from tests.fixtures.service import LEAD_TOKEN, WRITER_TOKEN, deployed_environment, free_port
from tests.support.gunicorn_service import GunicornService

KNOWN_LIMIT = 30
ANONYMOUS_LIMIT = 10


def start(folder: Path, **overrides: str) -> GunicornService:
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = deployed_environment(
        folder,
        port,
        DYNAVAL_RATE_LIMIT=f"{KNOWN_LIMIT}/minute",
        DYNAVAL_ANONYMOUS_RATE_LIMIT=f"{ANONYMOUS_LIMIT}/minute",
        DYNAVAL_RECEIVE_TIMEOUT_S="3",
        **overrides,
    )
    return GunicornService(env, port, folder / "gunicorn.log").start()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[GunicornService]:
    running = start(tmp_path)
    try:
        yield running
    finally:
        running.stop()


def call(service: GunicornService, path: str, token: str | None = None, **headers: str) -> requests.Response:
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return requests.get(service.url + path, headers=headers, timeout=10, allow_redirects=False)


def signed_in(service: GunicornService) -> requests.Session:
    """A browser's session signed in to the dashboard with the lead token (two anonymous requests:
    the login form and its post)."""
    browser = requests.Session()
    form = browser.get(service.url + "/dashboard/login", timeout=10)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    assert csrf is not None, form.text
    posted = browser.post(
        service.url + "/dashboard/login",
        data={"token": LEAD_TOKEN, "csrf_token": html.unescape(csrf[1])},
        timeout=10,
        allow_redirects=False,
    )
    assert posted.status_code == 303, posted.text
    return browser


def assert_rate_limited(answer: requests.Response, whom: str) -> None:
    assert answer.status_code == 429, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["field"]) == ("rate_limited", "Authorization"), error
    assert whom in error["message"], error
    assert 1 <= int(answer.headers["Retry-After"]) <= 60


def test_anonymous_traffic_never_spends_a_signed_in_leads_or_a_writers_budget(
    service: GunicornService,
) -> None:
    browser = signed_in(service)  # 2 anonymous requests
    for i in range(ANONYMOUS_LIMIT - 2):
        assert call(service, "/api/me", token=f"made-up-token-{i}").status_code == 401
    # The address's anonymous budget is spent: made-up tokens, no token, the login page, the writers'
    # page and the published document are all refused for it.
    assert_rate_limited(
        call(service, "/api/me", token="yet-another-made-up-one"), "without a valid credential"
    )
    for path in ("/openapi.json", "/dashboard/login", "/write"):
        assert_rate_limited(call(service, path), "without a valid credential")
    # The signed-in lead, the lead's token and a writer's token, from the same address, are served.
    page = browser.get(service.url + "/dashboard/rounds", timeout=10, allow_redirects=False)
    assert page.status_code == 200, page.text
    assert call(service, "/api/me", token=LEAD_TOKEN).json()["role"] == "lead"
    assert call(service, "/api/me", token=WRITER_TOKEN).json()["role"] == "writer"


def test_a_leads_session_counts_against_the_lead(service: GunicornService) -> None:
    browser = signed_in(service)
    served = [
        browser.get(service.url + "/dashboard/rounds", timeout=10, allow_redirects=False).status_code
        for _ in range(KNOWN_LIMIT)
    ]
    assert served == [200] * KNOWN_LIMIT
    assert_rate_limited(
        browser.get(service.url + "/dashboard/rounds", timeout=10, allow_redirects=False),
        "for this credential",
    )
    # The lead's token is the same lead: spent too. A writer and anonymous callers are not.
    assert_rate_limited(call(service, "/api/me", token=LEAD_TOKEN), "for this credential")
    assert call(service, "/api/me", token=WRITER_TOKEN).status_code == 200
    assert call(service, "/openapi.json").status_code == 200


def test_the_client_address_behind_trusted_proxies_is_the_forwarded_one(tmp_path: Path) -> None:
    # Not trusted (the default): X-Forwarded-For is the client's say, and buys no fresh budget.
    untrusted = start(tmp_path / "direct")
    try:
        for i in range(ANONYMOUS_LIMIT):
            assert call(untrusted, "/openapi.json", **{"X-Forwarded-For": f"10.0.0.{i}"}).status_code == 200
        assert_rate_limited(
            call(untrusted, "/openapi.json", **{"X-Forwarded-For": "10.0.1.1"}), "without a valid credential"
        )
    finally:
        untrusted.stop()
    # One trusted proxy: each forwarded client has a budget of its own, read from the last hop.
    proxied = start(tmp_path / "proxied", DYNAVAL_TRUSTED_PROXIES="1")
    try:
        for _ in range(ANONYMOUS_LIMIT):
            assert call(proxied, "/openapi.json", **{"X-Forwarded-For": "10.0.0.1"}).status_code == 200
        assert_rate_limited(call(proxied, "/openapi.json", **{"X-Forwarded-For": "10.0.0.1"}), "address")
        # A client cannot pose as another by writing its own X-Forwarded-For before the proxy's.
        spoofed = call(proxied, "/openapi.json", **{"X-Forwarded-For": "10.0.0.2, 10.0.0.1"})
        assert_rate_limited(spoofed, "address")
        assert call(proxied, "/openapi.json", **{"X-Forwarded-For": "10.0.0.2"}).status_code == 200
    finally:
        proxied.stop()


# ------------------------------------------------------------------------ the server's own answers


def raw(service: GunicornService, request: bytes) -> Answer:
    with connect(service) as sock:
        sock.sendall(request)
        answer = read_answer(sock)
        read_to_end(sock)
    return answer


def assert_json_error(answer: Answer, status: int, code: str, field: str | None) -> None:
    """The API's error body, with the security headers every JSON answer carries."""
    assert answer.status == status, answer
    assert answer.headers["content-type"] == "application/json", answer.headers
    error = answer.json()["error"]
    assert isinstance(error, dict) and set(error) == {"code", "message", "field"}, error
    assert (error["code"], error["field"]) == (code, field), error
    assert isinstance(error["message"], str) and error["message"].strip(), error
    for name, value in DATA_HEADERS:
        assert answer.headers.get(name.lower()) == value, (name, answer.headers)


def test_every_refusal_of_the_server_itself_is_json_with_the_security_headers(
    service: GunicornService,
) -> None:
    # gunicorn's own: a malformed request line, a bad header name, a request line over 8,190 bytes,
    # more than 100 header fields.
    assert_json_error(raw(service, b"GARBAGE\r\n\r\n"), 400, "bad_request", None)
    assert_json_error(raw(service, b"GET /health HTTP/1.1\r\nBad Name: x\r\n\r\n"), 400, "bad_request", None)
    long_line = b"GET /health?" + b"q" * 9000 + b" HTTP/1.1\r\nHost: dynaval\r\n\r\n"
    assert_json_error(raw(service, long_line), 414, "too_large", "path")
    many = b"".join(b"X-Header-%d: v\r\n" % i for i in range(101))
    assert_json_error(raw(service, b"GET /health HTTP/1.1\r\nHost: dynaval\r\n" + many + b"\r\n"), 431,
                      "too_large", "headers")  # fmt: skip
    # The worker's own: a head over 64 KiB, a request not received in time.
    big = b"GET /health HTTP/1.1\r\nHost: dynaval\r\nX-Big: " + b"a" * (70 * 1024) + b"\r\n\r\n"
    assert_json_error(raw(service, big), 431, "too_large", "headers")
    with connect(service) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: dyna")
        started = time.monotonic()
        answer = read_answer(sock)
        assert time.monotonic() - started < 10
    assert_json_error(answer, 408, "request_timeout", None)


def test_a_large_header_within_the_head_limit_is_taken(service: GunicornService) -> None:
    # A single 9 KB header was refused (gunicorn's 8,190 bytes a field) though the head limit is 64 KiB.
    for size in (9_000, 60_000):
        head = b"GET /health HTTP/1.1\r\nHost: dynaval\r\nConnection: close\r\nX-Trace: " + b"t" * size
        answer = raw(service, head + b"\r\n\r\n")
        assert answer.status == 200, (size, answer)


def test_a_full_batch_of_the_longest_texts_fits_the_body_limit(
    service: GunicornService, tmp_path: Path
) -> None:
    """The documented batch, 100 candidates of 2,000 characters, in a script of three bytes a
    character and escaped as Python's json escapes it (six bytes), is no 413: it reaches its route,
    which finds no round 999."""
    settings = Settings(development=True, data_dir=tmp_path)
    candidates = [
        {"text": "\u4e2d" * settings.max_text_chars, "writer_label": "positive"}
        for _ in range(settings.max_batch_size)
    ]
    body = json.dumps({"candidates": candidates})  # ensure_ascii: \u4e2d, six bytes a character
    assert len(body) > 6 * settings.max_text_chars * settings.max_batch_size
    answer = requests.post(
        service.url + "/api/rounds/999/candidates/batch",
        data=body,
        headers={"Authorization": f"Bearer {WRITER_TOKEN}", "Content-Type": "application/json"},
        timeout=30,
    )
    assert answer.status_code == 404, answer.text[:300]
    assert answer.json()["error"]["field"] == "round_id"
