"""The health room's storage port: the near-duplicate index checked at submission."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

from dynaval.domain.health.near_duplicates import EarlierExample, NearDuplicateCheck


class NearDuplicateIndex(Protocol):
    """The shared near-duplicate index at submission (every example's MinHash LSH band keys and
    vector, which each process holds in memory) and what each check found; see
    docs/near_duplicates.md."""

    def serialize_checks(self, task_type: str) -> None:
        """Hold, until this unit of work ends, the right to check and index new examples of
        ``task_type``: two submissions of one trick at the same moment are checked one after the
        other, so the second sees the first."""
        ...

    def add(
        self, candidate_id: str, task_type: str, keys: Collection[int] | bytes, vector: bytes | None = None
    ) -> None:
        """Index a candidate (added in this unit of work, or stored earlier) under its band keys (an
        image: its fingerprint's bytes, :meth:`~dynaval.domain.images.image.ImageFingerprint.to_bytes`),
        with its vector for the semantic check (``None``: none computed)."""
        ...

    def add_many(self, examples: Sequence[tuple[str, str, Collection[int] | bytes, bytes | None]]) -> None:
        """Index stored candidates in bulk: ``(candidate id, task type, keys, vector)``."""
        ...

    def examples(self, candidate_ids: Collection[str]) -> dict[str, EarlierExample]:
        """The stored examples with these ids."""
        ...

    def vectors_after(
        self, task_type: str, seq: int, *, limit: int | None = None
    ) -> list[tuple[int, str, bytes | None]]:
        """The examples of ``task_type`` indexed after ``seq`` (a number that only grows):
        ``(seq, candidate id, vector)``, in order."""
        ...

    def vectors_of(self, candidate_ids: Collection[str]) -> dict[str, bytes]:
        """The stored vectors of these candidates (float16 bytes; the candidates with none, or not
        indexed, are left out): what a release's semantic check reads instead of encoding again."""
        ...

    def keys_after(
        self, task_type: str, seq: int, *, limit: int | None = None
    ) -> list[tuple[int, str, bytes | None]]:
        """The examples of ``task_type`` indexed after ``seq``: ``(seq, candidate id, band keys as
        stored by :func:`~dynaval.domain.health.band_keys.keys_to_bytes`, or an image's fingerprint)``,
        in order."""
        ...

    def without_vectors(
        self, limit: int, *, passing_over: Collection[str] = ()
    ) -> list[tuple[str, str, dict[str, str]]]:
        """Indexed examples with no vector: ``(id, task type, inputs)``, of task types other than
        ``passing_over``."""
        ...

    def set_vectors(self, vectors: Sequence[tuple[str, str, bytes]]) -> None:
        """Give indexed examples their vectors ``(id, task type, vector)``, under a new ``seq``."""
        ...

    def unindexed(self, limit: int) -> list[tuple[str, str, dict[str, str]]]:
        """Stored candidates missing from the index ``(id, task type, inputs)``, oldest first."""
        ...

    def size(self) -> int:
        """How many examples the index holds."""
        ...

    def record(self, check: NearDuplicateCheck) -> None:
        """Keep what the check found for a candidate stored in this unit of work."""
        ...

    def checks_of(self, candidate_ids: Collection[str]) -> dict[str, NearDuplicateCheck]: ...

    def flagged(self, round_id: int, *, limit: int | None = None) -> list[str]:
        """The ids of the round's candidates flagged as near-duplicates, the earliest first (the
        first ``limit``, when given)."""
        ...

    def flagged_count(self, round_id: int) -> int:
        """How many of the round's candidates are flagged as near-duplicates."""
        ...

    def round_band_keys(self, round_id: int) -> dict[str, bytes | None]:
        """The stored band keys of the round's indexed candidates, by candidate id."""
        ...
