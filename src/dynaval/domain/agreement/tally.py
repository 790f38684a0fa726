"""Per-item count vectors, kept sparse, and the few distinct count patterns they fall into.

Alpha depends on the votes only through each item's count vector (how many votes each label got).
An item's vector is stored as *entries*, one per label that got a vote on it, so the whole tally is
O(votes) whatever the number of labels. Items with the same vector share a *pattern*: with a few
annotators and labels, a million items fall into a handful of patterns, which is what makes the
bootstrap cheap (see :mod:`.resampling`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from dynaval.domain.agreement.encoding import IntArray

CodeArray: TypeAlias = npt.NDArray[np.integer[Any]]
"""Vote codes (items, labels) of any integer width: a release's tally keeps C ints, and the keys
made of them (item x labels + label) are computed in 64 bits, so no wider copy is needed first."""

_DENSE_FACTOR = 8
_DENSE_SLACK = 1 << 16
_MAX_CODE = 1 << 62


@dataclass(frozen=True)
class ItemTally:
    """Sparse count vectors of all items: entries sorted by item, then label."""

    entry_item: IntArray
    entry_label: IntArray
    entry_count: IntArray
    item_start: IntArray
    """Item i's entries are ``item_start[i]:item_start[i + 1]``."""
    item_votes: IntArray
    n_labels: int


@dataclass(frozen=True)
class Patterns:
    """The distinct count vectors of the pairable items (two or more votes) and their frequencies.

    Patterns come most frequent first. Entries are sorted by pattern, then label; pattern p's are
    ``start[p]:start[p + 1]``.
    """

    frequency: IntArray
    size: IntArray
    """Votes in one item of the pattern (n_u)."""
    start: IntArray
    entry_pattern: IntArray
    entry_label: IntArray
    entry_count: IntArray
    n_labels: int

    @property
    def count(self) -> int:
        return int(self.frequency.size)

    @property
    def items(self) -> int:
        return int(self.frequency.sum())

    @property
    def values(self) -> int:
        """Pairable values: votes on pairable items."""
        return int((self.frequency * self.size).sum())


