"""When two images are near-copies: the same picture (the same SHA-256 of its pixels), or one that a
shift of a pixel or two, or a re-encoding, made of the other.

Each image is fingerprinted by the adapter (:mod:`dynaval.adapters.images.fingerprints`): its ink
(the distance of each pixel from the border's median, its background) is moved so that the ink's
centre of mass is in the middle, and the result is hashed with a DCT perceptual hash of
``HASH_BITS`` bits (``imagehash.phash``, ``hash_size=12``). Moving by the centre of mass makes a
shift by whole pixels vanish; the pHash keeps only low frequencies, so a re-encoding barely moves
it. A centre of mass that a re-encoding nudges across a pixel boundary would move the whole picture
by one pixel, so each image also keeps the hashes of its picture moved one pixel each way
(``around``), and the distance of two images is the least Hamming distance between one's centre
hash and any of the other's hashes.

``THRESHOLD = 8`` of 144 bits, measured on drawn digits (``benchmarks/image_near_copies.py``,
docs/near_duplicates.md): a shift by one or two pixels that keeps the drawing whole gives 0; a JPEG
re-encoding at quality 90 or 75, shifted or not, at most 6; of the pairs of different drawings of
one digit, 0.3 % are within 8 bits (12 bits for the closest 1 %, 34 at the median).

>>> rule = NearCopyRule()
>>> a = ImageFingerprint(centre=0b1011, around=(0b1111,))
>>> b = ImageFingerprint(centre=0b0011, around=())
>>> distance(a, b), rule.holds(distance(a, b))
(1, True)
>>> distance(a, ImageFingerprint(centre=(1 << 144) - 1, around=()))
140
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dynaval.domain.images.image import ImageFingerprint

METHOD = "centred-phash-hamming"
HASH_BITS = 144
THRESHOLD = 8
MAX_THRESHOLD = 32
"""The most a round may set: beyond it, different drawings of one digit are called copies."""


@dataclass(frozen=True)
class NearCopyRule:
    """Two images are near-copies at or below ``threshold`` bits apart."""

    threshold: int = THRESHOLD

    def holds(self, bits_apart: int) -> bool:
        return bits_apart <= self.threshold

    def to_dict(self) -> dict[str, Any]:
        return {"method": METHOD, "hash_bits": HASH_BITS, "threshold": self.threshold}

    @classmethod
    def from_dict(cls, data: Any) -> NearCopyRule:
        if not isinstance(data, dict):
            return cls()
        return cls(threshold=int(data.get("threshold", THRESHOLD)))


def distance(a: ImageFingerprint, b: ImageFingerprint) -> int:
    """The bits two images' hashes differ by, the least over the shifts each keeps: symmetric."""
    return min(
        min((a.centre ^ other).bit_count() for other in b.hashes),
        min((b.centre ^ other).bit_count() for other in a.hashes),
    )


def near_copies(
    fingerprint: ImageFingerprint, stored: Iterable[tuple[str, ImageFingerprint]], rule: NearCopyRule
) -> list[tuple[str, int]]:
    """The keys of the stored images within the rule of ``fingerprint`` and how many bits apart,
    nearest first (then by key)."""
    found = []
    for key, other in stored:
        bits = distance(fingerprint, other)
        if rule.holds(bits):
            found.append((key, bits))
    return sorted(found, key=lambda item: (item[1], item[0]))


def similarity(bits_apart: int) -> float:
    """A distance as a similarity in [0, 1] (1: the same hash), for lists that sort texts' and
    images' near-duplicates together."""
    return round(1.0 - bits_apart / HASH_BITS, 4)


WORDS = 3
"""A hash as 64-bit words: 144 bits in three (the last holds 16)."""
HASHES = 9
"""An image's hashes: its centre's and the eight one pixel off."""
MERGE_BLOCKS = 16
"""A process's fingerprints are held in blocks of arrays; past this many they are merged into one."""


def _words(value: int) -> list[int]:
    return [(value >> (64 * i)) & 0xFFFFFFFFFFFFFFFF for i in range(WORDS)]


def as_arrays(prints: Sequence[ImageFingerprint]) -> tuple[Any, Any]:
    """The fingerprints as numpy words: the centres ``(n, WORDS)`` and every hash ``(n, HASHES,
    WORDS)`` (an image with fewer hashes repeats its centre)."""
    import numpy

    centres = numpy.array([_words(p.centre) for p in prints], dtype=numpy.uint64).reshape(-1, WORDS)
    hashes = numpy.array(
        [[_words(h) for h in (*p.hashes, *[p.centre] * (HASHES - len(p.hashes)))][:HASHES] for p in prints],
        dtype=numpy.uint64,
    ).reshape(-1, HASHES, WORDS)
    return centres, hashes


def distances(fingerprint: ImageFingerprint, centres: Any, hashes: Any) -> Any:
    """:func:`distance` from ``fingerprint`` to every image of :func:`as_arrays`, at once."""
    import numpy

    own_centre, own_hashes = as_arrays([fingerprint])
    theirs = numpy.bitwise_count(own_centre[0] ^ hashes).sum(axis=2).min(axis=1)
    ours = numpy.bitwise_count(centres[:, None, :] ^ own_hashes[0]).sum(axis=2).min(axis=1)
    return numpy.minimum(theirs, ours)


