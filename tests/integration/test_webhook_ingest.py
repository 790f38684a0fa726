"""The webhook path on a real SQLite file and a real PostgreSQL database.

Candidates are written straight into the database with Label Studio task ids, and payloads in Label
Studio's webhook shape go through :func:`dynaval.service_layer.votes.ingest_webhook`: created,
updated, repeated, late, foreign and deleted annotations, an overridden candidate and an excluded
annotator. (The same path against a real Label Studio runs in the end-to-end tests.)
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlmodel import col, select

from dynaval.adapters.label_studio import ExportedTask, ParsedAnnotation, parse_annotation
from dynaval.adapters.orm import (
    AnnotationRow,
    AnnotatorStatusRow,
    CandidateRow,
    DecisionRow,
    DeletedAnnotationRow,
    RoundRow,
)
from dynaval.domain.errors import InvalidInput, NotFound
from dynaval.domain.votes import current_ballots
from dynaval.service_layer.decisions import annotation_records_of
from dynaval.service_layer.services import Services
from dynaval.service_layer.votes import ingest_webhook, reconcile_round

PROJECT = 4242
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def add_round(services: Services, project_id: int = PROJECT) -> int:
    with services.database.unit_of_work() as session:
        row = RoundRow(
            name=f"round for project {project_id}",
            task_type="sentiment",
            model_dir="/models/x",
            model_name="x",
            model_hash="sha256:0",
            labels=["positive", "negative", "neutral"],
            policy={"min_votes": 3, "max_votes": 5},
            label_studio_project_id=project_id,
        )
        session.add(row)
        session.commit()
        assert row.id is not None
        return row.id


def add_candidate(services: Services, round_id: int, task_id: int, **fields: Any) -> str:
    with services.database.unit_of_work() as session:
        row = CandidateRow(
            id=str(uuid.uuid4()),
            round_id=round_id,
            inputs={"text": "the soup was cold"},
            writer_label="negative",
            writer_id="writer-1",
            status="in_validation",
            label_studio_task_id=task_id,
            wanted_votes=3,
            label_studio_overlap=3,
            **fields,
        )
        session.add(row)
        session.commit()
        return row.id


def annotation_payload(
    annotation_id: int,
    task_id: int,
    annotator: int,
    label: str | None,
    *,
    updated: datetime = T0,
    action: str = "ANNOTATION_CREATED",
    project_id: int = PROJECT,
    flag_reason: str | None = None,
    was_cancelled: bool = False,
) -> dict[str, Any]:
    result: list[dict[str, Any]] = []
    if label is not None:
        result.append(
            {"from_name": "label", "to_name": "text", "type": "choices", "value": {"choices": [label]}}
        )
    if flag_reason is not None:
        result.append(
            {"from_name": "flag", "to_name": "text", "type": "choices", "value": {"choices": ["flag"]}}
        )
        result.append(
            {
                "from_name": "flag_reason",
                "to_name": "text",
                "type": "textarea",
                "value": {"text": [flag_reason]},
            }
        )
    return {
        "action": action,
        "project": {"id": project_id, "token": "project-token-never-stored"},
        "task": {"id": task_id},
        "annotation": {
            "id": annotation_id,
            "task": task_id,
            "completed_by": annotator,
            "result": result,
            "was_cancelled": was_cancelled,
            "lead_time": 4.5,
            "created_at": T0.isoformat(),
            "updated_at": updated.isoformat(),
        },
    }


def candidate_state(
    services: Services, candidate_id: str
) -> tuple[str, int, list[tuple[int, str, str | None]]]:
    with services.database.unit_of_work() as session:
        row = session.get(CandidateRow, candidate_id)
        assert row is not None
        votes = session.exec(
            select(AnnotationRow)
            .where(AnnotationRow.candidate_id == candidate_id)
            .order_by(col(AnnotationRow.id))
        ).all()
        history = session.exec(select(DecisionRow).where(DecisionRow.candidate_id == candidate_id)).all()
        return row.status, len(history), [(v.id, v.annotator_id, v.label) for v in votes]


def test_votes_decide_and_every_change_is_recorded_once(services: Services) -> None:
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=11)
    ingest_webhook(services, annotation_payload(1, 11, 101, "negative"))
    ingest_webhook(services, annotation_payload(2, 11, 102, "negative"))
    assert candidate_state(services, candidate_id)[0] == "in_validation"
    result = ingest_webhook(services, annotation_payload(3, 11, 103, "negative"))
    assert result.candidates_changed == 1
    status, decisions, votes = candidate_state(services, candidate_id)
    assert status == "accepted"
    assert votes == [(1, "101", "negative"), (2, "102", "negative"), (3, "103", "negative")]
    with services.database.unit_of_work() as session:
        candidate = session.get(CandidateRow, candidate_id)
        assert candidate is not None
        assert candidate.decision is not None
        assert candidate.decision["rule_version"] == "dynaval-majority/1"
        assert [b["annotator"] for b in candidate.decision["ballots"]] == ["101", "102", "103"]
        assert candidate.decided_at is not None
        history = session.exec(select(DecisionRow).where(DecisionRow.candidate_id == candidate_id)).all()
        # Every vote changed the recorded ballots, so each is in the history, with its cause.
        assert [h.outcome for h in history] == ["in_validation", "in_validation", "accepted"]
        assert [len(h.ballots) for h in history] == [1, 2, 3]
        assert {h.cause for h in history} == {"webhook"}
        assert candidate.version == 3
        stored = session.get(AnnotationRow, 3)
        assert stored is not None and stored.lead_time_s == 4.5 and stored.source == "webhook"
    assert decisions == 3


def test_a_newer_update_flips_the_decision_and_older_or_repeated_copies_change_nothing(
    services: Services,
) -> None:
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=21)
    for annotation_id, annotator in ((1, 101), (2, 102), (3, 103)):
        ingest_webhook(services, annotation_payload(annotation_id, 21, annotator, "negative"))
    assert candidate_state(services, candidate_id)[:2] == ("accepted", 3)
    late = T0 + timedelta(minutes=5)
    changed = annotation_payload(3, 21, 103, "positive", updated=late, action="ANNOTATION_UPDATED")
    assert ingest_webhook(services, changed).candidates_changed == 1
    after_change = candidate_state(services, candidate_id)
    assert after_change[0] == "escalated"  # 2 of 3 agree: one more vote is asked for
    assert after_change[2][2] == (3, "103", "positive")
    # The same update again, and the original (older) copy arriving late: nothing changes.
    assert ingest_webhook(services, changed).candidates_changed == 0
    assert ingest_webhook(services, annotation_payload(3, 21, 103, "negative")).candidates_changed == 0
    assert candidate_state(services, candidate_id) == after_change
    with services.database.unit_of_work() as session:
        row = session.get(AnnotationRow, 3)
        assert row is not None
        assert row.label == "positive"


def test_a_foreign_annotation_id_is_refused_and_nothing_is_written(services: Services) -> None:
    round_id = add_round(services)
    first = add_candidate(services, round_id, task_id=31)
    second = add_candidate(services, round_id, task_id=32)
    ingest_webhook(services, annotation_payload(7, 31, 101, "negative"))
    before = (candidate_state(services, first), candidate_state(services, second))
    with pytest.raises(InvalidInput) as raised:
        ingest_webhook(services, annotation_payload(7, 32, 102, "positive", updated=T0 + timedelta(hours=1)))
    assert raised.value.field == "annotation.id"
    assert (candidate_state(services, first), candidate_state(services, second)) == before


def test_unknown_project_and_another_rounds_task_are_refused(services: Services) -> None:
    round_id = add_round(services)
    other_round = add_round(services, project_id=PROJECT + 1)
    add_candidate(services, round_id, task_id=41)
    other = add_candidate(services, other_round, task_id=42)
    with pytest.raises(NotFound) as unknown:
        ingest_webhook(services, annotation_payload(1, 41, 101, "negative", project_id=999_999))
    assert unknown.value.field == "project.id"
    with pytest.raises(NotFound) as foreign:
        ingest_webhook(services, annotation_payload(2, 42, 101, "negative"))  # task 42 is the other round's
    assert foreign.value.field == "annotation.task"
    assert candidate_state(services, other)[2] == []
    with services.database.unit_of_work() as session:
        assert session.exec(select(AnnotationRow)).all() == []


@pytest.mark.parametrize(
    ("payload_change", "field"),
    [
        ({"project": {"id": 2**70}}, "project.id"),
        ({"project": {"id": True}}, "project.id"),
        ({"annotation": {"id": 2**64, "task": 51, "completed_by": 1}}, "annotation"),
        ({"annotation": {"id": 5, "task": 51, "completed_by": 1, "updated_at": "yesterday"}}, "annotation"),
        ({"annotation": {"id": 5, "task": 51, "completed_by": 1, "result": "positive"}}, "annotation"),
        ({"action": "ANNOTATIONS_DELETED", "annotations": [{"id": -3}]}, "annotations"),
    ],
)
def test_malformed_payloads_name_the_field_and_write_nothing(
    services: Services, payload_change: dict[str, Any], field: str
) -> None:
    round_id = add_round(services)
    add_candidate(services, round_id, task_id=51)
    payload = {**annotation_payload(5, 51, 101, "negative"), **payload_change}
    with pytest.raises(InvalidInput) as raised:
        ingest_webhook(services, payload)
    assert raised.value.field == field
    with services.database.unit_of_work() as session:
        assert session.exec(select(AnnotationRow)).all() == []


def test_an_overridden_candidate_keeps_the_leads_outcome(services: Services) -> None:
    round_id = add_round(services)
    candidate_id = add_candidate(
        services,
        round_id,
        task_id=61,
        override_outcome="rejected",
        override_reason="off topic",
        override_by="lead",
    )
    for annotation_id, annotator in ((1, 101), (2, 102), (3, 103)):
        ingest_webhook(services, annotation_payload(annotation_id, 61, annotator, "negative"))
    status, decisions, votes = candidate_state(services, candidate_id)
    assert (status, decisions, len(votes)) == ("in_validation", 0, 3)


def test_an_excluded_annotators_vote_is_stored_but_not_counted(services: Services) -> None:
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=71)
    with services.database.unit_of_work() as session:
        session.add(
            AnnotatorStatusRow(
                round_id=round_id, annotator_id="103", excluded=True, decided_by="lead", reason="test"
            )
        )
        session.commit()
    for annotation_id, annotator in ((1, 101), (2, 102), (3, 103)):
        ingest_webhook(services, annotation_payload(annotation_id, 71, annotator, "negative"))
    status, _decisions, votes = candidate_state(services, candidate_id)
    assert status == "in_validation" and len(votes) == 3
    with services.database.unit_of_work() as session:
        candidate = session.get(CandidateRow, candidate_id)
        assert candidate is not None and candidate.decision is not None
        assert candidate.decision["excluded_annotators"] == ["103"]
        assert candidate.wanted_votes == 4  # the excluded vote fills a Label Studio slot
    ingest_webhook(services, annotation_payload(4, 71, 104, "negative"))
    assert candidate_state(services, candidate_id)[0] == "accepted"


def test_flags_cancelled_and_deleted_annotations(services: Services) -> None:
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=81)
    ingest_webhook(services, annotation_payload(1, 81, 101, "negative"))
    ingest_webhook(services, annotation_payload(2, 81, 102, None, was_cancelled=True))
    assert candidate_state(services, candidate_id)[0] == "in_validation"
    ingest_webhook(services, annotation_payload(3, 81, 103, None, flag_reason="not English"))
    assert candidate_state(services, candidate_id)[0] == "in_validation"  # one flag of the two needed
    ingest_webhook(services, annotation_payload(4, 81, 104, None, flag_reason="spam"))
    assert candidate_state(services, candidate_id)[0] == "flagged"
    with services.database.unit_of_work() as session:
        row = session.get(AnnotationRow, 3)
        assert row is not None and row.flagged and row.flag_reason == "not English"
    deleted = {"action": "ANNOTATIONS_DELETED", "project": {"id": PROJECT}, "annotations": [{"id": 3}]}
    assert ingest_webhook(services, deleted).candidates_changed == 1
    status, _decisions, votes = candidate_state(services, candidate_id)
    assert status == "in_validation"
    assert [v[0] for v in votes] == [1, 2, 4]


def test_only_each_annotators_latest_counting_annotation_is_their_vote(services: Services) -> None:
    """An annotator who annotated a task several times votes once: with their latest annotation
    that counts (not cancelled, not empty); a tie in time goes to the higher annotation id. The
    database picks it; the result must be the domain rule's over every stored annotation."""
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=85)
    at = [T0 + timedelta(minutes=m) for m in range(6)]
    stream = [
        annotation_payload(1, 85, 101, "positive", updated=at[0]),
        annotation_payload(2, 85, 101, "negative", updated=at[1]),
        annotation_payload(3, 85, 101, None, updated=at[2], was_cancelled=True),  # skipped: not a vote
        annotation_payload(4, 85, 102, "positive", updated=at[3]),
        annotation_payload(5, 85, 102, "negative", updated=at[3]),  # same time, higher id: this one
        annotation_payload(6, 85, 103, "positive", updated=at[4]),
        annotation_payload(7, 85, 103, None, updated=at[5]),  # empty: not a vote
    ]
    for payload in stream:
        ingest_webhook(services, payload)
    with services.database.unit_of_work() as session:
        candidate = session.get(CandidateRow, candidate_id)
        assert candidate is not None and candidate.decision is not None
        stored = session.exec(select(AnnotationRow).where(AnnotationRow.candidate_id == candidate_id)).all()
        expected = [
            {"annotator": b.annotator, "label": b.label, "flagged": b.flagged, "reason": b.reason}
            for b in current_ballots(annotation_records_of(stored))
        ]
    assert len(stored) == 7
    assert candidate.decision["ballots"] == expected
    assert [(b["annotator"], b["label"]) for b in expected] == [
        ("101", "negative"),
        ("102", "negative"),
        ("103", "positive"),
    ]
    assert candidate.status == "escalated"  # 2 of 3 agree with the writer: one more vote is wanted


