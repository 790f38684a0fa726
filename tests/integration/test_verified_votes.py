"""Votes come only from Label Studio's copy: webhooks are hints, on a real SQLite file and a real
PostgreSQL database.

Candidates are written straight into the database with Label Studio task ids. A fake of our Label
Studio port (:class:`tests.support.label_studio_copy.LabelStudioCopy`) holds what "Label Studio
has"; webhooks in Label Studio's shape go through
:func:`dynaval.service_layer.validation.webhooks.ingest_webhook` (through the request model that checks their
shape, as both HTTP entry points do) and the tasks they name are read back with
:func:`dynaval.service_layer.validation.vote_reading.verify_round`. Forged webhooks (sent with the right
secret, as any Label Studio user could) change nothing. (The same, against a real Label Studio,
runs in tests/e2e/test_forged_webhooks.py.)
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlmodel import col, select

from dynaval.adapters.db.candidates import record_of
from dynaval.adapters.db.orm import (
    AnnotationRow,
    AnnotatorStatusRow,
    CandidateRow,
    DecisionRow,
    GoldAnswerRow,
    GoldItemRow,
    TaskCheckRow,
)
from dynaval.adapters.label_studio import LabelStudioUnavailable
from dynaval.adapters.task_queue import QueuedWork, start_embedded_consumer
from dynaval.domain.errors import InvalidInput, NotFound, TooLarge
from dynaval.domain.validation.votes import current_ballots
from dynaval.entrypoints.api.fields import MAX_DELETED_IDS
from dynaval.entrypoints.api.webhook_payload import read_webhook
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation import webhooks
from dynaval.service_layer.validation.vote_reading import reconcile_round, verify_round
from tests.integration.conftest import PROJECT, RecordedWork
from tests.support.label_studio_copy import T0, LabelStudioCopy, annotation_json, deletion_webhook, webhook
from tests.support.rows import candidate_row, round_row
from tests.support.waiting import wait_for

CREATED, UPDATED = "ANNOTATION_CREATED", "ANNOTATION_UPDATED"


def ingest_webhook(services: Services, payload: object) -> webhooks.WebhookResult:
    """A webhook's body as both entry points take it: checked by the request model, then ingested."""
    return webhooks.ingest_webhook(services, read_webhook(payload))


def add_round(services: Services, project_id: int = PROJECT) -> int:
    with services.database.unit_of_work() as session:
        row = round_row(name=f"round for project {project_id}", label_studio_project_id=project_id)
        session.add(row)
        session.commit()
        assert row.id is not None
        return row.id


def add_candidate(services: Services, round_id: int, task_id: int, **fields: Any) -> str:
    with services.database.unit_of_work() as session:
        row = candidate_row(
            round_id=round_id,
            status="in_validation",
            label_studio_task_id=task_id,
            wanted_votes=3,
            label_studio_overlap=3,
            **fields,
        )
        session.add(row)
        session.commit()
        return row.id


def annotate(
    services: Services, label_studio: LabelStudioCopy, round_id: int, *annotations: dict[str, Any]
) -> None:
    """Annotations made in Label Studio, one webhook each (as Label Studio sends them), then read back."""
    for annotation in annotations:
        label_studio.put(annotation)
        ingest_webhook(services, webhook(CREATED, PROJECT, annotation))
    verify_round(services, round_id)


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


def waiting_tasks(services: Services) -> list[int]:
    with services.database.unit_of_work() as session:
        return sorted(session.exec(select(TaskCheckRow.task_id)).all())


def stored_equal_label_studio(services: Services, label_studio: LabelStudioCopy, candidate_id: str) -> bool:
    """The candidate's stored annotations are exactly Label Studio's, field by field."""
    with services.database.unit_of_work() as session:
        candidate = session.get(CandidateRow, candidate_id)
        assert candidate is not None and candidate.label_studio_task_id is not None
        rows = session.exec(select(AnnotationRow).where(AnnotationRow.candidate_id == candidate_id)).all()
        stored = {
            (r.id, r.annotator_id, r.label, r.flagged, r.was_cancelled, r.updated_at.replace(tzinfo=None))
            for r in rows
        }
    held = {
        (
            a["id"],
            str(a["completed_by"]),
            a["result"][0]["value"]["choices"][0]
            if a["result"] and a["result"][0]["from_name"] == "label"
            else None,
            any(r["from_name"] == "flag" for r in a["result"]),
            a["was_cancelled"],
            datetime.fromisoformat(a["updated_at"]).astimezone(UTC).replace(tzinfo=None),
        )
        for a in label_studio.tasks.get(candidate.label_studio_task_id, [])
    }
    return stored == held


