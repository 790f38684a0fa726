"""A round's health figures on hand-made rounds: top-writer shares, distinct-n, repeated-pattern
clusters, the fooled rate with and without them, and the possible-score-inflation mark."""

from __future__ import annotations

import pytest

from dynaval.domain.health.near_duplicates import field_shingles, is_near_duplicate
from dynaval.domain.health.round_health import (
    Diversity,
    HealthCandidate,
    RoundPoint,
    diversity,
    round_health,
    trend,
    writer_shares,
)

TRICK = "the movie was not bad at all and i would watch it again tomorrow"


def _c(i: int, text: str, writer: str, *, fooled: bool = True, field: str = "text") -> HealthCandidate:
    return HealthCandidate(f"c{i:02d}", {field: text}, writer, fooled, "accepted" if fooled else "not_fooled")


def test_top_writer_shares_count_the_most_prolific_writers() -> None:
    # 12 writers: w0 wrote 10, w1 6, w2..w11 one each (10): 26 candidates.
    writers = ["w0"] * 10 + ["w1"] * 6 + [f"w{i}" for i in range(2, 12)]
    shares = writer_shares(writers)
    assert shares.writers == 12
    assert shares.top[1] == pytest.approx(10 / 26)
    assert shares.top[5] == pytest.approx((10 + 6 + 3) / 26)
    assert shares.top[10] == pytest.approx((10 + 6 + 8) / 26)


def test_top_writer_shares_of_a_round_with_few_writers_or_none() -> None:
    assert writer_shares(["a", "b", "a"]).top == {1: pytest.approx(2 / 3), 5: 1.0, 10: 1.0}
    assert writer_shares([]).top == {1: None, 5: None, 10: None}


def test_distinct_n_exact_values_on_folded_text() -> None:
    # "The cat sat" / "the  CAT ran": folded, 6 unigrams of which 4 distinct (the, cat, sat, ran);
    # bigrams (the cat)(cat sat)(the cat)(cat ran): 3 of 4; trigrams: 2 of 2.
    found = diversity(["The cat sat", "the  CAT ran"])
    assert found.distinct == {1: pytest.approx(4 / 6), 2: pytest.approx(3 / 4), 3: 1.0}
    assert found.ngrams == {1: 6, 2: 4, 3: 2}


def test_distinct_n_does_not_span_fields_and_is_undefined_without_ngrams() -> None:
    # Two one-word fields: two unigrams, no bigram (a bigram never joins two fields).
    found = diversity(["Bonjour", "bonjour"])
    assert found.distinct == {1: 0.5, 2: None, 3: None}
    assert diversity([]).distinct == {1: None, 2: None, 3: None}


def test_distinct_n_folds_non_ascii_text() -> None:
    # NFKC and case folding: a full-width C, a capital É and a decomposed é are one word.
    assert diversity(["\uff23AF\u00c9 noir", "cafe\u0301 noir"]).distinct[1] == pytest.approx(2 / 4)


def _round() -> list[HealthCandidate]:
    """Ten candidates: a trick repeated four times by two writers (c00 first, not fooled), a
    second pattern of two, and four unrelated texts."""
    return [
        _c(0, TRICK, "ana", fooled=False),
        _c(1, "an unrelated remark about the hotel staff being friendly", "bo"),
        _c(2, TRICK.replace("movie", "film"), "ana"),
        _c(3, TRICK.replace("tomorrow", "today"), "cy"),
        _c(4, "the phone screen cracked after a week of light use", "bo", fooled=False),
        _c(5, TRICK.replace("again", "twice"), "ana"),
        _c(6, "the soup was cold and the waiter never came back to us", "dee"),
        _c(7, "the soup was cold and the waiter never came back to me", "eve"),
        _c(8, "prices at this place are fair for what you get here", "bo", fooled=False),
        _c(9, "my flight left on time and the crew were polite", "cy"),
    ]


def _pairs(candidates: list[HealthCandidate]) -> list[tuple[str, str]]:
    """Every near-duplicate pair, by the rule itself (the index only finds them faster)."""
    shingled = {c.id: field_shingles(c.inputs, ["text"]) for c in candidates}
    ids = sorted(shingled)
    return [
        (a, b) for i, a in enumerate(ids) for b in ids[i + 1 :] if is_near_duplicate(shingled[a], shingled[b])
    ]


