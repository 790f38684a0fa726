"""The regression suite: cases that only ever grow, the models registered by content hash, each
case's results, its history across models, and the suspect rule.

A case's id is the id of the candidate (or capture) it came from, so every list of cases and flips
traces back to the example and its votes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from dynaval.domain.errors import Conflict, InvalidInput

SUSPECT_MIN_MODELS = 3
"""A case is suspect only once at least this many registered models were evaluated on it."""

MAX_REASON_CHARS = 2000


def check_reason(reason: str) -> str:
    """A lead's reason: visible text, at most :data:`MAX_REASON_CHARS` characters."""
    reason = reason.strip()
    if not reason:
        raise InvalidInput("a reason is required", field="reason")
    if len(reason) > MAX_REASON_CHARS:
        raise InvalidInput(f"the reason must be at most {MAX_REASON_CHARS} characters", field="reason")
    return reason


@dataclass(frozen=True)
class RegressionCase:
    """One example the suite keeps: inputs, gold label, where it came from, and its state."""

    id: str
    round_id: int
    split: str
    """``dev_r1``, ``test_r2``...; a capture's source for a failure capture."""
    task_type: str
    inputs: Mapping[str, str]
    label: str
    source: str
    """``release:<name>@<version>`` (the first release that held it), or a capture's source."""
    added_at: datetime | None = None
    """When the suite took it (None before it is stored)."""
    round_model_prediction: str | None = None
    """What the round's own model answered when the example was written (its provenance)."""
    retired_at: datetime | None = None
    retired_by: str | None = None
    retired_reason: str | None = None
    suspect: bool = False
    confirmed: bool = False

    @property
    def retired(self) -> bool:
        return self.retired_at is not None

    def retire(self, *, by: str, reason: str, at: datetime) -> RegressionCase:
        """The case, retired: it leaves the suite (its results stay)."""
        if self.retired:
            raise Conflict(
                f"case {self.id} was retired already ({self.retired_reason}, by {self.retired_by})",
                field="case",
            )
        return replace(self, retired_at=at, retired_by=by, retired_reason=check_reason(reason))

    def check_may_revalidate(self) -> None:
        """Only a suspect case still in the suite goes back to the validators (a :class:`Conflict`
        naming ``cases`` and the id otherwise)."""
        if self.retired:
            raise Conflict(
                f"case {self.id} is retired ({self.retired_reason}); it is not re-validated", field="cases"
            )
        if not self.suspect:
            state = "confirmed by a re-validation already" if self.confirmed else "not suspect"
            raise Conflict(f"case {self.id} is {state}: only suspect cases are re-validated", field="cases")

    def confirm(self) -> RegressionCase:
        """The case, its label confirmed by a re-validation: it stays, no longer suspect (and is not
        marked suspect again by later evaluations)."""
        if self.retired:
            raise Conflict(f"case {self.id} is retired; a retired case is not confirmed", field="case")
        return replace(self, suspect=False, confirmed=True)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "round_id": self.round_id,
            "split": self.split,
            "task_type": self.task_type,
            "inputs": dict(self.inputs),
            "label": self.label,
            "source": self.source,
            "added_at": self.added_at.isoformat() if self.added_at else None,
            "round_model_prediction": self.round_model_prediction,
            "retired_at": self.retired_at.isoformat() if self.retired_at else None,
            "retired_by": self.retired_by,
            "retired_reason": self.retired_reason,
            "suspect": self.suspect,
            "confirmed": self.confirmed,
        }


@dataclass(frozen=True)
class RegisteredModel:
    """A model the service knows by the content hash of its folder; a lead may ship it."""

    hash: str
    name: str
    folder: str
    registered_at: datetime
    shipped: bool = False
    shipped_at: datetime | None = None
    shipped_by: str | None = None
    shipped_reason: str | None = None

    def ship(self, *, by: str, reason: str, at: datetime) -> RegisteredModel:
        if self.shipped:
            raise Conflict(f"model {self.hash} was shipped already, by {self.shipped_by}", field="model")
        return replace(self, shipped=True, shipped_at=at, shipped_by=by, shipped_reason=check_reason(reason))

    def to_dict(self) -> dict[str, Any]:
        return {
            "hash": self.hash,
            "name": self.name,
            "folder": self.folder,
            "registered_at": self.registered_at.isoformat(),
            "shipped": self.shipped,
            "shipped_at": self.shipped_at.isoformat() if self.shipped_at else None,
            "shipped_by": self.shipped_by,
            "shipped_reason": self.shipped_reason,
        }


