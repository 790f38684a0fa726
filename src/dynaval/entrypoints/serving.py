"""The gunicorn worker that serves dynaval: gthread, but a thread only ever sees a request received whole.

gunicorn's gthread worker gives a connection to a thread as soon as its first bytes arrive, and the
thread then reads the rest with blocking calls and no deadline. A client that sends its headers, or
a declared 60 KB body, one piece every few seconds holds that thread for as long as it likes, and
16 such clients stop the default service (one worker, 16 threads).

This worker receives each request in its main loop instead, without blocking, as a buffering proxy in
front would: the head, then the body up to ``DYNAVAL_MAX_BODY_BYTES`` (by ``Content-Length`` or by
chunks). Only a request received whole goes to a thread, so a slow client holds no thread, only a
socket and the bytes it sent so far. A request not received whole within
``DYNAVAL_RECEIVE_TIMEOUT_S`` (counted from the connection, or on a kept-alive connection from the
first byte of the request) is answered 408 and its connection closed. A head over 64 KiB is answered
431. Nothing else about the request is interpreted here: gunicorn's own parser reads it, from the
bytes buffered here, and refuses anything malformed as it always has (400; 414 for a request line
over 8,190 bytes; 431 for more than 100 header fields), but in the API's JSON error body with the
security headers every answer carries, not gunicorn's HTML page.

When the framing is unusual (a malformed or doubled length, a transfer coding other than plain
chunked, a body over the limit, a bare LF), the request goes to a thread at once so that gunicorn and
the app can refuse it; a read that thread then makes from the socket ends by the same deadline, and
the connection is closed after the answer rather than drained. Label Studio's webhooks are ordinary
JSON posts with a ``Content-Length``: received whole here, then answered by the thread without
another system call to read.

Connections gunicorn would close with a blocking two-second linger in its main loop (its graceful
close, to drain what the client still sends) linger here in the poller instead, so a client that
keeps a finished connection open cannot stall the loop either.

Written against gunicorn 27's gthread worker (pinned in ``pyproject.toml``); TLS and HTTP/2 are not
served by it (TLS ends in front of the service).
"""

from __future__ import annotations

import contextlib
import html
import json
import re
import selectors
import socket
import time
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from typing import Any

from gunicorn import util as gunicorn_util
from gunicorn.http.errors import NoMoreData
from gunicorn.workers.gthread import ThreadWorker
from werkzeug.exceptions import RequestTimeout

from dynaval.entrypoints.headers import DATA_HEADERS

#: Largest request head (request line and headers) received; a longer one is answered 431. The API
#: needs a few hundred bytes; nginx's default allows 32 KiB.
MAX_HEAD_BYTES = 64 * 1024
#: Longest chunk-size line (with extensions) of a chunked body before the request goes to gunicorn,
#: which refuses it.
MAX_CHUNK_LINE_BYTES = 4096
#: Body bytes past DYNAVAL_MAX_BODY_BYTES received before a chunked body over the limit goes to the
#: app: it reads the limit and then one byte more, which gunicorn's body reader asks for in steps of
#: at least 1 KiB; all of it must be here already, so that no thread waits for it.
CHUNKED_PAST_LIMIT_BYTES = 64 * 1024
#: How long a closed connection lingers to drain what its client still sends (gunicorn's own
#: graceful close waits as long, but blocking its main loop).
LINGER_S = 2.0
LINGER_MAX_BYTES = 64 * 1024
#: Bytes read per readiness event: the whole of an ordinary request in one call.
RECV_BYTES = 64 * 1024
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"

# The header fields that frame a request; gunicorn refuses a name with blanks before its colon.
_FRAMING_FIELD = re.compile(rb"\r\n(content-length|transfer-encoding|expect):([^\r\n]*)", re.IGNORECASE)
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")


class Progress(Enum):
    """How far a request has been received."""

    MORE = "more"  # wait for more bytes
    WHOLE = "whole"  # the request, head and body, is in the buffer
    HAND_OVER = "hand over"  # unusual framing or a body over the limit: gunicorn and the app answer it now
    HEAD_TOO_LARGE = "head too large"


