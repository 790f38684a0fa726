"""A near-duplicate index with datasketch's MinHash and MinHashLSH candidates, computed in batches.

The rule (shingles, the similarity, the thresholds) is :mod:`dynaval.domain.health.near_duplicates`; this
adapter only finds candidates quickly and confirms each with the rule's exact similarity.
:class:`MinHashIndex` holds its examples in memory: built for one release's rows, not kept between
processes. :func:`band_keys` gives an example's LSH band keys for the shared index at submission,
which the database keeps (:mod:`dynaval.adapters.health.near_duplicate_index`).
"""

from __future__ import annotations

import functools
import hashlib
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from hashlib import sha1
from typing import Any

import numpy as np
import numpy.typing as npt

from dynaval.domain.health.near_duplicates import (
    LSH_THRESHOLD_MARGIN,
    MIN_ROUND_THRESHOLD,
    MINHASH_SEED,
    NUM_PERM,
    SHINGLE_WORDS,
    Components,
    FieldShingles,
    NearDuplicateRule,
    shingles,
    similarity,
    tagged,
    tagged_texts,
)


@dataclass(frozen=True, slots=True)
class Match:
    key: str
    similarity: float


class MinHashIndex:
    """Examples by key; ``matches`` and ``pairs`` give the confirmed near-duplicates.

    The signatures are datasketch's (its ``affine32`` MinHash: SHA-1 of each tagged shingle, the
    MurmurHash3 finalizer, ``NUM_PERM`` affine permutations drawn with ``MINHASH_SEED``), computed
    for a batch of examples at a time with numpy instead of one ``MinHash`` object each, and kept in
    one array. The candidates are datasketch's ``MinHashLSH`` candidates (its bands for the rule's
    LSH threshold: two examples are candidates when all the values of one band are equal), found by
    sorting each band's 64-bit digest instead of a dict of sets per band. Only the digests are kept
    (8 bytes a band an example, not 4 a permutation: 200 bytes an example instead of 500, for a
    million-row release). Two examples whose band values differ share a digest with a chance of
    about one in 2^64; such a candidate is no pair unless the exact similarity confirms it, as every
    candidate must.
    """

    def __init__(self, rule: NearDuplicateRule | None = None) -> None:
        self.rule = rule or NearDuplicateRule()
        self._ranges: list[tuple[int, int]] = _hashranges(self.rule.lsh_threshold)
        self._width = self._ranges[-1][1]
        self._permutations = _permutations(self._width)
        self._keys: set[str] = set()
        self._key_list: list[str] = []
        """Every key added, in order: the key of the example added n-th (none for an index by row)."""
        self._added = 0
        self._by_row: bool | None = None
        """Whether the examples are known by the order they were added in (:meth:`add_row`), not
        by a key; None until the first is added."""
        self._examples: dict[str, FieldShingles] = {}
        """The examples added by :meth:`add`, by key."""
        self._fields: tuple[str, ...] | None = None
        self._text_bytes = bytearray()
        self._text_ends = array("q")
        """The examples added by :meth:`add_inputs` that have words: their fields' texts, UTF-8, one
        after another (``_text_ends[i]`` ends text i), shingled again when compared. A million
        releases' rows cost their texts' bytes, not a tuple and strings each in a dict."""
        self._hashed = array("q")
        """The examples with words, in the order of the digests' columns: the order each was added in."""
        self._hashed_texts = array("q")
        """For each of those, the index of its first text (-1: added by :meth:`add`)."""
        self._sides = array("b")
        """For each of those, its side (-1: none; see :meth:`add_inputs`)."""
        self._blocks: list[npt.NDArray[np.uint64]] = []
        """The examples' band digests (a row a band, a column an example), a batch a block."""
        self._pending: list[list[bytes]] = []
        self._pending_values = 0
        self._bands: list[_Band] | None = None
        self._closed = False

    def __len__(self) -> int:
        return self._added

    def close(self) -> None:
        """Let go of every example (a release's index holds hundreds of megabytes): a closed index
        takes no example and answers no question."""
        self._closed = True
        self._keys = set()
        self._key_list = []
        self._added = 0
        self._examples = {}
        self._text_bytes = bytearray()
        self._text_ends = array("q")
        self._hashed = array("q")
        self._hashed_texts = array("q")
        self._sides = array("b")
        self._blocks = []
        self._pending = []
        self._pending_values = 0
        self._bands = None

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the near-duplicate index is closed: its examples are let go")

    def _new_key(self, key: str) -> None:
        self._check_open()
        self._keep_order(by_row=False)
        if key in self._keys:
            raise ValueError(f"{key} is in the index already")
        self._keys.add(key)
        self._key_list.append(key)

    def _keep_order(self, *, by_row: bool) -> None:
        if self._by_row is None:
            self._by_row = by_row
        elif self._by_row is not by_row:
            raise ValueError(
                "an index's examples are all known by a key, or all by the order they were added in"
            )

    def add(self, key: str, example: FieldShingles) -> None:
        """Index ``example`` under ``key`` (a key is added once)."""
        self._new_key(key)
        self._examples[key] = example
        self._hash(tagged(example), None)

    def add_inputs(
        self, key: str, inputs: Mapping[str, Any], fields: Sequence[str], side: int | None = None
    ) -> None:
        """Index the example with these input ``fields`` under ``key``, as :meth:`add` does its
        shingles (``field_shingles`` at the rule's shingle size), keeping only its texts: for the
        many examples of a release, of which few are ever compared. An example given a ``side``
        (0 to 127) is not paired with another of the same side: ``release verify`` asks only for
        the pairs across kinds of split, and a release's candidates are nearly all within one."""
        self.add_texts(key, tuple(str(inputs.get(name) or "") for name in fields), fields, side)

    def add_texts(
        self, key: str, texts: Sequence[str], fields: Sequence[str], side: int | None = None
    ) -> None:
        """:meth:`add_inputs` of the ``fields``' texts, in order (a missing one as ``""``)."""
        self._check_texts(texts, fields, side)
        self._new_key(key)
        self._add_texts(texts, fields, side)

    def add_row(self, texts: Sequence[str], fields: Sequence[str], side: int | None = None) -> int:
        """:meth:`add_texts` of an example known by the order it was added in (0 for the first),
        which this returns; :meth:`row_pairs` gives its pairs by that number. No key is kept: for
        an index whose caller keeps the keys (the release index's child process)."""
        self._check_open()
        self._check_texts(texts, fields, side)
        self._keep_order(by_row=True)
        self._add_texts(texts, fields, side)
        return self._added - 1

    def _check_texts(self, texts: Sequence[str], fields: Sequence[str], side: int | None) -> None:
        if self._fields is not None and tuple(fields) != self._fields:
            raise ValueError("an index's examples added by their inputs have the same fields")
        if len(texts) != len(fields):
            raise ValueError(f"{len(texts)} texts for {len(fields)} fields")
        if side is not None and not 0 <= side <= 127:
            raise ValueError(f"a side is 0 to 127, not {side}")

    def _add_texts(self, texts: Sequence[str], fields: Sequence[str], side: int | None) -> None:
        self._fields = tuple(fields)
        self._hash(tagged_texts(texts, self.rule.shingle), texts, side)

    def _row_shingles(self, row: int) -> FieldShingles:
        """The shingles of the example in digest column ``row``."""
        first = self._hashed_texts[row]
        if first < 0:
            return self._examples[self._key_list[self._hashed[row]]]
        ends, count = self._text_ends, len(self._fields or ())
        texts = (
            self._text_bytes[(ends[i - 1] if i else 0) : ends[i]].decode()
            for i in range(first, first + count)
        )
        return tuple(shingles(text, self.rule.shingle) for text in texts)

    def _hash(self, values: list[bytes], texts: Sequence[str] | None, side: int | None = None) -> None:
        """Index the next example by its tagged shingles (``values``), keeping its ``texts`` (None:
        its shingles are kept by :meth:`add`) and its side (-1: none)."""
        self._added += 1
        if values:  # an example with no words has nothing to compare: it is never a candidate
            self._hashed.append(self._added - 1)
            self._sides.append(-1 if side is None else side)
            if texts is None:
                self._hashed_texts.append(-1)
            else:
                self._hashed_texts.append(len(self._text_ends))
                for text in texts:
                    self._text_bytes += text.encode()
                    self._text_ends.append(len(self._text_bytes))
            self._pending.append(values)
            self._pending_values += len(values)
            if self._pending_values >= HASH_BATCH_VALUES:
                self._hash_pending()
        self._bands = None

    def _hash_pending(self) -> None:
        if self._pending:
            rows = signatures(self._pending, self._permutations)
            self._blocks.append(np.stack([_band_digests(rows[:, a:b]) for a, b in self._ranges]))
            self._pending = []
            self._pending_values = 0

    def _band_column(self, band: int) -> npt.NDArray[np.uint64]:
        """Every example's digest of ``band``, one band at a time: the blocks are never joined
        into one copy of every digest."""
        self._hash_pending()
        if not self._blocks:
            return np.empty(0, dtype=np.uint64)
        return np.concatenate([block[band] for block in self._blocks])

    def _banded(self) -> list[_Band]:
        if self._bands is None:
            self._bands = [_Band(self._band_column(band)) for band in range(len(self._ranges))]
        return self._bands

    def matches(self, example: FieldShingles) -> list[Match]:
        """The indexed examples that are near-duplicates of ``example``, most similar first."""
        self._check_open()
        self._keyed("matches")
        values = tagged(example)
        if not values:
            return []
        query = signatures([values], self._permutations)
        candidates: set[int] = set()
        for band, (start, end) in zip(self._banded(), self._ranges, strict=True):
            candidates.update(band.rows_like(_band_digests(query[:, start:end])[0]))
        found = []
        for row in candidates:
            value = similarity(example, self._row_shingles(row))
            if value >= self.rule.threshold:
                found.append(Match(self._key_of(row), round(value, 4)))
        return sorted(found, key=lambda m: (-m.similarity, m.key))

    def ask(self) -> None:
        """Nothing to start: this index finds its pairs when :meth:`pairs` is called."""

    def pairs(
        self, keep: Callable[[str, str], bool] = lambda _a, _b: True
    ) -> Iterator[tuple[str, str, float]]:
        """Each confirmed pair of indexed examples once (keys in sorted order), where ``keep``
        allows it and the two are not of one side: for each key in order, its partners most
        similar first.

        The candidates are compared a group at a time (the examples sharing one band's digest),
        each pair in the first group that holds both, with only that group's examples shingled.
        Comparing in key order instead kept every partner's shingles until its own turn, most of
        the grouped examples' at once: on the release benchmark's million rows (346,000 of them in
        139,000 groups) the index peaked at 883 MB that way and 663 MB this way, and found its
        pairs in 11.3 s instead of 17.7 s."""
        self._check_open()
        self._keyed("pairs")
        keys, hashed = self._key_list, self._hashed

        def ordered(row: int, other: int) -> tuple[str, str]:
            a, b = keys[hashed[row]], keys[hashed[other]]
            return (a, b) if a < b else (b, a)

        found = [
            (*ordered(row, other), value)
            for row, other, value in self._confirmed(lambda row, other: keep(*ordered(row, other)))
        ]
        yield from sorted_pairs(found)

    def row_pairs(self) -> list[tuple[int, int, float]]:
        """:meth:`pairs` of an index by row (:meth:`add_row`): each ``(a, b, similarity)`` with
        ``a < b`` the numbers of the two examples, in no set order. Mapped to keys, and sorted by
        :func:`sorted_pairs`, they are the pairs the same examples added by key would give."""
        self._check_open()
        if self._by_row is False:
            raise ValueError("the index's examples are known by their keys: ask for its pairs()")
        hashed = self._hashed
        found = []
        for row, other, value in self._confirmed(None):
            a, b = hashed[row], hashed[other]
            found.append((a, b, value) if a < b else (b, a, value))
        return found

    def _keyed(self, asked: str) -> None:
        if self._by_row:
            raise ValueError(
                f"the index's examples are known by the order they were added in: it has no {asked}() by key"
            )

    def _key_of(self, row: int) -> str:
        return self._key_list[self._hashed[row]]

    def _confirmed(self, keep: Callable[[int, int], bool] | None) -> list[tuple[int, int, float]]:
        """Each confirmed pair of digest columns ``(row, other, similarity)`` once, where ``keep``
        (None: every pair) allows it and the two are not of one side, in the order found."""
        groups: list[list[int]] = []
        memberships: dict[int, list[int]] = {}
        # A group of one side holds no pair wanted: left out before any Python work on it.
        row_sides = np.frombuffer(self._sides, dtype=np.int8).copy()  # the array may grow after
        for band in range(len(self._ranges)):  # one band at a time: each band's sort is freed after it
            for group in _Band(self._band_column(band)).groups(row_sides):
                for row in group:
                    memberships.setdefault(row, []).append(len(groups))
                groups.append(group)
        sides = self._sides
        threshold = self.rule.threshold
        found: list[tuple[int, int, float]] = []
        for number, group in enumerate(groups):
            shingled: dict[int, FieldShingles] = {}
            for place, row in enumerate(group):
                earlier = [g for g in memberships[row] if g < number]
                for other in group[place + 1 :]:
                    if earlier and any(g in earlier for g in memberships[other]):
                        continue  # the two share an earlier group: compared there
                    if sides[row] >= 0 and sides[row] == sides[other]:
                        continue  # one side: a pair not asked for
                    if keep is not None and not keep(row, other):
                        continue
                    for each in (row, other):
                        if each not in shingled:
                            shingled[each] = self._row_shingles(each)
                    value = similarity(shingled[row], shingled[other])
                    if value >= threshold:
                        found.append((row, other, round(value, 4)))
        return found


