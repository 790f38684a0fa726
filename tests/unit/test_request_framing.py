"""Where a request ends, as the serving worker's main loop finds it while bytes arrive.

The worker gives a request to a thread only when :class:`RequestFraming` says it is whole (or hands
it over at once when its framing is unusual, for gunicorn to answer), so "whole" must be said
exactly at the request's last byte, however the bytes are split, and never before.
"""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from dynaval.entrypoints.serving import CHUNKED_PAST_LIMIT_BYTES, MAX_HEAD_BYTES, Progress, RequestFraming

LIMIT = 1000
BODY = b'{"text": "Lovely\nday."}'
POST = b"POST /api/rounds/1/candidates HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


def with_length(body: bytes, head: bytes = POST) -> bytes:
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def chunked(*chunks: bytes, trailer: bytes = b"") -> bytes:
    framed = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks)
    return POST + b"Transfer-Encoding: chunked\r\n\r\n" + framed + b"0\r\n" + trailer + b"\r\n"


def fed(*pieces: bytes) -> list[Progress]:
    framing = RequestFraming(LIMIT)
    return [framing.feed(piece) for piece in pieces]


def progress_of(request: bytes) -> Progress:
    return fed(request)[-1]


def test_a_request_is_whole_exactly_at_its_last_byte_whatever_the_split() -> None:
    for request in (
        b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
        with_length(BODY),
        with_length(b""),
        chunked(b'{"text": ', b'"hi"}'),
        chunked(b"abc", trailer=b"X-Checksum: 1\r\n"),
        b"\r\nGET /health HTTP/1.1\r\n\r\n",  # one empty line before the request line is allowed
    ):
        for cut in range(1, len(request)):
            framing = RequestFraming(LIMIT)
            assert framing.feed(request[:cut]) is Progress.MORE, (request, cut)
            assert framing.feed(request[cut:]) is Progress.WHOLE, (request, cut)


@given(st.lists(st.integers(min_value=1, max_value=len(with_length(BODY))), max_size=12))
def test_fed_a_byte_run_at_a_time_a_request_is_whole_only_at_the_end(cuts: list[int]) -> None:
    request = chunked(b'{"text": ', b'"hi"}') + with_length(BODY)  # a second one pipelined behind
    first = len(chunked(b'{"text": ', b'"hi"}'))
    bounds = sorted({0, first, *(c for c in cuts if c < first)})
    pieces = [request[a:b] for a, b in itertools.pairwise(bounds)]
    progress = fed(*pieces)
    assert progress[:-1] == [Progress.MORE] * (len(pieces) - 1)
    assert progress[-1] is Progress.WHOLE
    # Bytes of the next request behind a whole one change nothing.
    framing = RequestFraming(LIMIT)
    assert framing.feed(request) is Progress.WHOLE


def test_a_body_with_line_breaks_is_no_bare_lf_and_a_head_with_one_is_handed_over() -> None:
    assert progress_of(with_length(b"one\ntwo\n\n")) is Progress.WHOLE
    assert progress_of(b"GET /health HTTP/1.1\nHost: x\n\n") is Progress.HAND_OVER
    assert fed(b"GET /health HTTP/1.1\r", b"\nHost: x\r\n", b"\r\n") == [
        Progress.MORE,
        Progress.MORE,
        Progress.WHOLE,
    ]


def test_unusual_framing_is_handed_over_at_once_for_gunicorn_to_answer() -> None:
    for head in (
        POST + b"Content-Length: 3\r\nContent-Length: 3\r\n\r\n",  # two lengths
        POST + b"Content-Length: +3\r\n\r\n",
        POST + b"Content-Length: 0x3\r\n\r\n",
        POST + b"Content-Length: \r\n\r\n",
        POST + b"Transfer-Encoding: gzip, chunked\r\n\r\n",
        POST + b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        POST + b"Content-Length: 3\r\n folded\r\n\r\n",  # obsolete line folding
        POST + b"Expect: something-else\r\nContent-Length: 3\r\n\r\n",
        POST + b"Content-Length: %d\r\n\r\n" % (LIMIT + 1),  # the app answers 413 without the body
        POST + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",  # not a chunk size
        POST + b"Transfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n",  # a chunk without its CRLF
    ):
        assert progress_of(head) is Progress.HAND_OVER, head


def test_a_head_gunicorn_refuses_goes_to_it_at_once_whatever_its_framing_says() -> None:
    for head in (
        POST + b"No colon here\r\n\r\n",
        POST + b"Content-Length : 3\r\n\r\n",  # a blank before the colon: not a length to wait for
        b"GET /health HTTP/1.1\r\n\r\n\r\n",
    ):
        assert progress_of(head) is not Progress.MORE, head


def test_a_chunked_body_over_the_limit_is_handed_over_once_the_app_can_read_past_the_limit() -> None:
    # The app reads the limit and one byte more (gunicorn reads at least 1 KiB ahead for it): all
    # of that must be buffered, in one chunk or several, before a thread gets the request.
    enough = LIMIT + CHUNKED_PAST_LIMIT_BYTES
    framing = RequestFraming(LIMIT)
    assert framing.feed(POST + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % (enough * 2)) is Progress.MORE
    assert framing.feed(b"a" * enough) is Progress.MORE
    assert framing.feed(b"a") is Progress.HAND_OVER
    framing = RequestFraming(LIMIT)
    assert framing.feed(POST + b"Transfer-Encoding: chunked\r\n\r\n") is Progress.MORE
    for _ in range(enough // 100):
        assert framing.feed(b"64\r\n" + b"a" * 100 + b"\r\n") is Progress.MORE
    assert framing.feed(b"64\r\n" + b"a" * 100 + b"\r\n") is Progress.HAND_OVER


def test_a_head_over_the_limit_is_too_large_found_or_not() -> None:
    assert progress_of(POST + b"X-Big: " + b"a" * MAX_HEAD_BYTES) is Progress.HEAD_TOO_LARGE
    assert progress_of(POST + b"X-Big: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n") is Progress.HEAD_TOO_LARGE
    assert progress_of(POST + b"X-Big: " + b"a" * 1000 + b"\r\n\r\n") is Progress.WHOLE


def test_expect_100_continue_is_noted_for_a_body_still_to_come_on_http_1_1_only() -> None:
    head = POST + b"Expect: 100-Continue\r\nContent-Length: 3\r\n\r\n"
    framing = RequestFraming(LIMIT)
    assert framing.feed(head) is Progress.MORE
    assert framing.wants_continue
    assert framing.feed(b"abc") is Progress.WHOLE
    old = head.replace(b"HTTP/1.1", b"HTTP/1.0")
    framing = RequestFraming(LIMIT)
    assert framing.feed(old) is Progress.MORE
    assert not framing.wants_continue