# ------------------------------------------------------------------------- the verified path


def test_a_webhook_stores_no_vote_until_its_task_is_read_back(
    services: Services, label_studio: LabelStudioCopy
) -> None:
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=11)
    annotation = label_studio.put(annotation_json(1, 11, 101, "negative"))
    result = ingest_webhook(services, webhook(CREATED, PROJECT, annotation))
    assert result.to_dict() == {"action": CREATED, "handled": True, "tasks_to_verify": 1}
    assert candidate_state(services, candidate_id) == ("in_validation", 0, [])
    assert waiting_tasks(services) == [11]
    assert services.work.verifications == [round_id]  # type: ignore[attr-defined]
    report = verify_round(services, round_id)
    assert (report.tasks, report.added_or_updated, report.decisions_changed) == (1, 1, 1)
    assert label_studio.reads == [[11]]
    assert candidate_state(services, candidate_id)[2] == [(1, "101", "negative")]
    assert waiting_tasks(services) == []


def test_votes_decide_and_every_change_is_recorded_once(
    services: Services, label_studio: LabelStudioCopy
) -> None:
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=12)
    annotate(services, label_studio, round_id, annotation_json(1, 12, 101, "negative"))
    annotate(services, label_studio, round_id, annotation_json(2, 12, 102, "negative"))
    assert candidate_state(services, candidate_id)[0] == "in_validation"
    annotate(services, label_studio, round_id, annotation_json(3, 12, 103, "negative"))
    status, decisions, votes = candidate_state(services, candidate_id)
    assert status == "accepted"
    assert votes == [(1, "101", "negative"), (2, "102", "negative"), (3, "103", "negative")]
    with services.database.unit_of_work() as session:
        candidate = session.get(CandidateRow, candidate_id)
        assert candidate is not None and candidate.decision is not None
        assert candidate.decision["rule_version"] == "dynaval-majority/1"
        assert [b["annotator"] for b in candidate.decision["ballots"]] == ["101", "102", "103"]
        assert candidate.decided_at is not None
        history = session.exec(select(DecisionRow).where(DecisionRow.candidate_id == candidate_id)).all()
        assert [h.outcome for h in history] == ["in_validation", "in_validation", "accepted"]
        assert [len(h.ballots) for h in history] == [1, 2, 3]
        assert {h.cause for h in history} == {"verification"}
        assert candidate.version == 3
        stored = session.get(AnnotationRow, 3)
        assert stored is not None and stored.lead_time_s == 4.5 and stored.source == "verification"
    assert decisions == 3
    # Reading the same copy again (a repeated webhook) changes nothing.
    ingest_webhook(services, webhook(UPDATED, PROJECT, annotation_json(3, 12, 103, "negative")))
    assert verify_round(services, round_id).added_or_updated == 0
    assert candidate_state(services, candidate_id)[:2] == ("accepted", 3)


def test_an_edit_in_label_studio_flips_the_decision(
    services: Services, label_studio: LabelStudioCopy
) -> None:
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=21)
    annotate(
        services, label_studio, round_id, *(annotation_json(i, 21, 100 + i, "negative") for i in (1, 2, 3))
    )
    assert candidate_state(services, candidate_id)[0] == "accepted"
    edited = annotation_json(3, 21, 103, "positive", updated=T0 + timedelta(minutes=5))
    label_studio.put(edited)
    ingest_webhook(services, webhook(UPDATED, PROJECT, edited))
    verify_round(services, round_id)
    status, _decisions, votes = candidate_state(services, candidate_id)
    assert status == "escalated"  # 2 of 3 agree: one more vote is asked for
    assert votes[2] == (3, "103", "positive")
    assert services.work.escalations == [round_id]  # type: ignore[attr-defined]