def tally_items(item: CodeArray, label: CodeArray, n_items: int, n_labels: int) -> ItemTally:
    """Count the votes of each (item, label) pair: a counting sort when the key space is O(votes)."""
    key = _entry_key(item, label, n_labels)
    span = n_items * n_labels
    if span <= _DENSE_FACTOR * key.size + _DENSE_SLACK:
        dense = np.bincount(key, minlength=span)
        keys = np.flatnonzero(dense)
        counts = dense[keys]
    else:
        keys, counts = np.unique(key, return_counts=True)
    del key
    entry_item = (keys // n_labels).astype(np.intp, copy=False)
    item_votes = np.bincount(item, minlength=n_items).astype(np.intp, copy=False)
    item_start = np.zeros(n_items + 1, dtype=np.intp)
    np.cumsum(np.bincount(entry_item, minlength=n_items), out=item_start[1:])
    return ItemTally(
        entry_item=entry_item,
        entry_label=(keys % n_labels).astype(np.intp, copy=False),
        entry_count=counts.astype(np.intp, copy=False),
        item_start=item_start,
        item_votes=item_votes,
        n_labels=n_labels,
    )


def own_label_counts(tally: ItemTally, item: IntArray, label: IntArray) -> IntArray:
    """For each vote, how many votes its label got on its item (its own included)."""
    key = _entry_key(item, label, tally.n_labels)
    entry_key = _entry_key(tally.entry_item, tally.entry_label, tally.n_labels)
    span = tally.item_votes.size * tally.n_labels
    if span <= _DENSE_FACTOR * key.size + _DENSE_SLACK:
        lookup = np.zeros(span, dtype=np.intp)
        lookup[entry_key] = tally.entry_count
        return lookup[key]
    return tally.entry_count[np.searchsorted(entry_key, key)]


def _entry_key(item: CodeArray, label: CodeArray, n_labels: int) -> npt.NDArray[np.int64]:
    key = item.astype(np.int64, copy=True)
    key *= n_labels
    key += label
    return key


def pairable_patterns(tally: ItemTally, *, distinct: bool = True) -> Patterns:
    """The pairable items' count vectors, merged into distinct patterns unless ``distinct`` is False.

    Without merging every pairable item is its own pattern of frequency one (enough for a point
    estimate; the merge costs a sort).
    """
    pairable = tally.item_votes >= 2
    n_items = int(pairable.sum())
    if n_items == pairable.size:  # every item is pairable: share the tally's arrays
        entry_item, entry_label, entry_count = tally.entry_item, tally.entry_label, tally.entry_count
    else:
        keep = pairable[tally.entry_item]
        local = np.cumsum(pairable.astype(np.intp)) - 1
        entry_item = local[tally.entry_item[keep]]
        entry_label = tally.entry_label[keep]
        entry_count = tally.entry_count[keep]
        del keep, local
    lengths = np.bincount(entry_item, minlength=n_items)
    start = _offsets(lengths)
    size = tally.item_votes[pairable]
    if not distinct or n_items == 0:
        return Patterns(
            frequency=np.ones(n_items, dtype=np.intp),
            size=size,
            start=start,
            entry_pattern=entry_item,
            entry_label=entry_label,
            entry_count=entry_count,
            n_labels=tally.n_labels,
        )
    group = _group_identical(
        entry_item, entry_label, entry_count, start, lengths, int(size.max()), tally.n_labels
    )
    by_group = np.bincount(group)
    # Any member represents its pattern: all members have the same count vector.
    first_member = np.zeros(by_group.size, dtype=np.intp)
    first_member[group] = np.arange(n_items, dtype=np.intp)
    # Most frequent first (ties by group id), so that the bootstrap's common patterns lead.
    order = np.argsort(-by_group, kind="stable")
    frequency, representative = by_group[order], first_member[order]
    member = ragged_arange(start[representative], lengths[representative])
    rep_lengths = lengths[representative]
    return Patterns(
        frequency=frequency.astype(np.intp),
        size=size[representative],
        start=_offsets(rep_lengths),
        entry_pattern=np.repeat(np.arange(representative.size, dtype=np.intp), rep_lengths),
        entry_label=entry_label[member],
        entry_count=entry_count[member],
        n_labels=tally.n_labels,
    )


def dense_patterns(item: CodeArray, label: CodeArray, n_items: int, n_labels: int) -> Patterns | None:
    """:func:`pairable_patterns` of :func:`tally_items` (``distinct=True``) straight from the votes,
    or ``None`` where this shortcut does not apply (then take the general path).

    It applies when the items x labels count matrix is O(votes) (the counting sort's own condition)
    and the mixed-radix pattern code fits in int64. The count matrix then gives each item's code in
    one product, with no per-entry arrays for all items; the patterns come out identical (the same
    codes, so the same groups, order and representatives' count vectors).
    """
    span = n_items * n_labels
    if item.size == 0 or span > _DENSE_FACTOR * item.size + _DENSE_SLACK:
        return None
    counts: IntArray = np.bincount(_entry_key(item, label, n_labels), minlength=span).reshape(
        n_items, n_labels
    )
    size = np.bincount(item, minlength=n_items)
    pairable = size >= 2
    if not pairable.any():
        return None
    if not pairable.all():
        counts, size = counts[pairable], size[pairable]
    base = int(size.max()) + 1
    if n_labels * np.log2(base) >= 62:
        return None
    code = counts @ (base ** np.arange(n_labels, dtype=np.int64))
    group = dense_rank(code)
    by_group = np.bincount(group)
    first_member = np.zeros(by_group.size, dtype=np.intp)
    first_member[group] = np.arange(group.size, dtype=np.intp)
    order = np.argsort(-by_group, kind="stable")
    frequency, representative = by_group[order], first_member[order]
    rows = counts[representative]
    entry_pattern, entry_label = np.nonzero(rows)  # row-major: by pattern, then label
    return Patterns(
        frequency=frequency.astype(np.intp),
        size=size[representative].astype(np.intp),
        start=_offsets(np.bincount(entry_pattern, minlength=representative.size)),
        entry_pattern=entry_pattern.astype(np.intp),
        entry_label=entry_label.astype(np.intp),
        entry_count=rows[entry_pattern, entry_label].astype(np.intp),
        n_labels=n_labels,
    )


def ragged_arange(starts: IntArray, lengths: IntArray) -> IntArray:
    """``concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])`` without the loop."""
    total = int(lengths.sum())
    shift = np.repeat(starts - _offsets(lengths)[:-1], lengths)
    return np.arange(total, dtype=np.intp) + shift


def pairs_within_groups(start: IntArray, max_pairs: int) -> Iterator[tuple[IntArray, IntArray]]:
    """All ordered pairs (i, j), i == j included, of positions in one group, in chunks.

    Groups are contiguous: group g holds positions ``start[g]:start[g + 1]``. Each chunk covers
    whole groups and holds at most ``max_pairs`` pairs unless a single group has more.
    """
    lengths = np.diff(start)
    squares = lengths.astype(np.int64) ** 2
    cumulative = np.cumsum(squares)
    first_group = 0
    n_groups = lengths.size
    while first_group < n_groups:
        done = int(cumulative[first_group - 1]) if first_group else 0
        last_group = int(np.searchsorted(cumulative, done + max_pairs, side="right"))
        last_group = min(max(last_group, first_group + 1), n_groups)
        members = np.arange(start[first_group], start[last_group], dtype=np.intp)
        group_of_member = np.repeat(
            np.arange(first_group, last_group, dtype=np.intp), lengths[first_group:last_group]
        )
        partners = lengths[group_of_member]
        first = np.repeat(members, partners)
        second = ragged_arange(start[group_of_member], partners)
        yield first, second
        first_group = last_group


def _group_identical(
    entry_item: IntArray,
    entry_label: IntArray,
    entry_count: IntArray,
    start: IntArray,
    lengths: IntArray,
    max_size: int,
    n_labels: int,
) -> IntArray:
    """A group id per item; items get the same id exactly when their count vectors are equal."""
    base = max_size + 1
    if n_labels * np.log2(base) < 62:
        # Exact mixed-radix code: sum of count * base**label fits in int64.
        powers = base ** np.arange(n_labels, dtype=np.int64)
        weighted = powers[entry_label]
        weighted *= entry_count
        code = np.add.reduceat(weighted, start[:-1])
        del weighted
        return dense_rank(code)
    return _refine_groups(entry_item, entry_label, entry_count, start, lengths, base)


def _refine_groups(
    entry_item: IntArray,
    entry_label: IntArray,
    entry_count: IntArray,
    start: IntArray,
    lengths: IntArray,
    base: int,
) -> IntArray:
    """Partition refinement: split groups by the (label, count) of their j-th entry, j = 0, 1, ...

    Used when the mixed-radix code would overflow (many labels); O(entries log entries) overall.
    """
    n_items = lengths.size
    key = entry_label.astype(np.int64) * base + entry_count
    span = int(key.max()) + 1
    group = dense_rank(lengths).astype(np.int64)
    position = np.arange(entry_item.size, dtype=np.intp) - start[entry_item]
    by_position = np.argsort(position, kind="stable")
    bounds = _offsets(np.bincount(position))
    for j in range(bounds.size - 1):
        at_j = by_position[bounds[j] : bounds[j + 1]]
        items = entry_item[at_j]
        if n_items * span < _MAX_CODE:
            split = np.unique(group[items] * span + key[at_j], return_inverse=True)[1]
        else:
            stacked = np.stack([group[items], key[at_j]], axis=1)
            split = np.unique(stacked, axis=0, return_inverse=True)[1]
        group[items] = split.reshape(-1) + n_items
        group = dense_rank(group).astype(np.int64)
    return np.asarray(group, dtype=np.intp)


def dense_rank(keys: npt.NDArray[np.integer]) -> IntArray:
    """Each key's rank among the distinct keys (0, 1, ...): by counting when the keys span little."""
    if keys.size == 0:
        return np.zeros(0, dtype=np.intp)
    low, high = int(keys.min()), int(keys.max())
    if high - low < _DENSE_FACTOR * keys.size + _DENSE_SLACK:
        shifted = (keys - low).astype(np.intp, copy=False)
        present = np.bincount(shifted) > 0
        return np.asarray((np.cumsum(present.astype(np.intp)) - 1)[shifted], dtype=np.intp)
    return np.asarray(np.unique(keys, return_inverse=True)[1].reshape(-1), dtype=np.intp)


def stable_order(keys: IntArray, n_keys: int) -> IntArray:
    """``argsort(keys, kind="stable")`` for keys in ``[0, n_keys)``, as an LSD radix sort.

    numpy sorts 16-bit integers stably by radix; wider keys take one such pass per 16 bits,
    O(n) each, where a general stable argsort is O(n log n).
    """
    order: IntArray = np.arange(keys.size, dtype=np.intp)
    if bool(np.all(keys[1:] >= keys[:-1])):  # already in order, as votes read item by item are
        return order
    for shift in range(0, max(n_keys - 1, 1).bit_length(), 16):
        digit = ((keys[order] >> shift) & 0xFFFF).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
    return order


def _offsets(lengths: IntArray) -> IntArray:
    offsets = np.zeros(lengths.size + 1, dtype=np.intp)
    np.cumsum(lengths, out=offsets[1:])
    return offsets
