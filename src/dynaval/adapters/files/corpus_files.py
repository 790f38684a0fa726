"""A training corpus on disk, read one document at a time (it may be far larger than memory).

Two layouts: ``.txt``, one document per line; ``.jsonl``, one JSON object per line with a string
``text`` (the field Hugging Face's text datasets and most pretraining dumps use). Blank lines are
skipped, but counted, so a reported line number is the file's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson

from dynaval.service_layer.health.ports import CorpusUnreadable

__all__ = ["CorpusUnreadable", "TextCorpora", "check_corpus", "iter_documents"]

SUFFIXES = (".txt", ".jsonl")


def check_corpus(path: Path) -> None:
    """Refuse, before any work, a corpus that is missing or in another layout."""
    if path.suffix not in SUFFIXES:
        raise CorpusUnreadable(
            f"--corpus {path.name}: a corpus is a .txt file (one document per line) "
            'or a .jsonl file (one {"text": ...} object per line)'
        )
    if not path.is_file():
        raise CorpusUnreadable(f"--corpus {path}: no such file")


def iter_documents(path: Path) -> Iterator[tuple[int, str]]:
    """Each document and its 1-based line number."""
    check_corpus(path)
    jsonl = path.suffix == ".jsonl"
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.rstrip(b"\r\n")
            if not line.strip():
                continue
            if not jsonl:
                yield number, line.decode("utf-8", errors="replace")
                continue
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                raise CorpusUnreadable(f"--corpus {path.name} line {number}: not JSON") from None
            text = record.get("text") if isinstance(record, dict) else None
            if not isinstance(text, str):
                raise CorpusUnreadable(f'--corpus {path.name} line {number}: no string "text" field')
            yield number, text


class TextCorpora:
    """The health room's :class:`~dynaval.service_layer.health.ports.CorpusFiles`: these two layouts."""

    def check(self, path: Path) -> None:
        check_corpus(path)

    def documents(self, path: Path) -> Iterator[tuple[int, str]]:
        return iter_documents(path)