@dataclass
class RecordedWork:
    """The work queue port, recording what the webhook path asks for."""

    escalations: list[int] = field(default_factory=list)

    def push_soon(self, round_id: int) -> None:
        pass

    def escalate_soon(self, round_id: int) -> None:
        self.escalations.append(round_id)


def test_only_a_candidate_waiting_for_votes_asks_label_studio_for_more(services: Services) -> None:
    """A decided candidate that gets more annotations than its task asked for (Label Studio does not
    stop annotators at the overlap) needs nothing from Label Studio; an escalated one does."""
    services.work = work = RecordedWork()
    round_id = add_round(services)  # 3 votes first, up to 5
    candidate_id = add_candidate(services, round_id, task_id=87)  # overlap 3
    for annotation_id, annotator in ((1, 101), (2, 102), (3, 103)):
        ingest_webhook(services, annotation_payload(annotation_id, 87, annotator, "negative"))
    assert candidate_state(services, candidate_id)[0] == "accepted"
    assert ingest_webhook(services, annotation_payload(4, 87, 104, "negative")).candidates_changed == 1
    assert candidate_state(services, candidate_id)[0] == "accepted"  # 4 of 4: still accepted
    assert work.escalations == []
    # One of them changes their mind: 3 of 4 is short of unanimity, a fifth vote is wanted.
    changed = annotation_payload(4, 87, 104, "positive", updated=T0 + timedelta(minutes=1))
    assert ingest_webhook(services, changed).candidates_changed == 1
    assert candidate_state(services, candidate_id)[0] == "escalated"
    assert work.escalations == [round_id]