@dataclass
class RequestFraming:
    """Where the request at the start of ``buffer`` ends, found incrementally as bytes arrive.

    Only the framing is read (the end of the head, ``Content-Length``, ``Transfer-Encoding:
    chunked``, ``Expect``), and anything unusual is handed over rather than judged: gunicorn's
    parser decides what the request means. Each :meth:`feed` looks at the new bytes only, so a body
    sent one byte at a time costs linear time in all.
    """

    max_body_bytes: int
    buffer: bytearray = field(default_factory=bytearray)
    wants_continue: bool = False  # an HTTP/1.1 ``Expect: 100-continue`` with a body still to come
    head_complete: bool = False
    _scan_from: int = 0
    _head_end: int = 0
    _content_length: int = 0
    _chunked: bool = False
    _chunk_at: int = 0  # where the next chunk-size line starts
    _chunk_payload: int = 0  # body bytes in the chunks complete so far

    def feed(self, data: bytes) -> Progress:
        self.buffer += data
        return self.progress()

    def progress(self) -> Progress:
        if not self.head_complete:
            outcome = self._find_head()
            if outcome is not None:
                return outcome
        if self._chunked:
            return self._chunked_progress()
        if len(self.buffer) >= self._head_end + self._content_length:
            return Progress.WHOLE
        return Progress.MORE

    def _find_head(self) -> Progress | None:
        buffer = self.buffer
        end = buffer.find(b"\r\n\r\n", max(0, self._scan_from - 3))
        # A bare LF among the new bytes of the head? gunicorn refuses one at once (RFC 9112
        # section 2.2). Counted from a CR, so that a CRLF split between two reads counts whole.
        start = max(0, self._scan_from - 1)
        if start and buffer[start] == 0x0A:
            start -= 1
        head_so_far = end if end >= 0 else len(buffer)
        if buffer.count(b"\n", start, head_so_far) != buffer.count(b"\r\n", start, head_so_far):
            return Progress.HAND_OVER
        if end < 0:
            self._scan_from = len(self.buffer)
            return Progress.HEAD_TOO_LARGE if len(self.buffer) > MAX_HEAD_BYTES else Progress.MORE
        if end + 4 > MAX_HEAD_BYTES:
            return Progress.HEAD_TOO_LARGE
        self.head_complete = True
        self._head_end = self._chunk_at = end + 4
        return self._read_head(bytes(self.buffer[:end]))

    def _read_head(self, head: bytes) -> Progress | None:
        if b"\r\n " in head or b"\r\n\t" in head:
            return Progress.HAND_OVER  # obsolete line folding: gunicorn refuses it
        http_1_0 = head.split(b"\r\n", 1)[0].endswith(b" HTTP/1.0")
        content_length: int | None = None
        expect: bytes | None = None
        for match in _FRAMING_FIELD.finditer(head):
            name, value = match[1].lower(), match[2].strip(b" \t")
            if name == b"content-length":
                if content_length is not None or not value.isdigit():
                    return Progress.HAND_OVER
                content_length = int(value)
            elif name == b"transfer-encoding":
                if self._chunked or value.lower() != b"chunked":
                    return Progress.HAND_OVER
                self._chunked = True
            else:
                if expect is not None:
                    return Progress.HAND_OVER
                expect = value.lower()
        if self._chunked and content_length is not None:
            return Progress.HAND_OVER
        if expect is not None and expect != b"100-continue":
            return Progress.HAND_OVER  # gunicorn answers 417
        if content_length is not None and content_length > self.max_body_bytes:
            return Progress.HAND_OVER  # the app answers 413 from the header, reading none of it
        self._content_length = content_length or 0
        self.wants_continue = expect is not None and not http_1_0 and (self._chunked or bool(content_length))
        return None

    def _chunked_progress(self) -> Progress:
        buffer = self.buffer
        while True:
            line_end = buffer.find(b"\r\n", self._chunk_at)
            if line_end < 0:
                too_long = len(buffer) - self._chunk_at > MAX_CHUNK_LINE_BYTES
                return Progress.HAND_OVER if too_long else Progress.MORE
            size_field = bytes(buffer[self._chunk_at : line_end]).split(b";", 1)[0].strip(b" \t")
            if not _HEX.fullmatch(size_field):
                return Progress.HAND_OVER
            size = int(size_field, 16)
            data_at = line_end + 2
            if size == 0:  # the last chunk, then trailer fields up to an empty line
                if buffer.startswith(b"\r\n", data_at) or buffer.find(b"\r\n\r\n", line_end) >= 0:
                    return Progress.WHOLE
                return Progress.HAND_OVER if len(buffer) - data_at > MAX_HEAD_BYTES else Progress.MORE
            chunk_end = data_at + size
            # Over the limit: hand over once enough past the limit is here for the app to read the
            # limit and one byte more from the buffer, and answer 413 without waiting.
            payload = self._chunk_payload + min(size, len(buffer) - data_at)
            if payload > self.max_body_bytes + CHUNKED_PAST_LIMIT_BYTES:
                return Progress.HAND_OVER
            if len(buffer) < chunk_end + 2:
                return Progress.MORE
            if buffer[chunk_end : chunk_end + 2] != b"\r\n":
                return Progress.HAND_OVER
            self._chunk_payload += size
            self._chunk_at = chunk_end + 2


