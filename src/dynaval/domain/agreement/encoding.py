"""From votes to integer codes: every check of the input happens here, before any arithmetic.

Votes arrive as ``(item, annotator, label)`` triples or as three parallel columns
(:class:`VoteColumns`, e.g. numpy arrays straight from a query). Items and annotators are numbered
in order of first appearance (triples, object columns) or ascending order (numpy columns, which
are encoded without a Python loop). Labels are then renumbered by the value domain: the order of
``values`` when given, else ascending numbers for numeric scales and first appearance (or
ascending, for numpy columns) for nominal labels.
Memory: three integer codes per vote, plus the distinct ids.
"""

from __future__ import annotations

import math
import numbers
from array import array
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, cast, get_args

import numpy as np
import numpy.typing as npt

Level = Literal["nominal", "ordinal", "interval", "ratio"]
LEVELS: tuple[Level, ...] = get_args(Level)
Label: TypeAlias = str | int | float
"""A vote's label: a string or a finite number (bool is refused: ``True == 1`` would merge labels)."""
Id: TypeAlias = str | int
"""An item or annotator id: a string or an integer."""
# Mapping is invariant in its key type: spell out the key types so that ``dict[str, float]`` fits.
Values: TypeAlias = (
    Sequence[Label]
    | Mapping[str, float]
    | Mapping[int, float]
    | Mapping[float, float]
    | Mapping[Label, float]
)
"""The value domain: labels in order, or (for a numeric scale) a mapping from label to its number."""
WriterLabels: TypeAlias = Mapping[str, Label | None] | Mapping[int, Label | None] | Mapping[Id, Label | None]
"""Each item's writer label (None: not known)."""

IntArray: TypeAlias = npt.NDArray[np.intp]
Ids: TypeAlias = tuple[Id, ...] | npt.NDArray[np.generic]
"""Distinct ids: a tuple, or for numpy columns the array of distinct values (integers or strings)."""
FloatArray: TypeAlias = npt.NDArray[np.float64]

# A dense scratch tally of K keys is used instead of sorting when K is at most this many times the
# number of votes (plus a small constant): memory stays O(votes) either way.
_DENSE_FACTOR = 8
_DENSE_SLACK = 1 << 16


@dataclass(frozen=True)
class VoteColumns:
    """Votes as three parallel columns: ``items[k]``, ``annotators[k]``, ``labels[k]`` make vote k.

    Columns may be sequences or numpy arrays (integer or string ids; string or numeric labels).
    This is the fast way in for large rounds: numpy columns are encoded without a Python loop.
    """

    items: Sequence[Id] | npt.NDArray[np.generic]
    annotators: Sequence[Id] | npt.NDArray[np.generic]
    labels: Sequence[Label] | npt.NDArray[np.generic]
    label_codes: npt.NDArray[np.integer[Any]] | None = field(default=None, repr=False, compare=False)
    """From :meth:`from_codes`: ``labels[k]`` is ``label_names[label_codes[k]]`` (alpha can be taken
    from the codes without encoding the names again; the items and annotators are codes too, which
    ``counted_vote_codes`` numbers 0, 1, 2... in the order they first come)."""
    label_names: tuple[Label, ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def from_codes(
        cls, items: array[int], annotators: array[int], labels: array[int], label_names: Iterable[Label]
    ) -> VoteColumns:
        """Votes kept as integer codes (``labels[k]`` indexes ``label_names``), without a copy of
        the item and annotator columns: how a million votes are gathered without a tuple each."""
        listed = tuple(label_names)
        names = np.array(list(listed) or [""], dtype=object)
        codes = np.frombuffer(labels, dtype=np.dtype(labels.typecode))
        return cls(
            items=np.frombuffer(items, dtype=np.dtype(items.typecode)),
            annotators=np.frombuffer(annotators, dtype=np.dtype(annotators.typecode)),
            labels=names[codes],
            label_codes=codes,
            label_names=listed,
        )


Votes: TypeAlias = Iterable[tuple[Id, Id, Label]] | VoteColumns


@dataclass(frozen=True)
class Domain:
    """The labels alpha is computed over, in order, with their numbers on numeric scales."""

    labels: tuple[Label, ...]
    numbers: FloatArray | None
    """``numbers[i]`` is the value of ``labels[i]`` (interval and ratio levels only)."""


@dataclass(frozen=True)
class CodedVotes:
    """Votes as integer codes; ``item[k]`` indexes ``item_ids`` and so on."""

    item: IntArray
    annotator: IntArray
    label: IntArray
    """Index into ``domain.labels``."""
    item_ids: Ids
    annotator_ids: Ids
    domain: Domain

    @property
    def votes(self) -> int:
        return int(self.item.size)


def check_level(level: object) -> Level:
    if level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(map(repr, LEVELS))}; got {level!r}")
    return level


