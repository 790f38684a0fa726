"""An in-memory index of example vectors: keys -> vectors, the best by dot product, with faiss.

The rule (what a vector is, the threshold, the exact similarity) is
:mod:`dynaval.domain.health.semantic_duplicates`; this adapter only finds the vectors whose dot product with
a query reaches a threshold, best first.

Up to :data:`EXACT_UP_TO` vectors it searches them all (``faiss.IndexFlatIP``: exact). Past that it
moves them into an inverted-file index (``faiss.IndexIVFFlat``, inner product): about sqrt(n) k-means
cells, and a search scans only the :data:`PROBES` cells nearest the query. Brute force over
1,000,000 x 384 float32 took about 300 ms a query on 2 cores; the cells take a few milliseconds. The
vectors are kept whole (float32), so every dot product reported is exact; what the cells cost is
recall: a vector in a cell the search does not scan is missed. On 1,000,000 random unit vectors
with planted near-duplicates (cosine 0.8 to 1 with their query: random vectors have no clusters,
the hardest case) the search finds about 98% of them (``benchmarks/semantic_index.py`` measures it
each run). The cells are trained again, on every vector then held, each time the index has grown
:data:`RETRAIN_GROWTH` times since the last training, so they follow the data.

Vectors added after training wait in a buffer of :data:`PENDING_ROWS`, searched by brute force,
before going into the cells together: a faiss add opens an OpenMP parallel region that cost 8 to
18 ms on the loaded 2-core machine, however few rows it carries.

Searches and adds are serialised by a lock: faiss does not allow an add during a search.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy
import numpy.typing as npt

EXACT_UP_TO = 20_000
"""Up to this many vectors every search is exact (a 384-wide flat scan of 20,000 rows takes a few
milliseconds)."""
PROBES = 48
"""Cells scanned per search of the inverted-file index."""
RETRAIN_GROWTH = 8
"""The cells are trained again when the index holds this many times the vectors they were trained on."""
PENDING_ROWS = 4096
"""Vectors added after training are searched by brute force until this many wait; then they go into
the cells in one add."""
TRAIN_POINTS_PER_CELL = 64
"""k-means runs on at most this many vectors per cell (a sample): enough for stable cells, and it
keeps training 1,000,000 vectors to seconds."""


def cells_for(count: int) -> int:
    """The number of k-means cells for ``count`` vectors: about the square root, at least 64."""
    return max(64, 1 << round(math.log2(max(1.0, math.sqrt(count)))))


class VectorIndex:
    """Vectors of one width by key; :meth:`search` gives the keys whose dot reaches a threshold."""

    def __init__(self, dimensions: int) -> None:
        if dimensions < 1:
            raise ValueError(f"dimensions must be at least 1, not {dimensions}")
        import faiss  # heavy import stays out of module import

        self._faiss: Any = faiss
        self.dimensions = dimensions
        self._lock = threading.Lock()
        self._index: Any = faiss.IndexFlatIP(dimensions)
        self._trained_on = 0
        # Vectors added since the cells were trained wait here, searched by brute force, and go into
        # the cells PENDING_ROWS at a time: one faiss add costs a few milliseconds (a parallel
        # region) however few rows it carries, so adding candidates one by one stays cheap.
        self._pending = numpy.zeros((0, dimensions), dtype=numpy.float32)
        self._pending_count = 0
        self._keys: list[str] = []
        self._positions: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._positions

    @property
    def exact(self) -> bool:
        """Whether a search scans every vector (small index) rather than the nearest cells."""
        return self._trained_on == 0

    def add(self, keys: Sequence[str], vectors: npt.ArrayLike) -> None:
        """Index ``vectors`` (one row per key, ``dimensions`` wide); a key is added once."""
        rows = numpy.ascontiguousarray(vectors, dtype=numpy.float32)
        if rows.ndim == 1 and len(keys) == 1:
            rows = rows.reshape(1, -1)
        if rows.ndim != 2 or rows.shape != (len(keys), self.dimensions):
            raise ValueError(
                f"expected {len(keys)} vectors of {self.dimensions} dimensions, got shape {rows.shape}"
            )
        fresh = [str(key) for key in keys]
        if len(set(fresh)) != len(fresh):
            raise ValueError("a key appears twice in one add")
        with self._lock:
            for key in fresh:
                if key in self._positions:
                    raise ValueError(f"{key} is in the index already")
            if not fresh:
                return
            count = len(self._keys) + len(fresh)
            if (self._trained_on == 0 and count > EXACT_UP_TO) or (
                self._trained_on and count >= RETRAIN_GROWTH * self._trained_on
            ):
                self._train(rows)
            elif self._trained_on == 0:
                self._index.add(rows)  # a flat index: an add is a copy
            else:
                self._add_to_cells(rows)
            for key in fresh:
                self._positions[key] = len(self._keys)
                self._keys.append(key)

    def _add_to_cells(self, rows: npt.NDArray[numpy.float32]) -> None:
        if self._pending_count + len(rows) > PENDING_ROWS:
            self._flush()
        if len(rows) >= PENDING_ROWS:
            self._index.add(rows)
            return
        if not len(self._pending):
            self._pending = numpy.zeros((PENDING_ROWS, self.dimensions), dtype=numpy.float32)
        self._pending[self._pending_count : self._pending_count + len(rows)] = rows
        self._pending_count += len(rows)

    def _flush(self) -> None:
        if self._pending_count:
            self._index.add(self._pending[: self._pending_count])
            self._pending_count = 0

    def _train(self, rows: npt.NDArray[numpy.float32]) -> None:
        """Move every vector held, and ``rows``, into an inverted-file index trained on them all."""
        faiss = self._faiss
        held = [self._index.reconstruct_n(0, self._index.ntotal)] if self._index.ntotal else []
        held += [self._pending[: self._pending_count]] if self._pending_count else []
        # A rebuild adds everything at once into an empty index: then ``rows`` are used as they are,
        # not copied (the index's own copy is the only other one).
        everything = numpy.concatenate([*held, rows]) if held else rows
        del held
        self._index.reset()  # its vectors are in ``everything`` now: do not hold them twice
        self._pending_count = 0
        count = len(everything)
        cells = cells_for(count)
        quantizer = faiss.IndexFlatIP(self.dimensions)
        index = faiss.IndexIVFFlat(quantizer, self.dimensions, cells, faiss.METRIC_INNER_PRODUCT)
        index.cp.max_points_per_centroid = TRAIN_POINTS_PER_CELL
        index.cp.seed = 1  # the same vectors give the same cells
        index.train(everything)
        index.add(everything)
        index.make_direct_map()  # reconstruct(key's position) for vector()
        index.nprobe = min(PROBES, cells)
        self._quantizer = quantizer  # faiss does not own it from Python: keep it alive
        self._index = index
        self._trained_on = count

    def vector(self, key: str) -> npt.NDArray[numpy.float32]:
        """The vector stored under ``key`` (a copy)."""
        with self._lock:
            position = self._positions[key]
            held = int(self._index.ntotal)
            if position >= held:
                row: npt.NDArray[numpy.float32] = self._pending[position - held].copy()
            else:
                row = self._index.reconstruct(position)
        return row

    def search(self, vector: npt.ArrayLike, *, threshold: float, limit: int) -> list[tuple[str, float]]:
        """The keys whose dot product with ``vector`` is at least ``threshold``, best first (ties by
        key), at most ``limit`` of them."""
        query = numpy.ascontiguousarray(vector, dtype=numpy.float32).reshape(1, -1)
        if query.shape[1] != self.dimensions:
            raise ValueError(f"expected a vector of {self.dimensions} dimensions, got shape {query.shape}")
        if limit < 1:
            return []
        with self._lock:
            if not self._keys:
                return []
            # faiss keeps inner products strictly above the radius: ask a hair lower, then keep >=.
            _limits, scores, ids = self._index.range_search(query, float(threshold) - 1e-6)
            hits = [
                (self._keys[int(i)], float(score))
                for i, score in zip(ids, scores, strict=True)
                if score >= threshold
            ]
            if self._pending_count:
                held = int(self._index.ntotal)
                pending = self._pending[: self._pending_count] @ query[0]
                hits += [
                    (self._keys[held + int(i)], float(pending[i]))
                    for i in numpy.flatnonzero(pending >= threshold)
                ]
        hits.sort(key=lambda hit: (-hit[1], hit[0]))
        return hits[:limit]