@dataclass(frozen=True)
class CaseResult:
    """One model's answer on one case, in one evaluation run."""

    case_id: str
    model_hash: str
    prediction: str
    probabilities: Mapping[str, float]
    correct: bool
    run_id: int = 0
    evaluated_at: datetime | None = None


@dataclass(frozen=True)
class Passed:
    model_hash: str
    at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model_hash, "at": self.at.isoformat() if self.at else None}


@dataclass(frozen=True)
class CaseHistory:
    """A case across every evaluation: who passed it first and last, and who flipped it to wrong."""

    case_id: str
    evaluations: int = 0
    first_passed: Passed | None = None
    last_passed: Passed | None = None
    flipped_by: list[Passed] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "case_id": self.case_id,
            "evaluations": self.evaluations,
            "first_passed": self.first_passed.to_dict() if self.first_passed else None,
            "last_passed": self.last_passed.to_dict() if self.last_passed else None,
            "flipped_by": [p.to_dict() for p in self.flipped_by],
        }


def case_history(case_id: str, results: Iterable[CaseResult]) -> CaseHistory:
    """The history of one case from its results in evaluation order: the first and the last model
    that got it right, and each model whose result was wrong right after a result that was right
    (a right-to-wrong flip, Xie et al. 2021)."""
    first: Passed | None = None
    last: Passed | None = None
    flipped: list[Passed] = []
    previous: bool | None = None
    count = 0
    for result in results:
        count += 1
        here = Passed(result.model_hash, result.evaluated_at)
        if result.correct:
            first = first or here
            last = here
        elif previous:
            flipped.append(here)
        previous = result.correct
    return CaseHistory(case_id, count, first, last, flipped)


def latest_outcomes(results: Iterable[tuple[str, str, bool]]) -> dict[str, dict[str, bool]]:
    """Case id -> model hash -> whether that model's latest result was right, from
    ``(case_id, model_hash, correct)`` in evaluation order."""
    latest: dict[str, dict[str, bool]] = defaultdict(dict)
    for case_id, model_hash, correct in results:
        latest[case_id][model_hash] = correct
    return dict(latest)


def suspect_cases(
    latest: Mapping[str, Mapping[str, bool]], *, min_models: int = SUSPECT_MIN_MODELS
) -> set[str]:
    """Cases that every model evaluated on them fails (each model's latest result), once at least
    ``min_models`` were: perhaps a wrong label rather than a hard case."""
    return {
        case_id
        for case_id, by_model in latest.items()
        if len(by_model) >= min_models and not any(by_model.values())
    }


def accuracy_groups(
    cases: Sequence[RegressionCase], correct: Mapping[str, bool]
) -> dict[str, dict[str, list[bool]]]:
    """The outcomes of ``correct`` (case id -> right or wrong) grouped by split and by label."""
    groups: dict[str, dict[str, list[bool]]] = {"split": defaultdict(list), "label": defaultdict(list)}
    for case in cases:
        if case.id in correct:
            groups["split"][case.split].append(correct[case.id])
            groups["label"][case.label].append(correct[case.id])
    return {kind: dict(values) for kind, values in groups.items()}


BOOTSTRAP_RESAMPLES = 2000


def accuracy_with_ci(outcomes: Sequence[bool], *, seed: int = 0) -> dict[str, Any]:
    """Accuracy with a percentile bootstrap 95% CI (scipy, ``seed`` fixed); no interval for fewer
    than two cases.

    >>> accuracy_with_ci([True, True, False, True])["accuracy"]
    0.75
    """
    import numpy as np
    from scipy.stats import bootstrap

    n = len(outcomes)
    if n == 0:
        return {"cases": 0, "correct": 0, "accuracy": None, "ci95": None}
    values = np.asarray(outcomes, dtype=float)
    accuracy = float(values.mean())
    ci: list[float] | None = None
    if n >= 2:
        if values.min() == values.max():
            ci = [accuracy, accuracy]  # every resample is the same
        else:
            result = bootstrap(
                (values,),
                np.mean,
                confidence_level=0.95,
                n_resamples=BOOTSTRAP_RESAMPLES,
                method="percentile",
                rng=np.random.default_rng(seed),
            )
            ci = [float(result.confidence_interval.low), float(result.confidence_interval.high)]
    return {"cases": n, "correct": int(values.sum()), "accuracy": accuracy, "ci95": ci}
