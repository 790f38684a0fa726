"""Freezing a round, on fakes of our own ports: the freeze's rules (open, waiting, forced with a
reason), and what a frozen round does with what Label Studio still sends (stored late, decides
nothing). The same use cases run on a real Label Studio in ``tests/e2e/test_freeze.py``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dynaval.adapters.label_studio import ExportedTask, ParsedAnnotation
from dynaval.domain.errors import Conflict, InvalidInput
from dynaval.domain.validation.candidate import CandidateStatus
from dynaval.domain.validation.round import RoundState
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation import annotator_exclusion, gold, overrides, pushing, rounds
from dynaval.service_layer.validation import vote_reading as verification
from dynaval.service_layer.validation.candidates import GivenInputs
from tests.unit.fakes import FakeLabelStudio, FakeStore, fake_services
from tests.unit.test_use_cases import NEG, POS, T0, a_candidate, a_round, decide, vote


def closed_round(store: FakeStore) -> None:
    a_round(store)
    store.rounds[1].state = RoundState.CLOSED
    store.rounds[1].closed_at = T0


def decided(services: Services, store: FakeStore, cid: str, task_id: int, label: str) -> None:
    a_candidate(store, cid, task_id=task_id)
    vote(store, cid, task_id * 10 + 1, "101", label)
    vote(store, cid, task_id * 10 + 2, "102", label)
    decide(services, store, cid)


def test_an_open_round_is_closed_before_it_is_frozen_and_a_frozen_one_is_not_frozen_again() -> None:
    store = FakeStore()
    services = fake_services(store)
    a_round(store)
    with pytest.raises(Conflict, match="close it before freezing"):
        rounds.freeze_round(services, 1, by="lead")
    assert store.rounds[1].state is RoundState.OPEN

    store.rounds[1].state = RoundState.CLOSED
    frozen = rounds.freeze_round(services, 1, by="lead")
    assert frozen.unvalidated == 0 and frozen.round.frozen_at is not None
    assert store.rounds[1].state is RoundState.FROZEN
    with pytest.raises(Conflict, match="already frozen"):
        rounds.freeze_round(services, 1, by="lead")
    assert store.leases[1] is None  # the push lease it held is given back


@pytest.mark.parametrize(
    "status", [CandidateStatus.IN_VALIDATION, CandidateStatus.ESCALATED, CandidateStatus.QUEUED]
)
def test_a_round_with_a_candidate_still_waiting_is_not_frozen_without_force(status: CandidateStatus) -> None:
    store = FakeStore()
    services = fake_services(store)
    closed_round(store)
    decided(services, store, "done", 11, POS)
    a_candidate(store, "waiting", status=status, task_id=12)
    with pytest.raises(Conflict, match="has 1 candidate still waiting") as refused:
        rounds.freeze_round(services, 1, by="lead")
    assert refused.value.field == "force"
    assert store.rounds[1].state is RoundState.CLOSED
    assert store.candidates["waiting"].status is status


def test_a_forced_freeze_needs_a_reason() -> None:
    store = FakeStore()
    services = fake_services(store)
    closed_round(store)
    a_candidate(store, "waiting", task_id=12)
    for reason in (None, "", "   "):
        with pytest.raises(InvalidInput, match="reason is required") as refused:
            rounds.freeze_round(services, 1, by="lead", force=True, reason=reason)
        assert refused.value.field == "reason"
    assert store.rounds[1].state is RoundState.CLOSED and not store.audit


def test_a_forced_freeze_leaves_the_waiting_candidates_unvalidated_and_logs_who_and_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FakeStore()
    services = fake_services(store)
    closed_round(store)
    decided(services, store, "done", 11, POS)
    a_candidate(store, "waiting", task_id=12)
    a_candidate(store, "more", status=CandidateStatus.ESCALATED, task_id=13)
    a_candidate(store, "queued", status=CandidateStatus.QUEUED)

    frozen = rounds.freeze_round(services, 1, by="lead-lee", force=True, reason="release deadline")

    assert frozen.unvalidated == 3 and frozen.round.state is RoundState.FROZEN
    assert store.candidates["done"].status is CandidateStatus.ACCEPTED
    for cid, before in (("waiting", "in_validation"), ("more", "escalated"), ("queued", "queued")):
        candidate = store.candidates[cid]
        assert candidate.status is CandidateStatus.UNVALIDATED
        assert (
            candidate.wanted_votes <= candidate.label_studio_overlap and not candidate.wants_more_annotations
        )
        entry = store.history[cid][-1]
        assert (entry.cause, entry.figures["by"], entry.figures["status_before"]) == (
            "forced-freeze",
            "lead-lee",
            before,
        )
    events = {e.candidate_id: e for e in store.audit}
    assert set(events) == {"waiting", "more", "queued"}
    assert {(e.action, e.by, e.reason, e.status_after) for e in events.values()} == {
        ("forced-freeze", "lead-lee", "release deadline", "unvalidated")
    }
    assert (
        "frozen by force by lead-lee, 3 candidate(s) left unvalidated; reason: release deadline"
        in caplog.text
    )
    # Unvalidated is not accepted: the round counts it apart.
    assert store.candidates["waiting"].status.value not in ("accepted", "rejected")


def test_a_freeze_waits_for_a_push_under_way() -> None:
    store = FakeStore()
    services = fake_services(store)
    closed_round(store)
    store.leases[1] = datetime.now(UTC) + timedelta(minutes=1)
    with pytest.raises(Conflict, match="being pushed"):
        rounds.freeze_round(services, 1, by="lead")
    assert store.rounds[1].state is RoundState.CLOSED


def frozen_round_with_a_decision(label_studio: FakeLabelStudio) -> tuple[Services, FakeStore]:
    store = FakeStore()
    services = fake_services(store, label_studio)
    closed_round(store)
    decided(services, store, "c1", 11, POS)
    assert store.candidates["c1"].status is CandidateStatus.ACCEPTED
    rounds.freeze_round(services, 1, by="lead")
    return services, store


def parsed(annotation_id: int, annotator: str, label: str, at: datetime) -> ParsedAnnotation:
    return ParsedAnnotation(annotation_id, 11, annotator, label, False, None, False, 2.0, at, at)


def test_annotations_read_after_the_freeze_are_stored_late_and_change_no_decision() -> None:
    label_studio = FakeLabelStudio()
    services, store = frozen_round_with_a_decision(label_studio)
    before = store.candidates["c1"]
    later = T0 + timedelta(hours=1)
    # Label Studio now has a new annotation against the writer; one vote changed, the other is gone.
    label_studio.exported = [
        ExportedTask(
            11,
            "c1",
            [
                parsed(111, "101", NEG, later),
                parsed(113, "103", NEG, later),
            ],
        )
    ]

    report = verification.reconcile_round(services, 1)

    assert (report.late, report.frozen_kept, report.decisions_changed) == (1, 2, 0)
    after = store.candidates["c1"]
    assert (after.status, after.decision, after.version) == (before.status, before.decision, before.version)
    by_id = {a.annotation_id: a for a in store.annotations["c1"]}
    assert by_id[113].late and by_id[113].label == NEG
    # The record the decision rests on is kept as it was.
    assert not by_id[111].late and by_id[111].label == POS and not by_id[112].late
    assert services.work.escalations == []  # type: ignore[attr-defined]


def test_a_late_annotation_follows_label_studio_but_a_frozen_one_is_never_removed() -> None:
    label_studio = FakeLabelStudio()
    services, store = frozen_round_with_a_decision(label_studio)
    later = T0 + timedelta(hours=1)
    label_studio.exported = [ExportedTask(11, "c1", [parsed(113, "103", NEG, later)])]
    verification.reconcile_round(services, 1)
    label_studio.exported = [ExportedTask(11, "c1", [parsed(113, "103", POS, later + timedelta(1))])]
    verification.reconcile_round(services, 1)
    label_studio.exported = [ExportedTask(11, "c1", [])]

    report = verification.reconcile_round(services, 1)

    assert (report.deleted, report.frozen_kept) == (1, 2)
    assert sorted(a.annotation_id for a in store.annotations["c1"]) == [111, 112]
    assert store.candidates["c1"].status is CandidateStatus.ACCEPTED


def test_a_webhook_read_of_a_frozen_round_stores_late_too() -> None:
    label_studio = FakeLabelStudio()
    services, store = frozen_round_with_a_decision(label_studio)
    label_studio.exported = [ExportedTask(11, "c1", [parsed(113, "103", NEG, T0 + timedelta(hours=1))])]
    store.task_checks[(1, 11)] = datetime.now(UTC) - timedelta(seconds=1)

    report = verification.verify_round(services, 1)

    assert report.late == 1 and not store.task_checks
    assert [a.late for a in store.annotations["c1"] if a.annotation_id == 113] == [True]
    assert store.candidates["c1"].status is CandidateStatus.ACCEPTED


def test_nothing_changes_a_frozen_rounds_decisions() -> None:
    label_studio = FakeLabelStudio()
    services, store = frozen_round_with_a_decision(label_studio)
    with pytest.raises(Conflict, match="frozen"):
        overrides.override_decision(services, candidate_id="c1", outcome="rejected", reason="x", by="lead")
    with pytest.raises(Conflict, match="frozen"):
        annotator_exclusion.set_exclusion_by_lead(
            services, round_id=1, annotator="whoever", excluded=True, reason="x"
        )
    assert annotator_exclusion.apply_gold_rule(services, 1, ["101"]) == 0
    gold_before = dict(store.gold)
    with pytest.raises(Conflict, match="frozen") as no_gold:
        gold.add_gold_items(
            services, round_id=1, items=[gold.NewGoldItem(GivenInputs({"text": "Lovely."}), label=POS)]
        )
    assert no_gold.value.field == "round_id" and store.gold == gold_before
    # Neither a push nor an escalation goes to Label Studio.
    store.candidates["c1"].wanted_votes = 3
    store.candidates["c1"].status = CandidateStatus.ESCALATED
    assert pushing.apply_escalations(services, 1) == 0
    a_candidate(store, "queued", status=CandidateStatus.QUEUED)
    assert pushing.push_pending(services, 1, force=True) == 0
    assert label_studio.overlaps == {} and label_studio.imports == 0
