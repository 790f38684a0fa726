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
part of it at that size (past 20,000 rows, one search a row is most of the rest; docs/benchmarks.md).

So at ``release create`` a row whose example has a vector stored at submission (float16, by the
submission check; ``stored``) is not encoded again: its stored vector stands in for it. Rounding
moves a mean or per-field cosine by less than
:data:`~dynaval.domain.health.semantic_duplicates.STORED_MARGIN`, so before any pair is searched,
every such row that the index finds within that margin of the threshold of another row (searched at
``threshold - STORED_MARGIN``, by the mean cosine the index ranks by) is encoded after all; and a
search for pairs that still meets a row on its stored vector (the inverted cells' recall is not
symmetric) encodes it and starts again. So every hit a search ranks, every pair and every
similarity comes from encoded float32 vectors, as when every row is encoded: the same pairs, links
and clusters, up to the last bits that the encoder's batches change (its padding) and the index's
recall past 20,000 rows, as for any two runs. The rows far from every other cost a lookup and a
search instead of the encoder.
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
LOOKUP_BATCH = 500
"""Examples whose stored vectors are read in one call (bound parameters of one statement)."""

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
        self._on_store: npt.NDArray[numpy.bool_] = numpy.zeros(0, dtype=bool)
        """Which rows still stand on their stored vectors (once encoded)."""
        self._pairs: list[tuple[str, str, float]] | None = None
        self._links: list[tuple[str, str]] = []
        self.encoded_count = 0
        """Rows encoded so far (rows near a neighbour, whose stored vector did not stand in, included)."""

    @property
    def on_store_count(self) -> int:
        """Rows whose stored vector stands in for encoding them."""
        return int(self._on_store.sum())

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
        on_store = self._fill_stored(vectors)
        missing = numpy.flatnonzero(~on_store)
        if len(missing):
            vectors[missing] = self._encode(missing)
        stored = int(on_store.sum())
        again = self._settle(vectors, on_store) if stored else 0
        self._encoded, self._on_store = vectors, on_store
        if stored:
            log.info(
                "semantic check: %d of %d rows on their stored vectors; %d encoded, %d of them stored "
                "but near a neighbour",
                self.on_store_count,
                len(self._keys),
                self.encoded_count,
                again,
            )
        self._let_texts_go()
        return self._encoded

    def _let_texts_go(self) -> None:
        """The texts are needed while a row stands on its stored vector (it may be encoded yet)."""
        if not self._on_store.any():
            self._texts = []

    def _fill_stored(self, vectors: npt.NDArray[numpy.float32]) -> npt.NDArray[numpy.bool_]:
        """Put the rows' stored vectors (float16, made float32) into ``vectors`` where a row's
        example has one of the encoder's width (another width is another encoder's), and say
        which rows have one."""
        on_store = numpy.zeros(len(self._keys), dtype=bool)
        if self._stored is None:
            return on_store
        size = vectors.shape[1] * numpy.dtype(STORED_DTYPE).itemsize
        for start in range(0, len(self._ids), LOOKUP_BATCH):
            ids = self._ids[start : start + LOOKUP_BATCH]
            found = self._stored([i for i in ids if i is not None])
            for offset, example_id in enumerate(ids):
                data = found.get(example_id) if example_id is not None else None
                if data is not None and len(data) == size:
                    vectors[start + offset] = from_bytes(data)
                    on_store[start + offset] = True
        return on_store

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
        self.encoded_count += len(positions)
        return numpy.concatenate(parts)

    def _settle(self, vectors: npt.NDArray[numpy.float32], on_store: npt.NDArray[numpy.bool_]) -> int:
        """Encode every row on its stored vector that the index finds at or above ``threshold -
        STORED_MARGIN`` of another row (by the mean cosine it ranks by), searched from each such row
        and, once the index has cells (past ``EXACT_UP_TO`` rows, where recall is not symmetric),
        from every row; clear their marks in ``on_store``. How many were encoded."""
        index = VectorIndex(vectors.shape[1])
        index.add(self._keys, vectors)
        low = self.rule.threshold - STORED_MARGIN
        where = {key: position for position, key in enumerate(self._keys)}
        # A row's own search marks it: one other hit is enough, its nearest HITS_PER_ROW plenty.
        limit = min(len(index), HITS_PER_ROW + 1)
        searched = range(len(self._keys)) if not index.exact else map(int, numpy.flatnonzero(on_store))
        near: set[int] = set()
        for position in searched:
            key = self._keys[position]
            for other, _mean in index.search(vectors[position], threshold=low, limit=limit):
                if other == key:
                    continue
                if on_store[position]:
                    near.add(position)
                if on_store[where[other]]:
                    near.add(where[other])
        self._encode_instead(vectors, on_store, near)
        return len(near)

    def _encode_instead(
        self, vectors: npt.NDArray[numpy.float32], on_store: npt.NDArray[numpy.bool_], rows: set[int]
    ) -> None:
        """Encode ``rows`` (standing on their stored vectors) into ``vectors``, and unmark them."""
        if rows:
            positions = numpy.array(sorted(rows), dtype=numpy.intp)
            vectors[positions] = self._encode(positions)
            on_store[positions] = False

    def _still_stored(self, positions: set[int]) -> bool:
        """Encode those of ``positions`` still on their stored vectors (a search met them, past the
        index's recall at settling): whether there were any, so the search starts again."""
        late = {p for p in positions if self._on_store[p]}
        if late and self._encoded is not None:
            self._encode_instead(self._encoded, self._on_store, late)
            log.info(
                "semantic check: %d more rows encoded, met by a search on their stored vectors", len(late)
            )
            self._let_texts_go()
        return bool(late)

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
        while True:
            found = self._find_in(vectors)
            if found is not None:
                return found

    def _find_in(self, vectors: npt.NDArray[numpy.float32]) -> list[tuple[str, str, float]] | None:
        """:meth:`pairs` (and :attr:`_links`) over ``vectors``; ``None`` when a hit met a row on its
        stored vector, now encoded: search again."""
        index = VectorIndex(vectors.shape[1])
        index.add(self._keys, vectors)
        found: dict[tuple[str, str], float] = {}
        fields, threshold = len(self.fields), self.rule.threshold
        components = Components()
        root = components.root
        self._links = []
        stored = self._on_store.any()
        where = {key: position for position, key in enumerate(self._keys)} if stored else {}
        met: set[int] = set()
        for position, key in enumerate(self._keys):
            # Every hit (the search finds them all at the threshold): the nearest are pairs, the
            # rest only links where they join what is not connected yet. The index ranks by mean
            # field cosine (never below the smallest): confirm each hit.
            hits = index.search(vectors[position], threshold=threshold, limit=len(index))
            if stored:  # a hit on a stored vector (recall past settling): encode it, search again
                on_store = self._on_store
                for other, _mean in hits:
                    if other != key and (on_store[position] or on_store[where[other]]):
                        met.update((position, where[other]))
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
        if self._still_stored(met):
            return None
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
        while True:
            found = self._crossing_in(vectors, kind_of)
            if found is not None:
                return found

    def _crossing_in(
        self, vectors: npt.NDArray[numpy.float32], kind_of: Callable[[str], Hashable | None]
    ) -> list[tuple[str, str, float]] | None:
        """:meth:`crossing_pairs` over ``vectors``; ``None`` when a hit met a row on its stored
        vector, now encoded: search again."""
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
        met: set[int] = set()
        for one, other in combinations(by_kind, 2):
            smaller, larger = sorted((one, other), key=lambda kind: len(by_kind[kind]))
            searched = indexes[larger]
            for position in by_kind[smaller]:
                key = self._keys[position]
                for hit, _mean in searched.search(
                    vectors[position], threshold=threshold, limit=len(searched)
                ):
                    if self._on_store[position] or self._on_store[where[hit]]:
                        met.update((position, where[hit]))
                    value = field_cosines(vectors[position], vectors[where[hit]], fields)
                    if value >= threshold:
                        found[(key, hit) if key < hit else (hit, key)] = round(value, 4)
        if self._still_stored(met):
            return None
        return [(a, b, sim) for (a, b), sim in sorted(found.items())]
