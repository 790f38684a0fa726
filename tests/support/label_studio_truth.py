"""What Label Studio holds, beside what the service stored: the comparison every fault test ends with.

Label Studio's side is read from one JSON export with the admin's key (the task annotations
endpoint leaves cancelled annotations out), with the labelling config's control names rather than
the service's parser, so the service's reading is checked, not repeated.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from sqlmodel import col, select

from dynaval.adapters.db.database import Database
from dynaval.adapters.db.orm import AnnotationRow, CandidateRow, DecisionRow, RoundRow, as_utc
from dynaval.domain.validation.decision import decide
from dynaval.domain.validation.policy import DecisionPolicy
from dynaval.domain.validation.votes import AnnotationRecord, current_ballots
from tests.support.label_studio_server import LabelStudioServer

K = TypeVar("K")

# (task id, annotator, label, flagged, flag reason, cancelled)
AnnotationState = tuple[int, str, str | None, bool, str | None, bool]


def label_studio_export(server: LabelStudioServer, project_id: int) -> list[dict[str, Any]]:
    """Every task of the project with every annotation, cancelled ones included."""
    chunks = server.client.projects.exports.download_sync(
        project_id, export_type="JSON", download_all_tasks=True
    )
    tasks = json.loads(b"".join(chunks))
    assert isinstance(tasks, list)
    return tasks


def label_studio_annotations(server: LabelStudioServer, project_id: int) -> dict[int, AnnotationState]:
    """Every annotation of the project as Label Studio exports it."""
    task_type = server.task_type
    found: dict[int, AnnotationState] = {}
    for task in label_studio_export(server, project_id):
        for annotation in task.get("annotations") or []:
            label: str | None = None
            flagged = False
            reason: str | None = None
            for region in annotation.get("result") or []:
                value = region.get("value") or {}
                if region.get("from_name") == task_type.label_control:
                    label = (value.get("choices") or [None])[0]
                elif region.get("from_name") == task_type.flag_control:
                    flagged = bool(value.get("choices"))
                elif region.get("from_name") == task_type.reason_control:
                    reason = " ".join(value.get("text") or []) or None
            completed_by = annotation.get("completed_by")
            annotator = completed_by.get("id") if isinstance(completed_by, dict) else completed_by
            found[int(annotation["id"])] = (
                int(task["id"]),
                str(annotator),
                label,
                flagged,
                reason if flagged else None,
                bool(annotation.get("was_cancelled")),
            )
    return found


def label_studio_task_ids(server: LabelStudioServer, project_id: int) -> set[int]:
    return {int(task["id"]) for task in label_studio_export(server, project_id)}


def stored_annotations(database: Database, round_id: int) -> dict[int, AnnotationState]:
    """Every annotation the service stored for the round, in the same shape."""
    with database.unit_of_work() as session:
        rows = session.exec(
            select(AnnotationRow, CandidateRow.label_studio_task_id)
            .join(CandidateRow, col(CandidateRow.id) == AnnotationRow.candidate_id)
            .where(AnnotationRow.round_id == round_id)
        ).all()
        return {
            a.id: (int(task_id or 0), a.annotator_id, a.label, a.flagged, a.flag_reason, a.was_cancelled)
            for a, task_id in rows
        }


def differing(left: Mapping[K, object], right: Mapping[K, object]) -> list[K]:
    """Keys whose values differ, or that only one side has."""
    return [key for key in {*left, *right} if left.get(key, "missing") != right.get(key, "missing")]


def expected_decision(
    records: Sequence[AnnotationRecord], writer_label: str, policy: dict[str, Any]
) -> dict[str, Any]:
    """The rule applied to votes (no annotator excluded), in the shape a candidate stores its decision."""
    ballots = current_ballots(records)
    decision = decide(ballots, writer_label, DecisionPolicy(**policy))
    ballot_dicts = [
        {"annotator": b.annotator, "label": b.label, "flagged": b.flagged, "reason": b.reason}
        for b in ballots
    ]
    return {**decision.to_dict(), "ballots": ballot_dicts}


def decision_mismatches(database: Database, round_id: int) -> dict[str, list[str]]:
    """Candidates of the round whose stored decision is not the rule applied to their stored votes
    (``rule``), whose last history entry is not that decision (``history``), or whose version does
    not count their history (``version``). Every list empty: the decisions are consistent."""
    found: dict[str, list[str]] = {"rule": [], "history": [], "version": []}
    with database.unit_of_work() as session:
        round_row = session.get(RoundRow, round_id)
        assert round_row is not None
        candidates = session.exec(select(CandidateRow).where(CandidateRow.round_id == round_id)).all()
        for candidate in candidates:
            if candidate.label_studio_task_id is None or candidate.override_outcome is not None:
                continue
            rows = session.exec(select(AnnotationRow).where(AnnotationRow.candidate_id == candidate.id)).all()
            records = [
                AnnotationRecord(
                    annotation_id=a.id,
                    annotator=a.annotator_id,
                    label=a.label,
                    flagged=a.flagged,
                    reason=a.flag_reason,
                    was_cancelled=a.was_cancelled,
                    updated_at=as_utc(a.updated_at),
                )
                for a in rows
            ]
            want = expected_decision(records, candidate.writer_label, round_row.policy)
            if candidate.decision != want or candidate.status != want["outcome"]:
                found["rule"].append(candidate.id)
            history = session.exec(
                select(DecisionRow)
                .where(DecisionRow.candidate_id == candidate.id)
                .order_by(col(DecisionRow.id))
            ).all()
            last = history[-1] if history else None
            if (
                last is None
                or last.outcome != candidate.status
                or last.ballots != want["ballots"]
                or last.figures != {k: v for k, v in want.items() if k != "ballots"}
            ):
                found["history"].append(candidate.id)
            if candidate.version != len(history):
                found["version"].append(candidate.id)
    return found
