"""The near-duplicate rule on hand-made pairs, and the MinHash index that finds them."""

from __future__ import annotations

import random

import pytest

from dynaval.domain.health import minhash as minhash_index
from dynaval.domain.health.minhash import MinHashIndex, band_keys, connecting_pairs
from dynaval.domain.health.near_duplicates import (
    Components,
    FieldShingles,
    NearDuplicateRule,
    clusters,
    field_shingles,
    is_near_duplicate,
    similarity,
)

TEXT = ["text"]
NLI = ["premise", "hypothesis"]
REVIEW = "the movie was not bad at all and the actors were great in every scene"


def one(text: str) -> tuple[frozenset[str], ...]:
    return field_shingles({"text": text}, TEXT)


def nli(premise: str, hypothesis: str) -> tuple[frozenset[str], ...]:
    return field_shingles({"premise": premise, "hypothesis": hypothesis}, NLI)


def test_a_one_word_edit_is_a_near_duplicate() -> None:
    edited = REVIEW.replace("movie", "film")
    assert 0.6 <= similarity(one(REVIEW), one(edited)) < 1
    assert is_near_duplicate(one(REVIEW), one(edited))


def test_a_light_paraphrase_is_a_near_duplicate_and_a_rewording_is_not() -> None:
    light = "The movie was NOT bad at all, and the actors were great in every single scene"
    assert is_near_duplicate(one(REVIEW), one(light))
    # A rewording shares meaning, not words: beyond a lexical rule (the semantic check's job).
    reworded = "every scene had great acting and i quite liked the film overall"
    assert similarity(one(REVIEW), one(reworded)) < 0.2
    assert not is_near_duplicate(one(REVIEW), one(reworded))


def test_the_same_hypothesis_under_another_premise_is_not_a_duplicate() -> None:
    hypothesis = "A man is playing an instrument."
    a = nli("A man plays the guitar on a busy street corner at night.", hypothesis)
    b = nli("Two children are building a sandcastle on the beach in the sun.", hypothesis)
    assert similarity(a, b) == 0
    assert not is_near_duplicate(a, b)
    # ... while the same pair with a one-word edit of the premise is one.
    c = nli("A man plays the guitar on a busy street corner at midnight.", hypothesis)
    assert is_near_duplicate(a, c)


def test_another_hypothesis_under_the_same_premise_is_not_a_duplicate() -> None:
    premise = "A man plays the guitar on a busy street corner at night while people walk past him."
    a = nli(premise, "A man is sleeping.")
    b = nli(premise, "Nobody is outside.")
    assert not is_near_duplicate(a, b)


def test_unrelated_texts_are_not_duplicates() -> None:
    a = one("the hotel room was clean and the staff were friendly")
    b = one("my phone screen cracked after two days of light use")
    assert similarity(a, b) == 0
    assert not is_near_duplicate(a, b)


def test_non_ascii_text_is_compared_after_nfkc_and_case_folding() -> None:
    composed = "Das Café in München war großartig, aber der Kaffee war kalt"
    decomposed = "DAS CAFE\u0301 IN MU\u0308NCHEN WAR GROSSARTIG, ABER DER KAFFEE WAR KALT"
    assert similarity(one(composed), one(decomposed)) == 1
    fullwidth = "".join(c if c == " " else chr(ord(c) + 0xFEE0) for c in REVIEW)
    assert similarity(one(REVIEW), one(fullwidth)) == 1
    japanese = one("この映画は とても 良かった です")
    assert is_near_duplicate(japanese, one("この映画は　とても　良かった　です"))  # ideographic spaces
    assert not is_near_duplicate(japanese, one("この映画は とても 悪かった です"))


def test_the_index_finds_each_pair_once_with_its_exact_similarity() -> None:
    index = MinHashIndex()
    texts = {
        "a": REVIEW,
        "b": REVIEW.replace("movie", "film"),
        "c": "the hotel room was clean and the staff were friendly",
        "d": "my phone screen cracked after two days of light use",
        "e": "",
    }
    for key, text in texts.items():
        index.add(key, one(text))
    assert list(index.pairs()) == [("a", "b", round(similarity(one(texts["a"]), one(texts["b"])), 4))]
    assert list(index.pairs(keep=lambda _a, _b: False)) == []
    # One edit from "a", two from "b": only "a" is near enough.
    twice = one(REVIEW.replace("actors", "cast"))
    assert [m.key for m in index.matches(twice)] == ["a"]
    assert similarity(twice, one(texts["b"])) < 0.6
    with pytest.raises(ValueError):
        index.add("a", one(REVIEW))