def test_many_waiting_tasks_are_read_in_batches(services: Services, label_studio: LabelStudioCopy) -> None:
    round_id = add_round(services)
    candidates = {task_id: add_candidate(services, round_id, task_id=task_id) for task_id in range(300, 325)}
    for task_id in candidates:
        annotation = label_studio.put(annotation_json(task_id, task_id, 101, "negative"))
        ingest_webhook(services, webhook(CREATED, PROJECT, annotation))
    report = verify_round(services, round_id, batch_size=10)
    assert [len(read) for read in label_studio.reads] == [10, 10, 5]
    assert report.tasks == 25 and report.added_or_updated == 25
    assert waiting_tasks(services) == []
    assert all(candidate_state(services, c)[2] for c in candidates.values())


def test_label_studio_down_keeps_the_tasks_waiting(services: Services, label_studio: LabelStudioCopy) -> None:
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=31)
    label_studio.down = True
    annotation = label_studio.put(annotation_json(1, 31, 101, "negative"))
    ingest_webhook(services, webhook(CREATED, PROJECT, annotation))
    with pytest.raises(LabelStudioUnavailable):
        verify_round(services, round_id)
    assert waiting_tasks(services) == [31]
    assert candidate_state(services, candidate_id)[2] == []
    label_studio.down = False
    verify_round(services, round_id)
    assert candidate_state(services, candidate_id)[2] == [(1, "101", "negative")]
    assert waiting_tasks(services) == []


def test_a_webhook_that_arrives_during_a_read_keeps_its_task_waiting(
    services: Services, label_studio: LabelStudioCopy
) -> None:
    """The read may have been taken before the change the webhook announces: the task is read again."""
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=33)
    first = label_studio.put(annotation_json(1, 33, 101, "negative"))
    ingest_webhook(services, webhook(CREATED, PROJECT, first))

    def second_vote_meanwhile() -> None:
        second = label_studio.put(annotation_json(2, 33, 102, "negative"))
        ingest_webhook(services, webhook(CREATED, PROJECT, second))

    label_studio.during_read = second_vote_meanwhile
    verify_round(services, round_id)
    assert [v[0] for v in candidate_state(services, candidate_id)[2]] == [1]
    assert waiting_tasks(services) == [33]
    verify_round(services, round_id)
    assert [v[0] for v in candidate_state(services, candidate_id)[2]] == [1, 2]
    assert waiting_tasks(services) == []


def test_an_older_read_never_overwrites_a_newer_one(
    services: Services, label_studio: LabelStudioCopy
) -> None:
    """A reconcile whose export was taken before a verification applied its read keeps the newer copy."""
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=35)
    label_studio.put(annotation_json(1, 35, 101, "negative"))

    def verified_meanwhile() -> None:
        label_studio.put(annotation_json(2, 35, 102, "negative"))
        ingest_webhook(services, webhook(CREATED, PROJECT, annotation_json(2, 35, 102, "negative")))
        verify_round(services, round_id)  # reads both annotations, after the export was taken

    label_studio.during_read = verified_meanwhile
    report = reconcile_round(services, round_id)  # its export holds annotation 1 only
    assert report.newer_read_kept == 1
    assert [v[0] for v in candidate_state(services, candidate_id)[2]] == [1, 2]
    assert stored_equal_label_studio(services, label_studio, candidate_id)


# --------------------------------------------------------------- forged webhooks change nothing


def test_a_forged_vote_for_an_annotation_label_studio_does_not_have_is_never_stored(
    services: Services, label_studio: LabelStudioCopy
) -> None:
    """Vote stuffing: a webhook, with the right secret, for a real task and a user who never saw it."""
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=41)
    annotate(services, label_studio, round_id, *(annotation_json(i, 41, 100 + i, "negative") for i in (1, 2)))
    before = candidate_state(services, candidate_id)
    forged = annotation_json(999, 41, 777, "negative")
    assert ingest_webhook(services, webhook(CREATED, PROJECT, forged)).tasks_to_verify == 1
    verify_round(services, round_id)
    assert candidate_state(services, candidate_id) == before  # no third vote, so no acceptance
    assert before[0] == "in_validation"
    assert stored_equal_label_studio(services, label_studio, candidate_id)


