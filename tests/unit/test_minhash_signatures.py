"""The index's batched MinHash signatures and banded candidates are datasketch's, value for value:
the signatures equal ``MinHash.update_batch``'s hash values, and the pairs and matches equal those
of an index over datasketch's ``MinHash`` and ``MinHashLSH`` (the index's implementation before the
batching, kept here as the reference), on varied rows."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from datasketch import MinHash, MinHashLSH

from dynaval.domain.health import minhash
from dynaval.domain.health.minhash import (
    HASH_BATCH_VALUES,
    MinHashIndex,
    band_keys,
    signatures,
    sorted_pairs,
)
from dynaval.domain.health.near_duplicates import (
    MINHASH_SEED,
    NUM_PERM,
    FieldShingles,
    NearDuplicateRule,
    field_shingles,
    shingles,
    similarity,
    tagged,
    tagged_texts,
)

NLI = ["premise", "hypothesis"]
FULLWIDTH = "".join(chr(ord(c) + 0xFEE0) for c in "FULL")
WORDS = [
    *["the", "a", "movie", "film", "was", "not", "bad", "good", "great", "plot", "actors", "cast"],
    *["and", "in", "every", "scene", "café", "München", "großartig", "Kaffee", "映画", "とても"],
    *["良かった", "\ufb01lm", FULLWIDTH, "naïve"],
]


class ReferenceIndex:
    """The index as it was: a datasketch ``MinHash`` per example in a ``MinHashLSH``."""

    def __init__(self, rule: NearDuplicateRule) -> None:
        self.rule = rule
        self.lsh = MinHashLSH(threshold=rule.lsh_threshold, num_perm=NUM_PERM)
        self.examples: dict[str, FieldShingles] = {}
        self.minhashes: dict[str, MinHash] = {}

    def minhash(self, example: FieldShingles) -> MinHash | None:
        values = tagged(example)
        if not values:
            return None
        minhash = MinHash(num_perm=NUM_PERM, seed=MINHASH_SEED)
        minhash.update_batch(values)
        return minhash

    def add(self, key: str, example: FieldShingles) -> None:
        self.examples[key] = example
        minhash = self.minhash(example)
        if minhash is not None:
            self.lsh.insert(key, minhash)
            self.minhashes[key] = minhash

    def matches(self, example: FieldShingles) -> list[tuple[str, float]]:
        minhash = self.minhash(example)
        if minhash is None:
            return []
        found = [(str(k), round(similarity(example, self.examples[k]), 4)) for k in self.lsh.query(minhash)]
        return sorted(((k, s) for k, s in found if s >= self.rule.threshold), key=lambda m: (-m[1], m[0]))

    def pairs(self, keep: Callable[[str, str], bool]) -> Iterator[tuple[str, str, float]]:
        for key in sorted(self.examples):
            minhash = self.minhashes.get(key)
            if minhash is None:
                continue
            found = []
            for other in map(str, self.lsh.query(minhash)):
                if other > key:
                    value = similarity(self.examples[key], self.examples[other])
                    if value >= self.rule.threshold:
                        found.append((other, round(value, 4)))
            for other, value in sorted(found, key=lambda m: (-m[1], m[0])):
                if keep(key, other):
                    yield key, other, value


def sentence(rng: random.Random, most: int = 14) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, most)))


def varied_rows(rng: random.Random, count: int) -> list[dict[str, str]]:
    """NLI rows: small vocabulary (many near-duplicates), non-ASCII, empty fields, long texts,
    exact copies and one-word edits."""
    rows: list[dict[str, str]] = []
    for i in range(count):
        if rows and i % 7 == 0:
            copy = dict(rng.choice(rows))
            copy["hypothesis"] = copy["hypothesis"].replace("the", "a", 1)
            rows.append(copy)
        elif i % 11 == 0:
            rows.append({"premise": sentence(rng, 200), "hypothesis": ""})
        else:
            rows.append({"premise": sentence(rng), "hypothesis": sentence(rng) if i % 3 else ""})
    return rows


def test_the_bands_and_permutations_are_datasketchs_without_importing_it() -> None:
    """The index makes datasketch's ``MinHashLSH`` bands and ``MinHash`` permutations itself, so
    that its process need not import datasketch (with scipy): the same, at every LSH threshold a
    rule can give (0.05 to 0.9) and beyond, up to where datasketch refuses a single band."""
    thresholds = sorted({round(t, 4) for t in np.arange(0.01, 0.98, 0.0025)})
    thresholds += [NearDuplicateRule(threshold=t / 100).lsh_threshold for t in range(1, 101)]
    for threshold in thresholds:
        expected = list(MinHashLSH(threshold=threshold, num_perm=NUM_PERM).hashranges)
        assert minhash._hashranges(threshold) == expected, threshold
    reference = MinHash(num_perm=NUM_PERM, seed=MINHASH_SEED)
    assert reference.scheme == "affine32"
    assert np.array_equal(minhash._permutations(NUM_PERM), reference.permutations)
    assert minhash._permutations(40).tolist() == reference.permutations[:, :40].tolist()


def test_the_batched_signatures_are_datasketchs_hash_values() -> None:
    rng = random.Random(7)
    examples = [field_shingles(row, NLI) for row in varied_rows(rng, 300)]
    examples += [
        field_shingles({"premise": "Das Café in München", "hypothesis": f"{FULLWIDTH} width"}, NLI),
        field_shingles({"premise": "one", "hypothesis": ""}, NLI),  # a single shingle
        field_shingles({"premise": "", "hypothesis": "この映画は とても 良かった です"}, NLI),
    ]
    values = [tagged(e) for e in examples if tagged(e)]
    permutations = MinHash(num_perm=NUM_PERM, seed=MINHASH_SEED).permutations
    computed = signatures(values, permutations)
    assert computed.dtype == np.uint32 and computed.shape == (len(values), NUM_PERM)
    for row, example in zip(computed, values, strict=True):
        expected = MinHash(num_perm=NUM_PERM, seed=MINHASH_SEED)
        expected.update_batch(example)
        assert row.tolist() == expected.hashvalues.tolist()


@pytest.mark.parametrize(
    "rule",
    [NearDuplicateRule(), NearDuplicateRule(threshold=0.9), NearDuplicateRule(shingle=3, threshold=0.5)],
)
def test_the_index_finds_datasketchs_pairs_and_matches(rule: NearDuplicateRule) -> None:
    rng = random.Random(11)
    rows = varied_rows(rng, 4_000)
    values = sum(len(tagged(field_shingles(row, NLI, rule.shingle))) for row in rows)
    assert values > 2 * HASH_BATCH_VALUES  # several batches, the last one partial
    index, reference = MinHashIndex(rule), ReferenceIndex(rule)
    by_inputs = MinHashIndex(rule)  # keeping the texts, shingled again when compared
    by_row = MinHashIndex(rule)  # known by the order added: the keys kept by the caller
    keys: list[str] = []
    for i, row in enumerate(rows):
        key = f"e{rng.randrange(10**6):06d}-{i}"  # added out of key order
        example = field_shingles(row, NLI, rule.shingle)
        index.add(key, example)
        reference.add(key, example)
        by_inputs.add_inputs(key, row, NLI)
        assert by_row.add_row(tuple(str(row.get(name) or "") for name in NLI), NLI) == len(keys)
        keys.append(key)

    def keep(a: str, b: str) -> bool:
        return (len(a) + len(b)) % 3 != 0

    found = list(index.pairs())
    assert found == list(reference.pairs(lambda _a, _b: True))
    assert len(found) > 100  # the small vocabulary makes many
    assert list(index.pairs(keep)) == list(reference.pairs(keep))
    assert list(by_inputs.pairs()) == found
    assert list(by_inputs.pairs(keep)) == list(reference.pairs(keep))
    row_pairs = by_row.row_pairs()
    assert all(a < b for a, b, _sim in row_pairs)
    named = [(min(keys[a], keys[b]), max(keys[a], keys[b]), sim) for a, b, sim in row_pairs]
    assert sorted_pairs(named) == found
    with pytest.raises(ValueError):
        by_inputs.add_inputs(next(iter(reference.examples)), rows[0], NLI)
    for row in varied_rows(random.Random(3), 60):
        query = field_shingles(row, NLI, rule.shingle)
        assert [(m.key, m.similarity) for m in index.matches(query)] == reference.matches(query)
        assert [(m.key, m.similarity) for m in by_inputs.matches(query)] == reference.matches(query)
    # Added after a query: found too.
    late = field_shingles(rows[5], NLI, rule.shingle)
    index.add("late", late)
    reference.add("late", late)
    assert [(m.key, m.similarity) for m in index.matches(late)] == reference.matches(late)
    assert list(index.pairs()) == list(reference.pairs(lambda _a, _b: True))


def test_an_index_of_examples_without_words_finds_nothing() -> None:
    index = MinHashIndex()
    index.add("a", field_shingles({"premise": "", "hypothesis": ""}, NLI))
    index.add("b", field_shingles({"premise": "  ", "hypothesis": ""}, NLI))
    assert len(index) == 2
    assert list(index.pairs()) == []
    assert index.matches(field_shingles({"premise": "", "hypothesis": ""}, NLI)) == []
    assert band_keys(field_shingles({"premise": "", "hypothesis": ""}, NLI)) == []


def test_an_index_knows_its_examples_by_key_or_by_row_not_both() -> None:
    inputs = ("a cat sat on the mat today", "a cat sat")
    by_row = MinHashIndex()
    assert [by_row.add_row(inputs, NLI), by_row.add_row(("", ""), NLI), by_row.add_row(inputs, NLI)] == [
        0,
        1,
        2,
    ]
    assert len(by_row) == 3
    assert by_row.row_pairs() == [(0, 2, 1.0)]  # the example without words is never a candidate
    with pytest.raises(ValueError, match="all known by a key, or all by the order"):
        by_row.add_texts("k", inputs, NLI)
    with pytest.raises(ValueError, match="no pairs\\(\\) by key"):
        list(by_row.pairs())
    with pytest.raises(ValueError, match="no matches\\(\\) by key"):
        by_row.matches(field_shingles(dict(zip(NLI, inputs, strict=True)), NLI))
    with pytest.raises(ValueError, match="a side is 0 to 127"):
        by_row.add_row(inputs, NLI, side=128)
    by_key = MinHashIndex()
    by_key.add_texts("k", inputs, NLI)
    with pytest.raises(ValueError, match="all known by a key, or all by the order"):
        by_key.add_row(inputs, NLI)
    with pytest.raises(ValueError, match="known by their keys"):
        by_key.row_pairs()


def test_a_closed_index_lets_go_of_its_examples_and_refuses_more() -> None:
    index = MinHashIndex()
    inputs = {"premise": "a cat sat on the mat today", "hypothesis": "a cat sat"}
    index.add_inputs("a", inputs, NLI)
    index.add_inputs("b", inputs, NLI)
    assert [(a, b) for a, b, _sim in index.pairs()] == [("a", "b")]
    index.close()
    assert len(index) == 0
    assert not index._text_bytes and not index._blocks and not index._hashed  # the memory is let go
    with pytest.raises(RuntimeError, match="closed"):
        index.add_inputs("c", inputs, NLI)
    with pytest.raises(RuntimeError, match="closed"):
        list(index.pairs())
    with pytest.raises(RuntimeError, match="closed"):
        index.matches(field_shingles(inputs, NLI))


@pytest.mark.parametrize("size", [1, 2, 3])
def test_tagged_texts_are_the_tagged_shingles_of_each_field(size: int) -> None:
    rng = random.Random(size)
    # Whitespace str.split() knows beyond ASCII (NBSP, ideographic space, file separators), text
    # that NFKC changes, case folding that grows a word, empty and one-word fields.
    spaces = [" ", "  ", "\t", "\n", "\u00a0", "\u3000", "\x1c", "\u2028", "\u200b"]
    words = [*WORDS, "Straße", "ǅ", "İstanbul", "x"]
    for _ in range(400):
        texts = tuple(
            rng.choice(["", " "])
            + "".join(rng.choice(words) + rng.choice(spaces) for _ in range(rng.randrange(5)))
            for _ in range(rng.randrange(1, 4))
        )
        expected = tagged(tuple(shingles(text, size) for text in texts))
        made = tagged_texts(texts, size)
        assert sorted(made) == sorted(expected) and len(made) == len(set(made)), texts
