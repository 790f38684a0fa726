"""Near-duplicates at submission against the live service and a real Label Studio: a writer's tenth
small variation of one trick is flagged (and shown to leads first), refused with 409 under
``reject`` and never reaches Label Studio (read back from Label Studio itself), a writer sees only
that another writer's near-duplicate exists, and a restarted service on the same database still
finds them. The tiny test model always answers "neutral", so a "positive" label fools it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from label_studio_sdk import LabelStudio
from sqlalchemy import text

from tests.fixtures.service import OTHER_WRITER_TOKEN, WRITER_TOKEN, LiveService, running_service
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.labelstudio, pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)]

TRICK = "the plot was predictable but honestly the ending made me smile like a little child again"
# Ten small variations of one trick: each one word away from the first.
SWAPS = [
    ("smile", "smile"), ("smile", "grin"), ("honestly", "frankly"), ("child", "kid"),
    ("predictable", "obvious"), ("plot", "story"), ("little", "small"), ("ending", "finale"),
    ("again", "once more"), ("made", "got"),
]  # fmt: skip
VARIATIONS = [TRICK.replace(old, new) for old, new in SWAPS]
UNRELATED = "customer support never answered my emails about the broken blender for three weeks"


def create_round(live: LiveService, name: str, **policy: Any) -> dict[str, Any]:
    created = live.call("POST", "/api/rounds", json={"name": name, "task": "sentiment", "policy": policy})
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    return body


def submit(live: LiveService, round_id: int, text_: str, token: str = WRITER_TOKEN) -> Any:
    return live.call(
        "POST", f"/api/rounds/{round_id}/candidates", token=token,
        json={"inputs": {"text": text_}, "writer_label": "positive"},
    )  # fmt: skip


def candidate(live: LiveService, candidate_id: str, token: str | None = None) -> dict[str, Any]:
    response = live.call("GET", f"/api/candidates/{candidate_id}", **({"token": token} if token else {}))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def candidate_rows(live: LiveService) -> int:
    assert live.services.database is not None
    with live.services.database.engine.connect() as connection:
        return int(connection.execute(text('SELECT count(*) FROM "candidate"')).scalar_one())


def test_the_tenth_variation_of_a_trick_is_flagged_and_leads_see_it_first(
    live_service: LiveService, tmp_path: Path, label_studio_server: Any, tiny_model_dir: Path
) -> None:
    round_id = int(create_round(live_service, "flagging round", near_duplicates="flag")["id"])
    answers = []
    for variation in VARIATIONS:
        response = submit(live_service, round_id, variation)
        assert response.status_code == 201, response.text
        answers.append(response.json())
    ids = [a["id"] for a in answers]
    assert answers[0]["near_duplicates"] == [] and not answers[0]["near_duplicate_flagged"]
    tenth = answers[9]
    assert tenth["fooled"] and tenth["near_duplicate_flagged"]
    # At most five, most similar first, each the writer's own earlier example: id and round shown.
    shown = tenth["near_duplicates"]
    assert 1 <= len(shown) <= 5 and shown[0]["id"] == ids[0] and shown[0]["round_id"] == round_id
    assert (
        all(set(m) == {"id", "round_id", "similarity", "kind"} for m in shown)
        and shown[0]["kind"] == "lexical"
    )
    assert {m["id"] for m in shown} <= set(ids[:9]) and 0.6 <= shown[0]["similarity"] < 1
    # Near-copies (lexical) first, then paraphrases (semantic), each the most similar first.
    kinds = [m["kind"] for m in shown]
    assert kinds == sorted(kinds, key=lambda kind: kind != "lexical")
    for kind in ("lexical", "semantic"):
        values = [m["similarity"] for m in shown if m["kind"] == kind]
        assert values == sorted(values, reverse=True)

    # Another writer's variation: only that a near-duplicate exists, never whose.
    other = submit(live_service, round_id, VARIATIONS[1].replace("little", "young"), OTHER_WRITER_TOKEN)
    assert other.status_code == 201, other.text
    assert other.json()["near_duplicates"] and all(
        set(m) == {"similarity", "kind"} for m in other.json()["near_duplicates"]
    )
    # The lead reads every id; the round lists its flagged candidates, the earliest first.
    assert candidate(live_service, other.json()["id"])["near_duplicates"][0]["id"] in ids
    flagged = live_service.call("GET", f"/api/rounds/{round_id}/near-duplicates")
    assert flagged.status_code == 200, flagged.text
    flagged_ids = [*ids[1:], other.json()["id"]]
    assert [c["id"] for c in flagged.json()["candidates"]] == flagged_ids
    assert flagged.json()["total"] == len(flagged_ids)
    # The round's dashboard page lists them above its decision queue, the earliest first.
    page = live_service.call("GET", f"/dashboard/rounds/{round_id}")
    assert page.status_code == 200, page.text[:500]
    start = page.text.index('data-testid="flagged-near-duplicates"')
    panel = page.text[start : page.text.index('data-testid="decision-queue"')]
    assert f"Flagged as near-duplicates ({len(flagged_ids)})" in panel
    rows = [panel.index(f'data-testid="flagged-{c}"') for c in flagged_ids]
    assert rows == sorted(rows)

    # A restarted service on the same database finds them: the index is in the database.
    with running_service(
        live_service.services.settings.resolved_database_url,
        tmp_path / "data2",
        label_studio_server,
        tiny_model_dir,
    ) as restarted:
        again = submit(restarted, round_id, TRICK.replace("the ending", "that ending"))
        assert again.status_code == 201, again.text
        assert again.json()["near_duplicate_flagged"] and again.json()["near_duplicates"][0]["id"] == ids[0]


def test_under_reject_the_variation_is_refused_and_never_reaches_label_studio(
    live_service: LiveService, label_studio_server: Any
) -> None:
    ls = LabelStudio(base_url=label_studio_server.url, api_key=label_studio_server.api_key)
    created = create_round(live_service, "rejecting round", near_duplicates="reject")
    round_id, project = int(created["id"]), int(created["label_studio_project_id"])
    first = submit(live_service, round_id, VARIATIONS[0])
    assert first.status_code == 201, first.text
    first_id = first.json()["id"]

    for variation in VARIATIONS[1:]:
        refused = submit(live_service, round_id, variation)
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert error["code"] == "near_duplicate" and error["field"] == "inputs"
        best = error["near_duplicates"][0]
        assert (best["id"], best["round_id"], best["kind"]) == (first_id, round_id, "lexical")
        assert 0.6 <= best["similarity"] < 1
        assert first_id in error["message"]
    # Another writer learns only that one exists; a batch is refused whole, naming the item.
    other = submit(live_service, round_id, VARIATIONS[9], OTHER_WRITER_TOKEN)
    assert other.status_code == 409, other.text
    hidden = other.json()["error"]["near_duplicates"]
    assert hidden[0]["kind"] == "lexical" and hidden[0]["similarity"] >= 0.6
    assert all(set(m) == {"similarity", "kind"} for m in hidden)
    assert first_id not in other.json()["error"]["message"]
    batch = live_service.call(
        "POST", f"/api/rounds/{round_id}/candidates/batch", token=WRITER_TOKEN,
        json={"candidates": [{"text": UNRELATED, "writer_label": "positive"},
                             {"text": VARIATIONS[3], "writer_label": "positive"}]},
    )  # fmt: skip
    assert batch.status_code == 409 and batch.json()["error"]["field"] == "candidates[1].inputs", batch.text
    assert candidate_rows(live_service) == 1

    # The first is pushed; nothing else ever is: Label Studio's own list of the project's tasks.
    wait_for(
        "the first candidate in Label Studio",
        lambda: candidate(live_service, first_id)["status"] == "in_validation",
    )
    synced = live_service.call("POST", f"/api/rounds/{round_id}/sync")
    assert synced.status_code == 200, synced.text
    tasks = list(ls.tasks.list(project=project))
    assert [t.data["candidate_id"] for t in tasks] == [first_id]
    assert [t.data["text"] for t in tasks] == [VARIATIONS[0]]
