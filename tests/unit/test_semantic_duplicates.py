"""The semantic near-duplicate rule on hand-made pairs, with the real MiniLM encoder (local, offline),
and the vector index against brute force."""

from __future__ import annotations

import numpy
import numpy.typing as npt
import pytest

from dynaval.adapters.sentence_encoder import SentenceEncoder
from dynaval.domain.health.semantic_duplicates import (
    SEMANTIC_THRESHOLD,
    SemanticRule,
    example_vector,
    example_vectors,
    field_cosines,
    is_semantic_duplicate,
)
from dynaval.domain.health.vector_index import EXACT_UP_TO, PENDING_ROWS, VectorIndex


@pytest.fixture(scope="module")
def encoder() -> SentenceEncoder:
    return SentenceEncoder()


def similarity(encoder: SentenceEncoder, a: tuple[str, ...], b: tuple[str, ...]) -> float:
    """The rule's similarity of two examples given field by field."""
    left = example_vector(encoder.encode(list(a)))
    right = example_vector(encoder.encode(list(b)))
    return field_cosines(left, right, len(a))


# --- the encoder ---------------------------------------------------------------------------------


def test_encodes_unit_float32_rows_of_384_dimensions(encoder: SentenceEncoder) -> None:
    vectors = encoder.encode(["The soup was far too salty.", "Das Essen war köstlich.", ""])
    assert vectors.shape == (3, encoder.dimensions) == (3, 384)
    assert vectors.dtype == numpy.float32
    assert numpy.allclose(numpy.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_padding_in_a_batch_does_not_change_a_text_s_vector(encoder: SentenceEncoder) -> None:
    short = "The soup was far too salty."
    alone = encoder.encode([short])[0]
    padded = encoder.encode([short, "A much longer sentence, so the short one is padded to its length."])[0]
    assert numpy.allclose(alone, padded, atol=1e-5)


def test_an_empty_list_encodes_to_no_rows(encoder: SentenceEncoder) -> None:
    assert encoder.encode([]).shape == (0, 384)


# --- the rule on hand-made pairs -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The app crashes every time I open the camera.", "Whenever I launch the camera, the app crashes."),
        ("The soup was far too salty.", "There was way too much salt in the soup."),
        ("The shoes fell apart after a week.", "After one week the shoes were falling to pieces."),
    ],
)
def test_paraphrases_are_near_duplicates(encoder: SentenceEncoder, a: str, b: str) -> None:
    assert similarity(encoder, (a,), (b,)) >= SEMANTIC_THRESHOLD


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The soup was far too salty.", "The soup was much too salty."),
        ("The staff were friendly and helpful.", "The staff were friendly and very helpful."),
        (
            "The meal was not terrible, it was not awful, it was just not bad at all.",
            "The dinner was not terrible, it was not awful, it was just not bad at all.",
        ),
    ],
)
def test_a_one_word_edit_is_a_near_duplicate(encoder: SentenceEncoder, a: str, b: str) -> None:
    assert similarity(encoder, (a,), (b,)) >= SEMANTIC_THRESHOLD


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The printer jams on every other page.", "The concert started an hour late."),
        ("The battery lasts two full days.", "The soup was far too salty."),
        ("A man is playing a guitar on stage.", "The committee approved the new budget on Monday."),
    ],
)
def test_unrelated_texts_are_not_near_duplicates(encoder: SentenceEncoder, a: str, b: str) -> None:
    assert similarity(encoder, (a,), (b,)) < SEMANTIC_THRESHOLD


def test_the_same_hypothesis_under_another_premise_is_not_a_duplicate(encoder: SentenceEncoder) -> None:
    hypothesis = "Leila's mother lives abroad."
    first = ("Leila calls her mother every Sunday evening.", hypothesis)
    other_premise = ("The shop closes at six on weekdays.", hypothesis)
    small_edit = ("Leila phones her mother every Sunday evening.", hypothesis)

    assert similarity(encoder, first, other_premise) < SEMANTIC_THRESHOLD
    assert similarity(encoder, first, small_edit) >= SEMANTIC_THRESHOLD
    # The example vector's dot product is the mean of the field cosines; the rule takes the smallest.
    a, b = (example_vector(encoder.encode(list(pair))) for pair in (first, other_premise))
    assert float(a @ b) == pytest.approx(
        (1.0 + similarity(encoder, first[:1], other_premise[:1])) / 2, abs=1e-4
    )
    assert not is_semantic_duplicate(a, b, 2)


