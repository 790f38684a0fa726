"""A release's MinHash index in a process of its own, so that its hashing runs on another core.

:class:`~dynaval.adapters.minhash_index.MinHashIndex` holds the GIL for most of its work (a SHA-1
per shingle, a Python loop per row), so a thread would not run it beside the release's reading.
:class:`MinHashProcess` takes the calls a release build makes of its index (``add_inputs``,
``pairs``, ``close``) and, once it has been given ``start_after`` rows, starts a child process and
sends it the rows' texts a batch at a time. The child builds a ``MinHashIndex`` of them and answers
with its ``pairs()``, so the pairs are the in-process index's exactly. The build pays for copying
each row's texts into a batch; the child's hashing overlaps the build's reading of the next rows.
A smaller release is indexed in the caller's process when its pairs are asked for: starting an
interpreter costs about a second of CPU, more than hashing a few thousand rows.

The child is started with ``spawn`` (a fresh interpreter: the build runs threads of its own, which
``fork`` would copy mid-flight). It sees the end of its input when the parent closes its end or
dies, and then exits. A failure in the child (the index's own errors, the child killed) is raised
in the caller at its next call as :class:`IndexProcessFailed`, naming what happened.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import resource
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from dynaval.adapters.minhash_index import MinHashIndex
from dynaval.domain.errors import Unavailable
from dynaval.domain.near_duplicates import NearDuplicateRule

START_AFTER_ROWS = 20_000
"""Rows from which the index goes to a child process (fewer are indexed in the caller's)."""
BATCH_ROWS = 2_000
"""Rows sent to the child at a time: messages of a few hundred kilobytes, sent at little cost a row."""
JOIN_SECONDS = 10.0
"""How long ``close`` waits for the child to exit after its input ends, before it is killed."""

Pair = tuple[str, str, float]
_Row = tuple[str, tuple[str, ...]]


class IndexProcessFailed(Unavailable):
    """The index's child process failed, or ended before answering: the build stops, keeping
    nothing, and may be run again (HTTP 503; the command line prints the message)."""


class MinHashProcess:
    """A :class:`MinHashIndex` over rows' input fields, kept in a child process once it is large."""

    def __init__(self, rule: NearDuplicateRule | None = None, *, start_after: int | None = None) -> None:
        self.rule = rule or NearDuplicateRule()
        self.start_after = START_AFTER_ROWS if start_after is None else start_after
        self.peak_rss_mb: float | None = None
        """The child's peak RSS, once it has answered (None: no child was started)."""
        self._fields: tuple[str, ...] | None = None
        self._batch: list[_Row] = []
        self._pairs: list[Pair] | None = None
        self._closed = False
        self._conn: Connection | None = None
        self._process: BaseProcess | None = None

    @property
    def in_child(self) -> bool:
        """Whether the rows went to a child process."""
        return self._process is not None

    def add_inputs(self, key: str, inputs: Mapping[str, Any], fields: Sequence[str]) -> None:
        """Index the example with these input ``fields`` under ``key`` (as ``MinHashIndex.add_inputs``)."""
        self._check_open()
        if self._pairs is not None:
            raise RuntimeError("the near-duplicate index has given its pairs and takes no more rows")
        if self._fields is None:
            self._fields = tuple(fields)
        elif tuple(fields) != self._fields:
            raise ValueError("an index's examples added by their inputs have the same fields")
        self._batch.append((key, tuple(str(inputs.get(name) or "") for name in fields)))
        if self._process is None:
            if len(self._batch) >= self.start_after:
                self._start()
        elif len(self._batch) >= BATCH_ROWS:
            self._send_batch()

    def pairs(self) -> list[Pair]:
        """Every confirmed pair ``(a, b, similarity)``, as ``MinHashIndex.pairs()`` gives them."""
        self._check_open()
        if self._pairs is None:
            if self._process is None:
                self._pairs = _pairs_of(self.rule, self._fields or (), self._batch)
                self._batch = []
            else:
                self._send_batch()
                self._send(("pairs",))
                _kind, self._pairs, self.peak_rss_mb = self._receive()
        return self._pairs

    def close(self) -> None:
        """End the child (its input ends; killed if it does not exit) and let go of the rows and pairs."""
        if self._closed:
            return
        self._closed = True
        self._batch = []
        self._pairs = None
        if self._conn is not None:
            self._conn.close()
        if self._process is not None:
            self._process.join(JOIN_SECONDS)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
            self._process.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the near-duplicate index is closed: its examples are let go")

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child_end = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(child_end, self.rule.to_dict()), name="dynaval-minhash-index"
        )
        try:
            self._process.start()
        finally:
            child_end.close()
        rows, self._batch = self._batch, []
        for start in range(0, len(rows), BATCH_ROWS):
            self._send(("add", self._fields, rows[start : start + BATCH_ROWS]))

    def _send_batch(self) -> None:
        if self._batch:
            self._send(("add", self._fields, self._batch))
            self._batch = []

    def _send(self, message: tuple[Any, ...]) -> None:
        assert self._conn is not None
        if self._conn.poll():  # the child speaks unasked only to say it failed
            self._receive()
        try:
            self._conn.send(message)
        except OSError:  # the child is gone: say why, if it said
            self._receive()
            raise

    def _receive(self) -> Any:
        assert self._conn is not None and self._process is not None
        try:
            answer = self._conn.recv()
        except (EOFError, OSError):
            self._process.join(JOIN_SECONDS)
            raise IndexProcessFailed(
                "the near-duplicate index's process ended without answering (exit code "
                f"{self._process.exitcode}): most likely it ran out of memory or was killed; "
                "nothing was kept, so the release can be built again once memory is free"
            ) from None
        if answer[0] == "failed":
            raise IndexProcessFailed(
                f"the near-duplicate index's process failed ({answer[1]}); nothing was kept"
            )
        return answer


def _add_rows(index: MinHashIndex, fields: Sequence[str], rows: Sequence[_Row]) -> None:
    for key, texts in rows:
        index.add_inputs(key, dict(zip(fields, texts, strict=True)), fields)


def _pairs_of(rule: NearDuplicateRule, fields: Sequence[str], rows: Sequence[_Row]) -> list[Pair]:
    index = MinHashIndex(rule)
    _add_rows(index, fields, rows)
    found = list(index.pairs())
    index.close()
    return found


def _serve(conn: Connection, rule: dict[str, Any]) -> None:
    """The child: index the rows it is sent; answer ``pairs``; exit at the end of its input."""
    try:
        index = MinHashIndex(NearDuplicateRule.from_dict(rule))
        while True:
            try:
                message = conn.recv()
            except EOFError:
                return
            if message[0] == "add":
                _add_rows(index, message[1], message[2])
            else:
                found = list(index.pairs())
                index.close()
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                conn.send(("pairs", found, peak))
    except Exception as error:  # every failure goes to the parent, which raises it
        with contextlib.suppress(OSError):  # the parent is gone: nobody to tell
            conn.send(("failed", f"{type(error).__name__}: {error}"))
    finally:
        conn.close()
