"""Gold items and the gold rule: known answers that check the annotators.

A gold item is mixed among a round's candidates in Label Studio, shaped exactly like one. Each
annotator's gold accuracy is their latest non-cancelled labelled answer per gold item against the
known label. Once they have answered ``gold_min_items`` gold items, an accuracy below
``gold_min_accuracy`` excludes them: their votes stop counting. A lead may exclude or reinstate
anyone; the rule then leaves that annotator to the lead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from dynaval.domain.validation.policy import DecisionPolicy


class DecidedBy(StrEnum):
    GOLD = "gold"
    """The automatic rule."""
    LEAD = "lead"
    """A lead; the rule then leaves the annotator alone."""


@dataclass
class GoldItem:
    id: str
    round_id: int
    inputs: dict[str, str]
    label: str
    created_at: datetime | None = None
    push_attempted_at: datetime | None = None
    pushed_at: datetime | None = None
    label_studio_task_id: int | None = None
    label_studio_read_at: datetime | None = None

    def enter_validation(self, *, task_id: int, at: datetime) -> None:
        """Its task is in Label Studio (after a push, or found there after a lost answer)."""
        self.label_studio_task_id = task_id
        self.pushed_at = self.pushed_at or at


@dataclass(frozen=True)
class GoldAnswer:
    """One annotator's answer to one gold item, as Label Studio holds it."""

    annotation_id: int
    gold_item_id: str
    annotator: str
    label: str | None
    was_cancelled: bool
    updated_at: datetime


@dataclass(frozen=True)
class GoldScore:
    correct: int
    total: int

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.total if self.total else None


def gold_scores(answers: Iterable[tuple[GoldAnswer, str]]) -> dict[str, GoldScore]:
    """Each annotator's gold accuracy from ``(answer, the item's label)`` pairs: their latest
    non-cancelled labelled answer per gold item (ties in time go to the higher annotation id)."""
    latest: dict[tuple[str, str], tuple[datetime, int, bool]] = {}
    for answer, truth in answers:
        if answer.was_cancelled or answer.label is None:
            continue
        key = (answer.annotator, answer.gold_item_id)
        stamp = (answer.updated_at, answer.annotation_id)
        if key not in latest or stamp > latest[key][:2]:
            latest[key] = (*stamp, answer.label == truth)
    tallies: dict[str, list[int]] = {}
    for (annotator, _item), (_, _, right) in latest.items():
        tally = tallies.setdefault(annotator, [0, 0])
        tally[0] += int(right)
        tally[1] += 1
    return {annotator: GoldScore(c, t) for annotator, (c, t) in tallies.items()}


@dataclass(frozen=True)
class AnnotatorStatus:
    """Whether an annotator's votes count in a round, who decided it and why."""

    annotator: str
    excluded: bool
    decided_by: DecidedBy
    reason: str
    changed_at: datetime | None = None


def gold_verdict(
    score: GoldScore, policy: DecisionPolicy, current: AnnotatorStatus | None
) -> tuple[bool, str] | None:
    """What the gold rule says of one annotator: ``(excluded, reason)`` when their status must
    change, None when it stands (or when a lead decided it)."""
    if current is not None and current.decided_by is DecidedBy.LEAD:
        return None
    should_exclude = (
        score.total >= policy.gold_min_items
        and score.accuracy is not None
        and score.accuracy < policy.gold_min_accuracy
    )
    if current is None and not should_exclude:
        return None
    if current is not None and current.excluded == should_exclude:
        return None
    if should_exclude:
        return True, f"gold accuracy {score.correct}/{score.total} below {policy.gold_min_accuracy:g}"
    return False, f"gold accuracy {score.correct}/{score.total} back at or above {policy.gold_min_accuracy:g}"


@dataclass(frozen=True)
class ExclusionEvent:
    """One exclusion or reinstatement, with the gold figures of the moment."""

    round_id: int
    annotator: str
    excluded: bool
    decided_by: DecidedBy
    reason: str
    gold_correct: int
    gold_total: int
    decisions_changed: int
    made_at: datetime


def gold_to_mix(policy: DecisionPolicy, candidates: int) -> int:
    """How many gold items to mix into a push of ``candidates`` candidates, keeping the round's rate."""
    if policy.gold_rate <= 0 or candidates <= 0:
        return 0
    return max(0, round(candidates * policy.gold_rate / (1 - policy.gold_rate)))