def test_another_hypothesis_under_the_same_premise_is_not_a_duplicate(encoder: SentenceEncoder) -> None:
    premise = "A man is playing a guitar on stage."
    assert (
        similarity(encoder, (premise, "A person is playing music."), (premise, "The stage is empty."))
        < SEMANTIC_THRESHOLD
    )


NON_ASCII = [
    (
        "Le café était délicieux et le serveur très aimable.",
        "Le café était délicieux et le serveur très gentil.",
    ),
    (
        "Das Essen war köstlich, aber die Bedienung war unhöflich.",
        "Das Essen war köstlich, aber die Bedienung war unfreundlich.",
    ),
    ("这家餐厅的服务非常好，菜也很好吃。", "这家餐厅的服务非常好，菜也很美味。"),  # noqa: RUF001 (Chinese commas)
]


@pytest.mark.parametrize(("a", "b"), NON_ASCII)
def test_non_ascii_text_matches_its_own_small_edit(encoder: SentenceEncoder, a: str, b: str) -> None:
    assert similarity(encoder, (a,), (b,)) >= SEMANTIC_THRESHOLD


def test_non_ascii_texts_do_not_match_each_other(encoder: SentenceEncoder) -> None:
    originals = [a for a, _b in NON_ASCII]
    vectors = encoder.encode(originals)
    cosines = vectors @ vectors.T
    assert (cosines[~numpy.eye(len(originals), dtype=bool)] < SEMANTIC_THRESHOLD).all()


# --- the pure rule -------------------------------------------------------------------------------


def test_example_vector_dot_is_the_mean_field_cosine_and_field_cosines_the_smallest() -> None:
    rng = numpy.random.default_rng(3)
    left, right = rng.standard_normal((2, 3, 8)).astype(numpy.float32)
    a, b = example_vector(left), example_vector(right)
    unit_l = left / numpy.linalg.norm(left, axis=1, keepdims=True)
    unit_r = right / numpy.linalg.norm(right, axis=1, keepdims=True)
    cosines = (unit_l * unit_r).sum(axis=1)
    assert a.shape == (24,) and a.dtype == numpy.float32
    assert float(a @ a) == pytest.approx(1.0, abs=1e-6)
    assert float(a @ b) == pytest.approx(float(cosines.mean()), abs=1e-6)
    assert field_cosines(a, b, 3) == pytest.approx(float(cosines.min()), abs=1e-6)


def test_example_vectors_makes_each_row_as_example_vector_does() -> None:
    fields = numpy.random.default_rng(4).standard_normal((5, 2, 6)).astype(numpy.float32)
    rows = example_vectors(fields)
    assert rows.shape == (5, 12) and rows.dtype == numpy.float32
    for row, example in zip(rows, fields, strict=True):
        assert numpy.allclose(row, example_vector(example), atol=1e-7)
    assert example_vectors(numpy.zeros((0, 2, 6))).shape == (0, 12)


def test_an_empty_field_is_similar_to_nothing() -> None:
    vectors = numpy.array([[1.0, 0.0], [0.0, 0.0]], dtype=numpy.float32)
    a = example_vector(vectors)
    assert numpy.isfinite(a).all()
    assert field_cosines(a, a, 2) == 0.0


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="fields, dimensions"):
        example_vector(numpy.zeros(4, dtype=numpy.float32))
    with pytest.raises(ValueError, match="differ in shape"):
        field_cosines(numpy.zeros(8), numpy.zeros(6), 2)


# --- the vector index ----------------------------------------------------------------------------


def random_units(rng: numpy.random.Generator, count: int, dimensions: int) -> npt.NDArray[numpy.float32]:
    rows = rng.standard_normal((count, dimensions)).astype(numpy.float32)
    units: npt.NDArray[numpy.float32] = rows / numpy.linalg.norm(rows, axis=1, keepdims=True)
    return units


def brute_force(
    vectors: npt.NDArray[numpy.float32], query: npt.NDArray[numpy.float32], threshold: float
) -> list[tuple[str, float]]:
    scores = vectors @ query
    hits = [(f"k{i}", float(scores[i])) for i in numpy.flatnonzero(scores >= threshold)]
    return sorted(hits, key=lambda hit: (-hit[1], hit[0]))


