"""The lexical half of the near-duplicate index at submission: each process's band keys, loaded
from the database on first use and topped up before each check, counted with numpy.

Every example's MinHash LSH band keys (:func:`dynaval.domain.health.minhash.band_keys`) are stored
with its row of ``near_duplicate_example`` (``band_keys``: the sorted keys as little-endian int64
bytes), in the unit of work that stores the example; the row's ``seq`` only grows. A process keeps,
per task type, every example's keys in sorted numpy arrays (a key and the example's ordinal: 12
bytes a key, 32 keys an example) and the last ``seq`` it read, and before each check adds the rows
stored since, by any process. So every process sees every example, and a restart reloads them.

Why not the database: at a million examples some band keys are shared by tens of thousands of
them (a popular trick makes such a key), and the query that groups the rows of those keys took 65
to 85 ms warm, far more when the pages were cold (docs/benchmarks.md). In memory the same count is
a binary search per key and one ``numpy.unique`` over the owners found.

The sorted arrays are kept as a few runs of falling size (a log-structured merge): the rows read by
a top-up form a new run, and two runs merge when the newer is at least half the older's size. So a
top-up costs about its own size, and a lookup searches a handful of runs.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable

import numpy
import numpy.typing as npt

KEY_DTYPE = numpy.dtype("<i8")

Int64s = npt.NDArray[numpy.int64]
Int32s = npt.NDArray[numpy.int32]


def keys_to_bytes(keys: Collection[int]) -> bytes:
    """How an example's band keys are stored: sorted, distinct, little-endian int64."""
    return numpy.asarray(sorted(set(keys)), dtype=KEY_DTYPE).tobytes()


def keys_from_bytes(data: bytes | None) -> Int64s:
    if not data:
        return numpy.zeros(0, dtype=numpy.int64)
    return numpy.frombuffer(data, dtype=KEY_DTYPE).astype(numpy.int64)


class _Run:
    """Band keys sorted, each with the ordinal of the example that holds it."""

    def __init__(self, keys: Int64s, owners: Int32s) -> None:
        order = numpy.argsort(keys, kind="stable")
        self.keys: Int64s = keys[order]
        self.owners: Int32s = owners[order]

    def __len__(self) -> int:
        return len(self.keys)

    def owners_of(self, wanted: Int64s) -> list[Int32s]:
        """The owners of each of ``wanted`` (sorted) held in this run."""
        starts = numpy.searchsorted(self.keys, wanted, side="left")
        ends = numpy.searchsorted(self.keys, wanted, side="right")
        return [self.owners[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True) if e > s]


class _TaskKeys:
    def __init__(self) -> None:
        self.ids: list[str] = []
        self.known: set[str] = set()
        self.runs: list[_Run] = []
        self.last_seq = 0

    def add(self, examples: list[tuple[str, bytes]]) -> None:
        """Hold new examples ``(id, stored keys)``: their keys become a run, merged as needed."""
        first = len(self.ids)
        self.ids.extend(candidate_id for candidate_id, _data in examples)
        counts = numpy.fromiter(
            (len(data) // KEY_DTYPE.itemsize for _c, data in examples), dtype=numpy.int64, count=len(examples)
        )
        if not counts.sum():
            return
        keys = numpy.frombuffer(b"".join(data for _c, data in examples), dtype=KEY_DTYPE).astype(numpy.int64)
        owners = numpy.repeat(numpy.arange(first, first + len(examples), dtype=numpy.int32), counts)
        self.runs.append(_Run(keys, owners))
        while len(self.runs) > 1 and 2 * len(self.runs[-1]) >= len(self.runs[-2]):
            newer, older = self.runs.pop(), self.runs.pop()
            # Two sorted runs, one after the other: the stable sort (a merge sort that finds runs)
            # merges them in about linear time.
            self.runs.append(
                _Run(
                    numpy.concatenate([older.keys, newer.keys]),
                    numpy.concatenate([older.owners, newer.owners]),
                )
            )


class BandKeyIndex:
    """Per task type, the band keys of every stored example this process has read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: dict[str, _TaskKeys] = {}

    def _keys(self, task_type: str) -> _TaskKeys:
        if task_type not in self._tasks:
            self._tasks[task_type] = _TaskKeys()
        return self._tasks[task_type]

    def last_seq(self, task_type: str) -> int:
        with self._lock:
            return self._keys(task_type).last_seq

    def top_up(self, task_type: str, rows: Iterable[tuple[int, str, bytes | None]]) -> None:
        """Add stored rows ``(seq, candidate id, band keys bytes)`` read after :meth:`last_seq`; an
        example held already (its row written again, under a new ``seq``) is passed over."""
        with self._lock:
            held = self._keys(task_type)
            new: list[tuple[str, bytes]] = []
            for seq, candidate_id, data in rows:
                if seq <= held.last_seq:
                    continue
                held.last_seq = seq
                if candidate_id in held.known:
                    continue
                held.known.add(candidate_id)
                new.append((candidate_id, data or b""))
            if new:
                held.add(new)

    def lookup(self, task_type: str, keys: Collection[int], *, limit: int) -> list[str]:
        """The ids of the held examples of ``task_type`` sharing a band key with ``keys``: those
        sharing the most first, the earliest indexed first among equals, at most ``limit``."""
        if not keys:
            return []
        wanted = numpy.unique(numpy.fromiter(keys, dtype=numpy.int64, count=len(keys)))
        with self._lock:
            held = self._keys(task_type)
            found = [owners for run in held.runs for owners in run.owners_of(wanted)]
            if not found:
                return []
            owners, shared = numpy.unique(numpy.concatenate(found), return_counts=True)
            # Most shared first, then the lowest ordinal (the earliest indexed): owners is sorted, so
            # a stable sort on the negated counts keeps that order among equals.
            best = owners[numpy.argsort(-shared, kind="stable")[:limit]]
            return [held.ids[int(ordinal)] for ordinal in best]

    def size(self, task_type: str) -> int:
        with self._lock:
            return len(self._keys(task_type).ids)


def shared_keys(examples: Iterable[tuple[str, Int64s]]) -> list[tuple[int, str]]:
    """``(band key, example id)`` of the keys that two of ``examples`` or more hold (each example's
    keys distinct, as :func:`keys_to_bytes` stores them): the only keys that can pair two of them."""
    ids: list[str] = []
    arrays: list[Int64s] = []
    for example_id, keys in examples:
        ids.append(example_id)
        arrays.append(keys)
    if not ids:
        return []
    counts = numpy.fromiter((len(k) for k in arrays), dtype=numpy.int64, count=len(arrays))
    keys = numpy.concatenate(arrays) if counts.sum() else numpy.zeros(0, dtype=numpy.int64)
    owners = numpy.repeat(numpy.arange(len(ids)), counts)
    _distinct, inverse, held = numpy.unique(keys, return_inverse=True, return_counts=True)
    kept = held[inverse] > 1
    return [(key, ids[owner]) for key, owner in zip(keys[kept].tolist(), owners[kept].tolist(), strict=True)]
