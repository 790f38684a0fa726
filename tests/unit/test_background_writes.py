"""Lines written by a thread beside the caller: the file must be whole and in order once closed, its
hash taken as it was written must be the file's, and a failure on the thread must reach the caller."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

from dynaval.adapters.files import background_writes
from dynaval.adapters.files.background_writes import BackgroundWork, LineWriter


def test_lines_come_out_whole_in_order_and_hashed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background_writes, "CHUNK_BYTES", 64)  # many chunks, some lines longer than one
    lines = [f"line {i} ".encode() * (i % 23) for i in range(500)]
    seen: list[bytes] = []
    writer = LineWriter(tmp_path / "a.jsonl", hashed=True, then=seen.append)
    for line in lines:
        writer.add(line)
    writer.close()
    data = (tmp_path / "a.jsonl").read_bytes()
    assert data == b"".join(line + b"\n" for line in lines)
    assert b"".join(seen) == data and len(seen) > 50  # every chunk went to `then`, in order
    assert all(chunk.endswith(b"\n") for chunk in seen)  # whole lines only
    assert writer.sha256 == hashlib.sha256(data).hexdigest()
    assert writer.lines == 500


def test_a_failure_on_the_thread_reaches_the_caller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background_writes, "CHUNK_BYTES", 16)

    def refuse(chunk: bytes) -> None:
        if b"bad" in chunk:
            raise ValueError("a bad chunk")

    work = BackgroundWork("test-writes")
    writer = LineWriter(tmp_path / "b.jsonl", work, then=refuse)
    with pytest.raises(ValueError, match="a bad chunk"):
        for i in range(10_000):  # the failure is raised at a later hand-over, or at close
            writer.add(b"bad line" if i == 3 else b"a good line")
        writer.close()
        work.close()
    writer.abort()
    assert not work.running


def test_a_file_that_cannot_open_starts_no_thread(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    with pytest.raises(FileNotFoundError):
        LineWriter(tmp_path / "missing" / "c.jsonl")
    assert {t for t in threading.enumerate() if t.is_alive()} <= before