@dataclass
class _TaskPrints:
    last_seq: int = 0
    ids: list[str] = field(default_factory=list)
    known: set[str] = field(default_factory=set)
    blocks: list[tuple[Any, Any]] = field(default_factory=list)
    """The held fingerprints as arrays (see :func:`as_arrays`), in the order of ``ids``."""
    pending: list[ImageFingerprint] = field(default_factory=list)
    """Read since the last lookup, not in a block yet."""

    def settle(self) -> None:
        import numpy

        if self.pending:
            self.blocks.append(as_arrays(self.pending))
            self.pending = []
        if len(self.blocks) > MERGE_BLOCKS:
            self.blocks = [
                (
                    numpy.concatenate([c for c, _h in self.blocks]),
                    numpy.concatenate([h for _c, h in self.blocks]),
                )
            ]


class FingerprintIndex:
    """Per image task type, the fingerprints of every stored example this process has read (from
    the shared index in the database, topped up before each check, as the texts' band keys are),
    held as numpy words. A check compares a new image with every one at once: about 6 ms for
    10,000 images, 60 ms for 100,000 on one core (docs/near_duplicates.md)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: dict[str, _TaskPrints] = {}

    def _of(self, task_type: str) -> _TaskPrints:
        return self._tasks.setdefault(task_type, _TaskPrints())

    def last_seq(self, task_type: str) -> int:
        with self._lock:
            return self._of(task_type).last_seq

    def top_up(self, task_type: str, rows: Iterable[tuple[int, str, bytes | None]]) -> None:
        """Add stored rows ``(seq, candidate id, fingerprint bytes)`` read after :meth:`last_seq`."""
        with self._lock:
            held = self._of(task_type)
            for seq, candidate_id, data in rows:
                if seq <= held.last_seq:
                    continue
                held.last_seq = seq
                if candidate_id in held.known or not data:
                    continue
                held.known.add(candidate_id)
                held.ids.append(candidate_id)
                held.pending.append(ImageFingerprint.from_bytes(data))

    def lookup(
        self, task_type: str, fingerprint: ImageFingerprint, rule: NearCopyRule, *, limit: int
    ) -> list[tuple[str, int]]:
        """The held examples within ``rule`` of ``fingerprint``: ``(id, bits apart)``, nearest first
        (then the earliest held), at most ``limit``."""
        import numpy

        with self._lock:
            held = self._of(task_type)
            held.settle()
            found: list[tuple[int, int]] = []
            offset = 0
            for centres, hashes in held.blocks:
                bits = distances(fingerprint, centres, hashes)
                found += [(int(bits[i]), offset + int(i)) for i in numpy.nonzero(bits <= rule.threshold)[0]]
                offset += len(centres)
            found.sort()
            return [(held.ids[at], bits) for bits, at in found[:limit]]

    def size(self, task_type: str) -> int:
        with self._lock:
            return len(self._of(task_type).ids)


class ImagePairIndex:
    """The near-copy pairs among a release's images (the leak scan's index for an image task type:
    it has the methods of the lexical one, and ``verify`` uses it too). ``fingerprint_of`` gives the
    fingerprint of an image field's value (an image's path in a release). Every pair is compared, in
    numpy: a few seconds for ten thousand images. An image ``fingerprint_of`` cannot give (None) is
    left out."""

    def __init__(self, rule: NearCopyRule, fingerprint_of: Callable[[str], ImageFingerprint | None]) -> None:
        self.rule = rule
        self.fingerprint_of = fingerprint_of
        self.keys: list[str] = []
        self.prints: list[ImageFingerprint] = []

    def add_inputs(
        self, key: str, inputs: Mapping[str, Any], fields: Sequence[str], side: int | None = None
    ) -> None:
        """An image row; its ``side`` is not used: every pair is compared, and ``pairs(keep)``
        keeps those asked for."""
        value = inputs.get(fields[0])
        found = self.fingerprint_of(str(value)) if value is not None else None
        if found is not None:  # an image that cannot be read is not compared (its checks name it)
            self.keys.append(key)
            self.prints.append(found)

    def ask(self) -> None:
        """Nothing to start: this index finds its pairs when :meth:`pairs` is called."""

    def pairs(self, keep: Callable[[str, str], bool] = lambda _a, _b: True) -> list[tuple[str, str, float]]:
        """Every pair within the rule, where ``keep`` allows it: ``(a, b, similarity)`` with ``a``
        before ``b`` in key order, the pairs in that order."""
        import numpy

        if len(self.keys) < 2:
            return []
        centres, hashes = as_arrays(self.prints)
        found = []
        for i in range(len(self.keys) - 1):
            theirs = numpy.bitwise_count(centres[i] ^ hashes[i + 1 :]).sum(axis=2).min(axis=1)
            ours = numpy.bitwise_count(centres[i + 1 :, None, :] ^ hashes[i]).sum(axis=2).min(axis=1)
            bits = numpy.minimum(theirs, ours)
            for j in numpy.nonzero(bits <= self.rule.threshold)[0]:
                a, b = sorted((self.keys[i], self.keys[i + 1 + int(j)]))
                if keep(a, b):
                    found.append((a, b, similarity(int(bits[j]))))
        return sorted(found)

    def close(self) -> None:
        self.prints = []
