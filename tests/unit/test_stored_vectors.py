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


def worst_rounded_block() -> Vector:
    """A unit vector (to 5e-6) each of whose components float16 rounds down by nearly its largest
    relative step, 2**-11: just below the midpoint above a power of two (213 of 2**-4, 171 of 2**-5)."""
    powers = numpy.array([2.0**-4] * 213 + [2.0**-5] * 171)
    return (powers * (1 + 2.0**-11 - 2.0**-20)).astype(numpy.float32)


@pytest.mark.parametrize("fields", [1, 4])  # scaled by 1/sqrt(fields): a power of two keeps the midpoints
def test_the_worst_rounding_stays_within_half_the_margin(fields: int) -> None:
    block = worst_rounded_block()
    assert abs(float(numpy.linalg.norm(block.astype(numpy.float64))) - 1) < 5e-6
    # Each field's block as example_vector scales it (1/sqrt(fields)), without normalising it again.
    vector = numpy.tile(block, fields) / numpy.float32(numpy.sqrt(fields))
    exact = field_cosines(vector, vector, fields)
    rounded = field_cosines(from_bytes(to_bytes(vector)), from_bytes(to_bytes(vector)), fields)
    # Both sides rounded down by 2**-11: the cosine falls by twice that, the most rounding can move it.
    assert 9.7e-4 < exact - rounded <= STORED_MARGIN / 2


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
    assert (stored.on_store_count, stored.encoded_count) == (200, 6)


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
    assert (rows.on_store_count, rows.encoded_count) == (200, 0)


def test_rows_without_a_stored_vector_are_encoded(planted: dict[str, Vector]) -> None:
    every, _encoder = scan(planted, stored=None)
    # Half the examples have a vector stored; the other half are encoded.
    half = dict(list(stored_of(planted).items())[::2])
    rows, encoder = scan(planted, half)
    assert rows.pairs() == every.pairs()
    assert rows.on_store_count + rows.encoded_count == len(planted)
    assert len(encoder.encoded) == rows.encoded_count >= len(planted) // 2


def test_vectors_stored_by_an_encoder_of_another_width_are_not_used(planted: dict[str, Vector]) -> None:
    every, _encoder = scan(planted, stored=None)
    narrow = {key: to_bytes(numpy.ones(8, dtype=numpy.float32) / numpy.sqrt(8)) for key in stored_of(planted)}
    rows, encoder = scan(planted, narrow)
    assert rows.pairs() == every.pairs()
    assert (rows.on_store_count, rows.encoded_count) == (0, len(planted))
    assert sorted(encoder.encoded) == sorted(planted)
    # Some stored of the other width, some not stored: every row encoded once.
    some = dict(list(narrow.items())[:50])
    rows, encoder = scan(planted, some)
    assert rows.pairs() == every.pairs()
    assert sorted(encoder.encoded) == sorted(planted)


def test_a_row_without_an_example_id_is_encoded(planted: dict[str, Vector]) -> None:
    rows, encoder = scan(planted, stored_of(planted))
    rows.add("no id", {"text": "text 0"})  # a copy of "text 0", with no example id to look up
    assert ("id-text 0", "no id", 1.0) in rows.pairs()
    assert "text 0" in encoder.encoded and encoder.encoded.count("text 0") == 2


def two_field_rows() -> dict[tuple[str, str], tuple[Vector, Vector]]:
    """Two-field examples: a pair near in both fields (a duplicate), one near in one field only
    whose mean cosine still reaches the threshold (no duplicate), one whose mean falls short."""
    rng = numpy.random.default_rng(11)
    rows = {
        (f"p{i}", f"h{i}"): (unit(rng.standard_normal(DIMENSIONS)), unit(rng.standard_normal(DIMENSIONS)))
        for i in range(100)
    }
    for name, (first, second) in {
        "both": (0.85, 0.8004),
        "mean only": (0.98, 0.7),
        "neither": (0.9, 0.5),
    }.items():
        a = (unit(rng.standard_normal(DIMENSIONS)), unit(rng.standard_normal(DIMENSIONS)))
        rows[(f"{name} p", f"{name} h")] = a
        rows[(f"{name} p'", f"{name} h'")] = (at_cosine(rng, a[0], first), at_cosine(rng, a[1], second))
    return rows