def check_values(level: Level, values: object) -> Domain | None:
    """The domain fixed by ``values`` (None when it is to be read from the votes)."""
    if values is None:
        return None
    if isinstance(values, str | bytes):
        raise ValueError(
            "values must be a sequence of labels or a mapping from label to number, not a string"
        )
    if isinstance(values, Mapping):
        return _domain_from_mapping(level, values)
    if isinstance(values, np.ndarray):
        values = values.tolist()
    if not isinstance(values, Sequence):
        raise ValueError(
            "values must be a sequence of labels or a mapping from label to number; "
            f"got {type(values).__name__}"
        )
    labels = _distinct_labels(values)
    if level in ("interval", "ratio"):
        numbers = [_number_of(level, label, where="in values") for label in labels]
        return Domain(labels, np.asarray(numbers, dtype=np.float64))
    return Domain(labels, None)


def encode_votes(votes: Votes, level: Level, fixed: Domain | None) -> CodedVotes:
    """Validate the votes and turn them into codes; ``fixed`` comes from :func:`check_values`."""
    if isinstance(votes, VoteColumns):
        item, item_ids, annotator, annotator_ids, label, observed = _from_columns(votes)
    elif isinstance(votes, str | bytes | Mapping) or not isinstance(votes, Iterable):
        raise ValueError(
            "votes must be an iterable of (item, annotator, label) triples or VoteColumns; "
            f"got {type(votes).__name__}"
        )
    else:
        item, item_ids, annotator, annotator_ids, label, observed = _from_triples(votes)
    checked_items = item_ids if isinstance(item_ids, np.ndarray) else _checked_ids(item_ids, "item")
    checked_annotators = (
        annotator_ids if isinstance(annotator_ids, np.ndarray) else _checked_ids(annotator_ids, "annotator")
    )
    for observed_label in observed:
        _check_label(observed_label, where="in the votes")
    checked = cast(list[Label], observed)
    domain = fixed if fixed is not None else _domain_from_votes(level, checked)
    position = label_codes(domain)
    outside = [value for value in checked if value not in position]
    if outside:
        raise ValueError(f"votes carry labels outside values: {_sorted_repr(outside)}")
    remap = np.fromiter((position[value] for value in checked), dtype=np.intp, count=len(checked))
    _check_one_vote_per_annotator(item, annotator, checked_items, checked_annotators)
    return CodedVotes(
        item=item,
        annotator=annotator,
        label=label if np.array_equal(remap, np.arange(remap.size)) else remap[label],
        item_ids=checked_items,
        annotator_ids=checked_annotators,
        domain=domain,
    )


def id_list(ids: Ids) -> list[Id]:
    """The ids as plain Python values."""
    return cast(list[Id], ids.tolist()) if isinstance(ids, np.ndarray) else list(ids)


def label_codes(domain: Domain) -> dict[Label, int]:
    """Each domain label's code."""
    return {label: i for i, label in enumerate(domain.labels)}


