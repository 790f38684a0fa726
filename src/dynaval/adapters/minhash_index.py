"""A near-duplicate index over datasketch's MinHash and MinHashLSH.

The rule (shingles, the similarity, the thresholds) is :mod:`dynaval.domain.near_duplicates`; this
adapter only finds candidates quickly and confirms each with the rule's exact similarity.
:class:`MinHashIndex` holds its examples in memory: built for one release's rows, not kept between
processes. :func:`band_keys` gives an example's LSH band keys for the shared index at submission,
which the database keeps (:mod:`dynaval.adapters.near_duplicate_index`).
"""

from __future__ import annotations

import functools
import hashlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from datasketch import MinHash, MinHashLSH

from dynaval.domain.near_duplicates import (
    LSH_THRESHOLD_MARGIN,
    MIN_ROUND_THRESHOLD,
    MINHASH_SEED,
    NUM_PERM,
    SHINGLE_WORDS,
    FieldShingles,
    NearDuplicateRule,
    similarity,
    tagged,
)


@dataclass(frozen=True, slots=True)
class Match:
    key: str
    similarity: float


class MinHashIndex:
    """Examples by key; ``matches`` and ``pairs`` give the confirmed near-duplicates."""

    def __init__(self, rule: NearDuplicateRule | None = None) -> None:
        self.rule = rule or NearDuplicateRule()
        self._lsh = MinHashLSH(threshold=self.rule.lsh_threshold, num_perm=NUM_PERM)
        # The permutations are drawn once and shared: drawing them per example would cost more
        # than hashing the example.
        template = MinHash(num_perm=NUM_PERM, seed=MINHASH_SEED)
        self._permutations, self._scheme = template.permutations, template.scheme
        self._examples: dict[str, FieldShingles] = {}
        # Each indexed example's MinHash, kept from ``add`` so that ``pairs`` queries with it
        # instead of hashing every example a second time (about 1 KiB an example).
        self._minhashes: dict[str, MinHash] = {}

    def __len__(self) -> int:
        return len(self._examples)

    def _minhash(self, example: FieldShingles) -> MinHash | None:
        values = tagged(example)
        if not values:
            return None  # nothing to compare: an example with no words
        minhash = MinHash(
            num_perm=NUM_PERM, seed=MINHASH_SEED, permutations=self._permutations, scheme=self._scheme
        )
        minhash.update_batch(values)
        return minhash

    def add(self, key: str, example: FieldShingles) -> None:
        """Index ``example`` under ``key`` (a key is added once)."""
        if key in self._examples:
            raise ValueError(f"{key} is in the index already")
        minhash = self._minhash(example)
        self._examples[key] = example
        if minhash is not None:
            self._lsh.insert(key, minhash, check_duplication=False)
            self._minhashes[key] = minhash

    def matches(self, example: FieldShingles) -> list[Match]:
        """The indexed examples that are near-duplicates of ``example``, most similar first."""
        minhash = self._minhash(example)
        if minhash is None:
            return []
        found = []
        for key in self._lsh.query(minhash):
            value = similarity(example, self._examples[key])
            if value >= self.rule.threshold:
                found.append(Match(str(key), round(value, 4)))
        return sorted(found, key=lambda m: (-m.similarity, m.key))

    def pairs(
        self, keep: Callable[[str, str], bool] = lambda _a, _b: True
    ) -> Iterator[tuple[str, str, float]]:
        """Each confirmed pair of indexed examples once (keys in sorted order), where ``keep``
        allows it: for each key in order, its partners most similar first."""
        for key in sorted(self._examples):
            minhash = self._minhashes.get(key)
            if minhash is None:
                continue  # an example with no words matches nothing
            example = self._examples[key]
            found = []
            # Only the later keys: the pair (earlier, key) was confirmed from the earlier side.
            for other in map(str, self._lsh.query(minhash)):
                if other > key:
                    value = similarity(example, self._examples[other])
                    if value >= self.rule.threshold:
                        found.append(Match(other, round(value, 4)))
            for match in sorted(found, key=lambda m: (-m.similarity, m.key)):
                if keep(key, match.key):
                    yield key, match.key, match.similarity


# ------------------------------------------------------------------ the shared index's band keys

INDEX_LSH_THRESHOLD = MIN_ROUND_THRESHOLD - LSH_THRESHOLD_MARGIN
"""The shared index at submission finds candidates from this Jaccard estimate up, whatever the
round's threshold (one set of band keys serves every round)."""


def keys_serve(rule: NearDuplicateRule) -> bool:
    """Whether the stored band keys find the candidate pairs of ``rule``: they are made of the
    default shingles, for thresholds from ``MIN_ROUND_THRESHOLD`` up."""
    return rule.shingle == SHINGLE_WORDS and rule.threshold >= MIN_ROUND_THRESHOLD


