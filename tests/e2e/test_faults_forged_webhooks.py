"""Forged webhooks from a hostile annotator: no forged vote survives, no decision rests on one.

Label Studio Community shows a webhook's headers to every user who can log in. The attacker here is
an annotator of the round's Label Studio: they log in through Label Studio's login form, read the
service's webhook secret from ``GET /api/webhooks/``, and post webhooks with it, as anyone of them
could. Three attacks, each on its own candidate, against the real Label Studio:

1. **vote stuffing**: ``ANNOTATION_CREATED`` for a real task, for a user who never saw it;
2. **permanent overwrite**: ``ANNOTATION_UPDATED`` of a real annotation, changed and dated 9999;
3. **suppression**: ``ANNOTATIONS_DELETED`` for the ids the next annotations will get, and for a
   real annotation Label Studio still has.

After each: the stored annotations equal Label Studio's, no decision in the candidate's history was
made from a forged vote, and the annotators' later real votes and edits are applied. The figures go
to the fault report (``scripts/fault_report``).
"""

from __future__ import annotations

from typing import Any

import pytest
import requests

from dynaval.adapters.db.orm import AnnotationRow
from tests.fixtures.service import WRITER_TOKEN, LiveService
from tests.support.fault_report import record_scenario
from tests.support.label_studio_server import Annotator, LabelStudioServer
from tests.support.label_studio_truth import (
    decision_mismatches,
    differing,
    label_studio_annotations,
    stored_annotations,
)
from tests.support.waiting import wait_for, wait_verified

pytestmark = pytest.mark.labelstudio

POS, NEG = "positive", "negative"
WEBHOOK_PATH = "/webhooks/label-studio"
FAR_FUTURE = "9999-12-31T23:59:59Z"


def read_secret_as_annotator(server: LabelStudioServer, annotator: Annotator) -> str:
    """What any annotator reads in Label Studio Community: every webhook, its headers included."""
    session = server.log_in(annotator)
    try:
        hooks = session.get("/api/webhooks/")
    finally:
        session.close()
    assert hooks.status_code == 200, hooks.text
    [secret] = {value for hook in hooks.json() for name, value in (hook.get("headers") or {}).items()}
    return str(secret)


def stored_update_year(live: LiveService, annotation_id: int) -> int:
    with live.services.database.unit_of_work() as session:
        row = session.get(AnnotationRow, annotation_id)
        assert row is not None
        return row.updated_at.year


def forged_annotation(
    action: str, project_id: int, annotation_id: int, task_id: int, annotator: int, label: str, **changes: Any
) -> dict[str, Any]:
    return {
        "action": action,
        "project": {"id": project_id},
        "task": {"id": task_id},
        "annotation": {
            "id": annotation_id,
            "task": task_id,
            "completed_by": annotator,
            "result": [
                {"from_name": "label", "to_name": "text", "type": "choices", "value": {"choices": [label]}}
            ],
            "was_cancelled": False,
            "created_at": "2026-12-01T12:00:00Z",
            "updated_at": "2026-12-01T12:00:00Z",
            **changes,
        },
    }


