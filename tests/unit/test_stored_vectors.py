"""The vectors stored at submission standing in for encoding at release: float16 moves a cosine by
less than ``STORED_MARGIN``, and :class:`SemanticRows` encodes every stored row within that margin of
the threshold of a neighbour, so its pairs are the pairs of encoding every row.

The encoder here is a fake of the service's own ``Encoder`` port (texts to fixed vectors, each text
counted as it is encoded); the rows, the margin and the index are the real ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy
import numpy.typing as npt
import pytest

from dynaval.domain.health.semantic_duplicates import (
    STORED_MARGIN,
    SemanticRule,
    example_vector,
    field_cosines,
    from_bytes,
    to_bytes,
)
from dynaval.service_layer.health.semantic_leaks import SemanticRows

DIMENSIONS = 384
"""MiniLM's width: random unit vectors this wide are far apart (cosines about 0 +- 0.05)."""
THRESHOLD = SemanticRule().threshold

Vector = npt.NDArray[numpy.float32]


def unit(vector: npt.ArrayLike) -> Vector:
    array = numpy.asarray(vector, dtype=numpy.float64)
    return (array / numpy.linalg.norm(array)).astype(numpy.float32)


def at_cosine(rng: numpy.random.Generator, base: Vector, cosine: float) -> Vector:
    """A unit vector whose cosine with ``base`` (a unit vector) is ``cosine``."""
    other = rng.standard_normal(len(base))
    other -= other.dot(base) * base
    other /= numpy.linalg.norm(other)
    return unit(cosine * base + numpy.sqrt(1 - cosine * cosine) * other)


class CountingEncoder:
    """The ``Encoder`` port over fixed vectors: what each text encodes to, and which were asked for."""

    def __init__(self, vectors: Mapping[str, Vector]) -> None:
        self.vectors = vectors
        self.encoded: list[str] = []

    @property
    def dimensions(self) -> int:
        return DIMENSIONS

    def encode(self, texts: Sequence[str]) -> Vector:
        self.encoded.extend(texts)
        return numpy.stack([self.vectors[text] for text in texts])


def rows_of(texts: Mapping[str, Vector]) -> list[tuple[str, dict[str, str]]]:
    return [(f"id-{text}", {"example_id": f"id-{text}", "text": text}) for text in texts]


def scan(
    texts: Mapping[str, Vector], stored: Mapping[str, bytes] | None
) -> tuple[SemanticRows, CountingEncoder]:
    encoder = CountingEncoder(texts)
    rows = SemanticRows(
        ["text"],
        SemanticRule(),
        lambda: encoder,
        None if stored is None else (lambda ids: {i: stored[i] for i in ids if i in stored}),
    )
    for key, row in rows_of(texts):
        rows.add(key, row)
    return rows, encoder


def stored_of(texts: Mapping[str, Vector]) -> dict[str, bytes]:
    """Each example's vector as the submission check stores it (float16)."""
    return {f"id-{text}": to_bytes(example_vector(vector[None, :])) for text, vector in texts.items()}


@pytest.fixture
def planted() -> dict[str, Vector]:
    """200 unrelated texts, and three planted pairs: a clear one (0.9), one just below the threshold
    and one just above (each within float16's reach of it)."""
    rng = numpy.random.default_rng(7)
    texts = {f"text {i}": unit(rng.standard_normal(DIMENSIONS)) for i in range(200)}
    for name, cosine in (("clear", 0.9), ("below", THRESHOLD - 0.0004), ("above", THRESHOLD + 0.0004)):
        base = unit(rng.standard_normal(DIMENSIONS))
        texts[f"{name} a"], texts[f"{name} b"] = base, at_cosine(rng, base, cosine)
    return texts


# --- the margin ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fields", [1, 2, 3])
def test_float16_moves_a_per_field_cosine_by_less_than_half_the_margin(fields: int) -> None:
    rng = numpy.random.default_rng(fields)
    worst = 0.0
    for trial in range(1500):
        cosine = rng.uniform(0.6, 1.0)
        blocks_a, blocks_b = [], []
        for _field in range(fields):
            if trial % 3 == 0:
                # A few large components (float16's relative step is largest there) and the rest tiny
                # (subnormal in float16).
                raw = numpy.zeros(DIMENSIONS)
                raw[rng.choice(DIMENSIONS, 3, replace=False)] = rng.uniform(0.5, 1.0, 3)
                raw[rng.choice(DIMENSIONS, 50, replace=False)] += rng.uniform(-1e-5, 1e-5, 50)
                base = unit(raw)
            else:
                base = unit(rng.standard_normal(DIMENSIONS))
            blocks_a.append(base)
            blocks_b.append(at_cosine(rng, base, cosine))
        a, b = example_vector(numpy.stack(blocks_a)), example_vector(numpy.stack(blocks_b))
        exact = field_cosines(a, b, fields)
        rounded = field_cosines(from_bytes(to_bytes(a)), from_bytes(to_bytes(b)), fields)
        worst = max(worst, abs(rounded - exact))
        # Against a float32 vector (one side stored, the other encoded): no farther.
        worst = max(worst, abs(field_cosines(from_bytes(to_bytes(a)), b, fields) - exact))
    assert worst <= STORED_MARGIN / 2, worst
    # An identical vector rounded on both sides: the largest relative step, twice.
    ones = example_vector(numpy.full((fields, DIMENSIONS), 0.9997, dtype=numpy.float32))
    assert abs(field_cosines(from_bytes(to_bytes(ones)), from_bytes(to_bytes(ones)), fields) - 1) <= (
        STORED_MARGIN / 2
    )