def test_a_forged_update_dated_in_the_future_changes_nothing_and_the_real_edit_still_applies(
    services: Services, label_studio: LabelStudioCopy
) -> None:
    """Permanent overwrite: an update of a real annotation stamped in the year 9999."""
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=43)
    annotate(
        services, label_studio, round_id, *(annotation_json(i, 43, 100 + i, "negative") for i in (1, 2, 3))
    )
    assert candidate_state(services, candidate_id)[0] == "accepted"
    forged = annotation_json(3, 43, 103, "positive", updated=datetime(9999, 1, 1, tzinfo=UTC))
    ingest_webhook(services, webhook(UPDATED, PROJECT, forged))
    verify_round(services, round_id)
    assert candidate_state(services, candidate_id)[0] == "accepted"
    assert stored_equal_label_studio(services, label_studio, candidate_id)
    # The annotator's real edit, later, is applied.
    real = label_studio.put(annotation_json(3, 43, 103, "neutral", updated=T0 + timedelta(minutes=1)))
    ingest_webhook(services, webhook(UPDATED, PROJECT, real))
    verify_round(services, round_id)
    assert candidate_state(services, candidate_id)[2][2] == (3, "103", "neutral")
    assert stored_equal_label_studio(services, label_studio, candidate_id)


def test_a_stored_copy_that_differs_from_label_studio_is_replaced_whatever_its_date(
    services: Services, label_studio: LabelStudioCopy
) -> None:
    """A copy forged before verification existed (dated 9999) is replaced by Label Studio's at the
    next reconcile: content decides, not time."""
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=45)
    label_studio.put(annotation_json(1, 45, 101, "negative"))
    with services.database.unit_of_work() as session:
        session.add(
            AnnotationRow(
                id=1,
                candidate_id=candidate_id,
                round_id=round_id,
                annotator_id="101",
                label="positive",
                created_at=T0,
                updated_at=datetime(9999, 1, 1, tzinfo=UTC),
            )
        )
        session.commit()
    report = reconcile_round(services, round_id)
    assert report.added_or_updated == 1
    assert candidate_state(services, candidate_id)[2] == [(1, "101", "negative")]
    assert stored_equal_label_studio(services, label_studio, candidate_id)


def test_a_forged_deletion_removes_nothing_label_studio_still_has(
    services: Services, label_studio: LabelStudioCopy
) -> None:
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=47)
    annotate(
        services, label_studio, round_id, *(annotation_json(i, 47, 100 + i, "negative") for i in (1, 2, 3))
    )
    assert ingest_webhook(services, deletion_webhook(PROJECT, [2])).tasks_to_verify == 1
    verify_round(services, round_id)
    assert candidate_state(services, candidate_id)[0] == "accepted"
    assert [v[0] for v in candidate_state(services, candidate_id)[2]] == [1, 2, 3]
    # A real deletion in Label Studio is applied.
    label_studio.delete(2)
    ingest_webhook(services, deletion_webhook(PROJECT, [2]))
    verify_round(services, round_id)
    assert [v[0] for v in candidate_state(services, candidate_id)[2]] == [1, 3]
    assert candidate_state(services, candidate_id)[0] == "in_validation"


def test_a_forged_deletion_of_ids_not_yet_seen_suppresses_nothing_and_stores_nothing(
    services: Services, label_studio: LabelStudioCopy
) -> None:
    """Suppression: deleting ids 34..63 before they exist must not drop the real annotation later."""
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=49)
    assert ingest_webhook(services, deletion_webhook(PROJECT, list(range(34, 64)))).tasks_to_verify == 0
    assert waiting_tasks(services) == []
    assert services.work.verifications == []  # type: ignore[attr-defined]
    annotate(services, label_studio, round_id, annotation_json(40, 49, 101, "negative"))
    assert candidate_state(services, candidate_id)[2] == [(40, "101", "negative")]


def test_a_deletion_webhook_is_bounded(services: Services, label_studio: LabelStudioCopy) -> None:
    add_round(services)
    with pytest.raises(TooLarge) as raised:
        ingest_webhook(services, deletion_webhook(PROJECT, list(range(1, MAX_DELETED_IDS + 2))))
    assert raised.value.field == "annotations"
    assert ingest_webhook(services, deletion_webhook(PROJECT, list(range(1, MAX_DELETED_IDS + 1)))).handled


