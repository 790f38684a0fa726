"""The rules of re-validating a suspect case: who may be sent, what each outcome does to the case."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dynaval.domain.errors import Conflict
from dynaval.domain.regression.revalidation import (
    SYSTEM,
    Revalidation,
    RevalidationOutcome,
    outcome_of,
    revalidation_candidate,
    settle_case,
)
from dynaval.domain.regression.suite import RegressionCase
from dynaval.domain.validation.candidate import CandidateStatus
from dynaval.domain.validation.round import Round, RoundKind

T0 = datetime(2026, 12, 4, 9, tzinfo=UTC)
T1 = datetime(2026, 12, 4, 10, tzinfo=UTC)


def suspect_case(**fields: object) -> RegressionCase:
    values: dict[str, object] = {
        "id": "case-1",
        "round_id": 3,
        "split": "dev_r1",
        "task_type": "sentiment",
        "inputs": {"text": "The soup was cold."},
        "label": "positive",
        "source": "release:dynaval-sentiment@1.0.0",
        "suspect": True,
    }
    values.update(fields)
    return RegressionCase(**values)  # type: ignore[arg-type]


def link(**fields: object) -> Revalidation:
    values: dict[str, object] = {
        "case_id": "case-1",
        "candidate_id": "cand-9",
        "round_id": 12,
        "sent_by": "lead-ana",
        "sent_at": T0,
    }
    values.update(fields)
    return Revalidation(**values)  # type: ignore[arg-type]


def test_only_a_suspect_case_still_in_the_suite_is_sent() -> None:
    suspect_case().check_may_revalidate()
    for case, words in (
        (suspect_case(suspect=False), "not suspect"),
        (suspect_case(suspect=False, confirmed=True), "confirmed"),
        (suspect_case().retire(by="lead", reason="typo in the text", at=T0), "retired"),
    ):
        with pytest.raises(Conflict) as refused:
            case.check_may_revalidate()
        message = str(refused.value)
        assert refused.value.field == "cases" and "case-1" in message and words in message


def test_the_candidate_carries_the_inputs_with_the_gold_label_in_the_writers_place() -> None:
    candidate = revalidation_candidate(
        suspect_case(), candidate_id="cand-9", round_id=12, by="lead-ana", at=T0
    )
    assert candidate.inputs == {"text": "The soup was cold."} and candidate.writer_label == "positive"
    assert candidate.round_id == 12 and candidate.writer_id == "lead-ana"
    assert candidate.status is CandidateStatus.QUEUED  # straight to Label Studio, no model asked


@pytest.mark.parametrize(
    ("status", "frozen", "outcome"),
    [
        # Until the round is frozen a decision may still change: nothing settles.
        (CandidateStatus.ACCEPTED, False, None),
        (CandidateStatus.REJECTED, False, None),
        (CandidateStatus.ACCEPTED, True, RevalidationOutcome.CONFIRMED),
        (CandidateStatus.REJECTED, True, RevalidationOutcome.RETIRED),
        (CandidateStatus.UNVALIDATED, True, RevalidationOutcome.UNRESOLVED),
        (CandidateStatus.FLAGGED, True, RevalidationOutcome.UNRESOLVED),
        (CandidateStatus.FLAGGED, False, None),  # a lead decides it (override) first
        (CandidateStatus.ESCALATED, False, None),
        (CandidateStatus.IN_VALIDATION, False, None),
        (CandidateStatus.QUEUED, False, None),
    ],
)
def test_what_a_decision_means_for_the_case(
    status: CandidateStatus, frozen: bool, outcome: RevalidationOutcome | None
) -> None:
    assert outcome_of(status, round_frozen=frozen) is outcome


def test_a_rejected_revalidation_retires_the_case_by_the_system_naming_round_and_candidate() -> None:
    case, settled = settle_case(suspect_case(), link(), RevalidationOutcome.RETIRED, at=T1)
    assert case.retired and case.retired_by == SYSTEM and case.retired_at == T1
    assert case.retired_reason is not None
    assert "round 12" in case.retired_reason and "cand-9" in case.retired_reason
    assert settled.outcome is RevalidationOutcome.RETIRED and settled.settled_at == T1 and not settled.is_open


def test_an_accepted_revalidation_confirms_the_case_which_is_no_longer_suspect() -> None:
    case, settled = settle_case(suspect_case(), link(), RevalidationOutcome.CONFIRMED, at=T1)
    assert case.confirmed and not case.suspect and not case.retired
    assert settled.outcome is RevalidationOutcome.CONFIRMED
    # A confirmed case is not sent again.
    with pytest.raises(Conflict, match="confirmed"):
        case.check_may_revalidate()


def test_an_unresolved_revalidation_leaves_the_case_suspect_to_be_sent_again() -> None:
    case, settled = settle_case(suspect_case(), link(), RevalidationOutcome.UNRESOLVED, at=T1)
    assert case == suspect_case() and settled.outcome is RevalidationOutcome.UNRESOLVED
    case.check_may_revalidate()


def test_a_case_a_lead_retired_meanwhile_stays_as_the_lead_left_it() -> None:
    retired = suspect_case().retire(by="lead-bo", reason="duplicate of case-7", at=T0)
    for outcome in RevalidationOutcome:
        case, settled = settle_case(retired, link(), outcome, at=T1)
        assert case == retired and settled.outcome is outcome


def test_a_retired_case_is_not_confirmed() -> None:
    with pytest.raises(Conflict):
        suspect_case().retire(by="lead", reason="x", at=T0).confirm()


def test_a_revalidation_round_takes_neither_candidates_nor_captures() -> None:
    round_ = Round(
        name="re-validation", task_type="sentiment", model_dir="", model_name="", model_hash="",
        labels=["positive", "negative", "neutral"], policy={}, id=12, kind=RoundKind.REVALIDATION,
    )  # fmt: skip
    assert not round_.has_model
    for check in (round_.check_takes_candidates, round_.check_takes_captures):
        with pytest.raises(Conflict, match="revalidation round") as refused:
            check()
        assert refused.value.field == "round_id"