def two_field_scan(
    rows: dict[tuple[str, str], tuple[Vector, Vector]], *, stored: bool
) -> tuple[SemanticRows, CountingEncoder]:
    encoder = CountingEncoder(
        {text: vector for texts, vectors in rows.items() for text, vector in zip(texts, vectors, strict=True)}
    )
    store = {f"id-{p}": to_bytes(example_vector(numpy.stack(vectors))) for (p, _h), vectors in rows.items()}
    scanned = SemanticRows(
        ["premise", "hypothesis"],
        SemanticRule(),
        lambda: encoder,
        (lambda ids: {i: store[i] for i in ids if i in store}) if stored else None,
    )
    for premise, hypothesis in rows:
        scanned.add(
            f"id-{premise}", {"example_id": f"id-{premise}", "premise": premise, "hypothesis": hypothesis}
        )
    return scanned, encoder


def test_two_fields_on_stored_vectors_give_the_pairs_of_encoding_every_row() -> None:
    rows = two_field_rows()
    every, _encoder = two_field_scan(rows, stored=False)
    on_store, encoder = two_field_scan(rows, stored=True)
    assert [(a, b) for a, b, _sim in every.pairs()] == [("id-both p", "id-both p'")]
    assert on_store.pairs() == every.pairs() and on_store.links() == every.links()
    # Encoded: the rows the index ranks near another by their mean cosine (the duplicate pair and
    # the pair near in one field), not the pair whose mean falls short nor the unrelated rows.
    assert sorted({text for text in encoder.encoded if text.endswith(("p", "p'"))}) == [
        "both p", "both p'", "mean only p", "mean only p'",
    ]  # fmt: skip


def test_past_the_exact_index_every_row_is_searched_and_the_pairs_are_the_same(
    planted: dict[str, Vector], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dynaval.domain.health import vector_index

    monkeypatch.setattr(vector_index, "EXACT_UP_TO", 50)  # the index takes cells past 50 rows
    every, _encoder = scan(planted, stored=None)
    rows, encoder = scan(planted, stored_of(planted))
    assert rows.pairs() == every.pairs() and rows.links() == every.links()
    assert sorted(encoder.encoded) == sorted(t for t in planted if not t.startswith("text "))


def test_a_search_that_meets_a_row_on_its_stored_vector_encodes_it_and_starts_again(
    planted: dict[str, Vector], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As when the index's cells miss a pair while settling (their recall is not symmetric): here
    the settling finds nothing at all, and the searches for pairs meet the rows instead."""
    every, _encoder = scan(planted, stored=None)
    monkeypatch.setattr(SemanticRows, "_settle", lambda self, vectors, on_store: 0)
    rows, encoder = scan(planted, stored_of(planted))
    assert rows.pairs() == every.pairs() and rows.links() == every.links()
    # The pairs' rows were met and encoded (the pair just below the threshold only where its
    # stored vectors put it at or above: it is no pair either way); no unrelated row.
    planted_rows = {t for t in planted if not t.startswith("text ")}
    assert {"clear a", "clear b", "above a", "above b"} <= set(encoder.encoded) <= planted_rows
    kinds = {key: "a" if key.endswith(" a") else "b" for key, _row in rows_of(planted)}
    crossing, crossing_encoder = scan(planted, stored_of(planted))
    assert crossing.crossing_pairs(kinds.get) == every.crossing_pairs(kinds.get)
    assert {"clear a", "clear b", "above a", "above b"} <= set(crossing_encoder.encoded) <= planted_rows
