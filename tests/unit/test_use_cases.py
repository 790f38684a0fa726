"""The use cases on fakes of our own ports: overrides, exclusions, the gold rule, escalation and the
push's backoff, in milliseconds. The same use cases run on SQLite, PostgreSQL and a real Label
Studio in the integration and end-to-end tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dynaval.domain.errors import Conflict, NotFound
from dynaval.domain.provenance import pseudonym
from dynaval.domain.validation.candidate import Candidate, CandidateStatus
from dynaval.domain.validation.gold import DecidedBy, GoldAnswer, GoldItem
from dynaval.domain.validation.policy import DecisionPolicy
from dynaval.domain.validation.round import Round, RoundState
from dynaval.domain.validation.votes import AnnotationRecord
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation import annotator_exclusion, overrides, pushing, rounds
from tests.unit.fakes import FakeLabelStudio, FakeRounds, FakeStore, fake_services

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
POS, NEG = "positive", "negative"


def a_round(store: FakeStore, **policy: object) -> int:
    round_ = Round(
        id=1,
        name="round",
        task_type="sentiment",
        model_dir="/models/m",
        model_name="m",
        model_hash="sha256:m",
        labels=[POS, NEG, "neutral"],
        policy=DecisionPolicy.from_overrides(dict(policy)).to_dict(),
        label_studio_project_id=77,
    )
    store.rounds[1] = round_
    return 1


def a_candidate(
    store: FakeStore,
    cid: str,
    *,
    status: CandidateStatus = CandidateStatus.IN_VALIDATION,
    task_id: int | None = None,
) -> Candidate:
    candidate = Candidate(
        id=cid,
        round_id=1,
        inputs={"text": f"text of {cid}"},
        writer_label=POS,
        writer_id="writer-ana",
        status=status,
        submitted_at=T0,
        label_studio_task_id=task_id if status is not CandidateStatus.QUEUED else None,
        wanted_votes=2,
        label_studio_overlap=2,
    )
    store.candidates[cid] = candidate
    return candidate


def vote(store: FakeStore, cid: str, annotation_id: int, annotator: str, label: str | None) -> None:
    store.annotations.setdefault(cid, []).append(
        AnnotationRecord(
            annotation_id, annotator, label, False, None, False, T0 + timedelta(seconds=annotation_id)
        )
    )


def decide(services: Services, store: FakeStore, cid: str) -> None:
    """What reading the votes back does: the rule on the stored votes."""
    with services.uow() as uow:
        candidate = uow.candidates.get(cid)
        assert candidate is not None
        candidate.decide(
            uow.candidates.annotations(cid),
            uow.rounds.get(1).policy,
            excluded=uow.annotators.excluded(1),
            cause="t",
            at=T0,
        )
        uow.candidates.save(candidate)
        uow.commit()


# ----------------------------------------------------------------------------------- overrides


def test_an_override_sets_the_outcome_records_it_three_times_and_survives_the_rule() -> None:
    store = FakeStore()
    services = fake_services(store)
    a_round(store)
    a_candidate(store, "c1", task_id=11)
    vote(store, "c1", 1, "101", NEG)
    vote(store, "c1", 2, "102", NEG)
    decide(services, store, "c1")
    assert store.candidates["c1"].status is CandidateStatus.REJECTED

    shown = overrides.override_decision(
        services, candidate_id="c1", outcome="accepted", reason="sarcasm", by="lead-lee"
    )

    stored = store.candidates["c1"]
    assert shown["status"] == "accepted" and shown["override"]["reason"] == "sarcasm"
    assert stored.status is CandidateStatus.ACCEPTED and stored.override is not None
    assert [e.cause for e in store.history["c1"]][-1] == "override"
    assert store.history["c1"][-1].figures["status_before"] == "rejected"
    [event] = store.audit
    assert (event.by, event.status_before, event.status_after) == ("lead-lee", "rejected", "accepted")
    # Later votes are stored, but the rule no longer decides it.
    vote(store, "c1", 3, "103", NEG)
    decide(services, store, "c1")
    assert store.candidates["c1"].status is CandidateStatus.ACCEPTED


def test_an_override_is_refused_before_validation_in_a_frozen_round_and_for_no_candidate() -> None:
    store = FakeStore()
    services = fake_services(store)
    a_round(store)
    a_candidate(store, "queued", status=CandidateStatus.QUEUED)
    with pytest.raises(Conflict, match="queued"):
        overrides.override_decision(
            services, candidate_id="queued", outcome="accepted", reason="x", by="lead"
        )
    with pytest.raises(NotFound):
        overrides.override_decision(
            services, candidate_id="nobody", outcome="accepted", reason="x", by="lead"
        )
    a_candidate(store, "c1", task_id=11)
    store.rounds[1].state = RoundState.FROZEN
    with pytest.raises(Conflict, match="frozen") as frozen:
        overrides.override_decision(services, candidate_id="c1", outcome="accepted", reason="x", by="lead")
    assert frozen.value.field == "candidate_id"
    assert store.commits == 0


# ---------------------------------------------------------------------------------- exclusions


def test_a_lead_excludes_an_annotator_and_every_decision_they_took_part_in_is_made_again() -> None:
    store = FakeStore()
    services = fake_services(store)
    a_round(store)
    for cid in ("c1", "c2"):
        a_candidate(store, cid, task_id=11 if cid == "c1" else 12)
        vote(store, cid, int(cid[1]) * 10 + 1, "101", POS)
        vote(store, cid, int(cid[1]) * 10 + 2, "102", POS)
        decide(services, store, cid)
    assert {c.status for c in store.candidates.values()} == {CandidateStatus.ACCEPTED}
    public_id = pseudonym(services.settings.pseudonym_secret, "annotator", "102")

    answer = annotator_exclusion.set_exclusion_by_lead(
        services, round_id=1, annotator=public_id, excluded=True, reason="votes at random"
    )

    assert answer["decisions_changed"] == 2
    assert {c.status for c in store.candidates.values()} == {CandidateStatus.IN_VALIDATION}
    assert all(c.decision and c.decision["excluded_annotators"] == ["102"] for c in store.candidates.values())
    [event] = store.exclusion_events
    assert (event.annotator, event.excluded, event.decided_by, event.decisions_changed) == (
        "102",
        True,
        DecidedBy.LEAD,
        2,
    )
    assert services.work.escalations == [1]  # type: ignore[attr-defined]
    with pytest.raises(NotFound) as unknown:
        annotator_exclusion.set_exclusion_by_lead(
            services, round_id=1, annotator="annotator_x", excluded=True, reason="x"
        )
    assert unknown.value.field == "annotator"


def test_the_gold_rule_excludes_a_poor_annotator_and_leaves_a_leads_choice_alone() -> None:
    store = FakeStore()
    services = fake_services(store)
    a_round(store, gold_min_items=2, gold_min_accuracy=0.75)
    a_candidate(store, "c1", task_id=11)
    vote(store, "c1", 1, "101", POS)
    vote(store, "c1", 2, "103", POS)
    decide(services, store, "c1")
    for n, label in enumerate((POS, NEG), start=1):
        store.gold[f"g{n}"] = GoldItem(
            id=f"g{n}", round_id=1, inputs={"text": "g"}, label=label, label_studio_task_id=90 + n
        )
        wrong = NEG if label == POS else POS
        store.gold_answers[100 + n] = GoldAnswer(100 + n, f"g{n}", "103", wrong, False, T0)

    changed = annotator_exclusion.apply_gold_rule(services, 1, ["103"])

    assert changed == 1 and store.candidates["c1"].status is CandidateStatus.IN_VALIDATION
    assert store.statuses[(1, "103")].excluded and store.statuses[(1, "103")].decided_by is DecidedBy.GOLD
    # A lead reinstates 103: the rule leaves them to the lead from now on.
    public_id = pseudonym(services.settings.pseudonym_secret, "annotator", "103")
    annotator_exclusion.set_exclusion_by_lead(
        services, round_id=1, annotator=public_id, excluded=False, reason="ok"
    )
    assert annotator_exclusion.apply_gold_rule(services, 1, ["103"]) == 0
    assert not store.statuses[(1, "103")].excluded


# ---------------------------------------------------------------------------------- escalation


def test_escalation_asks_label_studio_for_one_more_vote_only_where_one_is_wanted() -> None:
    store = FakeStore()
    label_studio = FakeLabelStudio()
    services = fake_services(store, label_studio)
    a_round(store)
    a_candidate(store, "split", task_id=21)
    vote(store, "split", 1, "101", POS)
    vote(store, "split", 2, "102", NEG)
    a_candidate(store, "agreed", task_id=22)
    vote(store, "agreed", 3, "101", POS)
    vote(store, "agreed", 4, "102", POS)
    for cid in ("split", "agreed"):
        decide(services, store, cid)
    assert store.candidates["split"].status is CandidateStatus.ESCALATED

    assert pushing.apply_escalations(services, 1) == 1

    assert label_studio.overlaps == {21: (3, False)}  # 2 voters of 3 wanted: not labelled yet
    assert store.candidates["split"].label_studio_overlap == 3
    assert pushing.apply_escalations(services, 1) == 0  # asked once


# ---------------------------------------------------------------------------------------- push


def test_a_failed_push_backs_off_and_a_success_clears_the_backoff() -> None:
    store = FakeStore()
    label_studio = FakeLabelStudio(down=True)
    services = fake_services(store, label_studio, push_retry_base_s=30.0, push_retry_max_s=120.0)
    a_round(store, gold_rate=0)
    a_candidate(store, "c1", status=CandidateStatus.QUEUED)

    with pytest.raises(Exception, match="could not be reached"):
        pushing.push_pending(services, 1)
    round_ = store.rounds[1]
    assert round_.push_failures == 1 and round_.push_retry_at is not None
    assert store.candidates["c1"].status is CandidateStatus.QUEUED
    assert store.candidates["c1"].push_attempted_at is not None  # looked up before any retry

    label_studio.down = False
    assert pushing.push_pending(services, 1) == 0  # still waiting out the backoff
    assert pushing.push_pending(services, 1, force=True) == 1  # a lead's sync tries at once
    pushed = store.candidates["c1"]
    assert (
        pushed.status is CandidateStatus.IN_VALIDATION
        and pushed.label_studio_task_id == label_studio.tasks["c1"]
    )
    assert [e.cause for e in store.history["c1"]] == ["pushed"]
    assert store.rounds[1].push_failures == 0 and store.rounds[1].push_retry_at is None


def test_a_retried_push_adopts_the_task_an_earlier_attempt_created() -> None:
    store = FakeStore()
    label_studio = FakeLabelStudio()
    services = fake_services(store, label_studio)
    a_round(store, gold_rate=0)
    candidate = a_candidate(store, "c1", status=CandidateStatus.QUEUED)
    candidate.push_attempted_at = T0
    label_studio.tasks["c1"] = 4242  # created, but its id never came back

    assert pushing.push_pending(services, 1, force=True) == 1
    assert label_studio.imports == 0
    assert store.candidates["c1"].label_studio_task_id == 4242


def test_a_candidate_queued_while_the_push_ends_is_pushed_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its own push request came while the lease was still held and gave up: the holder, once it
    has released the lease, looks again instead of leaving it to the minute's sweep."""
    store = FakeStore()
    label_studio = FakeLabelStudio()
    services = fake_services(store, label_studio)
    a_round(store, gold_rate=0)
    a_candidate(store, "c1", status=CandidateStatus.QUEUED)
    release = FakeRounds.release_push_lease

    def arrives_before_release(self: FakeRounds, round_id: int, lease: datetime) -> None:
        if "c2" not in store.candidates:
            a_candidate(store, "c2", status=CandidateStatus.QUEUED)
            self.store.candidates["c2"] = store.candidates["c2"]  # this fake unit of work commits a copy
            assert pushing.push_pending(services, 1) == 0  # its push request: the lease is taken
        release(self, round_id, lease)

    monkeypatch.setattr(FakeRounds, "release_push_lease", arrives_before_release)
    assert pushing.push_pending(services, 1) == 2
    assert all(store.candidates[c].status is CandidateStatus.IN_VALIDATION for c in ("c1", "c2"))


def test_push_backoff_doubles_and_is_capped() -> None:
    settings = fake_services(FakeStore(), push_retry_base_s=2.0, push_retry_max_s=120.0).settings
    assert [pushing.push_backoff_s(settings, n) for n in (0, 1, 2, 3, 7, 8, 40)] == [
        0,
        2,
        4,
        8,
        120,
        120,
        120,
    ]


# ---------------------------------------------------------------------------------------- rounds


def test_a_round_closes_once_and_then_takes_no_candidate() -> None:
    store = FakeStore()
    services = fake_services(store)
    a_round(store)
    closed = rounds.close_round(services, 1)
    assert closed.state is RoundState.CLOSED and store.rounds[1].closed_at is not None
    with pytest.raises(Conflict, match="already closed"):
        rounds.close_round(services, 1)
    with pytest.raises(Conflict, match="takes no candidates"):
        store.rounds[1].check_takes_candidates()
    with pytest.raises(NotFound):
        rounds.close_round(services, 2)
