"""The near-copy rule's process index (each process's fingerprints of a task type's images) and
the pairs of a release's images: the same answers as the rule's own distance, pair by pair."""

from __future__ import annotations

import random

from dynaval.domain.images.image import ImageFingerprint
from dynaval.domain.images.near_copies import (
    MERGE_BLOCKS,
    FingerprintIndex,
    ImagePairIndex,
    NearCopyRule,
    distance,
)


def prints(rng: random.Random, n: int) -> list[ImageFingerprint]:
    return [
        ImageFingerprint(rng.getrandbits(144), tuple(rng.getrandbits(144) for _ in range(8)))
        for _ in range(n)
    ]


def test_the_index_finds_what_the_rule_finds_nearest_first_and_holds_each_task_apart() -> None:
    rng = random.Random(3)
    held = prints(rng, 300)
    near = ImageFingerprint(held[10].centre ^ 0b101, held[10].around)  # 2 bits from held[10]
    held[200] = ImageFingerprint(held[10].around[3] ^ 1, ())  # 1 bit from one of held[10]'s shifts
    index = FingerprintIndex()
    # Topped up a few rows at a time, as checks do: more blocks than are ever kept apart.
    for start in range(0, len(held), 10):
        rows = [(i + 1, f"c{i}", held[i].to_bytes()) for i in range(start, start + 10)]
        index.top_up("digits", rows)
        index.lookup("digits", near, NearCopyRule(), limit=5)
    index.top_up("letters", [(1, "other", near.to_bytes())])
    rule = NearCopyRule(threshold=8)
    expected = sorted((distance(near, p), i) for i, p in enumerate(held) if distance(near, p) <= 8)
    assert index.lookup("digits", near, rule, limit=10) == [(f"c{i}", bits) for bits, i in expected]
    assert [key for key, _ in index.lookup("digits", near, rule, limit=10)][:2] == ["c200", "c10"]
    assert index.lookup("digits", near, rule, limit=1) == [("c200", 1)]
    assert index.lookup("letters", near, rule, limit=5) == [("other", 0)]
    assert index.size("digits") == 300 and len(index._of("digits").blocks) <= MERGE_BLOCKS + 1
    # A row read again (its candidate indexed anew) is held once; an older seq is passed over.
    index.top_up("digits", [(301, "c10", held[10].to_bytes()), (5, "late", near.to_bytes())])
    assert index.size("digits") == 300 and index.last_seq("digits") == 301


def test_a_releases_pairs_are_every_pair_within_the_rule() -> None:
    rng = random.Random(4)
    held = prints(rng, 60)
    held[40] = ImageFingerprint(held[3].centre ^ 0xFF, held[3].around)  # 8 bits apart: within
    held[50] = ImageFingerprint(held[3].centre ^ 0x1FF, ())  # 9 bits from held[3]'s centre
    pairs = ImagePairIndex(NearCopyRule(threshold=8), lambda key: held[int(key[1:])])
    for i in range(len(held)):
        pairs.add_inputs(f"e{i:02d}", {"image": f"e{i:02d}"}, ["image"])
    brute = sorted(
        (f"e{i:02d}", f"e{j:02d}")
        for i in range(len(held))
        for j in range(i + 1, len(held))
        if distance(held[i], held[j]) <= 8
    )
    assert [(a, b) for a, b, _sim in pairs.pairs()] == brute
    assert ("e03", "e40") in brute
    assert pairs.pairs(keep=lambda a, b: b != "e40") == [p for p in pairs.pairs() if p[1] != "e40"]
