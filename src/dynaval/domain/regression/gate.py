"""The gate: a candidate model fails when it gets wrong a case that the baseline got right (a
*negative flip*, Xie et al., ACL 2021). Positive flips, the accuracy change per round and
McNemar's test on the paired results are reported beside the decision, never instead of it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dynaval.domain.errors import InvalidInput
from dynaval.domain.regression.suite import RegressionCase

EXACT_BELOW = 25
"""McNemar's test is the exact binomial one when fewer discordant pairs than this, else chi-square."""


@dataclass(frozen=True)
class Answer:
    """A model's latest answer on a case."""

    prediction: str
    correct: bool
    model_hash: str


@dataclass(frozen=True)
class Flip:
    """A case the baseline got right and the candidate gets wrong."""

    case: RegressionCase
    baseline: Answer
    candidate: Answer

    def to_dict(self) -> dict[str, Any]:
        return {
            "case_id": self.case.id,
            "round_id": self.case.round_id,
            "split": self.case.split,
            "inputs": dict(self.case.inputs),
            "label": self.case.label,
            "baseline_model": self.baseline.model_hash,
            "baseline_prediction": self.baseline.prediction,
            "candidate_prediction": self.candidate.prediction,
        }


@dataclass(frozen=True)
class McNemar:
    """McNemar's test on the paired results: the discordant counts, the statistic and p-value."""

    baseline_only: int
    candidate_only: int
    both_right: int
    both_wrong: int
    exact: bool
    statistic: float | None
    p_value: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "both_right": self.both_right,
            "baseline_only_right": self.baseline_only,
            "candidate_only_right": self.candidate_only,
            "both_wrong": self.both_wrong,
            "method": "exact binomial" if self.exact else "chi-square (continuity corrected)",
            "statistic": self.statistic,
            "p_value": self.p_value,
        }


def mcnemar_test(*, both_right: int, baseline_only: int, candidate_only: int, both_wrong: int) -> McNemar:
    """McNemar's test (statsmodels): exact binomial when fewer than :data:`EXACT_BELOW` pairs
    disagree, else chi-square with continuity correction. No discordant pair: no test (p is None).

    >>> mcnemar_test(both_right=10, baseline_only=0, candidate_only=5, both_wrong=1).p_value
    0.0625
    """
    from statsmodels.stats.contingency_tables import mcnemar

    discordant = baseline_only + candidate_only
    exact = discordant < EXACT_BELOW
    if discordant == 0:
        return McNemar(baseline_only, candidate_only, both_right, both_wrong, exact, None, None)
    table = [[both_right, baseline_only], [candidate_only, both_wrong]]
    result = mcnemar(table, exact=exact, correction=True)
    return McNemar(
        baseline_only,
        candidate_only,
        both_right,
        both_wrong,
        exact,
        float(result.statistic),
        float(result.pvalue),
    )


@dataclass(frozen=True)
class GateResult:
    passed: bool
    max_flips: int
    negative_flips: list[Flip]
    positive_flips: int
    per_round: dict[str, dict[str, Any]]
    mcnemar: McNemar
    paired_cases: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "max_flips": self.max_flips,
            "negative_flips": [f.to_dict() for f in self.negative_flips],
            "positive_flips": self.positive_flips,
            "paired_cases": self.paired_cases,
            "per_round": self.per_round,
            "mcnemar": self.mcnemar.to_dict(),
        }


def check_max_flips(max_flips: int) -> int:
    if max_flips < 0:
        raise InvalidInput("max_flips must be 0 or more", field="max_flips")
    return max_flips


def decide(
    cases: Sequence[RegressionCase],
    *,
    baseline: Mapping[str, Answer],
    candidate: Mapping[str, Answer],
    max_flips: int = 0,
) -> GateResult:
    """Compare the candidate with the baseline on the cases both answered. Pass when the negative
    flips are at most ``max_flips``."""
    check_max_flips(max_flips)
    flips: list[Flip] = []
    positive = both_right = both_wrong = 0
    rounds: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    for case in cases:
        base, cand = baseline.get(case.id), candidate.get(case.id)
        if base is None or cand is None:
            continue
        rounds[case.split].append((base.correct, cand.correct))
        if base.correct and not cand.correct:
            flips.append(Flip(case, base, cand))
        elif cand.correct and not base.correct:
            positive += 1
        elif base.correct:
            both_right += 1
        else:
            both_wrong += 1
    per_round = {}
    for split, pairs in sorted(rounds.items()):
        base_acc = sum(b for b, _ in pairs) / len(pairs)
        cand_acc = sum(c for _, c in pairs) / len(pairs)
        per_round[split] = {
            "cases": len(pairs),
            "baseline_accuracy": base_acc,
            "candidate_accuracy": cand_acc,
            "change": cand_acc - base_acc,
            "negative_flips": sum(1 for b, c in pairs if b and not c),
            "positive_flips": sum(1 for b, c in pairs if c and not b),
        }
    test = mcnemar_test(
        both_right=both_right, baseline_only=len(flips), candidate_only=positive, both_wrong=both_wrong
    )
    return GateResult(
        passed=len(flips) <= max_flips,
        max_flips=max_flips,
        negative_flips=flips,
        positive_flips=positive,
        per_round=per_round,
        mcnemar=test,
        paired_cases=sum(len(p) for p in rounds.values()),
    )
