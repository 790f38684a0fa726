"""Files written beside the caller: a build appends lines to a buffer, and a thread of its own writes
them a chunk at a time (and, for a release's split, hashes them and makes their Parquet rows).

File writes, SHA-256 over chunks this size and Arrow's parsing and encoding all run without the
GIL, so on a machine of two cores they overlap the build's Python work instead of adding to it.
Chunks wait in a short queue (a few megabytes at most). A failure in the thread is raised in the
caller at its next hand-over or when it closes; after one, the thread only drains what is queued.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

CHUNK_BYTES = 2 << 20
"""How many bytes of lines are handed to the thread at a time (whole lines: more for a longer
line). Each hand-over costs the thread a wait for the GIL, up to the interpreter's switch interval
(5 ms) while the caller runs Python: at 256 KB a chunk the thread fell behind and the build waited
for it; at 2 MB it keeps up."""
QUEUED_CHUNKS = 4
"""Chunks that may wait for the thread."""


class BackgroundWork:
    """Runs calls on a thread of its own, one at a time, in the order they were handed over."""

    def __init__(self, name: str, *, queued: int = QUEUED_CHUNKS) -> None:
        """``queued``: how many chunks may wait for the thread."""
        self._queue: queue.Queue[tuple[Callable[[bytes], None], bytes] | None] = queue.Queue(maxsize=queued)
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, call: Callable[[bytes], None], chunk: bytes) -> None:
        """Run ``call(chunk)`` after everything handed over before."""
        self._raise_failure()
        self._queue.put((call, chunk))

    def close(self) -> None:
        """Wait until everything handed over has run; raise the thread's failure, if any."""
        self.stop()
        self._raise_failure()

    def stop(self) -> None:
        """Wait for the thread to end, raising nothing (for a caller already failing)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._failure is None:
                call, chunk = item
                try:
                    call(chunk)
                except BaseException as exc:  # handed to the caller
                    self._failure = exc

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure


class LineWriter:
    """A file of lines written by a :class:`BackgroundWork`: ``work``'s, shared with other writers
    (whose chunks then run in one order), or one of its own.

    ``then`` also runs on each chunk, after it is written (on the same thread); with ``hashed``, the
    file's SHA-256 is taken as it is written (:attr:`sha256`), instead of reading it back."""

    def __init__(
        self,
        path: Path,
        work: BackgroundWork | None = None,
        *,
        hashed: bool = False,
        then: Callable[[bytes], None] | None = None,
    ) -> None:
        self.path = path
        self.lines = 0
        self._handle: BinaryIO = path.open("wb")  # first: a file that cannot open starts no thread
        self._own_work = work is None
        self._work = work if work is not None else BackgroundWork(f"write-{path.name}")
        self._digest = hashlib.sha256() if hashed else None
        self._then = then
        self._buffer = bytearray()

    def add(self, line: bytes) -> None:
        """One line, without its newline."""
        self._buffer += line
        self._buffer += b"\n"
        self.lines += 1
        if len(self._buffer) >= CHUNK_BYTES:
            self.hand_over()

    def hand_over(self) -> None:
        """Give the lines added so far to the thread."""
        if self._buffer:
            chunk = bytes(self._buffer)
            self._buffer.clear()
            self._work.submit(self._write, chunk)

    def close(self) -> None:
        """Hand over the last lines and close the file once they are written. With a shared
        ``work``, the file is complete when that work is closed; with its own, on return."""
        self.hand_over()
        self._work.submit(self._close, b"")
        if self._own_work:
            self._work.close()

    def abort(self) -> None:
        """Stop writing (the caller is failing): the file is left closed and incomplete."""
        self._work.stop()
        self._handle.close()

    @property
    def sha256(self) -> str:
        """The file's SHA-256 (hex), once it is complete."""
        if self._digest is None:
            raise ValueError(f"{self.path.name} was not hashed as it was written")
        return self._digest.hexdigest()

    def _write(self, chunk: bytes) -> None:
        self._handle.write(chunk)
        if self._digest is not None:
            self._digest.update(chunk)
        if self._then is not None:
            self._then(chunk)

    def _close(self, _chunk: bytes) -> None:
        self._handle.close()