# --- the rows ------------------------------------------------------------------------------------


def test_stored_vectors_give_the_pairs_of_encoding_every_row_and_only_near_rows_are_encoded(
    planted: dict[str, Vector],
) -> None:
    every, every_encoder = scan(planted, stored=None)
    expected = every.pairs()
    assert [(a, b) for a, b, _sim in expected] == [("id-above a", "id-above b"), ("id-clear a", "id-clear b")]
    assert len(every_encoder.encoded) == len(planted)

    stored, encoder = scan(planted, stored_of(planted))
    assert stored.pairs() == expected  # the same pairs, with the same (float32) similarities
    assert stored.links() == every.links()
    # Encoded: the six planted rows (each within the margin of its partner), none of the others.
    assert sorted(encoder.encoded) == sorted(t for t in planted if not t.startswith("text "))
    assert (stored.from_store, stored.encoded) == (200, 6)


def test_a_pair_within_the_margin_is_decided_on_the_encoded_vectors() -> None:
    # Stored vectors that put each pair on the other side of the threshold from the encoded ones (as
    # rounding at its worst could, and a little more): the encoded ones decide.
    rng = numpy.random.default_rng(3)
    texts: dict[str, Vector] = {}
    stored: dict[str, bytes] = {}
    for name, exact, seen in (
        ("apart", THRESHOLD - 0.001, THRESHOLD + 0.001),
        ("near", THRESHOLD + 0.001, THRESHOLD - 0.0015),
    ):
        base = unit(rng.standard_normal(DIMENSIONS))
        texts[f"{name} a"], texts[f"{name} b"] = base, at_cosine(rng, base, exact)
        stored[f"id-{name} a"] = to_bytes(base)
        stored[f"id-{name} b"] = to_bytes(at_cosine(rng, base, seen))
    for i in range(50):
        texts[f"text {i}"] = unit(rng.standard_normal(DIMENSIONS))
    rows, encoder = scan(
        texts, {**stored_of({t: v for t, v in texts.items() if t.startswith("text ")}), **stored}
    )
    assert [(a, b) for a, b, _sim in rows.pairs()] == [("id-near a", "id-near b")]
    assert rows.pairs()[0][2] == round(THRESHOLD + 0.001, 4)
    assert sorted(encoder.encoded) == ["apart a", "apart b", "near a", "near b"]


def test_rows_far_from_every_other_are_not_encoded_at_all(planted: dict[str, Vector]) -> None:
    apart = {text: vector for text, vector in planted.items() if text.startswith("text ")}
    rows, encoder = scan(apart, stored_of(apart))
    assert rows.pairs() == [] and rows.links() == []
    assert encoder.encoded == []  # the encoder gave its width, and encoded nothing
    assert (rows.from_store, rows.encoded) == (200, 0)


def test_rows_without_a_stored_vector_are_encoded(planted: dict[str, Vector]) -> None:
    every, _encoder = scan(planted, stored=None)
    # Half the examples have a vector stored; the other half, and a row with no example id (an
    # earlier release's test row is keyed otherwise, but carries its id), are encoded.
    half = dict(list(stored_of(planted).items())[::2])
    rows, encoder = scan(planted, half)
    assert rows.pairs() == every.pairs()
    assert rows.from_store + rows.encoded == len(planted)
    assert len(encoder.encoded) == rows.encoded >= len(planted) // 2


def test_vectors_stored_by_an_encoder_of_another_width_are_not_used(planted: dict[str, Vector]) -> None:
    every, _encoder = scan(planted, stored=None)
    narrow = {key: to_bytes(numpy.ones(8, dtype=numpy.float32) / numpy.sqrt(8)) for key in stored_of(planted)}
    rows, encoder = scan(planted, narrow)
    assert rows.pairs() == every.pairs()
    assert (rows.from_store, rows.encoded) == (0, len(planted))
    assert sorted(encoder.encoded) == sorted(planted)
    # Some stored of the other width, some not stored: every row encoded once.
    some = dict(list(narrow.items())[:50])
    rows, encoder = scan(planted, some)
    assert rows.pairs() == every.pairs()
    assert sorted(encoder.encoded) == sorted(planted)
