"""Capture rounds and captures in the domain: which round takes what, and a capture decided by the
rule with its reported label in the writer's label's place."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dynaval.domain.errors import Conflict, InvalidInput
from dynaval.domain.validation.candidate import CandidateStatus
from dynaval.domain.validation.capture import CaptureSource, reported_candidate
from dynaval.domain.validation.policy import DecisionPolicy
from dynaval.domain.validation.round import Round, RoundKind
from dynaval.domain.validation.votes import AnnotationRecord
from dynaval.service_layer.validation import captures
from dynaval.service_layer.validation.candidates import GivenInputs
from tests.unit.fakes import FakeStore, fake_services

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
LABELS = ["positive", "negative", "neutral"]


def a_round(kind: RoundKind) -> Round:
    return Round(
        name="r", task_type="sentiment", model_dir="", model_name="", model_hash="",
        labels=LABELS, policy=DecisionPolicy().to_dict(), id=7, kind=kind,
    )  # fmt: skip


def test_a_capture_round_takes_captures_and_no_candidates() -> None:
    capture_round = a_round(RoundKind.CAPTURE)
    capture_round.check_takes_captures()
    assert not capture_round.has_model
    with pytest.raises(Conflict, match="capture round: it has no model") as refused:
        capture_round.check_takes_candidates()
    assert refused.value.field == "round_id"


def test_an_adversarial_round_takes_candidates_and_no_captures() -> None:
    adversarial = a_round(RoundKind.ADVERSARIAL)
    adversarial.check_takes_candidates()
    assert adversarial.has_model
    with pytest.raises(Conflict, match="takes writers' candidates, not captures"):
        adversarial.check_takes_captures()


def test_a_closed_capture_round_takes_no_captures() -> None:
    capture_round = a_round(RoundKind.CAPTURE)
    capture_round.close(T0)
    with pytest.raises(Conflict, match="is closed and takes no captures"):
        capture_round.check_takes_captures()


def vote(annotation_id: int, annotator: str, label: str) -> AnnotationRecord:
    return AnnotationRecord(
        annotation_id=annotation_id, annotator=annotator, label=label, flagged=False, reason=None,
        was_cancelled=False, updated_at=T0 + timedelta(minutes=annotation_id),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("labels", "outcome"),
    [(["negative", "negative"], "accepted"), (["positive", "positive"], "rejected"),
     (["negative", "positive"], "escalated")],
)  # fmt: skip
def test_a_capture_is_decided_by_the_rule_on_its_reported_label(labels: list[str], outcome: str) -> None:
    capture = reported_candidate(
        candidate_id="c1", round_id=7, inputs={"text": "Slow refund."}, reported_label="negative",
        reporter="canary-bot", at=T0,
    )  # fmt: skip
    # Queued for Label Studio at once: no model scores it, and it counts as a reported failure.
    assert capture.status is CandidateStatus.QUEUED and capture.fooled is True
    assert capture.model_prediction is None and capture.writer_id == capture.submitted_by == "canary-bot"
    capture.enter_validation(task_id=11, overlap=2, at=T0)
    policy = DecisionPolicy().to_dict()
    records = [vote(i, f"ann-{i}", label) for i, label in enumerate(labels, start=1)]
    capture.decide(records, policy, excluded=frozenset(), cause="test", at=T0)
    assert capture.status.value == outcome


def test_the_reporters_own_vote_never_counts() -> None:
    capture = reported_candidate(
        candidate_id="c1", round_id=7, inputs={"text": "Slow refund."}, reported_label="negative",
        reporter="desk", at=T0,
    )  # fmt: skip
    capture.enter_validation(task_id=11, overlap=2, at=T0)
    records = [vote(1, "ls-desk", "negative"), vote(2, "ann-2", "negative")]
    capture.decide(
        records, DecisionPolicy().to_dict(), excluded=frozenset(), cause="test", at=T0,
        writer_annotators={"desk": "ls-desk"},
    )  # fmt: skip
    assert capture.status is CandidateStatus.IN_VALIDATION  # one counted vote of two


def new_capture(text: str, label: str, reference: str | None = None) -> captures.NewCapture:
    return captures.NewCapture(
        inputs=GivenInputs({"text": text}), observed_output="positive", reported_label=label,
        source=CaptureSource.CANARY, model_name="prod", model_version="3", observed_at=T0,
        reference=reference,
    )  # fmt: skip


def test_reported_captures_are_queued_for_label_studio_with_their_provenance_and_no_model() -> None:
    store = FakeStore()
    store.rounds[7] = a_round(RoundKind.CAPTURE)
    services = fake_services(store)  # its model registry fails any load: none happens
    made = captures.report_captures(
        services,
        round_id=7,
        captures=[new_capture("Slow refund.", "negative", "T-1"), new_capture("Fine.", "neutral")],
        reporter="canary-bot",
        batch=True,
    )
    assert [store.candidates[c.id].status for c in made] == [CandidateStatus.QUEUED] * 2
    assert store.captures[made[0].id].reference == "T-1"
    assert store.captures[made[0].id].reporter == "canary-bot"
    assert services.work.pushes == [7]  # type: ignore[attr-defined]
    with pytest.raises(Conflict, match=f"already reported in round 7: capture {made[0].id}") as refused:
        captures.report_captures(
            services,
            round_id=7,
            captures=[new_capture("Again.", "negative", "T-1")],
            reporter="x",
            batch=False,
        )
    assert refused.value.field == "reference"
    with pytest.raises(InvalidInput, match="reported_label must be one of") as bad:
        captures.report_captures(
            services, round_id=7, captures=[new_capture("Ok.", "angry")], reporter="x", batch=True
        )
    assert bad.value.field == "captures[0].reported_label"
    assert len(store.candidates) == 2  # nothing of a refused report was stored
