"""A lead's dashboard session: when it holds, and when it has ended."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class LeadSessionRecord:
    """What the server keeps of a session: never its id, only the id's hash."""

    id_hash: str
    lead: str
    token_fingerprint: str
    created_at: datetime
    last_seen_at: datetime
    expires_at: datetime
    revoked_at: datetime | None = None

    def holds(self, now: datetime, *, idle: timedelta) -> bool:
        """Not revoked, not past its lifetime, used within ``idle``."""
        return self.revoked_at is None and now < self.expires_at and now - self.last_seen_at < idle

    def due_for_touch(self, now: datetime, *, every: timedelta) -> bool:
        """Whether ``last_seen_at`` should be written now (it is written at most every ``every``)."""
        return now - self.last_seen_at >= every