def test_time_zones_are_compared_as_instants(services: Services) -> None:
    """An update stamped in another zone is newer or older by its instant, not its digits."""
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=91)
    ingest_webhook(services, annotation_payload(1, 91, 101, "negative", updated=T0))
    plus_two = timezone_offset_hours(2)
    # 13:30 at +02:00 is 11:30 UTC: older than the stored 12:00 UTC copy.
    older = annotation_payload(1, 91, 101, "positive", updated=datetime(2026, 12, 1, 13, 30, tzinfo=plus_two))
    assert ingest_webhook(services, older).candidates_changed == 0
    assert candidate_state(services, candidate_id)[2] == [(1, "101", "negative")]
    # 14:30 at +02:00 is 12:30 UTC: newer.
    newer = annotation_payload(1, 91, 101, "positive", updated=datetime(2026, 12, 1, 14, 30, tzinfo=plus_two))
    ingest_webhook(services, newer)
    assert candidate_state(services, candidate_id)[2] == [(1, "101", "positive")]


def timezone_offset_hours(hours: int) -> Any:
    from datetime import timezone

    return timezone(timedelta(hours=hours))


def test_a_deletion_that_overtakes_the_creation_wins(services: Services) -> None:
    """Webhooks come in any order: a creation or update delivered after the deletion changes nothing."""
    round_id = add_round(services)
    other_round = add_round(services, project_id=PROJECT + 1)
    candidate_id = add_candidate(services, round_id, task_id=95)
    other = add_candidate(services, other_round, task_id=96)
    ingest_webhook(services, annotation_payload(9, 96, 101, "negative", project_id=PROJECT + 1))
    deleted = {
        "action": "ANNOTATIONS_DELETED",
        "project": {"id": PROJECT},
        "annotations": [{"id": 5}, {"id": 9}],
    }
    assert ingest_webhook(services, deleted).candidates_changed == 0
    assert ingest_webhook(services, annotation_payload(5, 95, 101, "negative")).candidates_changed == 0
    later = annotation_payload(
        5, 95, 101, "positive", updated=T0 + timedelta(hours=1), action="ANNOTATION_UPDATED"
    )
    assert ingest_webhook(services, later).candidates_changed == 0
    assert candidate_state(services, candidate_id)[2] == []
    # Annotation 9 is the other round's: a deletion through this round's project does not touch it.
    assert candidate_state(services, other)[2] == [(9, "101", "negative")]
    newer = annotation_payload(
        9, 96, 101, "positive", updated=T0 + timedelta(hours=1), project_id=PROJECT + 1
    )
    assert ingest_webhook(services, newer).candidates_changed == 1
    with services.database.unit_of_work() as session:
        assert session.exec(select(DeletedAnnotationRow.id)).all() == [5]


