"""The releases room's storage port: releases, where each put every example, and each writer's
sticky split kind."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

from dynaval.domain.releases.release import Release, SplitKind
from dynaval.domain.releases.splits import FixedPlace


class ReleaseRepository(Protocol):
    """Releases (never updated once added), their examples' places and writers' split kinds."""

    def add(self, release: Release, *, at: datetime) -> Release:
        """Store a new release; a second one with the same name and version fails on commit."""
        ...

    def get(self, release_id: int) -> Release:
        """The release; :class:`NotFound` naming ``release_id``."""
        ...

    def find(self, name: str, version: str) -> Release | None: ...

    def all(self, task_type: str | None = None) -> list[Release]:
        """Oldest first."""
        ...

    def writer_kinds(self, task_type: str) -> dict[str, SplitKind]:
        """Every placed writer's kind: by a release, or at their first accepted example."""
        ...

    def place_writers(self, task_type: str, kinds: Mapping[str, SplitKind], *, at: datetime) -> None:
        """Record writers placed at their first accepted example (before any release); a writer
        placed before fails on commit (the kind is sticky)."""
        ...

    def places(self, release_id: int) -> dict[str, FixedPlace]: ...

    def add_places(self, release_id: int, splits: Mapping[str, str], withheld: Mapping[str, str]) -> None: ...

    def assign_writers(
        self, task_type: str, kinds: Mapping[str, SplitKind], *, release_id: int, at: datetime
    ) -> None:
        """Record new writers' kinds; a writer placed before fails on commit (the kind is sticky)."""
        ...
