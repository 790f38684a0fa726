"""The dashboard room's storage ports: the leads' sessions and the pages' read models."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from dynaval.domain.dashboard.lead_session import LeadSessionRecord
from dynaval.domain.validation.candidate import Candidate
from dynaval.domain.validation.votes import AnnotationRecord


class DashboardSessions(Protocol):
    """The lead's dashboard sessions (table ``dashboard_session``)."""

    def add(self, record: LeadSessionRecord) -> None: ...

    def get(self, id_hash: str) -> LeadSessionRecord | None: ...

    def touch(self, id_hash: str, now: datetime) -> None:
        """Note that the session was used at ``now`` (never moving ``last_seen_at`` back)."""

    def revoke(self, id_hash: str, now: datetime) -> None: ...

    def purge(self, now: datetime, *, idle: timedelta) -> None:
        """Delete the rows that can no longer hold: past their lifetime or their idle timeout.
        A revoked row stays until then, so the table shows recent logouts."""


class DashboardQueries(Protocol):
    """What the lead's dashboard reads: fingerprints of a round's votes, counts, the paged queue."""

    def votes_fingerprint(self, round_id: int) -> tuple[Any, ...]:
        """What the round's counted votes depend on: its annotations (how many, and the latest time
        one was stored or changed) and its exclusion log (every exclusion or reinstatement adds an
        event). Cheap indexed queries (a count and a max are faster apart than together)."""

    def annotators_fingerprint(self, round_id: int) -> tuple[Any, ...]:
        """The votes' fingerprint and the round's gold answers (gold accuracy is on the annotators page)."""

    def status_counts(self, round_ids: Sequence[int]) -> dict[int, dict[tuple[str, bool], int]]:
        """Candidates of each round by (status, fooled), read at once."""

    def queue_page(
        self,
        round_id: int,
        *,
        fields: Sequence[str],
        status: str,
        q: str,
        urgent: Sequence[str],
        offset: int,
        limit: int,
        by_status: Mapping[str, int] | None,
    ) -> tuple[list[Candidate], dict[str, list[AnnotationRecord]], int]:
        """One page of the round's candidates, ``urgent`` statuses first, then the rest, each by
        submission time; with their annotations, and the total the filters keep. ``q`` keeps
        candidates whose ``fields`` contain it (case-insensitive); ``by_status``, the round's counts
        when the caller has them, saves counting again."""

    def writer_by_validators(self, round_id: int) -> list[tuple[str, str, int]]:
        """Candidates by writer label and validators' majority label (each candidate's latest rule
        decision; candidates without a majority are left out)."""
