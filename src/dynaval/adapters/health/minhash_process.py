"""A release's MinHash index in a process of its own, so that its hashing runs on another core.

:class:`~dynaval.domain.health.minhash.MinHashIndex` holds the GIL for most of its work (a SHA-1
per shingle, a Python loop per row), so a thread would not run it beside the release's reading.
:class:`MinHashProcess` takes the calls a release build makes of its index (``add_inputs``,
``pairs``, ``close``) and, once it has been given ``start_after`` rows, starts a child process and
sends it the rows' texts a batch at a time. The child builds a ``MinHashIndex`` of them by row
(``add_row``: the rows known by the order they came in, with no key kept there) and answers with its
``row_pairs()``; the caller, which keeps the keys in that order, names and sorts them as
``MinHashIndex.pairs()`` does, so the pairs are the in-process index's exactly. A key added twice
is found by the caller, from the keys' hashes, when the pairs are asked for. The build pays for copying
each row's texts into a batch; the child's hashing overlaps the build's reading of the next rows.
A smaller release is indexed in the caller's process when its pairs are asked for: starting an
interpreter costs about a second of CPU, more than hashing a few thousand rows.

The child is ``python -m dynaval.adapters.health.minhash_process``, talking pickles over its standard input
and a copy of its standard output. It is not a ``multiprocessing`` child: those are started by
importing the caller's main script again, which runs a script's top level a second time when it
has no ``if __name__ == "__main__"`` guard. It sees the end of its input when the parent closes its
end or dies, and then exits. A failure in the child (the index's own errors, the child killed) is
raised in the caller at its next call as :class:`IndexProcessFailed`, naming what happened; what the
child wrote to its standard error is kept in a temporary file and its last line is quoted.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import resource
import select
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from dynaval.domain.errors import Unavailable
from dynaval.domain.health.minhash import MinHashIndex, sorted_pairs
from dynaval.domain.health.near_duplicates import NearDuplicateRule

START_AFTER_ROWS = 20_000
"""Rows from which the index goes to a child process (fewer are indexed in the caller's)."""
BATCH_ROWS = 2_000
"""Rows sent to the child at a time: messages of a few hundred kilobytes, sent at little cost a row."""
EXIT_SECONDS = 10.0
"""How long ``close`` waits for the child to exit after its input ends, before it is killed."""

Pair = tuple[str, str, float]
_Row = tuple[tuple[str, ...], int | None]
"""A row sent to the index: its fields' texts and its side; its number is its place in the order sent."""
_RowPair = tuple[int, int, float]


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
        self._keys: list[str] = []
        """Every row's key, in the order added: the child knows the rows by their place here."""
        self._keys_checked = False
        self._batch: list[_Row] = []
        self._pairs: list[Pair] | None = None
        self._asked = False
        """Whether the child was asked for its pairs (it works on them while the caller goes on)."""
        self._closed = False
        self._child: subprocess.Popen[bytes] | None = None
        self._errors: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The child's process id; None while the rows are kept in the caller's process."""
        return None if self._child is None else self._child.pid

    def add_inputs(
        self, key: str, inputs: Mapping[str, Any], fields: Sequence[str], side: int | None = None
    ) -> None:
        """Index the example with these input ``fields`` under ``key``, of ``side`` (as
        ``MinHashIndex.add_inputs``)."""
        self._check_open()
        if self._pairs is not None or self._asked:
            raise RuntimeError("the near-duplicate index has been asked for its pairs and takes no more rows")
        if self._fields is None:
            self._fields = tuple(fields)
        elif tuple(fields) != self._fields:
            raise ValueError("an index's examples added by their inputs have the same fields")
        self._keys.append(key)
        self._batch.append((tuple(str(inputs.get(name) or "") for name in fields), side))
        if self._child is None:
            if len(self._batch) >= self.start_after:
                self._start()
        elif len(self._batch) >= BATCH_ROWS:
            self._send_batch()

    def ask(self) -> None:
        """Every row is added: the child (if one was started) starts finding the pairs, on its own
        core, while the caller does other work; :meth:`pairs` then waits for its answer. Below
        ``start_after`` rows there is no child, and the pairs are found when asked for."""
        self._check_open()
        self._check_keys()
        if self._child is not None and self._pairs is None and not self._asked:
            self._send_batch()
            self._send(("pairs",))
        self._asked = True  # no row may come after: the pairs asked for would not hold it

    def pairs(self) -> list[Pair]:
        """Every confirmed pair ``(a, b, similarity)``, as ``MinHashIndex.pairs()`` gives them."""
        self._check_open()
        if self._pairs is None:
            self._check_keys()
            if self._child is None:
                found = _pairs_of(self.rule, self._fields or (), self._batch)
                self._batch = []
            else:
                self.ask()
                _kind, found, self.peak_rss_mb = self._receive()
            self._pairs = self._named(found)
        return self._pairs

    def _named(self, found: list[_RowPair]) -> list[Pair]:
        """The rows' pairs by key, in the order ``MinHashIndex.pairs()`` gives them."""
        keys = self._keys
        named = []
        for a, b, value in found:
            first, second = keys[a], keys[b]
            named.append((first, second, value) if first < second else (second, first, value))
        return sorted_pairs(named)

    def _check_keys(self) -> None:
        """Raise ``ValueError`` (as ``MinHashIndex`` does) naming the first key added again: the
        rows whose keys' hashes (which a string keeps once computed) are equal, compared by their
        keys. A set of a million keys would hold 32 MB for the whole build; this, 24 MB for a moment."""
        if self._keys_checked:
            return
        keys = self._keys
        hashes = np.fromiter((hash(key) for key in keys), dtype=np.int64, count=len(keys))
        order = np.argsort(hashes, kind="stable")
        in_order = hashes[order]
        same = np.flatnonzero(in_order[1:] == in_order[:-1])
        repeats = [
            int(order[place + 1])
            for place in same.tolist()
            if keys[int(order[place])] == keys[int(order[place + 1])]
        ]
        if repeats:
            raise ValueError(f"{keys[min(repeats)]} is in the index already")
        self._keys_checked = True

    def close(self) -> None:
        """End the child (its input ends; killed if it does not exit) and let go of the rows and pairs."""
        if self._closed:
            return
        self._closed = True
        self._batch = []
        self._keys = []
        self._pairs = None
        child, self._child = self._child, None
        if child is not None:
            for stream in (child.stdin, child.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):  # a last write not flushed: the child is gone
                        stream.close()
            try:
                child.wait(EXIT_SECONDS)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if self._errors is not None:
            self._errors.close()
            self._errors = None

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the near-duplicate index is closed: its examples are let go")

    def _start(self) -> None:
        package_root = str(Path(__file__).resolve().parents[3])  # where `dynaval` is importable
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": package_root if not path else f"{package_root}{os.pathsep}{path}"}
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115 (open for the child's life, closed by close())
        self._child = subprocess.Popen(
            [sys.executable, "-m", __name__, json.dumps(self.rule.to_dict())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            env=env,
        )
        rows, self._batch = self._batch, []
        for start in range(0, len(rows), BATCH_ROWS):
            self._send(("add", self._fields, rows[start : start + BATCH_ROWS]))

    def _send_batch(self) -> None:
        if self._batch:
            self._send(("add", self._fields, self._batch))
            self._batch = []

    def _send(self, message: tuple[Any, ...]) -> None:
        child = self._child
        assert child is not None and child.stdin is not None and child.stdout is not None
        if select.select([child.stdout], [], [], 0)[0]:  # the child speaks unasked only when it fails
            self._receive()
        try:
            pickle.dump(message, child.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            child.stdin.flush()
        except OSError:  # the child is gone: say why, if it said
            self._receive()
            raise

    def _receive(self) -> Any:
        child = self._child
        assert child is not None and child.stdout is not None
        try:
            answer = pickle.load(child.stdout)
        except (EOFError, OSError, pickle.UnpicklingError):
            try:
                code: int | None = child.wait(EXIT_SECONDS)
            except subprocess.TimeoutExpired:
                code = None
            raise IndexProcessFailed(
                f"the near-duplicate index's process ended without answering (exit code {code}"
                f"{self._last_error()}): most likely it ran out of memory or was killed; "
                "nothing was kept, so the release can be built again once memory is free"
            ) from None
        if answer[0] == "failed":
            raise IndexProcessFailed(
                f"the near-duplicate index's process failed ({answer[1]}); nothing was kept"
            )
        return answer

    def _last_error(self) -> str:
        """``; it said: <the last line of its standard error>``, or nothing."""
        if self._errors is None:
            return ""
        self._errors.seek(0)
        lines = self._errors.read()[-4096:].decode(errors="replace").strip().splitlines()
        return f"; it said: {lines[-1]}" if lines else ""


def _add_rows(index: MinHashIndex, fields: Sequence[str], rows: Sequence[_Row]) -> None:
    for texts, side in rows:
        index.add_row(texts, fields, side)


def _pairs_of(rule: NearDuplicateRule, fields: Sequence[str], rows: Sequence[_Row]) -> list[_RowPair]:
    index = MinHashIndex(rule)
    _add_rows(index, fields, rows)
    found = index.row_pairs()
    index.close()
    return found


def _peak_rss_mb() -> float:
    """This process's own peak RSS. Not ``ru_maxrss``: Linux carries the parent's peak over a fork
    and exec into it, so a child started by a build already 300 MB large says 300 MB at least."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _serve(rule: dict[str, Any], requests: IO[bytes], answers: IO[bytes]) -> None:
    """The child: index the rows it is sent; answer ``pairs``; return at the end of its input."""
    try:
        index = MinHashIndex(NearDuplicateRule.from_dict(rule))
        while True:
            try:
                message = pickle.load(requests)
            except EOFError:
                return
            if message[0] == "add":
                _add_rows(index, message[1], message[2])
            else:
                found = index.row_pairs()
                index.close()
                peak = _peak_rss_mb()
                pickle.dump(("pairs", found, peak), answers, protocol=pickle.HIGHEST_PROTOCOL)
                answers.flush()
    except Exception as error:  # every failure goes to the parent, which raises it
        with contextlib.suppress(OSError):  # the parent is gone: nobody to tell
            pickle.dump(("failed", f"{type(error).__name__}: {error}"), answers)
            answers.flush()


if __name__ == "__main__":
    # The answers go to a copy of standard output; standard output itself is pointed at standard
    # error, so that nothing a library prints can break the stream of pickles.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    _serve(json.loads(sys.argv[1]), sys.stdin.buffer, answers)
