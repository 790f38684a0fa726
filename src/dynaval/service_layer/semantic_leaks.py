"""Semantic near-duplicates among many rows at once: a release's rows and the earlier releases' test
rows at ``release create``, a release's files at ``release verify``.

The rule is the submission check's (:mod:`dynaval.domain.semantic_duplicates`): every input field
encoded on its own by MiniLM (:mod:`dynaval.adapters.sentence_encoder`, offline), a pair's
similarity the smallest of its fields' cosines. The rows' texts are kept until the pairs are asked
for, then encoded in batches of :data:`ENCODE_BATCH` examples into one
:class:`~dynaval.adapters.vector_index.VectorIndex` (exact up to 20,000 rows, inverted cells past
that); every row is searched at the threshold and each hit confirmed by its per-field cosines.
Encoding is the cost: on two free cores MiniLM encodes about 300 short rows a second (3,000
one-field rows took 8.8 s quiet and 189 s under load; docs/releases.md, "Cost"), the search a small
part of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy
import numpy.typing as npt

from dynaval.adapters.semantic_index import shared_encoder
from dynaval.adapters.sentence_encoder import SentenceEncoder
from dynaval.adapters.vector_index import VectorIndex
from dynaval.domain.semantic_duplicates import SemanticRule, example_vectors, field_cosines

ENCODE_BATCH = 512
"""Examples whose fields are encoded in one call (the encoder batches them further)."""
HITS_PER_ROW = 100
"""At most this many neighbours of one row are confirmed: a pattern repeated hundreds of times is
still one connected cluster, found through its members' neighbours."""


class SemanticRows:
    """Rows by key, encoded when :meth:`pairs` is first asked for."""

    def __init__(
        self, fields: Sequence[str], rule: SemanticRule, encoder: SentenceEncoder | None = None
    ) -> None:
        if not fields:
            raise ValueError("semantic near-duplicates need at least one input field")
        self.fields = list(fields)
        self.rule = rule
        self._encoder = encoder
        self._keys: list[str] = []
        self._texts: list[str] = []
        self._pairs: list[tuple[str, str, float]] | None = None

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: str, row: Mapping[str, Any]) -> None:
        if self._pairs is not None:
            raise RuntimeError("rows cannot be added once the pairs are found")
        self._keys.append(key)
        self._texts.extend(str(row.get(name) or "") for name in self.fields)

    def _vectors(self) -> npt.NDArray[numpy.float32]:
        encoder = self._encoder or shared_encoder()
        width = len(self.fields)
        parts = []
        for start in range(0, len(self._keys), ENCODE_BATCH):
            texts = self._texts[start * width : (start + ENCODE_BATCH) * width]
            parts.append(example_vectors(encoder.encode(texts).reshape(len(texts) // width, width, -1)))
        self._texts = []  # encoded: the texts are not needed again
        return numpy.concatenate(parts) if parts else numpy.zeros((0, 1), dtype=numpy.float32)

    def pairs(self) -> list[tuple[str, str, float]]:
        """Every pair ``(a, b, similarity)`` at or above the rule's threshold, ``a < b``, each once,
        in key order."""
        if self._pairs is None:
            self._pairs = self._find() if self._keys else []
        return self._pairs

    def _find(self) -> list[tuple[str, str, float]]:
        vectors = self._vectors()
        index = VectorIndex(vectors.shape[1])
        index.add(self._keys, vectors)
        found: dict[tuple[str, str], float] = {}
        fields, threshold = len(self.fields), self.rule.threshold
        for position, key in enumerate(self._keys):
            # The index ranks by mean field cosine (never below the smallest): confirm each hit.
            for other, _mean in index.search(vectors[position], threshold=threshold, limit=HITS_PER_ROW):
                if other == key:
                    continue
                pair = (key, other) if key < other else (other, key)
                if pair not in found:
                    value = field_cosines(vectors[position], index.vector(other), fields)
                    if value >= threshold:
                        found[pair] = round(value, 4)
        return [(a, b, sim) for (a, b), sim in sorted(found.items())]


def semantic_pairs(
    rows: Sequence[tuple[str, Mapping[str, Any]]],
    fields: Sequence[str],
    rule: SemanticRule,
    keep: Callable[[str, str], bool] | None = None,
) -> list[tuple[str, str, float]]:
    """The semantic near-duplicate pairs among ``(key, row)``, those ``keep`` accepts."""
    scan = SemanticRows(fields, rule)
    for key, row in rows:
        scan.add(key, row)
    return [(a, b, sim) for a, b, sim in scan.pairs() if keep is None or keep(a, b)]