def test_a_release_recorded_rule_is_read_back_and_an_old_release_gets_the_default() -> None:
    rule = NearDuplicateRule(shingle=3, threshold=0.8)
    assert NearDuplicateRule.from_dict(rule.to_dict()) == rule
    assert NearDuplicateRule.from_dict(None) == NearDuplicateRule()
    with pytest.raises(ValueError):
        NearDuplicateRule(threshold=0)


# --- connecting_pairs: the clusters of the band keys the database keeps ------------------------


class CountedSimilarity:
    """The rule's real similarity, counting its calls from ``connecting_pairs``."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, a: FieldShingles, b: FieldShingles) -> float:
        self.calls += 1
        return similarity(a, b)


def connected(
    texts: dict[str, str], collide: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, str], int]:
    """``connecting_pairs`` over the texts' real band keys (and, ``collide``, one band key they all
    share, as by a chance collision): their clusters, and how many similarities it computed."""
    shingles = {key: one(text) for key, text in texts.items()}
    keys_of = {text: band_keys(one(text)) for text in set(texts.values())}
    keyed = [(band, key) for key, text in texts.items() for band in keys_of[text]]
    keyed += [(0, key) for key in texts] if collide else []
    counted = CountedSimilarity()
    monkeypatch.setattr(minhash_index, "similarity", counted)
    pairs = list(connecting_pairs(keyed, shingles.__getitem__, NearDuplicateRule()))
    assert all(a < b for a, b in pairs)
    return clusters(pairs), counted.calls


def test_a_pattern_repeated_2000_times_is_one_cluster_at_a_linear_cost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    copies = {f"c{i:04d}": REVIEW for i in range(2000)}
    found, calls = connected(copies, collide=False, monkeypatch=monkeypatch)
    assert found == dict.fromkeys(copies, "c0000")
    assert calls <= 2 * len(copies)


def test_two_patterns_sharing_a_band_key_stay_two_clusters_at_a_linear_cost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    other = "a quiet village by the sea where the fishermen mend their nets every single morning"
    assert similarity(one(REVIEW), one(other)) < 0.1
    # Interleaved keys: the two patterns alternate in every ordering by key.
    texts = {f"k{i:04d}": REVIEW if i % 2 else other for i in range(1200)}
    found, calls = connected(texts, collide=True, monkeypatch=monkeypatch)
    assert found == {key: "k0001" if text == REVIEW else "k0000" for key, text in texts.items()}
    assert calls <= 3 * len(texts)  # by every pair of a key in common: about len(texts) ** 2 / 4


def test_connecting_pairs_gives_the_components_of_every_confirmed_pair_sharing_a_band_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Chains of one-word edits (near their neighbours, not their ends), copies, and unrelated texts,
    # all in one bucket: the components must be those of every confirmed pair, checked one by one.
    rng = random.Random(7)
    words = [
        "the",
        "a",
        "movie",
        "film",
        "plot",
        "actors",
        "scene",
        "music",
        "ending",
        "was",
        "not",
        "bad",
        "good",
        "great",
        "at",
        "all",
        "every",
        "in",
    ]
    texts: dict[str, str] = {}
    for chain in range(6):
        text = [rng.choice(words) for _ in range(16)]
        for step in range(rng.randint(1, 8)):
            texts[f"t{chain}-{step}"] = " ".join(text)
            text[rng.randrange(len(text))] = rng.choice(words)
    for i in range(5):
        texts[f"u{i}"] = " ".join(rng.choice(words) for _ in range(12))
    keys = sorted(texts)
    expected = clusters(
        (a, b)
        for i, a in enumerate(keys)
        for b in keys[i + 1 :]
        if similarity(one(texts[a]), one(texts[b])) >= NearDuplicateRule().threshold
    )
    found, _calls = connected(texts, collide=True, monkeypatch=monkeypatch)
    assert found == expected
    assert len(set(expected.values())) > 1  # more than one component to keep apart


def test_components_join_links_and_keep_the_target_s_root() -> None:
    components = Components()
    assert components.root("a") == "a"
    components.attach("b", to="a")
    components.attach("c", to="b")
    components.attach("x", to="y")
    assert {components.root(k) for k in "abc"} == {"a"}
    assert components.root("x") == components.root("y") == "y"
    components.attach("y", to="c")  # joins the two: the target's root stays
    assert {components.root(k) for k in "abcxy"} == {"a"}
