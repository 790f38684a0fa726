"""The health room's ports: the sentence encoder, each process's index of every stored example's
vector, a release's lexical index and corpora, as the near-duplicate, leak and contamination checks
use them. Their adapters are :class:`~dynaval.adapters.sentence_encoder.SentenceEncoder` (MiniLM,
offline), :class:`~dynaval.adapters.health.semantic_index.SemanticVectors`,
:class:`~dynaval.adapters.health.minhash_process.MinHashProcess` and
:mod:`dynaval.adapters.files.corpus_files`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

import numpy
import numpy.typing as npt


class Encoder(Protocol):
    """Texts -> unit vectors (float32, ``dimensions`` wide): the cosine of two is their dot product."""

    @property
    def dimensions(self) -> int: ...

    def encode(self, texts: Sequence[str]) -> npt.NDArray[numpy.float32]: ...


class SemanticIndex(Protocol):
    """The encoder and, per task type, the vectors of every stored example this process has read
    (topped up from the database before each check)."""

    def encode(
        self, examples: Sequence[Mapping[str, str]], fields: Sequence[str]
    ) -> list[npt.NDArray[numpy.float32]]:
        """Each example's vector: its fields encoded in one batch, then joined."""

    def last_seq(self, task_type: str, fields: int) -> int: ...

    def top_up(self, task_type: str, fields: int, rows: Iterable[tuple[int, str, bytes | None]]) -> None:
        """Add stored rows ``(seq, candidate id, vector bytes)`` read after :meth:`last_seq`."""

    def matches(
        self, task_type: str, fields: int, vector: npt.NDArray[numpy.float32], *, threshold: float, limit: int
    ) -> list[tuple[str, float]]:
        """The indexed examples whose smallest field cosine with ``vector`` reaches ``threshold``."""

    def matches_soon(
        self, task_type: str, fields: int, vector: npt.NDArray[numpy.float32], *, threshold: float, limit: int
    ) -> Future[list[tuple[str, float]]]:
        """:meth:`matches`, on a thread of its own."""

    def size(self, task_type: str, fields: int) -> int: ...

    def close(self) -> None: ...

    def forget(self) -> None:
        """Drop every vector held in memory (the next check reloads them from the database)."""


class ReleaseIndex(Protocol):
    """What a release's leak scan asks of its lexical index: the domain's
    :class:`~dynaval.domain.health.minhash.MinHashIndex`, or the same index in a child process
    (:class:`~dynaval.adapters.health.minhash_process.MinHashProcess`)."""

    def add_inputs(
        self, key: str, inputs: Mapping[str, Any], fields: Sequence[str], side: int | None = None
    ) -> None:
        """A row; rows given one ``side`` are not paired with each other (None: with every row)."""

    def ask(self) -> None:
        """Every row is added: an index that works beside the caller starts finding its pairs now,
        and :meth:`pairs` then waits for them; an index in the caller's process does nothing."""

    def pairs(self) -> Iterable[tuple[str, str, float]]: ...

    def close(self) -> None: ...


class CorpusUnreadable(Exception):
    """The corpus cannot be read as one; the message says where and why."""


class CorpusFiles(Protocol):
    """A training corpus on disk, read one document at a time (it may be far larger than memory)."""

    def check(self, path: Path) -> None:
        """Refuse (:class:`CorpusUnreadable`), before any work, a corpus missing or in another layout."""

    def documents(self, path: Path) -> Iterator[tuple[int, str]]:
        """Each document and its 1-based line number."""