def test_waiting_tasks_are_one_row_per_task_however_many_webhooks(
    services: Services, label_studio: LabelStudioCopy
) -> None:
    round_id = add_round(services)
    add_candidate(services, round_id, task_id=51)
    for n in range(50):
        ingest_webhook(services, webhook(UPDATED, PROJECT, annotation_json(1000 + n, 51, 101, "positive")))
    assert waiting_tasks(services) == [51]
    verify_round(services, round_id)
    assert label_studio.reads == [[51]]


def test_unknown_project_and_another_rounds_task_are_refused_and_nothing_waits(
    services: Services, label_studio: LabelStudioCopy
) -> None:
    round_id = add_round(services)
    other_round = add_round(services, project_id=PROJECT + 1)
    add_candidate(services, round_id, task_id=53)
    add_candidate(services, other_round, task_id=54)
    with pytest.raises(NotFound) as unknown:
        ingest_webhook(services, webhook(CREATED, 999_999, annotation_json(1, 53, 101, "negative")))
    assert unknown.value.field == "project.id"
    with pytest.raises(NotFound) as foreign:
        ingest_webhook(services, webhook(CREATED, PROJECT, annotation_json(2, 54, 101, "negative")))
    assert foreign.value.field == "annotation.task"
    with pytest.raises(NotFound):
        ingest_webhook(services, webhook(CREATED, PROJECT, annotation_json(3, 12345, 101, "negative")))
    assert waiting_tasks(services) == []


@pytest.mark.parametrize(
    ("payload_change", "field"),
    [
        ({"project": {"id": 2**70}}, "project.id"),
        ({"project": {"id": True}}, "project.id"),
        ({"annotation": "positive"}, "annotation"),
        ({"annotation": {"id": 5, "task": 2**64}}, "annotation.task"),
        ({"annotation": {"id": 5, "task": "55"}}, "annotation.task"),
        ({"action": "ANNOTATIONS_DELETED", "annotations": [{"id": -3}]}, "annotations"),
        ({"action": "ANNOTATIONS_DELETED", "annotations": {"id": 3}}, "annotations"),
    ],
)
def test_malformed_payloads_name_the_field_and_write_nothing(
    services: Services, label_studio: LabelStudioCopy, payload_change: dict[str, Any], field: str
) -> None:
    round_id = add_round(services)
    add_candidate(services, round_id, task_id=55)
    payload = {**webhook(CREATED, PROJECT, annotation_json(5, 55, 101, "negative")), **payload_change}
    with pytest.raises(InvalidInput) as raised:
        ingest_webhook(services, payload)
    assert raised.value.field == field
    assert waiting_tasks(services) == []


def test_a_webhooks_content_beyond_its_ids_is_not_read(
    services: Services, label_studio: LabelStudioCopy
) -> None:
    """An unreadable time or result in a webhook does not matter: only Label Studio's copy is read."""
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=57)
    label_studio.put(annotation_json(5, 57, 101, "negative"))
    odd = {"id": 5, "task": 57, "completed_by": "nobody", "result": "positive", "updated_at": "yesterday"}
    ingest_webhook(services, webhook(CREATED, PROJECT, odd))
    verify_round(services, round_id)
    assert candidate_state(services, candidate_id)[2] == [(5, "101", "negative")]


def test_an_annotation_id_of_another_candidate_is_not_moved(
    services: Services, label_studio: LabelStudioCopy
) -> None:
    round_id = add_round(services)
    first = add_candidate(services, round_id, task_id=59)
    second = add_candidate(services, round_id, task_id=60)
    annotate(services, label_studio, round_id, annotation_json(7, 59, 101, "negative"))
    label_studio.tasks[60] = [annotation_json(7, 60, 102, "positive")]  # a corrupt read
    ingest_webhook(services, webhook(CREATED, PROJECT, annotation_json(7, 60, 102, "positive")))
    verify_round(services, round_id)
    assert candidate_state(services, first)[2] == [(7, "101", "negative")]
    assert candidate_state(services, second)[2] == []


# ------------------------------------------------------------ the decision rule on what was read


