"""Domain errors. Entry points turn them into HTTP statuses or CLI messages."""

from __future__ import annotations


class DomainError(Exception):
    """Base of every error the domain or a use case raises on purpose."""

    code = "invalid"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidInput(DomainError):
    code = "invalid_input"


class TooLarge(DomainError):
    code = "too_large"


class NotFound(DomainError):
    code = "not_found"


class Conflict(DomainError):
    code = "conflict"


class StorageConflict(Conflict):
    """What a unit of work tried to store conflicts with what another writer stored meanwhile (a
    unique key): the storage's own refusal, as the unit of work reports it. A use case that can
    say which of its rules was broken catches it and says so."""


class Forbidden(DomainError):
    """The caller is known but may not do this (another role's call, another writer's candidate)."""

    code = "forbidden"


class Unavailable(DomainError):
    """An outside system (the model, Label Studio) cannot serve the request now."""

    code = "unavailable"


class WritersBusy(Unavailable):
    """Another writer holds the database's write lock, and the caller asked not to wait for it."""


class TooManyRequests(DomainError):
    """The caller has spent its budget for now; ``retry_after_s`` says when some of it comes back."""

    code = "rate_limited"

    def __init__(self, message: str, *, field: str | None = None, retry_after_s: int) -> None:
        super().__init__(message, field=field)
        self.retry_after_s = retry_after_s


class ScoringLimited(TooManyRequests):
    """The caller has asked for more model work than its scoring budget allows now."""

    code = "scoring_limited"


class NearDuplicateRefused(Conflict):
    """A round whose policy rejects near-duplicates refused an example: ``near_duplicates`` are
    the earlier examples it repeats, as the writer may see them."""

    code = "near_duplicate"

    def __init__(self, message: str, *, field: str, near_duplicates: list[dict[str, object]]) -> None:
        super().__init__(message, field=field)
        self.near_duplicates = near_duplicates