def test_a_small_index_searches_exactly_as_brute_force() -> None:
    rng = numpy.random.default_rng(11)
    vectors = random_units(rng, 3000, 16)
    index = VectorIndex(16)
    index.add([f"k{i}" for i in range(3000)], vectors)
    assert index.exact
    for query in vectors[:20]:
        expected = brute_force(vectors, query, 0.5)
        found = index.search(query, threshold=0.5, limit=10_000)
        assert [key for key, _ in found] == [key for key, _ in expected]
        assert numpy.allclose([s for _, s in found], [s for _, s in expected], atol=1e-5)


def test_threshold_and_limit() -> None:
    index = VectorIndex(2)
    angles = numpy.radians([0, 10, 20, 40, 80])
    index.add(["a", "b", "c", "d", "e"], numpy.stack([numpy.cos(angles), numpy.sin(angles)], axis=1))
    query = numpy.array([1.0, 0.0], dtype=numpy.float32)
    assert [key for key, _ in index.search(query, threshold=0.9, limit=10)] == ["a", "b", "c"]
    assert [key for key, _ in index.search(query, threshold=0.9, limit=2)] == ["a", "b"]
    assert index.search(query, threshold=0.9, limit=0) == []
    assert [key for key, _ in index.search(query, threshold=-1.0, limit=10)] == ["a", "b", "c", "d", "e"]
    assert index.search(query, threshold=0.9, limit=1)[0][1] == pytest.approx(1.0)


def test_adds_in_several_batches_and_refuses_a_key_twice() -> None:
    rng = numpy.random.default_rng(5)
    vectors = random_units(rng, 300, 8)
    index = VectorIndex(8)
    for start in (0, 100, 250):
        stop = {0: 100, 100: 250, 250: 300}[start]
        index.add([f"k{i}" for i in range(start, stop)], vectors[start:stop])
    assert len(index) == 300 and "k299" in index
    assert numpy.array_equal(index.vector("k123"), vectors[123])
    assert index.search(vectors[280], threshold=0.999, limit=1)[0][0] == "k280"
    with pytest.raises(ValueError, match="k5 is in the index already"):
        index.add(["k5"], vectors[:1])
    with pytest.raises(ValueError, match="twice"):
        index.add(["x", "x"], vectors[:2])
    with pytest.raises(ValueError, match="8 dimensions"):
        index.add(["y"], numpy.zeros((1, 4)))
    with pytest.raises(ValueError, match="8 dimensions"):
        index.search(numpy.zeros(4), threshold=0.5, limit=1)
    assert len(index) == 300


def test_an_empty_index_finds_nothing() -> None:
    assert VectorIndex(4).search(numpy.ones(4), threshold=0.0, limit=3) == []


def test_a_large_index_reports_exact_scores_and_finds_planted_near_duplicates() -> None:
    """Past EXACT_UP_TO vectors the index scans only the nearest cells: every score it reports is the
    exact dot product, and the near-duplicates planted around the queries are found."""
    rng = numpy.random.default_rng(21)
    dimensions = 32
    count = EXACT_UP_TO + 5000
    vectors = random_units(rng, count, dimensions)
    queries = random_units(rng, 40, dimensions)
    for q, query in enumerate(queries):  # each query gets a near-duplicate at cosine 0.95
        noise = rng.standard_normal(dimensions).astype(numpy.float32)
        noise -= (noise @ query) * query
        noise /= numpy.linalg.norm(noise)
        vectors[q * 7] = 0.95 * query + numpy.sqrt(1 - 0.95**2) * noise
    index = VectorIndex(dimensions)
    for start in range(0, count, 10_000):
        index.add(
            [f"k{i}" for i in range(start, min(count, start + 10_000))], vectors[start : start + 10_000]
        )
    assert not index.exact and len(index) == count
    found_planted = 0
    for q, query in enumerate(queries):
        hits = index.search(query, threshold=0.9, limit=5)
        exact = {key: score for key, score in brute_force(vectors, query, 0.9)}
        for key, score in hits:
            assert score == pytest.approx(exact[key], abs=1e-5)
        assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
        found_planted += f"k{q * 7}" in dict(hits)
    assert found_planted == len(queries)