def test_forged_webhooks_from_an_annotator_leave_no_vote_and_no_decision(
    live_service: LiveService,
    label_studio_server: LabelStudioServer,
    label_studio_annotators: list[Annotator],
) -> None:
    backend = "sqlite" if live_service.services.database.is_sqlite else "postgres"
    call = live_service.call
    a, b, c, mallory = label_studio_annotators
    created = call("POST", "/api/rounds", json={"name": "forged webhooks", "task": "sentiment"})
    assert created.status_code == 201, created.text
    round_id, project_id = int(created.json()["id"]), int(created.json()["label_studio_project_id"])
    ids = []
    for text in ("What a lovely surprise.", "I would buy it again.", "Best purchase this year."):
        body = {"text": text, "writer_label": POS}
        submitted = call("POST", f"/api/rounds/{round_id}/candidates", token=WRITER_TOKEN, json=body)
        assert submitted.status_code == 201 and submitted.json()["fooled"] is True, submitted.text
        ids.append(submitted.json()["id"])

    def candidate(cid: str) -> dict[str, Any]:
        wait_verified(call, round_id)
        body: dict[str, Any] = call("GET", f"/api/candidates/{cid}").json()
        return body

    wait_for("candidates pushed", lambda: all(candidate(cid)["status"] == "in_validation" for cid in ids))
    stuffed, overwritten, suppressed = ids
    task = {cid: int(candidate(cid)["label_studio_task_id"]) for cid in ids}

    secret = read_secret_as_annotator(label_studio_server, mallory)
    forged: list[dict[str, Any]] = []

    def forge(body: dict[str, Any]) -> dict[str, Any]:
        response = requests.post(
            live_service.url + WEBHOOK_PATH,
            json=body,
            headers={"X-Dynaval-Webhook-Secret": secret},
            timeout=30,
        )
        assert response.status_code == 200, response.text  # the right secret: taken as a hint
        forged.append(body)
        answer: dict[str, Any] = response.json()
        return answer

    def outcomes(cid: str) -> list[str]:
        return [h["outcome"] for h in candidate(cid)["history"]]

    def stored_equal_label_studio() -> bool:
        wait_verified(call, round_id)
        return stored_annotations(live_service.services.database, round_id) == label_studio_annotations(
            label_studio_server, project_id
        )

    # 1. Vote stuffing: A's real vote, then a forged second vote "by B", who never saw the task.
    a_on_stuffed = label_studio_server.annotate(task[stuffed], a.id, POS)
    assert candidate(stuffed)["status"] == "in_validation"
    history_before = outcomes(stuffed)
    stuffing_id = 10_000_000 + task[stuffed]
    forge(forged_annotation("ANNOTATION_CREATED", project_id, stuffing_id, task[stuffed], b.id, POS))
    stuffing_stored = stuffing_id in stored_annotations(live_service.services.database, round_id)
    stuffing_decided = outcomes(stuffed) != history_before
    stuffing_equal = stored_equal_label_studio()
    label_studio_server.annotate(task[stuffed], b.id, POS)  # B's real vote, later
    stuffing_real_applied = candidate(stuffed)["status"] == "accepted"

    # 2. Permanent overwrite: A and B accept; a forged update of B's annotation, dated 9999.
    label_studio_server.annotate(task[overwritten], a.id, POS)
    b_annotation = label_studio_server.annotate(task[overwritten], b.id, POS)
    assert candidate(overwritten)["status"] == "accepted"
    history_before = outcomes(overwritten)
    forge(
        forged_annotation(
            "ANNOTATION_UPDATED",
            project_id,
            b_annotation,
            task[overwritten],
            b.id,
            NEG,
            updated_at=FAR_FUTURE,
        )
    )
    overwrite_decided = outcomes(overwritten) != history_before
    overwrite_equal = stored_equal_label_studio()
    overwrite_dated = stored_update_year(live_service, b_annotation)
    label_studio_server.update_annotation(b_annotation, NEG)  # B's real change of mind, later
    overwrite_real_applied = candidate(overwritten)["status"] == "escalated"
    synced = [call("POST", f"/api/rounds/{round_id}/sync").json() for _ in range(2)]

    # 3. Suppression: the ids the next annotations will get are "deleted" first, and so is A's vote
    # on the first candidate, which Label Studio still has. (The session's Label Studio hands out
    # annotation ids across projects; this round's latest annotation holds the highest.)
    top = max(label_studio_annotations(label_studio_server, project_id))
    suppress = forge(
        {
            "action": "ANNOTATIONS_DELETED",
            "project": {"id": project_id},
            "annotations": [{"id": i} for i in range(top + 1, top + 31)],
        }
    )
    stuffed_votes_before = len(candidate(stuffed)["votes"])
    forge(
        {
            "action": "ANNOTATIONS_DELETED",
            "project": {"id": project_id},
            "annotations": [{"id": a_on_stuffed}],
        }
    )
    deletion_removed_votes = stuffed_votes_before - len(candidate(stuffed)["votes"])
    later = [label_studio_server.annotate(task[suppressed], who.id, POS) for who in (a, c)]
    suppression_real_applied = candidate(suppressed)["status"] == "accepted"
    suppression_equal = stored_equal_label_studio()

    in_label_studio = label_studio_annotations(label_studio_server, project_id)
    stored = stored_annotations(live_service.services.database, round_id)
    mismatches = decision_mismatches(live_service.services.database, round_id)
    # A forged vote that survived would be a stored annotation Label Studio does not hold as stored.
    forged_votes_surviving = len(differing(stored, in_label_studio))
    record_scenario(
        f"forged webhooks from an annotator ({backend})",
        webhooks_sent=len(forged),
        votes_expected=len(in_label_studio),
        votes_stored=len(in_label_studio) - len(differing(stored, in_label_studio)),
        forged_votes_surviving=forged_votes_surviving,
        decisions_from_forged_votes=int(stuffing_decided) + int(overwrite_decided),
        votes_removed_by_forged_deletions=deletion_removed_votes,
        real_votes_and_edits_applied_after=sum(
            (stuffing_real_applied, overwrite_real_applied, suppression_real_applied)
        ),
        decisions_differing=len(mismatches["rule"]),
    )

    assert secret == live_service.services.settings.webhook_secret  # what every annotator can read
    assert not stuffing_stored and not stuffing_decided and stuffing_equal and stuffing_real_applied
    assert not overwrite_decided and overwrite_equal and overwrite_real_applied
    assert overwrite_dated < 9999
    assert [(s["added_or_updated"], s["deleted"]) for s in synced] == [(0, 0), (0, 0)]
    assert suppress["tasks_to_verify"] == 0  # ids the service never stored lead nowhere
    assert deletion_removed_votes == 0
    assert all(top < i <= top + 30 for i in later)  # the real votes got the "deleted" ids
    assert suppression_real_applied and suppression_equal
    assert stored == in_label_studio
    assert forged_votes_surviving == 0
    assert mismatches == {"rule": [], "history": [], "version": []}
