"""Reading a page ahead of the caller, in a thread of its own."""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator, Iterator
from typing import Any, TypeVar

_END = object()
_Page = TypeVar("_Page")


def read_ahead(pages: Generator[_Page, None, None]) -> Iterator[_Page]:
    """``pages``, read by a thread one page ahead of the caller.

    The database's share of a page (SQLite's own work, which runs without the GIL; PostgreSQL's,
    in the server) then overlaps the caller's building and writing of the page before. At most
    three pages are held: the caller's, the one waiting for it, and the one the thread has just
    read and waits to hand over. An error of the read is raised to the caller;
    when the caller stops early, the thread stops after the read in flight.
    """
    handoff: queue.Queue[Any] = queue.Queue(maxsize=1)
    stopping = threading.Event()

    def offer(item: Any) -> bool:
        while not stopping.is_set():
            try:
                handoff.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for page in pages:
                offered = offer(page)
                del page  # not held while the next page is read: the caller may be done with it
                if not offered:
                    return
            offer(_END)
        except BaseException as exc:  # handed to the caller, which raises it
            offer(exc)
        finally:
            pages.close()

    reader = threading.Thread(target=read, name="dataset-read-ahead", daemon=True)
    reader.start()
    try:
        while True:
            item = handoff.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stopping.set()
        reader.join()
