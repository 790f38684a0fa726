"""The lead's dashboard sessions, kept in the database.

Every worker and machine shares the database, so a logout (or an expiry) is seen by all of them at
once, and a copied cookie stops working there too. The browser holds a random id of 256 bits; the
table keeps only its SHA-256 (the id is as guessable as a key, so no slower hash is needed), with
the lead's name, an HMAC fingerprint of their token, and when the session began, was last used,
ends and was revoked.

A session holds while it is not revoked, younger than ``DYNAVAL_SESSION_LIFETIME_S``, used within
``DYNAVAL_SESSION_IDLE_S`` and its fingerprint still matches a configured lead token (removing a
token from the configuration ends its sessions). Rows past their lifetime or idle timeout are
deleted at each login and logout (a revoked row stays until then, so the table shows recent
logouts).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from dynaval.domain.clock import utcnow
from dynaval.domain.dashboard.lead_session import LeadSessionRecord
from dynaval.service_layer.services import Services
from dynaval.settings import Settings

TOUCH_EVERY_S = 60.0
"""``last_seen_at`` is written at most this often (or a tenth of the idle timeout, if shorter): a
page view is then a read, not a write under SQLite's one writer lock. The idle timeout can end a
session that much early, never late."""


@dataclass(frozen=True)
class LeadSession:
    """A session that holds: the lead's name, as the configuration names their token now."""

    lead: str
    expires_at: datetime


def fingerprint(settings: Settings, token: str) -> str:
    """The HMAC of a lead token under the session key: the row says whose token it was without
    holding it, and a new session key turns every fingerprint (so every session) invalid."""
    return hmac.new(
        settings.resolved_session_secret.encode(), b"lead:" + token.encode(), hashlib.sha256
    ).hexdigest()


def id_hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def start(services: Services, *, lead: str, token: str, replacing: str | None = None) -> str:
    """A new session for the lead whose token this is; returns its id (for the cookie only).

    Always a new id, so an id planted in the browser before the login is never signed in (session
    fixation); ``replacing``, the id the browser held, is revoked.
    """
    settings = services.settings
    session_id = secrets.token_urlsafe(32)
    now = utcnow()
    with services.uow() as uow:
        uow.dashboard_sessions.purge(now, idle=timedelta(seconds=settings.session_idle_s))
        if replacing:
            uow.dashboard_sessions.revoke(id_hash(replacing), now)
        uow.dashboard_sessions.add(
            LeadSessionRecord(
                id_hash=id_hash(session_id),
                lead=lead,
                token_fingerprint=fingerprint(settings, token),
                created_at=now,
                last_seen_at=now,
                expires_at=now + timedelta(seconds=settings.session_lifetime_s),
            )
        )
        uow.commit()
    return session_id


def resolve(services: Services, session_id: str) -> LeadSession | None:
    """The session this id names if it holds now, else None; notes that it was used."""
    settings = services.settings
    now = utcnow()
    with services.uow(read_only=True) as uow:
        record = uow.dashboard_sessions.get(id_hash(session_id))
    if record is None or not record.holds(now, idle=timedelta(seconds=settings.session_idle_s)):
        return None
    lead = _lead_of(settings, record.token_fingerprint)
    if lead is None:
        return None
    if record.due_for_touch(now, every=timedelta(seconds=min(TOUCH_EVERY_S, settings.session_idle_s / 10))):
        with services.uow() as uow:
            uow.dashboard_sessions.touch(record.id_hash, now)
            uow.commit()
    return LeadSession(lead=lead, expires_at=record.expires_at)


def end(services: Services, session_id: str) -> None:
    """Revoke the session (the logout): its id is refused from now on, on every worker."""
    now = utcnow()
    with services.uow() as uow:
        uow.dashboard_sessions.revoke(id_hash(session_id), now)
        uow.dashboard_sessions.purge(now, idle=timedelta(seconds=services.settings.session_idle_s))
        uow.commit()


def _lead_of(settings: Settings, kept: str) -> str | None:
    """The name of the configured lead token with this fingerprint, or None."""
    found = None
    # Compare with every token, so timing does not tell which one matched.
    for credential in settings.lead_credentials:
        if hmac.compare_digest(kept, fingerprint(settings, credential.token)) and found is None:
            found = credential.name
    return found