def _from_triples(
    votes: Iterable[tuple[Id, Id, Label]],
) -> tuple[IntArray, list[Hashable], IntArray, list[Hashable], IntArray, list[Hashable]]:
    items: dict[Hashable, int] = {}
    annotators: dict[Hashable, int] = {}
    labels: dict[Hashable, int] = {}
    item_codes: list[int] = []
    annotator_codes: list[int] = []
    label_codes: list[int] = []
    for position, vote in enumerate(votes):
        if isinstance(vote, str | bytes):
            raise ValueError(f"vote {position} is not an (item, annotator, label) triple: {vote!r}")
        try:
            item, annotator, label = vote
        except (TypeError, ValueError):
            raise ValueError(f"vote {position} is not an (item, annotator, label) triple: {vote!r}") from None
        if label.__class__ is bool or item.__class__ is bool or annotator.__class__ is bool:
            # Checked per vote: True == 1, so a dict would silently merge it with 1.
            raise ValueError(f"vote {position} holds a bool: {vote!r}; use strings or numbers")
        try:
            item_codes.append(items.setdefault(item, len(items)))
            annotator_codes.append(annotators.setdefault(annotator, len(annotators)))
            label_codes.append(labels.setdefault(label, len(labels)))
        except TypeError:
            raise ValueError(f"vote {position} holds an unhashable value: {vote!r}") from None
    return (
        np.asarray(item_codes, dtype=np.intp),
        list(items),
        np.asarray(annotator_codes, dtype=np.intp),
        list(annotators),
        np.asarray(label_codes, dtype=np.intp),
        list(labels),
    )


def _from_columns(
    columns: VoteColumns,
) -> tuple[
    IntArray,
    list[Hashable] | npt.NDArray[np.generic],
    IntArray,
    list[Hashable] | npt.NDArray[np.generic],
    IntArray,
    list[Hashable],
]:
    item, item_ids = _factorize(columns.items, "items", allow_float=False)
    annotator, annotator_ids = _factorize(columns.annotators, "annotators", allow_float=False)
    label, distinct = _factorize(columns.labels, "labels", allow_float=True)
    labels = cast(list[Hashable], distinct.tolist()) if isinstance(distinct, np.ndarray) else distinct
    if not item.size == annotator.size == label.size:
        raise ValueError(
            "VoteColumns must have columns of one length; got "
            f"{item.size} items, {annotator.size} annotators, {label.size} labels"
        )
    return item, item_ids, annotator, annotator_ids, label, labels


def _factorize(
    column: object, name: str, *, allow_float: bool
) -> tuple[IntArray, list[Hashable] | npt.NDArray[np.generic]]:
    """Codes and the distinct values: ascending for numpy columns, first appearance for objects."""
    array = np.asarray(column)
    if array.ndim != 1:
        raise ValueError(f"VoteColumns.{name} must be one-dimensional; got shape {array.shape}")
    kind = array.dtype.kind
    if kind == "O":
        index: dict[Hashable, int] = {}
        values = array.tolist()
        if any(value.__class__ is bool for value in values):
            raise ValueError(f"VoteColumns.{name} holds a bool; use strings or numbers")
        try:
            codes = [index.setdefault(value, len(index)) for value in values]
        except TypeError:
            raise ValueError(f"VoteColumns.{name} holds an unhashable value") from None
        return np.asarray(codes, dtype=np.intp), list(index)
    if kind not in ("iuUf" if allow_float else "iuU"):
        wanted = "strings or numbers" if allow_float else "strings or integers"
        raise ValueError(f"VoteColumns.{name} must hold {wanted}; got dtype {array.dtype}")
    if kind == "f" and not np.isfinite(array).all():
        raise ValueError(f"VoteColumns.{name} holds NaN or infinity; leave missing votes out instead")
    if array.size == 0:
        return np.zeros(0, dtype=np.intp), []
    if kind in "iu":
        low, high = int(array.min()), int(array.max())
        span = high - low + 1
        if span <= _DENSE_FACTOR * array.size + _DENSE_SLACK:
            # Counting instead of sorting: integer ids are usually dense.
            shifted = array.astype(np.intp, copy=low != 0)
            if low:
                shifted -= low
            present = np.bincount(shifted, minlength=span) > 0
            distinct_ints = np.flatnonzero(present) + low
            if present.all():  # already the codes 0..n-1
                return shifted, distinct_ints
            rank = np.cumsum(present.astype(np.intp)) - 1
            return rank[shifted], distinct_ints
    distinct, inverse = np.unique(array, return_inverse=True)
    return inverse.reshape(-1).astype(np.intp, copy=False), distinct


def _checked_ids(ids: list[Hashable], kind: str) -> tuple[Id, ...]:
    odd = [i for i, ident in enumerate(ids) if type(ident) is not str and type(ident) is not int]
    for i in odd:
        _check_id(ids[i], kind)
        ids[i] = _plain(ids[i])
    return tuple(cast(list[Id], ids))