def sorted_pairs(found: list[tuple[str, str, float]]) -> list[tuple[str, str, float]]:
    """Pairs ``(a, b, similarity)`` (``a < b``) in the order :meth:`MinHashIndex.pairs` gives them:
    by ``a``, then most similar first, then by ``b``."""
    found.sort(key=lambda pair: (pair[0], -pair[2], pair[1]))
    return found


HASH_BATCH_VALUES = 16_384
"""Tagged shingles whose hash values are computed together, a batch of examples at a time: their
permuted values are 8 MB at 125 permutations (about 1,300 examples of 13 shingles)."""

_FMIX32 = (np.uint32(16), np.uint32(0x85EBCA6B), np.uint32(13), np.uint32(0xC2B2AE35), np.uint32(16))
_MIX64 = np.uint64(0x9E3779B97F4A7C15)


def _datasketch() -> Any:
    """datasketch, imported on first use (by :func:`band_keys`, at submission): it brings scipy
    (about 55 MB), which a release's index never needs (it makes its bands and permutations itself)."""
    import datasketch

    return datasketch


@functools.lru_cache(maxsize=8)
def _hashranges(lsh_threshold: float) -> list[tuple[int, int]]:
    """datasketch's ``MinHashLSH`` bands for ``lsh_threshold`` (``NUM_PERM`` permutations, equal
    weights for false positives and negatives), found as it finds them (``_optimal_param``: the
    bands ``b`` of ``r`` rows whose weighted error is least) without importing it: datasketch
    integrates with scipy's ``quad`` (scipy.integrate: 54 MB and 0.4 s a process). The integrands
    are polynomials of degree ``b * r <= NUM_PERM``, which Gauss-Legendre quadrature of
    ``NUM_PERM // 2 + 1`` nodes integrates exactly; tests hold the bands equal to datasketch's."""
    nodes, weights = np.polynomial.legendre.leggauss(NUM_PERM // 2 + 1)

    def integral(
        function: Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]], low: float, high: float
    ) -> float:
        half = (high - low) / 2
        return half * float(np.dot(weights, function(half * nodes + (high + low) / 2)))

    least, best = float("inf"), (0, 0)
    for bands in range(1, NUM_PERM + 1):
        for rows in range(1, NUM_PERM // bands + 1):
            false_positive = integral(lambda s: 1 - (1 - s**rows) ** bands, 0.0, lsh_threshold)  # noqa: B023
            false_negative = integral(lambda s: (1 - s**rows) ** bands, lsh_threshold, 1.0)  # noqa: B023
            error = 0.5 * false_positive + 0.5 * false_negative
            if error < least:
                least, best = error, (bands, rows)
    bands, rows = best
    return [(band * rows, (band + 1) * rows) for band in range(bands)]


@functools.lru_cache(maxsize=4)
def _permutations(width: int) -> npt.NDArray[np.uint32]:
    """datasketch's ``affine32`` permutations (``a`` and ``b``, shape (2, ``width``)) for
    ``MINHASH_SEED``, its first ``width``: drawn as ``MinHash._init_permutations`` draws them (odd
    ``a``), without importing datasketch; tests hold them equal to its ``MinHash.permutations``."""
    generator = np.random.RandomState(MINHASH_SEED)
    a = generator.randint(0, 1 << 31, NUM_PERM, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = generator.randint(0, 1 << 32, NUM_PERM, dtype=np.uint32)
    return np.ascontiguousarray(np.array([a, b])[:, :width])


def signatures(
    examples: Sequence[Sequence[bytes]], permutations: npt.NDArray[np.uint32]
) -> npt.NDArray[np.uint32]:
    """The MinHash signatures of ``examples`` (each a non-empty list of tagged shingles), one row
    each: exactly datasketch's ``MinHash.update_batch`` hash values (``affine32``), for the
    permutations given."""
    # Whole digests, their first four bytes picked by numpy: a fifth less time than a slice each.
    digests = b"".join([sha1(value).digest() for values in examples for value in values])
    hashes = np.frombuffer(digests, dtype="<u4")[::5].astype(np.uint32)
    s1, m1, s2, m2, s3 = _FMIX32
    hashes = hashes ^ (hashes >> s1)
    hashes = hashes * m1
    hashes = hashes ^ (hashes >> s2)
    hashes = hashes * m2
    hashes = hashes ^ (hashes >> s3)
    a, b = permutations
    permuted = hashes[:, None] * a[None, :] + b[None, :]  # uint32: wraps, as datasketch's
    starts = np.zeros(len(examples), dtype=np.intp)
    np.cumsum([len(values) for values in examples[:-1]], out=starts[1:])
    result: npt.NDArray[np.uint32] = np.minimum.reduceat(permuted, starts, axis=0)
    return result


class _Band:
    """One band: each row's 64-bit digest of its values, sorted, to find the rows sharing one."""

    def __init__(self, digests: npt.NDArray[np.uint64]) -> None:
        self.order = np.argsort(digests, kind="stable")
        self.sorted = digests[self.order]

    def groups(self, sides: npt.NDArray[np.int8] | None = None) -> Iterator[list[int]]:
        """The rows (two or more) whose band digests are equal, group by group; given the rows'
        ``sides``, not a group whose rows are all of one side (-1, no side, pairs with any)."""
        count = len(self.sorted)
        if count < 2:
            return
        edges = np.flatnonzero(self.sorted[1:] != self.sorted[:-1]) + 1
        starts = np.concatenate(([0], edges))
        ends = np.concatenate((edges, [count]))
        wanted = ends - starts >= 2
        if sides is not None:
            in_order = sides[self.order]
            lowest = np.minimum.reduceat(in_order, starts)
            wanted &= (lowest < 0) | (lowest != np.maximum.reduceat(in_order, starts))
        for shared in np.flatnonzero(wanted):
            yield self.order[starts[shared] : ends[shared]].tolist()

    def rows_like(self, digest: np.uint64) -> list[int]:
        """The rows whose band digest is ``digest``."""
        low = int(np.searchsorted(self.sorted, digest, side="left"))
        high = int(np.searchsorted(self.sorted, digest, side="right"))
        rows: list[int] = self.order[low:high].tolist()
        return rows


def _band_digests(values: npt.NDArray[np.uint32]) -> npt.NDArray[np.uint64]:
    digests = np.zeros(len(values), dtype=np.uint64)
    for column in values.T:
        digests = (digests ^ column.astype(np.uint64)) * _MIX64
        digests ^= digests >> np.uint64(29)
    return digests


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
    lsh = _datasketch().MinHashLSH(threshold=INDEX_LSH_THRESHOLD, num_perm=NUM_PERM)
    template = _datasketch().MinHash(num_perm=NUM_PERM, seed=MINHASH_SEED)
    return list(lsh.hashranges), (template.permutations, template.scheme)


def band_keys(example: FieldShingles) -> list[int]:
    """The example's MinHash LSH band keys (signed 64-bit, each naming its band): two examples
    with a key in common are candidate near-duplicates. No key for an example with no words."""
    values = tagged(example)
    if not values:
        return []
    ranges, (permutations, scheme) = _banding()
    minhash = _datasketch().MinHash(
        num_perm=NUM_PERM, seed=MINHASH_SEED, permutations=permutations, scheme=scheme
    )
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
    components = Components()
    root = components.root
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
                components.attach(key, to=pivot)
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
                components.attach(own, to=other)
                mine = groups.pop(own, set())
                theirs = groups.pop(other)
                if len(mine) > len(theirs):
                    mine, theirs = theirs, mine
                theirs |= mine
                groups[other] = theirs
                own = other
            groups.setdefault(own, set()).add(key)
            window.append((distance, key))