def test_an_overridden_candidate_keeps_the_leads_outcome(
    services: Services, label_studio: LabelStudioCopy
) -> None:
    round_id = add_round(services)
    candidate_id = add_candidate(
        services,
        round_id,
        task_id=61,
        override_outcome="rejected",
        override_reason="off topic",
        override_by="lead",
    )
    annotate(
        services, label_studio, round_id, *(annotation_json(i, 61, 100 + i, "negative") for i in (1, 2, 3))
    )
    status, decisions, votes = candidate_state(services, candidate_id)
    assert (status, decisions, len(votes)) == ("in_validation", 0, 3)


def test_an_excluded_annotators_vote_is_stored_but_not_counted(
    services: Services, label_studio: LabelStudioCopy
) -> None:
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=71)
    with services.database.unit_of_work() as session:
        session.add(
            AnnotatorStatusRow(
                round_id=round_id, annotator_id="103", excluded=True, decided_by="lead", reason="test"
            )
        )
        session.commit()
    annotate(
        services, label_studio, round_id, *(annotation_json(i, 71, 100 + i, "negative") for i in (1, 2, 3))
    )
    status, _decisions, votes = candidate_state(services, candidate_id)
    assert status == "in_validation" and len(votes) == 3
    with services.database.unit_of_work() as session:
        candidate = session.get(CandidateRow, candidate_id)
        assert candidate is not None and candidate.decision is not None
        assert candidate.decision["excluded_annotators"] == ["103"]
        assert candidate.wanted_votes == 4  # the excluded vote fills a Label Studio slot
    annotate(services, label_studio, round_id, annotation_json(4, 71, 104, "negative"))
    assert candidate_state(services, candidate_id)[0] == "accepted"


def test_flags_and_cancelled_annotations(services: Services, label_studio: LabelStudioCopy) -> None:
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=81)
    annotate(
        services,
        label_studio,
        round_id,
        annotation_json(1, 81, 101, "negative"),
        annotation_json(2, 81, 102, None, was_cancelled=True),
        annotation_json(3, 81, 103, None, flag_reason="not English"),
    )
    assert candidate_state(services, candidate_id)[0] == "in_validation"  # one flag of the two needed
    annotate(services, label_studio, round_id, annotation_json(4, 81, 104, None, flag_reason="spam"))
    assert candidate_state(services, candidate_id)[0] == "flagged"
    with services.database.unit_of_work() as session:
        row = session.get(AnnotationRow, 3)
        assert row is not None and row.flagged and row.flag_reason == "not English"
        cancelled = session.get(AnnotationRow, 2)
        assert cancelled is not None and cancelled.was_cancelled


def test_only_each_annotators_latest_counting_annotation_is_their_vote(
    services: Services, label_studio: LabelStudioCopy
) -> None:
    """An annotator who annotated a task several times votes once: with their latest annotation
    that counts (not cancelled, not empty); a tie in time goes to the higher annotation id."""
    round_id = add_round(services)
    candidate_id = add_candidate(services, round_id, task_id=85)
    at = [T0 + timedelta(minutes=m) for m in range(6)]
    annotate(
        services,
        label_studio,
        round_id,
        annotation_json(1, 85, 101, "positive", updated=at[0]),
        annotation_json(2, 85, 101, "negative", updated=at[1]),
        annotation_json(3, 85, 101, None, updated=at[2], was_cancelled=True),  # skipped: not a vote
        annotation_json(4, 85, 102, "positive", updated=at[3]),
        annotation_json(5, 85, 102, "negative", updated=at[3]),  # same time, higher id: this one
        annotation_json(6, 85, 103, "positive", updated=at[4]),
        annotation_json(7, 85, 103, None, updated=at[5]),  # empty: not a vote
    )
    with services.database.unit_of_work() as session:
        candidate = session.get(CandidateRow, candidate_id)
        assert candidate is not None and candidate.decision is not None
        stored = session.exec(select(AnnotationRow).where(AnnotationRow.candidate_id == candidate_id)).all()
        expected = [
            {"annotator": b.annotator, "label": b.label, "flagged": b.flagged, "reason": b.reason}
            for b in current_ballots([record_of(r) for r in stored])
        ]
    assert len(stored) == 7
    assert candidate.decision["ballots"] == expected
    assert [(b["annotator"], b["label"]) for b in expected] == [
        ("101", "negative"),
        ("102", "negative"),
        ("103", "positive"),
    ]
    assert candidate.status == "escalated"  # 2 of 3 agree with the writer: one more vote is wanted


