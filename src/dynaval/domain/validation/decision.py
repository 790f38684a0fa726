"""The decision rule: from one candidate's votes to accept, reject, escalate or flag.

Pure and deterministic: the same ballots, writer label and policy always give the same decision,
so a decision can be recomputed on every vote change and checked later from its recorded inputs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from typing import Any

from dynaval.domain.validation.policy import RULE_VERSION, DecisionPolicy


class Outcome(StrEnum):
    """What the rule concluded. The values double as candidate statuses."""

    IN_VALIDATION = "in_validation"
    ESCALATED = "escalated"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    FLAGGED = "flagged"

    @property
    def is_final(self) -> bool:
        return self in (Outcome.ACCEPTED, Outcome.REJECTED, Outcome.FLAGGED)


@dataclass(frozen=True)
class Ballot:
    """One annotator's current vote on one candidate: a label, a flag, or both."""

    annotator: str
    label: str | None
    flagged: bool = False
    reason: str | None = None


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    wanted_votes: int
    """How many votes Label Studio should collect for this candidate's task."""
    votes_counted: int
    label_counts: dict[str, int]
    majority_label: str | None
    majority_share: float | None
    writer_label_share: float | None
    item_agreement: float | None
    """Share of agreeing pairs among the counted votes (undefined below two votes)."""
    validators_label: str | None
    """The label the validators' majority chose instead of the writer's, on a reject."""
    flags: int
    reason: str
    rule_version: str = RULE_VERSION
    excluded_annotators: tuple[str, ...] = field(default=())
    own_vote_ignored: str | None = None
    """The writer's own Label Studio user, when they voted on their own example: not counted."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "wanted_votes": self.wanted_votes,
            "votes_counted": self.votes_counted,
            "label_counts": dict(self.label_counts),
            "majority_label": self.majority_label,
            "majority_share": self.majority_share,
            "writer_label_share": self.writer_label_share,
            "item_agreement": self.item_agreement,
            "validators_label": self.validators_label,
            "flags": self.flags,
            "reason": self.reason,
            "rule_version": self.rule_version,
            "excluded_annotators": list(self.excluded_annotators),
            # Only when there is one, so that decisions stored before this key stay equal.
            **({"own_vote_ignored": self.own_vote_ignored} if self.own_vote_ignored else {}),
        }


def _accepts(writer_votes: int, strongest_other: int, total: int, share: Fraction) -> bool:
    return writer_votes > strongest_other and Fraction(writer_votes, total) >= share


def pairwise_agreement(counts: Iterable[int]) -> float | None:
    """Share of ordered pairs of votes on one item that carry the same label."""
    values = list(counts)
    n = sum(values)
    if n < 2:
        return None
    return sum(c * (c - 1) for c in values) / (n * (n - 1))


def decide(
    ballots: Iterable[Ballot],
    writer_label: str,
    policy: DecisionPolicy,
    *,
    excluded: Collection[str] = (),
    writer_annotator: str | None = None,
) -> Decision:
    """Apply the round's rule to a candidate's current ballots.

    1. ``flag_votes`` flags send the candidate to a lead.
    2. Below ``min_votes`` labelled votes the candidate waits for validators.
    3. With at least ``min_votes`` votes, all for the writer's label: accept.
    4. If the outcome can no longer change (every possible remaining vote up to ``max_votes``
       gives the same answer) it is decided now: unanimous agreement with the writer accepts,
       a majority the writer cannot reach rejects.
    5. Otherwise one more vote is asked for (escalation), up to ``max_votes``.
    6. At ``max_votes`` (or more, since Label Studio does not cap annotations) accept when the
       writer's label is the strict majority with at least ``accept_share`` of the votes; else
       reject, recording the validators' majority label when there is a single one.

    A vote by ``writer_annotator`` (the writer's own Label Studio user: writers may also be
    annotators) never counts, as an excluded annotator's does not, and is recorded.
    """
    all_ballots = list(ballots)
    excluded_set = frozenset(excluded)
    own_vote = next(
        (b for b in all_ballots if writer_annotator is not None and b.annotator == writer_annotator), None
    )
    counted = [b for b in all_ballots if b.annotator not in excluded_set and b is not own_vote]
    excluded_seen = tuple(sorted({b.annotator for b in all_ballots} & excluded_set)) if excluded_set else ()
    flags = sum(1 for b in counted if b.flagged)
    counts = Counter(b.label for b in counted if b.label is not None)
    n = sum(counts.values())
    writer_votes = counts.get(writer_label, 0)
    strongest_other = max((c for label, c in counts.items() if label != writer_label), default=0)
    ranked = counts.most_common()
    top_label = ranked[0][0] if ranked and (len(ranked) == 1 or ranked[0][1] > ranked[1][1]) else None
    share = policy.accept_fraction
    # Annotations that fill a Label Studio slot without a counted label (flag only, excluded
    # annotator): the task must ask for that many more, or Label Studio would call it done.
    uncounted = len(all_ballots) - n

    def make(outcome: Outcome, wanted: int, reason: str) -> Decision:
        validators_label = top_label if outcome is Outcome.REJECTED and top_label != writer_label else None
        return Decision(
            outcome=outcome,
            wanted_votes=wanted,
            votes_counted=n,
            label_counts=dict(sorted(counts.items())),
            majority_label=top_label,
            majority_share=(ranked[0][1] / n) if n else None,
            writer_label_share=(writer_votes / n) if n else None,
            item_agreement=pairwise_agreement(counts.values()),
            validators_label=validators_label,
            flags=flags,
            reason=reason,
            excluded_annotators=excluded_seen,
            own_vote_ignored=own_vote.annotator if own_vote is not None else None,
        )

    if flags >= policy.flag_votes:
        return make(Outcome.FLAGGED, len(all_ballots), f"{flags} annotators flagged it")
    if n < policy.min_votes:
        return make(
            Outcome.IN_VALIDATION, policy.min_votes + uncounted, f"{n} of {policy.min_votes} first votes"
        )
    if writer_votes == n:
        return make(Outcome.ACCEPTED, len(all_ballots), f"all {n} votes for the writer's label")

    remaining = max(policy.max_votes - n, 0)
    total = n + remaining
    if remaining == 0:
        if _accepts(writer_votes, strongest_other, total, share):
            return make(Outcome.ACCEPTED, n, f"{writer_votes} of {n} votes for the writer's label")
        return make(Outcome.REJECTED, n, f"only {writer_votes} of {n} votes for the writer's label")

    best_case = _accepts(writer_votes + remaining, strongest_other, total, share)
    worst_case = _accepts(writer_votes, strongest_other + remaining, total, share)
    if worst_case:
        return make(
            Outcome.ACCEPTED, n, f"{writer_votes} of {n} votes for the writer's label; more cannot change it"
        )
    if not best_case:
        return make(
            Outcome.REJECTED, n, f"{writer_votes} of {n} votes for the writer's label; it can no longer win"
        )
    return make(
        Outcome.ESCALATED,
        n + 1 + uncounted,
        f"votes disagree ({writer_votes} of {n} for the writer); one more asked",
    )
