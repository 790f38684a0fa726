"""The semantic half of the near-duplicate index at submission: each process's vectors, loaded from
the database on first use and topped up before each check.

Every example's vector (:func:`dynaval.domain.health.semantic_duplicates.example_vector` of its fields'
MiniLM embeddings) is stored, float16, with its row of ``near_duplicate_example`` in the unit of
work that stores the example; the row's ``seq`` only grows. A process keeps one
:class:`~dynaval.domain.health.vector_index.VectorIndex` per task type and the last ``seq`` it read, and
before each check adds the rows stored since (by any process): so every process sees every example,
a restart reloads them, and nothing needs to be rebuilt in memory by hand.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy
import numpy.typing as npt

from dynaval.adapters.sentence_encoder import SentenceEncoder
from dynaval.domain.health.semantic_duplicates import example_vector, field_cosines, from_bytes
from dynaval.domain.health.vector_index import VectorIndex


@functools.lru_cache(maxsize=4)
def shared_encoder(folder: Path | None = None) -> SentenceEncoder:
    """One encoder per process (its model loads on first use)."""
    return SentenceEncoder(folder)


class _TaskVectors:
    def __init__(self, dimensions: int) -> None:
        self.index = VectorIndex(dimensions)
        self.last_seq = 0


class SemanticVectors:
    """The encoder and, per task type, the vectors of every stored example this process has read."""

    def __init__(self, encoder: SentenceEncoder | None = None) -> None:
        self._encoder = encoder or shared_encoder()
        self._lock = threading.Lock()
        self._tasks: dict[tuple[str, int], _TaskVectors] = {}
        self._searcher: ThreadPoolExecutor | None = None

    def encode(
        self, examples: Sequence[Mapping[str, str]], fields: Sequence[str]
    ) -> list[npt.NDArray[numpy.float32]]:
        """Each example's vector: its fields encoded in one batch, then joined."""
        if not examples:
            return []
        texts = [str(example.get(name) or "") for example in examples for name in fields]
        rows = self._encoder.encode(texts).reshape(len(examples), len(fields), -1)
        return [example_vector(row) for row in rows]

    def _vectors(self, task_type: str, fields: int) -> _TaskVectors:
        key = (task_type, fields)
        if key not in self._tasks:
            self._tasks[key] = _TaskVectors(self._encoder.dimensions * fields)
        return self._tasks[key]

    def last_seq(self, task_type: str, fields: int) -> int:
        with self._lock:
            return self._vectors(task_type, fields).last_seq

    def top_up(self, task_type: str, fields: int, rows: Iterable[tuple[int, str, bytes | None]]) -> None:
        """Add stored rows ``(seq, candidate id, vector bytes)`` read after :meth:`last_seq`; a row
        without a vector is passed over."""
        with self._lock:
            vectors = self._vectors(task_type, fields)
            keys, found = [], []
            for seq, candidate_id, data in rows:
                if seq <= vectors.last_seq:
                    continue
                vectors.last_seq = seq
                if data is None or candidate_id in vectors.index:
                    continue
                vector = from_bytes(data)
                if vector.shape != (vectors.index.dimensions,):
                    continue  # encoded by another model: not comparable
                keys.append(candidate_id)
                found.append(vector)
            if keys:
                vectors.index.add(keys, numpy.stack(found))

    def matches(
        self, task_type: str, fields: int, vector: npt.NDArray[numpy.float32], *, threshold: float, limit: int
    ) -> list[tuple[str, float]]:
        """The indexed examples whose smallest field cosine with ``vector`` reaches ``threshold``,
        most similar first: found by their mean cosine (never below the smallest), then confirmed."""
        with self._lock:
            vectors = self._vectors(task_type, fields)
            hits = vectors.index.search(vector, threshold=threshold, limit=max(limit * 4, 20))
            confirmed = []
            for key, _mean in hits:
                value = field_cosines(vector, vectors.index.vector(key), fields)
                if value >= threshold:
                    confirmed.append((key, round(value, 4)))
        confirmed.sort(key=lambda hit: (-hit[1], hit[0]))
        return confirmed[:limit]

    def matches_soon(
        self, task_type: str, fields: int, vector: npt.NDArray[numpy.float32], *, threshold: float, limit: int
    ) -> Future[list[tuple[str, float]]]:
        """:meth:`matches`, run on a thread of its own: the search (faiss, which lets go of the GIL)
        proceeds while the caller does the lexical half of the check."""
        with self._lock:
            if self._searcher is None:
                self._searcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="semantic-search")
            searcher = self._searcher
        return searcher.submit(self.matches, task_type, fields, vector, threshold=threshold, limit=limit)

    def close(self) -> None:
        """Stop the search thread (a later search starts another)."""
        with self._lock:
            searcher, self._searcher = self._searcher, None
        if searcher is not None:
            searcher.shutdown(wait=True)

    def size(self, task_type: str, fields: int) -> int:
        with self._lock:
            return len(self._vectors(task_type, fields).index)

    def forget(self) -> None:
        """Drop every vector held in memory (the next check reloads them from the database)."""
        with self._lock:
            self._tasks.clear()