class ReceiveTimedOut(RequestTimeout):
    """A request's body did not arrive by its deadline while the app was reading it (408)."""


class ReceiveGuard:
    """The client socket as gunicorn's parser reads it in a thread: no read outlives the request's
    deadline. A request received whole is read from the parser's buffer and never gets here; this
    bounds the rest (a request handed over early, and anything this module did not foresee)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.deadline = float("inf")
        self.timeout_s = 0.0
        self.whole = False  # the request was received whole before it went to the thread
        self.continue_sent = False  # "100 Continue" already went out from the main loop
        self.in_app = False

    def recv(self, size: int) -> bytes:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self._expired()
        prior = self._sock.gettimeout()
        self._sock.settimeout(remaining if prior is None else min(prior, remaining))
        try:
            return self._sock.recv(size)
        except TimeoutError:
            if time.monotonic() >= self.deadline:
                self._expired()
            raise
        finally:
            self._sock.settimeout(prior)

    def _expired(self) -> None:
        message = f"the request was not received within {self.timeout_s:g} s"
        if self.in_app:
            # Not an OSError: Werkzeug would read that as a client that went away (400).
            raise ReceiveTimedOut(message)
        raise NoMoreData(message.encode())  # gunicorn closes the connection without an answer

    # gunicorn's parser bounds its own drain of an unread body with these.
    def gettimeout(self) -> float | None:
        return self._sock.gettimeout()

    def settimeout(self, value: float | None) -> None:
        self._sock.settimeout(value)


@dataclass
class _Incoming:
    framing: RequestFraming
    deadline: float
    continue_sent: bool = False


class BufferingThreadWorker(ThreadWorker):  # type: ignore[misc]  # gunicorn is untyped
    """gunicorn's gthread worker, receiving each request whole in its main loop (see the module)."""

    receive_timeout_s = 15.0
    max_body_bytes = 64 * 1024

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Both touched by the main loop only; insertion order is deadline order (one timeout for all).
        self._incoming: dict[Any, _Incoming] = {}
        self._lingering: dict[socket.socket, tuple[float, int]] = {}

    @classmethod
    def check_config(cls, cfg: Any, log: Any) -> None:
        super().check_config(cfg, log)
        if cfg.is_ssl or cfg.http2_cleartext != "off" or getattr(cfg, "protocol", "http") != "http":
            raise RuntimeError(
                f"{cls.__name__} serves plain HTTP/1.x only: end TLS in front of the service, and "
                "leave certfile, keyfile, http2_cleartext and protocol unset"
            )

    def configure(self, *, receive_timeout_s: float, max_body_bytes: int) -> None:
        """Set the deadline of a request and the largest body received before a thread gets it."""
        self.receive_timeout_s = receive_timeout_s
        self.max_body_bytes = max_body_bytes

    # ------------------------------------------------------------------ receiving, in the main loop

    def enqueue_req(self, conn: Any) -> None:
        """Every path that would give a connection to a thread (a new connection, a kept-alive one
        that became readable, one with a pipelined request already read) comes here first."""
        now = time.monotonic()
        incoming = _Incoming(RequestFraming(self.max_body_bytes), now + self.receive_timeout_s)
        if conn.parser is not None:  # bytes of the next request that came with the last one
            incoming.framing.buffer += conn.parser.unreader.take_buffered()
        if conn.sock.gettimeout() != 0.0:  # blocking after a thread had it; each switch is 2 syscalls
            conn.sock.setblocking(False)
        progress: Progress | None = incoming.framing.progress() if incoming.framing.buffer else Progress.MORE
        if progress is Progress.MORE:
            progress = self._read(conn, incoming)  # a kept-alive connection is readable already
        if progress is Progress.MORE:
            self._incoming[conn] = incoming
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_readable, conn))
        else:
            self._conclude(conn, incoming, progress)

    def _on_readable(self, conn: Any, _sock: Any) -> None:
        incoming = self._incoming[conn]
        progress = self._read(conn, incoming)
        if progress is not Progress.MORE:
            self.poller.unregister(conn.sock)
            del self._incoming[conn]
            self._conclude(conn, incoming, progress)

    def _read(self, conn: Any, incoming: _Incoming) -> Progress | None:
        """Read what has arrived; None when the client closed or the connection failed."""
        try:
            data = conn.sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return Progress.MORE
        except OSError:
            return None
        if not data:
            return None
        progress = incoming.framing.feed(data)
        if progress is Progress.MORE and incoming.framing.wants_continue and not incoming.continue_sent:
            # The client waits for this before it sends the body.
            try:
                sent = conn.sock.send(CONTINUE)
            except OSError:
                sent = 0
            if sent != len(CONTINUE):
                return Progress.HAND_OVER
            incoming.continue_sent = True
        return progress

    def _conclude(self, conn: Any, incoming: _Incoming, progress: Progress | None) -> None:
        if progress is None:  # the client closed, or the connection failed
            self.nr_conns -= 1
            _close_quietly(conn.sock)
        elif progress is Progress.HEAD_TOO_LARGE:
            self.log.info("refused a request head over %d bytes from %s", MAX_HEAD_BYTES, _peer(conn))
            self._answer_and_close(
                conn, 431, "Request Header Fields Too Large", "too_large",
                f"the request line and headers must be at most {MAX_HEAD_BYTES} bytes", "headers",
            )  # fmt: skip
        else:
            self._dispatch(conn, incoming, whole=progress is Progress.WHOLE)

    def _dispatch(self, conn: Any, incoming: _Incoming, *, whole: bool) -> None:
        # The thread makes the socket blocking again (gunicorn's handle()).
        conn.init()  # plain HTTP/1.x (see check_config): makes the parser, reads nothing
        conn.data_ready = True  # so the thread does not wait for data again
        conn.parser.unreader.unread(incoming.framing.buffer)  # copied into its buffer
        unreader = conn.parser.unreader
        if not isinstance(unreader.sock, ReceiveGuard):
            unreader.sock = ReceiveGuard(conn.sock)
        guard: ReceiveGuard = unreader.sock
        guard.deadline, guard.timeout_s = incoming.deadline, self.receive_timeout_s
        guard.whole, guard.continue_sent = whole, incoming.continue_sent
        super().enqueue_req(conn)

    def murder_pending(self) -> None:
        """Called by gunicorn's main loop every second at most: also ends what is overdue here."""
        super().murder_pending()
        now = time.monotonic()
        while self._incoming:
            conn, incoming = next(iter(self._incoming.items()))
            if incoming.deadline > now:
                break
            del self._incoming[conn]
            self.poller.unregister(conn.sock)
            self._time_out(conn, incoming)
        for sock, (until, _) in list(self._lingering.items()):
            if until <= now:
                self._end_linger(sock)

    def _time_out(self, conn: Any, incoming: _Incoming) -> None:
        received = len(incoming.framing.buffer)
        if not received:  # an idle connection: nothing to answer
            self._close(conn)
            return
        self.log.info(
            "closed a connection from %s: its request was not received within %g s (%d bytes came)",
            _peer(conn), self.receive_timeout_s, received,
        )  # fmt: skip
        self._answer_and_close(
            conn, 408, "Request Timeout", "request_timeout",
            f"the request was not received within {self.receive_timeout_s:g} s",
            "body" if incoming.framing.head_complete else None,
        )  # fmt: skip

    def _answer_and_close(
        self, conn: Any, status: int, reason: str, code: str, message: str, field: str | None
    ) -> None:
        # A few hundred bytes fit an empty send buffer; never wait for the client here.
        with contextlib.suppress(OSError):
            conn.sock.send(error_answer(status, reason, code, message, field))
        self._close(conn)

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        """gunicorn's own refusals (a malformed request line or header, a request line over its
        limit, too many header fields...) as the API answers errors: the same status and reason,
        in a JSON error body with the security headers. gunicorn decides and logs them as it always
        has; only what it would write (an HTML page) is read back and written as JSON instead."""
        written = _WrittenAnswer()
        super().handle_error(req, written, addr, exc)
        status, reason, message = written.error()
        code, field = GUNICORN_ERRORS.get(status, ("bad_request" if status < 500 else "internal", None))
        with contextlib.suppress(Exception):  # the client may be gone: gunicorn's own way
            gunicorn_util.write_nonblock(client, error_answer(status, reason, code, message, field))

    # ------------------------------------------------------------------------ in the thread

    def handle_request(self, req: Any, conn: Any) -> bool:
        guard: ReceiveGuard = conn.parser.unreader.sock
        if guard.continue_sent:
            req._expected_100_continue = False  # already sent from the main loop
        if not guard.whole:
            # Part of the request may still be on its way: answer, then close rather than wait for it.
            req.force_close()
        guard.in_app = True
        try:
            keepalive: bool = super().handle_request(req, conn)
            return keepalive
        finally:
            guard.in_app = False

    # ------------------------------------------------------------------------------ closing

    def finish_request(self, conn: Any, fs: Any) -> None:
        """As gunicorn's, but a connection to close lingers in the poller, not in a blocking wait."""
        try:
            keep = fs.result() if not fs.cancelled() else False
        except Exception:
            keep = False
        if keep:  # kept alive (or deferred): gunicorn's way
            super().finish_request(conn, fs)
            return
        self.nr_conns -= 1
        self._linger(conn.sock)

    def _close(self, conn: Any) -> None:
        self.nr_conns -= 1
        self._linger(conn.sock)

    def _linger(self, sock: socket.socket) -> None:
        """Close ``sock`` without a reset that would cut the last answer: send FIN, then read and
        drop what the client still sends until it closes, for ``LINGER_S`` at most."""
        try:
            sock.setblocking(False)
            sock.shutdown(socket.SHUT_WR)
            self.poller.register(sock, selectors.EVENT_READ, self._drain_linger)
        except (OSError, ValueError, KeyError):
            _close_quietly(sock)
            return
        self._lingering[sock] = (time.monotonic() + LINGER_S, 0)

    def _drain_linger(self, sock: socket.socket) -> None:
        until, drained = self._lingering[sock]
        try:
            data = sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data or drained + len(data) > LINGER_MAX_BYTES:
            self._end_linger(sock)
        else:
            self._lingering[sock] = (until, drained + len(data))

    def _end_linger(self, sock: socket.socket) -> None:
        del self._lingering[sock]
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(sock)
        _close_quietly(sock)

    def run(self) -> None:
        try:
            super().run()
        finally:
            for sock in list(self._lingering):
                _close_quietly(sock)
            for conn in self._incoming:
                _close_quietly(conn.sock)