class SnapshotGateway:
    """A fake of our Label Studio port for reconcile: its export is a fixed snapshot, and webhooks
    that Label Studio sends while the export is applied are delivered right after it was taken."""

    def __init__(
        self, snapshot: list[ExportedTask], during_export: list[dict[str, Any]], services: Services
    ) -> None:
        self.snapshot = snapshot
        self.during_export = during_export
        self.services = services

    def export_tasks(self, *, project_id: int, task_type: Any) -> Iterator[ExportedTask]:
        for payload in self.during_export:
            ingest_webhook(self.services, payload)
        yield from self.snapshot


def test_a_reconcile_keeps_what_webhooks_changed_after_its_export(services: Services) -> None:
    """Annotation 3 was created, and annotation 1 deleted, after Label Studio's export was taken:
    the reconcile neither drops the new vote nor brings the deleted one back."""
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=97)
    ingest_webhook(services, annotation_payload(1, 97, 101, "negative"))
    task_type = services.catalog.get("sentiment")

    def parsed(annotation_id: int, annotator: int) -> ParsedAnnotation:
        raw = annotation_payload(annotation_id, 97, annotator, "negative")["annotation"]
        return parse_annotation(raw, task_type)

    snapshot = [
        ExportedTask(task_id=97, candidate_id=candidate_id, annotations=[parsed(1, 101), parsed(2, 102)])
    ]
    during = [
        annotation_payload(3, 97, 103, "negative"),
        {"action": "ANNOTATIONS_DELETED", "project": {"id": PROJECT}, "annotations": [{"id": 1}]},
    ]
    services.label_studio = SnapshotGateway(snapshot, during, services)  # type: ignore[assignment]
    report = reconcile_round(services, round_id)
    assert report.added_or_updated == 1 and report.deleted == 0
    assert [v[0] for v in candidate_state(services, candidate_id)[2]] == [2, 3]
    with services.database.unit_of_work() as session:
        assert session.exec(select(DeletedAnnotationRow.id)).all() == [1]  # still remembered
