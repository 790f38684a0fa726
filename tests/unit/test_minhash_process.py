"""The release's MinHash index in a child process gives the in-process index's pairs exactly, and a
failing or killed child reaches the caller as a clear error, never as a hang or a lost row."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal

import pytest

from dynaval.adapters.minhash_index import MinHashIndex
from dynaval.adapters.minhash_process import IndexProcessFailed, MinHashProcess
from dynaval.domain.near_duplicates import NearDuplicateRule

NLI = ["premise", "hypothesis"]
WORDS = [
    "the", "a", "movie", "film", "was", "not", "bad", "good", "great", "plot", "actors", "cast",
    "and", "in", "every", "scene", "café", "naïve",
]  # fmt: skip


def rows(count: int, seed: int = 7) -> list[tuple[str, dict[str, str]]]:
    """NLI-shaped rows, a third of them a one-word edit of an earlier row (near-duplicates)."""
    rng = random.Random(seed)
    made: list[tuple[str, dict[str, str]]] = []
    for i in range(count):
        if made and i % 3 == 0:
            _key, earlier = rng.choice(made)
            words = earlier["hypothesis"].split()
            words[rng.randrange(len(words))] = rng.choice(WORDS)
            inputs = {"premise": earlier["premise"], "hypothesis": " ".join(words)}
        else:
            inputs = {
                "premise": " ".join(rng.choice(WORDS) for _ in range(14)),
                "hypothesis": " ".join(rng.choice(WORDS) for _ in range(12)),
            }
        made.append((f"ex-{i:05d}", inputs))
    made.append(("ex-empty", {"premise": "", "hypothesis": ""}))  # no words: never a candidate
    return made


def in_process_pairs(
    examples: list[tuple[str, dict[str, str]]], rule: NearDuplicateRule
) -> list[tuple[str, str, float]]:
    index = MinHashIndex(rule)
    for key, inputs in examples:
        index.add_inputs(key, inputs, NLI)
    return list(index.pairs())


def index_children() -> list[multiprocessing.process.BaseProcess]:
    return [p for p in multiprocessing.active_children() if p.name == "dynaval-minhash-index"]


@pytest.mark.parametrize("start_after", [50, 10_000], ids=["child process", "in process"])
def test_the_pairs_are_the_in_process_index_pairs(start_after: int) -> None:
    rule = NearDuplicateRule(threshold=0.6)
    examples = rows(4_321)
    expected = in_process_pairs(examples, rule)
    assert len(expected) > 100
    index = MinHashProcess(rule, start_after=start_after)
    for key, inputs in examples:
        index.add_inputs(key, inputs, NLI)
    assert index.in_child is (start_after < len(examples))
    assert index.pairs() == expected
    assert index.pairs() == expected  # asked again: the same list, no second search
    if index.in_child:
        assert index.peak_rss_mb is not None and index.peak_rss_mb > 0
    with pytest.raises(RuntimeError, match="takes no more rows"):
        index.add_inputs("late", {"premise": "a", "hypothesis": "b"}, NLI)
    index.close()
    assert index_children() == []
    with pytest.raises(RuntimeError, match="closed"):
        index.pairs()


def test_a_failure_in_the_child_is_raised_in_the_caller() -> None:
    index = MinHashProcess(start_after=10)
    try:
        for key, inputs in rows(30):
            index.add_inputs(key, inputs, NLI)
        index.add_inputs("ex-00003", {"premise": "again", "hypothesis": "again"}, NLI)  # a repeated key
        with pytest.raises(IndexProcessFailed, match="ex-00003 is in the index already"):
            index.pairs()
    finally:
        index.close()
    assert index_children() == []


def test_a_killed_child_is_named_not_waited_for() -> None:
    index = MinHashProcess(start_after=10)
    try:
        for key, inputs in rows(30):
            index.add_inputs(key, inputs, NLI)
        (child,) = index_children()
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        with pytest.raises(IndexProcessFailed, match="ended without answering"):
            index.pairs()
    finally:
        index.close()


def test_closing_before_the_pairs_ends_the_child() -> None:
    """A build that fails while reading closes its index: the child does not outlive it."""
    index = MinHashProcess(start_after=10)
    for key, inputs in rows(5_000):
        index.add_inputs(key, inputs, NLI)
    assert len(index_children()) == 1
    index.close()
    index.close()  # twice is harmless
    assert index_children() == []


def test_the_fields_stay_the_same() -> None:
    index = MinHashProcess()
    index.add_inputs("a", {"text": "one two three"}, ["text"])
    with pytest.raises(ValueError, match="same fields"):
        index.add_inputs("b", {"premise": "x", "hypothesis": "y"}, NLI)
    index.close()
