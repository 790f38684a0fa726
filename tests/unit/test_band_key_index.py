"""The in-memory band keys of the lexical near-duplicate check: what a lookup finds and in which
order, top-ups by ``seq``, and the same answers as a plain count however the runs were merged."""

from __future__ import annotations

import random

import pytest

from dynaval.domain.health.band_keys import BandKeyIndex, keys_from_bytes, keys_to_bytes, shared_keys


def test_keys_are_stored_sorted_and_distinct_and_read_back() -> None:
    keys = [5, -(2**63), 2**63 - 1, 5, -1]
    assert keys_from_bytes(keys_to_bytes(keys)).tolist() == [-(2**63), -1, 5, 2**63 - 1]
    assert keys_from_bytes(keys_to_bytes([])).tolist() == []
    assert keys_from_bytes(None).tolist() == []


def test_only_keys_two_examples_hold_can_pair_them() -> None:
    held = [("a", [1, 2]), ("b", [2, 3]), ("c", [3]), ("d", []), ("e", [9])]
    found = shared_keys((c, keys_from_bytes(keys_to_bytes(k))) for c, k in held)
    assert found == [(2, "a"), (2, "b"), (3, "b"), (3, "c")]
    assert shared_keys([]) == []
    assert shared_keys([("d", keys_from_bytes(None))]) == []


def test_the_examples_sharing_most_keys_come_first_then_the_earliest() -> None:
    index = BandKeyIndex()
    index.top_up(
        "nli",
        [
            (1, "a", keys_to_bytes([1, 2])),
            (2, "b", keys_to_bytes([1, 2, 3])),
            (3, "c", keys_to_bytes([9])),
            (4, "d", keys_to_bytes([1, 2])),
            (5, "e", None),  # no words, no keys
        ],
    )
    assert index.lookup("nli", [1, 2, 3], limit=10) == ["b", "a", "d"]
    assert index.lookup("nli", [3, 2, 1, 1], limit=2) == ["b", "a"]
    assert index.lookup("nli", [9], limit=10) == ["c"]
    assert index.lookup("nli", [42], limit=10) == []
    assert index.lookup("nli", [], limit=10) == []
    assert index.lookup("sentiment", [1], limit=10) == []  # another task type's keys are its own
    assert index.size("nli") == 5


def test_a_top_up_reads_only_rows_after_the_last_and_an_example_once() -> None:
    index = BandKeyIndex()
    index.top_up("sentiment", [(3, "a", keys_to_bytes([1]))])
    assert index.last_seq("sentiment") == 3
    # A row at or before the last seq read is passed over; a row written again (a vector added
    # later) under a new seq is the same example.
    index.top_up("sentiment", [(2, "old", keys_to_bytes([1])), (7, "a", keys_to_bytes([1]))])
    assert index.last_seq("sentiment") == 7
    assert index.lookup("sentiment", [1], limit=10) == ["a"]
    assert index.size("sentiment") == 1


@pytest.mark.parametrize("top_up_size", [1, 7, 250])
def test_lookups_equal_a_plain_count_however_the_keys_arrived(top_up_size: int) -> None:
    """Many top-ups of every size make and merge many runs; each lookup must still equal a count
    over every example."""
    rng = random.Random(top_up_size)
    examples = [(f"x{i:04d}", rng.sample(range(300), rng.randint(0, 12))) for i in range(1500)]
    index = BandKeyIndex()
    for start in range(0, len(examples), top_up_size):
        part = examples[start : start + top_up_size]
        index.top_up("t", [(start + n + 1, c, keys_to_bytes(k)) for n, (c, k) in enumerate(part)])
        if start % (top_up_size * 25) == 0:
            assert_plain_count(index, examples[: start + len(part)], rng)
    assert_plain_count(index, examples, rng)


def assert_plain_count(
    index: BandKeyIndex, examples: list[tuple[str, list[int]]], rng: random.Random
) -> None:
    for _ in range(20):
        query = set(rng.sample(range(300), 8))
        shared = {c: len(query & set(k)) for c, k in examples if query & set(k)}
        # The earliest first among equals: the examples' order is their order of arrival.
        order = {c: n for n, (c, _k) in enumerate(examples)}
        expected = sorted(shared, key=lambda c: (-shared[c], order[c]))[:30]
        assert index.lookup("t", query, limit=30) == expected
