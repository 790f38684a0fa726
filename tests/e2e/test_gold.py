"""Gold items against a real Label Studio: mixed in blind, scored per annotator, and an annotator
below the round's gold accuracy is excluded, which changes a decision; a lead reverses it."""

from __future__ import annotations

from typing import Any

import pytest
from label_studio_sdk import LabelStudio

from dynaval.domain.provenance import pseudonym
from tests.fixtures.service import PSEUDONYM_SECRET, WRITER_TOKEN, LiveService
from tests.support.waiting import wait_for, wait_verified

pytestmark = pytest.mark.labelstudio

POS, NEG, NEU = "positive", "negative", "neutral"
GOLD = [
    {"text": "An absolute delight from start to finish.", "label": POS},
    {"text": "The worst customer service I have ever had.", "label": NEG},
    {"text": "The library closes at six on Sundays.", "label": NEU},
    {"text": "Broken on arrival and nobody answers the phone.", "label": NEG},
    {"text": "The bus takes forty minutes to the airport.", "label": NEU},
]
WRONG = {POS: NEG, NEG: POS, NEU: POS}


def test_gold_exclusion_changes_a_decision_and_a_lead_reverses_it(
    live_service: LiveService, label_studio_server: Any, label_studio_annotators: list[Any]
) -> None:
    call = live_service.call
    ls = LabelStudio(base_url=label_studio_server.url, api_key=label_studio_server.api_key)
    a, b, d = label_studio_annotators[0], label_studio_annotators[1], label_studio_annotators[3]
    d_pseudonym = pseudonym(PSEUDONYM_SECRET, "annotator", str(d.id))
    policy = {"gold_rate": 0.5, "gold_min_items": 2, "gold_min_accuracy": 0.75}
    created = call("POST", "/api/rounds", json={"name": "gold round", "task": "sentiment", "policy": policy})
    assert created.status_code == 201, created.text
    round_id, project_id = created.json()["id"], created.json()["label_studio_project_id"]

    # Bad gold uploads are refused whole.
    bad = call(
        "POST", f"/api/rounds/{round_id}/gold", json={"items": [GOLD[0], {"text": "x", "label": "joy"}]}
    )
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "items[1].label"
    assert (
        call("POST", f"/api/rounds/{round_id}/gold", json={"items": []}).json()["error"]["field"] == "items"
    )
    refused = call("POST", f"/api/rounds/{round_id}/gold", token=WRITER_TOKEN, json={"items": GOLD})
    assert refused.status_code == 403

    uploaded = call("POST", f"/api/rounds/{round_id}/gold", json={"items": GOLD[:4]})
    assert uploaded.status_code == 201 and uploaded.json()["created"] == 4
    gold_ids = uploaded.json()["ids"]

    candidates = []
    for text, label in [("Just what I needed.", POS), ("Never again.", NEG), ("Could be worse.", POS)]:
        body = {"text": text, "writer_label": label}
        response = call("POST", f"/api/rounds/{round_id}/candidates", token=WRITER_TOKEN, json=body)
        assert response.status_code == 201 and response.json()["fooled"] is True
        candidates.append(response.json()["id"])

    def candidate(cid: str) -> dict[str, Any]:
        wait_verified(call, round_id)  # what Label Studio holds now, once the service read it back
        body: dict[str, Any] = call("GET", f"/api/candidates/{cid}").json()
        return body

    wait_for("candidates pushed", lambda: all(candidate(c)["status"] == "in_validation" for c in candidates))
    tasks = {t.data["candidate_id"]: t for t in ls.tasks.list(project=project_id)}
    # Gold is mixed in at the round's rate (3 candidates at 0.5 -> 3 gold), shaped like candidates.
    assert len(tasks) == 6 and len(set(tasks) & set(gold_ids)) == 3
    assert all(set(t.data) == {"candidate_id", "text"} for t in tasks.values())
    gold_tasks = [(tasks[g].id, item["label"]) for g, item in zip(gold_ids, GOLD, strict=False) if g in tasks]

    c1, c2, c3 = candidates
    annotate = label_studio_server.annotate
    annotate(tasks[c1].id, a.id, NEG)
    annotate(tasks[c1].id, d.id, NEG)
    assert candidate(c1)["status"] == "rejected"

    # A answers gold right; D answers gold wrong: below 0.75 after 2 gold items, D is excluded.
    for task_id, truth in gold_tasks[:2]:
        annotate(task_id, a.id, truth)
    annotate(gold_tasks[0][0], d.id, WRONG[gold_tasks[0][1]])
    assert candidate(c1)["status"] == "rejected"  # one gold answer is below the minimum
    annotate(gold_tasks[1][0], d.id, WRONG[gold_tasks[1][1]])
    body = candidate(c1)
    assert body["status"] == "in_validation"  # D's vote no longer counts: one vote left
    assert body["decision"]["excluded_annotators"] == [d_pseudonym]

    report = {
        r["annotator"]: r for r in call("GET", f"/api/rounds/{round_id}/annotators").json()["annotators"]
    }
    assert report[d_pseudonym]["excluded"] is True and report[d_pseudonym]["excluded_by"] == "gold"
    assert (report[d_pseudonym]["gold_correct"], report[d_pseudonym]["gold_total"]) == (0, 2)
    a_pseudonym = pseudonym(PSEUDONYM_SECRET, "annotator", str(a.id))
    assert report[a_pseudonym]["gold_accuracy"] == 1.0 and report[a_pseudonym]["excluded"] is False

    # The excluded annotator's new votes do not count either.
    annotate(tasks[c2].id, a.id, NEG)  # c2's writer said negative
    annotate(tasks[c2].id, d.id, POS)
    assert candidate(c2)["status"] == "in_validation"
    annotate(tasks[c2].id, b.id, NEG)
    assert candidate(c2)["status"] == "accepted"

    # Bad exclusion requests change nothing.
    url = f"/api/rounds/{round_id}/annotators/{d_pseudonym}/exclusion"
    assert call("POST", url, json={"excluded": False}).json()["error"]["field"] == "reason"
    assert call("POST", url, json={"excluded": "no", "reason": "x"}).json()["error"]["field"] == "excluded"
    unknown = call(
        "POST",
        f"/api/rounds/{round_id}/annotators/annotator_nobody/exclusion",
        json={"excluded": False, "reason": "x"},
    )
    assert unknown.status_code == 404 and unknown.json()["error"]["field"] == "annotator"
    assert call("POST", url, token=WRITER_TOKEN, json={"excluded": False, "reason": "x"}).status_code == 403
    assert candidate(c1)["status"] == "in_validation"

    # A lead reinstates D: the decisions D took part in are recomputed.
    reinstated = call("POST", url, json={"excluded": False, "reason": "gold items 1-2 were ambiguous"})
    assert reinstated.status_code == 200, reinstated.text
    assert reinstated.json()["decisions_changed"] >= 1
    assert candidate(c1)["status"] == "rejected"
    assert candidate(c2)["status"] == "accepted"  # 2 of 3 for the writer

    # The gold rule now leaves D to the lead, whatever D answers.
    annotate(gold_tasks[2][0], d.id, WRONG[gold_tasks[2][1]])
    wait_verified(call, round_id)
    report = {
        r["annotator"]: r for r in call("GET", f"/api/rounds/{round_id}/annotators").json()["annotators"]
    }
    assert report[d_pseudonym]["excluded"] is False and report[d_pseudonym]["gold_total"] == 3

    events = call("GET", f"/api/rounds/{round_id}/exclusions").json()["events"]
    assert [(e["annotator"], e["excluded"], e["decided_by"]) for e in events] == [
        (d_pseudonym, True, "gold"),
        (d_pseudonym, False, "lead"),
    ]
    assert events[1]["reason"] == "gold items 1-2 were ambiguous"

    # Reconcile finds the stored gold answers and votes equal to Label Studio's.
    synced = call("POST", f"/api/rounds/{round_id}/sync").json()
    assert synced["gold_tasks"] == 3
    assert synced["added_or_updated"] == 0 and synced["deleted"] == 0 and synced["decisions_changed"] == 0
    summary = call("GET", f"/api/rounds/{round_id}").json()
    cost = summary["validation_cost"]
    assert cost["validated_candidates"] == 3 and cost["votes_at_fixed_max_overlap"] == 9
    assert cost["votes"] == 5 and cost["votes_saved"] == 4
    assert candidate(c3)["status"] == "in_validation"  # never voted on: still waiting
