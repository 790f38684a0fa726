"""Where long work stands, for whoever watches it: a job's reporter (its row, at most once a second)
or a command's progress bars. Shared by the rooms whose work is long: releases, evaluation, training."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """Told each step of the work (``total``: how many units it counts, when known) and how many
    units of it are done. What it raises stops the work, whose own cleanup runs on the way out."""

    def step(self, name: str, total: int | None = None) -> None: ...

    def advance(self, done: int, total: int | None = None) -> None: ...


class Unwatched:
    """The :class:`Progress` of work no one watches."""

    def step(self, name: str, total: int | None = None) -> None:
        pass

    def advance(self, done: int, total: int | None = None) -> None:
        pass