def test_clusters_are_the_repeated_patterns_largest_first_with_example_and_writers() -> None:
    candidates = _round()
    health = round_health(candidates, ["text"], _pairs(candidates))
    assert [(c.size, c.first_id) for c in health.clusters] == [(4, "c00"), (2, "c06")]
    trick = health.clusters[0]
    assert trick.example == {"text": TRICK}
    assert trick.writers == [("ana", 3), ("cy", 1)]
    assert trick.candidate_ids == ["c00", "c02", "c03", "c05"]
    assert (trick.fooled, trick.accepted) == (3, 3)  # c00 fooled nobody: not validated
    assert health.clusters[1].writers == [("dee", 1), ("eve", 1)]
    assert health.clustered == 6


def test_fooled_rate_without_repeats_counts_each_pattern_once_by_its_first_candidate() -> None:
    candidates = _round()
    health = round_health(candidates, ["text"], _pairs(candidates))
    assert health.collected == 10 and health.fooled == 7
    assert health.fooled_rate == pytest.approx(0.7)
    # Kept: the trick as c00 (not fooled), the soup as c06 (fooled), and c01, c04, c08, c09:
    # six patterns, of which c06, c01, c09 fooled.
    assert (health.patterns, health.fooled_patterns) == (6, 3)
    assert health.fooled_rate_without_repeats == pytest.approx(0.5)
    figures = health.to_dict()
    assert figures["fooled_rate"] == {
        "with_repeats": pytest.approx(0.7),
        "without_repeats": pytest.approx(0.5),
        "fooled": 7,
        "collected": 10,
        "fooled_patterns": 3,
        "patterns": 6,
    }
    assert figures["repeated_patterns"]["clusters"] == 2 and figures["repeated_patterns"]["candidates"] == 6


def test_a_round_without_repeats_has_one_rate() -> None:
    candidates = [
        _c(0, "a lovely quiet room with a view", "a"),
        _c(1, "loud music all night long", "b", fooled=False),
    ]
    health = round_health(candidates, ["text"], [])
    assert health.clusters == [] and health.fooled_rate == health.fooled_rate_without_repeats == 0.5
    empty = round_health([], ["text"], [])
    assert empty.fooled_rate is None and empty.fooled_rate_without_repeats is None


def test_nli_figures_count_every_input_field() -> None:
    premise = "A man in a red coat is sleeping on a park bench."
    candidates = [
        HealthCandidate(
            "n1", {"premise": premise, "hypothesis": "Nobody is on the bench."}, "a", True, "accepted"
        ),
        HealthCandidate("n2", {"premise": premise, "hypothesis": "A man sleeps."}, "b", False, "not_fooled"),
    ]
    health = round_health(candidates, ["premise", "hypothesis"], [])
    # Words: 12 + 12 (premise twice) + 5 + 3 = 32; distinct: the premise's 10 ("a" thrice), then
    # "nobody", "the" and "sleeps." (punctuation stays on its word) = 13.
    assert health.diversity.distinct[1] == pytest.approx(13 / 32)
    assert health.diversity.ngrams == {1: 32, 2: 11 + 11 + 4 + 2, 3: 10 + 10 + 3 + 1}


def _point(round_id: int, mer: float | None, distinct_2: float | None) -> RoundPoint:
    return RoundPoint(
        round_id=round_id,
        name=f"r{round_id}",
        state="frozen",
        collected=100,
        mer=mer,
        vmer=None if mer is None else mer / 2,
        alpha=0.7,
        alpha_undefined_reason=None,
        diversity=Diversity({1: None, 2: distinct_2, 3: None}, {1: 0, 2: 0, 3: 0}),
    )


def test_a_round_whose_mer_rose_while_its_diversity_fell_is_marked() -> None:
    rounds = [
        _point(4, 0.40, 0.50),  # the fourth round: MER up, diversity down against round 2 -> marked
        _point(1, 0.30, 0.80),  # first: nothing to compare with
        _point(2, 0.35, 0.85),  # MER up, diversity up: not marked
        _point(7, 0.40, 0.30),  # MER equal (not strictly up): not marked
        _point(9, 0.20, 0.10),  # MER down: not marked
        _point(11, 0.50, None),  # diversity undefined: not marked
        _point(12, 0.60, 0.05),  # previous diversity undefined: not marked
    ]
    marked = {t.point.round_id: (t.previous_id, t.possible_score_inflation) for t in trend(rounds)}
    assert [t.point.round_id for t in trend(rounds)] == [1, 2, 4, 7, 9, 11, 12]
    assert marked == {
        1: (None, False),
        2: (1, False),
        4: (2, True),
        7: (4, False),
        9: (7, False),
        11: (9, False),
        12: (11, False),
    }
    assert trend(rounds)[2].to_dict()["possible_score_inflation"] is True
    assert trend(rounds)[2].to_dict()["diversity"] == 0.50
