"""Semantic near-duplicates among many rows at once: a release's rows and the earlier releases' test
rows at ``release create``, a release's files at ``release verify``.

The rule is the submission check's (:mod:`dynaval.domain.health.semantic_duplicates`): every input field
encoded on its own by MiniLM (:mod:`dynaval.adapters.sentence_encoder`, offline), a pair's
similarity the smallest of its fields' cosines. The rows' texts are kept until the pairs are asked
for, then encoded in batches of :data:`ENCODE_BATCH` examples into one
:class:`~dynaval.domain.health.vector_index.VectorIndex` (exact up to 20,000 rows, inverted cells past
that); every row is searched at the threshold and each hit confirmed by its per-field cosines.
At ``release create`` a row's :data:`HITS_PER_ROW` nearest hits are its pairs, and further hits
only link what no pair connects yet (a pattern repeated thousands of times costs no millions of
confirmations, and its clusters lose no link). At ``release verify`` the pairs across kinds of split
are searched without a cap, kind against kind (:meth:`SemanticRows.crossing_pairs`).
Encoding is the cost: on two free cores MiniLM encodes about 300 short rows a second (3,000
one-field rows took 8.8 s quiet and 189 s under load; docs/releases.md, "Cost"), the search a small
part of it.

So at ``release create`` a row whose example has a vector stored at submission (float16, by the
submission check; ``stored``) is not encoded again: its stored vector stands in for it. Rounding
moves a cosine by less than :data:`~dynaval.domain.health.semantic_duplicates.STORED_MARGIN`, so
before any pair is searched, every such row with a neighbour within that margin of the threshold
(searched at ``threshold - STORED_MARGIN``) is encoded after all, and every pair the rule finds, and
every similarity it states, comes from encoded float32 vectors, as without the stored ones. A row
encoded again is one that is near something; the rest of the rows cost a lookup and a search.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from itertools import combinations
from typing import Any

import numpy
import numpy.typing as npt

from dynaval.domain.health.near_duplicates import Components
from dynaval.domain.health.semantic_duplicates import (
    STORED_DTYPE,
    STORED_MARGIN,
    SemanticRule,
    example_vectors,
    field_cosines,
    from_bytes,
)
from dynaval.domain.health.vector_index import VectorIndex
from dynaval.service_layer.health.ports import Encoder

ENCODE_BATCH = 512
"""Examples whose fields are encoded in one call (the encoder batches them further)."""
HITS_PER_ROW = 100
"""At most this many neighbours of one row are its pairs (:meth:`SemanticRows.pairs`); a hit beyond
them is confirmed only where it links rows not connected yet (:meth:`SemanticRows.links`)."""
LOOKUP_BATCH = 5000
"""Examples whose stored vectors are read in one call."""

StoredVectors = Callable[[Sequence[str]], Mapping[str, bytes]]
"""Example ids -> the vectors stored for them at submission (float16 bytes; an id with none is left out)."""

log = logging.getLogger(__name__)


class SemanticRows:
    """Rows by key, encoded when :meth:`pairs`, :meth:`links` or :meth:`crossing_pairs` is first
    asked for."""

    def __init__(
        self,
        fields: Sequence[str],
        rule: SemanticRule,
        encoder: Callable[[], Encoder],
        stored: StoredVectors | None = None,
    ) -> None:
        """``encoder`` gives the encoder when rows are first encoded (it raises ``InvalidInput`` or
        ``ImportError`` when it cannot load); ``stored`` reads the vectors stored for rows'
        ``example_id`` (``None``: every row is encoded)."""
        if not fields:
            raise ValueError("semantic near-duplicates need at least one input field")
        self.fields = list(fields)
        self.rule = rule
        self._encoder = encoder
        self._stored = stored
        self._keys: list[str] = []
        self._ids: list[str | None] = []
        self._texts: list[str] = []
        self._encoded: npt.NDArray[numpy.float32] | None = None
        self._pairs: list[tuple[str, str, float]] | None = None
        self._links: list[tuple[str, str]] = []
        self.from_store = 0
        """Rows whose stored vector stood in for them (known once encoded)."""
        self.encoded = 0
        """Rows encoded (those near something among ``from_store`` included)."""

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: str, row: Mapping[str, Any]) -> None:
        if self._encoded is not None:
            raise RuntimeError("rows cannot be added once they are encoded")
        self._keys.append(key)
        example_id = row.get("example_id")
        self._ids.append(example_id if isinstance(example_id, str) else None)
        self._texts.extend(str(row.get(name) or "") for name in self.fields)

    def _vectors(self) -> npt.NDArray[numpy.float32]:
        if self._encoded is not None:
            return self._encoded
        width = len(self.fields) * self._encoder().dimensions
        vectors = numpy.empty((len(self._keys), width), dtype=numpy.float32)
        from_store = self._fill_stored(vectors)
        missing = numpy.flatnonzero(~from_store)
        if len(missing):
            vectors[missing] = self._encode(missing)
        self._encoded = vectors
        stored = int(from_store.sum())
        if stored:
            again = self._settle(vectors, from_store)
            self.from_store = stored - again
            log.info(
                "semantic check: %d of %d rows on their stored vectors; %d encoded, %d of them stored "
                "but near a neighbour",
                self.from_store,
                len(self._keys),
                self.encoded,
                again,
            )
        self._texts = []  # encoded: the texts are not needed again
        return self._encoded

    def _fill_stored(self, vectors: npt.NDArray[numpy.float32]) -> npt.NDArray[numpy.bool_]:
        """Put the rows' stored vectors (float16 made float32) into ``vectors``, where a row's
        example has one of the encoder's width (one of another width is another encoder's): which
        rows they are."""
        from_store = numpy.zeros(len(self._keys), dtype=bool)
        if self._stored is None:
            return from_store
        for start in range(0, len(self._ids), LOOKUP_BATCH):
            ids = self._ids[start : start + LOOKUP_BATCH]
            found = self._stored([i for i in ids if i is not None])
            for offset, example_id in enumerate(ids):
                data = found.get(example_id) if example_id is not None else None
                if data is None or len(data) != vectors.shape[1] * STORED_DTYPE(0).itemsize:
                    continue
                vectors[start + offset] = from_bytes(data)
                from_store[start + offset] = True
        return from_store

    def _encode(self, positions: npt.NDArray[numpy.intp]) -> npt.NDArray[numpy.float32]:
        """The rows at ``positions`` encoded, as :func:`example_vectors` joins their fields."""
        encoder = self._encoder()
        width = len(self.fields)
        parts = []
        for start in range(0, len(positions), ENCODE_BATCH):
            texts = [
                self._texts[position * width + field]
                for position in positions[start : start + ENCODE_BATCH]
                for field in range(width)
            ]
            parts.append(example_vectors(encoder.encode(texts).reshape(len(texts) // width, width, -1)))
        self.encoded += len(positions)
        return numpy.concatenate(parts)

    def _settle(self, vectors: npt.NDArray[numpy.float32], from_store: npt.NDArray[numpy.bool_]) -> int:
        """Encode every row standing on its stored vector that has a neighbour within
        :data:`STORED_MARGIN` of the threshold (the rows far from all others keep theirs: no pair,
        no link can come from them); how many were encoded. Each such row is searched at
        ``threshold - STORED_MARGIN``; a confirmed hit marks it and, when stored too, the hit (so a
        pair is settled from either side, whatever the index's recall); a row whose
        :data:`HITS_PER_ROW` nearest confirm none is searched again for all its hits."""
        index = VectorIndex(vectors.shape[1])
        index.add(self._keys, vectors)
        where = {key: position for position, key in enumerate(self._keys)}
        fields, low = len(self.fields), self.rule.threshold - STORED_MARGIN
        near: set[int] = set()
        for position in map(int, numpy.flatnonzero(from_store)):
            key, limit = self._keys[position], min(len(index), HITS_PER_ROW)
            while True:
                hits = index.search(vectors[position], threshold=low, limit=limit)
                for other, _mean in hits:
                    other_position = where[other]
                    if other == key or (
                        position in near and (other_position in near or not from_store[other_position])
                    ):
                        continue  # itself, or nothing left to learn from the pair
                    if field_cosines(vectors[position], vectors[other_position], fields) >= low:
                        near.add(position)
                        if from_store[other_position]:
                            near.add(other_position)
                if position in near or len(hits) < limit or limit >= len(index):
                    break
                limit = len(index)
        if near:
            positions = numpy.array(sorted(near), dtype=numpy.intp)
            vectors[positions] = self._encode(positions)
        return len(near)

    def pairs(self) -> list[tuple[str, str, float]]:
        """Pairs ``(a, b, similarity)`` at or above the rule's threshold, ``a < b``, each once, in
        key order: those among each row's :data:`HITS_PER_ROW` nearest. A row with more near rows
        than that leaves some out; :meth:`links` adds what connects them, :meth:`crossing_pairs`
        finds every pair across kinds."""
        if self._pairs is None:
            self._pairs = self._find() if self._keys else []
        return self._pairs

    def links(self) -> list[tuple[str, str]]:
        """Confirmed pairs beyond :meth:`pairs`' cap that join rows no pair or earlier link
        connects: with :meth:`pairs`, the connected components of every pair (for clusters)."""
        self.pairs()
        return self._links

    def _find(self) -> list[tuple[str, str, float]]:
        vectors = self._vectors()
        index = VectorIndex(vectors.shape[1])
        index.add(self._keys, vectors)
        found: dict[tuple[str, str], float] = {}
        fields, threshold = len(self.fields), self.rule.threshold
        components = Components()
        root = components.root
        for position, key in enumerate(self._keys):
            # Every hit (the search finds them all at the threshold): the nearest are pairs, the
            # rest only links where they join what is not connected yet. The index ranks by mean
            # field cosine (never below the smallest): confirm each hit.
            hits = index.search(vectors[position], threshold=threshold, limit=len(index))
            for rank, (other, _mean) in enumerate(hits):
                if other == key:
                    continue
                pair = (key, other) if key < other else (other, key)
                if rank < HITS_PER_ROW:
                    if pair not in found:
                        value = field_cosines(vectors[position], index.vector(other), fields)
                        if value >= threshold:
                            found[pair] = round(value, 4)
                            components.attach(other, to=key)
                elif (
                    root(key) != root(other)
                    and field_cosines(vectors[position], index.vector(other), fields) >= threshold
                ):
                    components.attach(other, to=key)
                    self._links.append(pair)
        return [(a, b, sim) for (a, b), sim in sorted(found.items())]

    def crossing_pairs(self, kind_of: Callable[[str], Hashable | None]) -> list[tuple[str, str, float]]:
        """Every pair ``(a, b, similarity)`` at or above the threshold whose rows are of different
        kinds (``kind_of``; ``None``: a row left out), ``a < b``, each once, in key order: not capped
        as :meth:`pairs` is, so a row's many near rows of its own kind hide none. Each kind's rows
        go into an index of their own (together, every row once), and for each two kinds the rows
        of the smaller are searched in the larger's index for all their hits."""
        if not self._keys:
            return []
        vectors = self._vectors()
        by_kind: dict[Hashable, list[int]] = {}
        for position, key in enumerate(self._keys):
            kind = kind_of(key)
            if kind is not None:
                by_kind.setdefault(kind, []).append(position)
        indexes: dict[Hashable, VectorIndex] = {}
        for kind, positions in by_kind.items():
            indexes[kind] = VectorIndex(vectors.shape[1])
            indexes[kind].add([self._keys[p] for p in positions], vectors[positions])
        where = {self._keys[p]: p for positions in by_kind.values() for p in positions}
        found: dict[tuple[str, str], float] = {}
        fields, threshold = len(self.fields), self.rule.threshold
        for one, other in combinations(by_kind, 2):
            smaller, larger = sorted((one, other), key=lambda kind: len(by_kind[kind]))
            searched = indexes[larger]
            for position in by_kind[smaller]:
                key = self._keys[position]
                for hit, _mean in searched.search(
                    vectors[position], threshold=threshold, limit=len(searched)
                ):
                    value = field_cosines(vectors[position], vectors[where[hit]], fields)
                    if value >= threshold:
                        found[(key, hit) if key < hit else (hit, key)] = round(value, 4)
        return [(a, b, sim) for (a, b), sim in sorted(found.items())]
