"""Counts in words people read: "1 writer", "2 writers"."""

from __future__ import annotations


def counted(count: int, singular: str, plural: str | None = None) -> str:
    """``count`` and the noun (or noun phrase) that agrees with it; ``plural`` defaults to
    ``singular`` + "s". A phrase with its verb gives both forms: ``counted(n, "writer is",
    "writers are")``."""
    if count == 1:
        return f"{count} {singular}"
    return f"{count} {plural if plural is not None else singular + 's'}"