@functools.lru_cache(maxsize=1)
def _banding() -> tuple[list[tuple[int, int]], tuple[object, object]]:
    """The bands (datasketch's choice for ``INDEX_LSH_THRESHOLD``) and the shared permutations,
    made on first use."""
    lsh = MinHashLSH(threshold=INDEX_LSH_THRESHOLD, num_perm=NUM_PERM)
    template = MinHash(num_perm=NUM_PERM, seed=MINHASH_SEED)
    return list(lsh.hashranges), (template.permutations, template.scheme)


def band_keys(example: FieldShingles) -> list[int]:
    """The example's MinHash LSH band keys (signed 64-bit, each naming its band): two examples
    with a key in common are candidate near-duplicates. No key for an example with no words."""
    values = tagged(example)
    if not values:
        return []
    ranges, (permutations, scheme) = _banding()
    minhash = MinHash(num_perm=NUM_PERM, seed=MINHASH_SEED, permutations=permutations, scheme=scheme)
    minhash.update_batch(values)
    keys = []
    for band, (start, end) in enumerate(ranges):
        digest = hashlib.blake2b(
            band.to_bytes(2, "big") + minhash.hashvalues[start:end].tobytes(), digest_size=8
        ).digest()
        keys.append(int.from_bytes(digest, "big", signed=True))
    return keys


def connecting_pairs(
    keyed: Iterable[tuple[int, str]],
    shingles_of: Callable[[str], FieldShingles],
    rule: NearDuplicateRule,
) -> Iterator[tuple[str, str]]:
    """From ``(band key, example key)`` rows, pairs sharing a band key that ``rule`` confirms (keys
    in sorted order), enough of them to connect every connected component of the near-duplicate
    graph (whose edges are the confirmed pairs sharing a band key). A pair whose two examples are
    connected already is not confirmed (it could not change a component): for clusters, not for a
    list of every pair. ``shingles_of`` gives an example's shingles (called once per example that
    shares a key).

    The cost per bucket (the examples sharing one band key) is about linear in its size, however
    often a pattern repeats. A bucket whose members are connected already costs one root lookup a
    member. Otherwise each member is compared once with the bucket's first member (the pivot), and
    the members are swept in order of their distance to it (``1 - similarity``, a metric: the
    largest of the fields' Jaccard distances). A member is compared only with members at most
    ``1 - threshold`` nearer the pivot than itself (the triangle inequality rules the others out),
    and within those with one after another of each other component's members until one is
    similar. So n copies of a pattern cost about 2n similarities, and two patterns colliding in a
    band key about 2n more, not n² / 4. The worst case is still quadratic: many members at about
    the same distance from the pivot, in many components that are not near each other. Unrelated
    texts seldom share a band key (LSH), so a bucket holds few components."""
    buckets: dict[int, set[str]] = {}
    for band_key, key in keyed:
        buckets.setdefault(band_key, set()).add(key)
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        parent.setdefault(key, key)
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    shingles: dict[str, FieldShingles] = {}

    def of(key: str) -> FieldShingles:
        if key not in shingles:
            shingles[key] = shingles_of(key)
        return shingles[key]

    def ordered(a: str, b: str) -> tuple[str, str]:
        return (a, b) if a < b else (b, a)

    reach = 1.0 - rule.threshold + 1e-9  # the farthest a near-duplicate can be (a hair for rounding)
    for band_key in sorted(buckets):
        members = sorted(buckets[band_key])
        if len({root(key) for key in members}) < 2:
            continue  # one component already (or one member)
        pivot = members[0]
        by_distance: list[tuple[float, str]] = [(0.0, pivot)]
        for key in members[1:]:
            value = similarity(of(pivot), of(key))
            if value >= rule.threshold and root(pivot) != root(key):
                parent[root(key)] = root(pivot)
                yield ordered(pivot, key)
            by_distance.append((1.0 - value, key))
        by_distance.sort()
        # The members swept so far within ``reach`` of the current one, by their component's root.
        window: deque[tuple[float, str]] = deque()
        groups: dict[str, set[str]] = {}
        for distance, key in by_distance:
            while window and window[0][0] < distance - reach:
                _gone, left = window.popleft()
                group = groups[root(left)]
                group.discard(left)
                if not group:
                    del groups[root(left)]
            own = root(key)
            for other in list(groups):
                if other == own or other not in groups:
                    continue
                near = next((m for m in groups[other] if similarity(of(m), of(key)) >= rule.threshold), None)
                if near is None:
                    continue
                yield ordered(near, key)
                parent[own] = other
                mine = groups.pop(own, set())
                theirs = groups.pop(other)
                if len(mine) > len(theirs):
                    mine, theirs = theirs, mine
                theirs |= mine
                groups[other] = theirs
                own = other
            groups.setdefault(own, set()).add(key)
            window.append((distance, key))
