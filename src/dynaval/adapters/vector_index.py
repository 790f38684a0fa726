"""An in-memory index of example vectors: keys -> vectors, top-k by dot product.

The rule (what a vector is, the threshold, the exact similarity) is
:mod:`dynaval.domain.semantic_duplicates`; this adapter only finds the vectors whose dot product with
a query reaches a threshold, best first. It is exact brute force over a contiguous float32 matrix
that grows by doubling, searched in blocks so a search never allocates more than one block of scores.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy
import numpy.typing as npt

_BLOCK_ROWS = 65_536


class VectorIndex:
    """Vectors of one width by key; :meth:`search` gives the keys whose dot reaches a threshold."""

    def __init__(self, dimensions: int) -> None:
        if dimensions < 1:
            raise ValueError(f"dimensions must be at least 1, not {dimensions}")
        self.dimensions = dimensions
        self._vectors = numpy.zeros((0, dimensions), dtype=numpy.float32)
        self._count = 0
        self._keys: list[str] = []
        self._positions: dict[str, int] = {}

    def __len__(self) -> int:
        return self._count

    def __contains__(self, key: object) -> bool:
        return key in self._positions

    def add(self, keys: Sequence[str], vectors: npt.ArrayLike) -> None:
        """Index ``vectors`` (one row per key, ``dimensions`` wide); a key is added once."""
        rows = numpy.asarray(vectors, dtype=numpy.float32)
        if rows.ndim == 1 and len(keys) == 1:
            rows = rows.reshape(1, -1)
        if rows.ndim != 2 or rows.shape != (len(keys), self.dimensions):
            raise ValueError(
                f"expected {len(keys)} vectors of {self.dimensions} dimensions, got shape {rows.shape}"
            )
        fresh = [str(key) for key in keys]
        if len(set(fresh)) != len(fresh):
            raise ValueError("a key appears twice in one add")
        for key in fresh:
            if key in self._positions:
                raise ValueError(f"{key} is in the index already")
        needed = self._count + len(fresh)
        if needed > self._vectors.shape[0]:
            capacity = max(needed, 2 * self._vectors.shape[0], 1024)
            grown = numpy.zeros((capacity, self.dimensions), dtype=numpy.float32)
            grown[: self._count] = self._vectors[: self._count]
            self._vectors = grown
        self._vectors[self._count : needed] = rows
        for offset, key in enumerate(fresh):
            self._positions[key] = self._count + offset
        self._keys.extend(fresh)
        self._count = needed

    def vector(self, key: str) -> npt.NDArray[numpy.float32]:
        """The vector stored under ``key`` (a copy)."""
        row: npt.NDArray[numpy.float32] = self._vectors[self._positions[key]].copy()
        return row

    def search(self, vector: npt.ArrayLike, *, threshold: float, limit: int) -> list[tuple[str, float]]:
        """The keys whose dot product with ``vector`` is at least ``threshold``, best first (ties by
        key), at most ``limit`` of them."""
        query = numpy.asarray(vector, dtype=numpy.float32).reshape(-1)
        if query.shape != (self.dimensions,):
            raise ValueError(f"expected a vector of {self.dimensions} dimensions, got shape {query.shape}")
        if limit < 1 or self._count == 0:
            return []
        hits: list[tuple[str, float]] = []
        for start in range(0, self._count, _BLOCK_ROWS):
            stop = min(start + _BLOCK_ROWS, self._count)
            scores = self._vectors[start:stop] @ query
            found = numpy.flatnonzero(scores >= threshold)
            hits.extend((self._keys[start + int(i)], float(scores[i])) for i in found)
        hits.sort(key=lambda hit: (-hit[1], hit[0]))
        return hits[:limit]