def test_only_a_candidate_waiting_for_votes_asks_label_studio_for_more(
    services: Services, label_studio: LabelStudioCopy
) -> None:
    """A decided candidate that gets more annotations than its task asked for (Label Studio does not
    stop annotators at the overlap) needs nothing from Label Studio; an escalated one does."""
    work: RecordedWork = services.work  # type: ignore[assignment]
    round_id = add_round(services)  # 3 votes first, up to 5
    candidate_id = add_candidate(services, round_id, task_id=87)  # overlap 3
    annotate(
        services, label_studio, round_id, *(annotation_json(i, 87, 100 + i, "negative") for i in (1, 2, 3))
    )
    annotate(services, label_studio, round_id, annotation_json(4, 87, 104, "negative"))
    assert candidate_state(services, candidate_id)[0] == "accepted"  # 4 of 4: still accepted
    assert work.escalations == []
    # One of them changes their mind: 3 of 4 is short of unanimity, a fifth vote is wanted.
    changed = label_studio.put(annotation_json(4, 87, 104, "positive", updated=T0 + timedelta(minutes=1)))
    ingest_webhook(services, webhook(UPDATED, PROJECT, changed))
    verify_round(services, round_id)
    assert candidate_state(services, candidate_id)[0] == "escalated"
    assert work.escalations == [round_id]


def test_gold_answers_are_read_back_like_votes(services: Services, label_studio: LabelStudioCopy) -> None:
    round_id = add_round(services)
    with services.database.unit_of_work() as session:
        session.add(
            GoldItemRow(
                id="gold-1",
                round_id=round_id,
                inputs={"text": "lovely"},
                label="positive",
                label_studio_task_id=91,
            )
        )
        session.commit()
    forged = annotation_json(11, 91, 101, "negative")
    ingest_webhook(services, webhook(CREATED, PROJECT, forged))  # Label Studio has no such answer
    verify_round(services, round_id)
    with services.database.unit_of_work() as session:
        assert session.exec(select(GoldAnswerRow)).all() == []
    annotate(services, label_studio, round_id, annotation_json(12, 91, 101, "positive"))
    label_studio.delete(12)
    ingest_webhook(services, deletion_webhook(PROJECT, [12]))
    with services.database.unit_of_work() as session:
        assert [a.id for a in session.exec(select(GoldAnswerRow)).all()] == [12]
    verify_round(services, round_id)
    with services.database.unit_of_work() as session:
        assert session.exec(select(GoldAnswerRow)).all() == []


def test_webhooks_of_one_second_are_read_back_together_by_the_task_queue(services: Services) -> None:
    """The real task queue (huey on SQLite, a consumer in threads): the tasks of webhooks that come
    within ``DYNAVAL_VERIFY_DELAY_S`` are read back from Label Studio in one read."""
    copy = LabelStudioCopy(project_id=PROJECT)
    services.label_studio = copy  # type: ignore[assignment]
    services.settings.verify_delay_s = 1.0
    assert isinstance(services.work, QueuedWork)  # as the composition root wires it
    # No sweep: it reads every waiting task of every round at once, whatever the gathering.
    consumer = start_embedded_consumer(services.task_queue, workers=1, periodic=False)
    try:
        round_id = add_round(services)
        candidates = [
            add_candidate(services, round_id, task_id=task_id) for task_id in (901, 902, 903, 904, 905)
        ]
        for task_id in (901, 902, 903, 904, 905):
            annotation = copy.put(annotation_json(task_id, task_id, 101, "negative"))
            ingest_webhook(services, webhook(CREATED, PROJECT, annotation))
        wait_for("the votes read back", lambda: waiting_tasks(services) == [], timeout_s=30)
    finally:
        consumer.stop(graceful=True)
    assert copy.reads == [[901, 902, 903, 904, 905]]
    assert all(candidate_state(services, c)[2] for c in candidates)