def _check_one_vote_per_annotator(
    item: IntArray, annotator: IntArray, item_ids: Ids, annotator_ids: Ids
) -> None:
    if item.size == 0:
        return
    n_annotators = len(annotator_ids)
    key = item.astype(np.int64) * n_annotators + annotator
    span = len(item_ids) * n_annotators
    if span <= _DENSE_FACTOR * key.size + _DENSE_SLACK:
        tally = np.bincount(key, minlength=span)
        repeated = np.flatnonzero(tally > 1)
        twice = int(repeated[0]) if repeated.size else None
    else:
        ordered = np.sort(key)
        same = np.flatnonzero(ordered[1:] == ordered[:-1])
        twice = int(ordered[same[0]]) if same.size else None
    if twice is not None:
        who, what = _plain(annotator_ids[twice % n_annotators]), _plain(item_ids[twice // n_annotators])
        raise ValueError(f"annotator {who!r} voted more than once on item {what!r}; keep one vote each")


def _domain_from_votes(level: Level, observed: list[Label]) -> Domain:
    labels = tuple(observed)
    if level == "nominal":
        return Domain(labels, None)
    text = [label for label in labels if isinstance(label, str)]
    if text:
        if level == "ordinal":
            raise ValueError(
                "the ordinal level needs values, the labels in order (the labels are not all numbers, "
                f"e.g. {text[0]!r})"
            )
        raise ValueError(
            f"the {level} level needs numeric labels or values mapping each label to its number; "
            f"{text[0]!r} is not a number"
        )
    ordered = tuple(sorted(labels))
    if level == "ordinal":
        return Domain(ordered, None)
    return Domain(ordered, np.asarray(ordered, dtype=np.float64))


def _domain_from_mapping(level: Level, values: Mapping[object, object]) -> Domain:
    labels = _distinct_labels(list(values))
    numbers = [
        _number_of(level, values[label], where=f"(the number of {label!r} in values)") for label in labels
    ]
    seen: dict[float, Label] = {}
    for label, number in zip(labels, numbers, strict=True):
        if number in seen:
            raise ValueError(f"values maps {seen[number]!r} and {label!r} to the same number {number!r}")
        seen[number] = label
    if level == "ordinal":
        order = sorted(range(len(labels)), key=numbers.__getitem__)
        return Domain(tuple(labels[i] for i in order), None)
    return Domain(labels, np.asarray(numbers, dtype=np.float64) if level != "nominal" else None)


def _distinct_labels(values: Sequence[object]) -> tuple[Label, ...]:
    if len(values) == 0:
        raise ValueError("values is empty; give the labels (or leave values out)")
    seen: set[Hashable] = set()
    for value in values:
        _check_label(value, where="in values")
        if value in seen:
            raise ValueError(f"values lists {value!r} more than once")
        seen.add(value)
    return tuple(_plain(value) for value in cast(Sequence[Label], values))


def _check_label(label: object, *, where: str) -> None:
    if isinstance(label, bool | np.bool_):
        raise ValueError(f"label {label!r} {where} is a bool; use strings or numbers (True would equal 1)")
    if isinstance(label, str):
        return
    if not isinstance(label, numbers.Real):
        raise ValueError(f"label {label!r} {where} is neither a string nor a number")
    if not math.isfinite(float(label)):
        raise ValueError(f"label {label!r} {where} is not a finite number; leave missing votes out instead")


def _number_of(level: Level, value: object, *, where: str) -> float:
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"the {level} level needs numbers: {value!r} {where} is not a number "
            "(pass values as a mapping from label to number)"
        )
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{value!r} {where} is not a finite number")
    return number


def _check_id(ident: object, kind: str) -> None:
    if isinstance(ident, bool | np.bool_) or not isinstance(ident, str | numbers.Integral):
        raise ValueError(f"{kind} id {ident!r} must be a string or an integer")


def _plain(value: object) -> Label:
    """numpy scalars as Python ones, so that reports serialise to JSON."""
    if isinstance(value, np.generic):
        return cast(Label, value.item())
    return cast(Label, value)


def _sorted_repr(values: list[Label]) -> str:
    try:
        return repr(sorted(cast(list[str], values)))
    except TypeError:
        return repr(values)