def test_vectors_added_after_training_are_found_one_by_one_and_after_they_move_into_the_cells() -> None:
    rng = numpy.random.default_rng(8)
    dimensions = 16
    index = VectorIndex(dimensions)
    first = random_units(rng, EXACT_UP_TO + 1, dimensions)
    index.add([f"k{i}" for i in range(len(first))], first)
    assert not index.exact
    later = random_units(rng, PENDING_ROWS + 10, dimensions)
    for i in range(5):  # one at a time: they wait outside the cells
        index.add([f"late{i}"], later[i])
        assert index.search(later[i], threshold=0.999, limit=1) == [
            (f"late{i}", pytest.approx(1.0, abs=1e-5))
        ]
    index.add([f"late{i}" for i in range(5, len(later))], later[5:])  # fills the waiting room: all go in
    assert len(index) == len(first) + len(later)
    for i in (0, 4, 5, len(later) - 1):
        assert numpy.array_equal(index.vector(f"late{i}"), later[i])
        assert index.search(later[i], threshold=0.999, limit=1)[0][0] == f"late{i}"
    assert numpy.array_equal(index.vector("k7"), first[7])


def test_threads_adding_and_searching_at_once_lose_nothing() -> None:
    import threading

    rng = numpy.random.default_rng(13)
    dimensions = 16
    index = VectorIndex(dimensions)
    base = random_units(rng, EXACT_UP_TO + 1, dimensions)
    index.add([f"k{i}" for i in range(len(base))], base)
    batches = [random_units(rng, 300, dimensions) for _ in range(4)]
    errors: list[BaseException] = []

    def add_one_by_one(worker: int) -> None:
        try:
            for i, row in enumerate(batches[worker]):
                index.add([f"w{worker}-{i}"], row)
                index.search(row, threshold=0.9, limit=3)
        except BaseException as exc:  # a failure in a thread is asserted on below
            errors.append(exc)

    threads = [threading.Thread(target=add_one_by_one, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(index) == len(base) + 4 * 300
    for worker, batch in enumerate(batches):
        for i in (0, 299):
            assert index.search(batch[i], threshold=0.999, limit=1)[0][0] == f"w{worker}-{i}"


def test_a_release_records_the_semantic_rule_or_that_it_was_off() -> None:
    rule = SemanticRule(threshold=0.85)
    assert SemanticRule.from_dict(rule.to_dict()) == rule
    assert SemanticRule.from_dict(SemanticRule.off_dict("turned off")) is None
    assert SemanticRule.from_dict(None) is None  # a release built before the semantic check
    with pytest.raises(ValueError, match="semantic near-duplicate threshold"):
        SemanticRule(threshold=1.5)


def _manifest(semantic: object) -> dict[str, object]:
    return {"near_duplicates": {"rule": {"shingle": 3, "threshold": 0.7, "semantic": semantic}}}


def test_the_manifest_s_semantic_rule_is_read_from_near_duplicates_rule_semantic() -> None:
    rule = SemanticRule(threshold=0.85)
    assert SemanticRule.from_manifest(_manifest(rule.to_dict())) == rule
    # Recorded as checked without a threshold: the default one.
    assert SemanticRule.from_manifest(_manifest({"checked": True})) == SemanticRule()


def test_a_manifest_whose_semantic_check_was_off_or_is_missing_gives_no_rule() -> None:
    assert SemanticRule.from_manifest(_manifest(SemanticRule.off_dict("turned off"))) is None
    # A release built before the semantic check: no semantic section, or no near_duplicates at all.
    assert SemanticRule.from_manifest({"near_duplicates": {"rule": {"shingle": 3, "threshold": 0.7}}}) is None
    assert SemanticRule.from_manifest({"near_duplicates": {}}) is None
    assert SemanticRule.from_manifest({}) is None


def test_a_malformed_semantic_section_is_read_as_missing_or_refused() -> None:
    # A section on the way that is not a mapping reads as missing (as verify has always read it).
    assert SemanticRule.from_manifest({"near_duplicates": "lexical"}) is None
    assert SemanticRule.from_manifest({"near_duplicates": {"rule": [0.7]}}) is None
    assert SemanticRule.from_manifest(_manifest("checked")) is None
    # A threshold that is not a number, or out of range, is refused.
    with pytest.raises(ValueError):
        SemanticRule.from_manifest(_manifest({"checked": True, "threshold": "high"}))
    with pytest.raises(TypeError):
        SemanticRule.from_manifest(_manifest({"checked": True, "threshold": None}))
    with pytest.raises(ValueError, match="semantic near-duplicate threshold"):
        SemanticRule.from_manifest(_manifest({"checked": True, "threshold": 1.5}))
