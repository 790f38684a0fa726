"""The models page's history: which model served when, and why each model was or was not shipped.

A model serves the rounds that pin it, from a round's creation to its close (an open round's model
serves now). Every registered model has a line, and so has a round's model the catalog lacks (a
round made before the catalog): in the order they first served or, never serving, were
registered. Why a model shipped is the lead's recorded reason; why one did not, its latest gate run
(failed with its negative flips, or passed and not shipped yet), or that it was never gated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dynaval.domain.regression.suite import RegisteredModel
from dynaval.domain.validation.round import Round, RoundState


@dataclass(frozen=True)
class Served:
    """A round a model served: from its creation to its close (None: it is open)."""

    round_id: int
    round_name: str
    task_type: str
    since: datetime | None
    until: datetime | None


@dataclass(frozen=True)
class HistoryLine:
    model_hash: str
    name: str
    registered_at: datetime | None
    served: list[Served]
    shipped_at: datetime | None
    shipped_by: str | None
    shipped_reason: str | None
    gate: Mapping[str, Any] | None
    """Its latest gate run (``GET /api/gate-runs``'s shape), if it was ever gated."""

    @property
    def first_seen(self) -> datetime | None:
        starts = [s.since for s in self.served if s.since is not None]
        return min(starts) if starts else self.registered_at

    @property
    def shipped(self) -> bool:
        return self.shipped_at is not None

    @property
    def why(self) -> str:
        """Why it was shipped, or why not, in words."""
        if self.shipped:
            return f"shipped by {self.shipped_by}: {self.shipped_reason}"
        if self.gate is None:
            return "not shipped: never gated"
        flips = len(self.gate["negative_flips"])
        if self.gate["passed"]:
            return (
                f"not shipped: passed gate run #{self.gate['id']} ({flips} negative flips, at most "
                f"{self.gate['max_flips']} allowed)"
            )
        return (
            f"not shipped: failed gate run #{self.gate['id']}, {flips} negative flips "
            f"(at most {self.gate['max_flips']} allowed)"
        )


def history_lines(
    models: Sequence[RegisteredModel], rounds: Sequence[Round], gates: Mapping[str, Mapping[str, Any]]
) -> list[HistoryLine]:
    """Every model's line, in the order they first served (or were registered)."""
    served: dict[str, list[Served]] = {}
    names: dict[str, str] = {}
    for round_ in rounds:
        if not round_.model_hash or round_.id is None:
            continue  # a capture round serves no model
        until = round_.closed_at or round_.frozen_at
        if round_.state is RoundState.OPEN:
            until = None
        served.setdefault(round_.model_hash, []).append(
            Served(round_.id, round_.name, round_.task_type, round_.created_at, until)
        )
        names.setdefault(round_.model_hash, round_.model_name or round_.model_hash)
    by_hash = {m.hash: m for m in models}
    lines = []
    for model_hash in dict.fromkeys([*served, *by_hash]):
        model = by_hash.get(model_hash)
        lines.append(
            HistoryLine(
                model_hash=model_hash,
                name=model.name if model else names[model_hash],
                registered_at=model.registered_at if model else None,
                served=served.get(model_hash, []),
                shipped_at=model.shipped_at if model and model.shipped else None,
                shipped_by=model.shipped_by if model else None,
                shipped_reason=model.shipped_reason if model else None,
                gate=gates.get(model_hash),
            )
        )
    return sorted(lines, key=lambda line: (line.first_seen is None, line.first_seen or datetime.min))