#: The error code and the field of each status gunicorn answers by itself.
GUNICORN_ERRORS: dict[int, tuple[str, str | None]] = {
    400: ("bad_request", None),
    403: ("forbidden", None),
    414: ("too_large", "path"),
    417: ("expectation_failed", "Expect"),
    431: ("too_large", "headers"),
    500: ("internal", None),
    501: ("not_implemented", "Transfer-Encoding"),
}


def error_answer(status: int, reason: str, code: str, message: str, field: str | None) -> bytes:
    """A whole HTTP answer that closes the connection: the API's JSON error body, and the security
    headers of every JSON answer."""
    error = {"error": {"code": code, "message": message, "field": field}}
    body = json.dumps(error, separators=(",", ":")).encode() + b"\n"
    headers = "".join(f"{name}: {value}\r\n" for name, value in DATA_HEADERS)
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{headers}Connection: close\r\n\r\n"
    ).encode()
    return head + body


class _WrittenAnswer:
    """Stands for the client's socket while gunicorn writes an error answer of its own, and keeps
    what it wrote: ``HTTP/1.1 400 Bad Request``, then an HTML page whose text is the message."""

    def __init__(self) -> None:
        self.data = bytearray()

    def gettimeout(self) -> float:
        return 0.0

    def setblocking(self, flag: bool) -> None:
        pass

    def sendall(self, data: bytes) -> None:
        self.data += data

    def send(self, data: bytes) -> int:
        self.data += data
        return len(data)

    def error(self) -> tuple[int, str, str]:
        """The status, its reason and the message gunicorn wrote (its reason when it wrote none)."""
        head, _, page = bytes(self.data).decode("latin-1").partition("\r\n\r\n")
        status_line = head.split("\r\n", 1)[0].split(" ", 2)
        status = int(status_line[1]) if len(status_line) > 1 and status_line[1].isdigit() else 500
        reason = status_line[2] if len(status_line) > 2 else "Error"
        text = page.partition("</h1>")[2].partition("</body>")[0]
        message = " ".join(html.unescape(text).split()) or reason.lower()
        return status, reason, message


def _close_quietly(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()


def _peer(conn: Any) -> str:
    client = conn.client
    return str(client[0]) if isinstance(client, tuple) and client else str(client)
