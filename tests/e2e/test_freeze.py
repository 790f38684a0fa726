"""Freezing a round against a real Label Studio: refused while a candidate waits, forced with a
reason (the waiting candidate is left unvalidated), then an annotation submitted in Label Studio
after the freeze is stored late and changes nothing; an override is refused; the CLI freezes another
round and answers a bad id or an open round with one line. Runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_cli import GOOD_SECRETS, assert_one_line_error, clean_environment, run_dynaval
from tests.e2e.test_task_types import Loop
from tests.fixtures.service import LiveService
from tests.support.waiting import wait_for

pytestmark = pytest.mark.labelstudio

POS, NEG = "positive", "negative"


def test_a_round_is_frozen_by_force_and_late_annotations_change_nothing(
    live_service: LiveService,
    label_studio_server: Any,
    label_studio_annotators: list[Any],
    tiny_model_dir: Path,
    tmp_path: Path,
) -> None:
    loop = Loop(live_service, label_studio_server, label_studio_annotators, "sentiment")
    loop.create(tiny_model_dir, "freeze")
    decided = loop.submit({"text": "A warm and generous film."}, POS)["id"]
    waiting = loop.submit({"text": "I cannot say what I felt."}, POS)["id"]
    decided_task, waiting_task = loop.task_id(decided), loop.task_id(waiting)
    loop.vote(decided_task, "A", POS)
    loop.vote(decided_task, "B", POS)
    loop.vote(waiting_task, "A", POS)
    wait_for("the decision", lambda: loop.candidate(decided)["status"] == "accepted", timeout_s=30.0)
    round_id = loop.round_id
    freeze = f"/api/rounds/{round_id}/freeze"

    refused = live_service.call("POST", freeze)
    assert refused.status_code == 409 and "open" in refused.text  # close it first
    assert live_service.call("POST", f"/api/rounds/{round_id}/close").status_code == 200
    refused = live_service.call("POST", freeze, json={})
    assert refused.status_code == 409, refused.text
    assert "1 candidate still waiting" in refused.text
    no_reason = live_service.call("POST", freeze, json={"force": True, "reason": "  "})
    assert no_reason.status_code == 422 and no_reason.json()["error"]["field"] == "reason", no_reason.text
    no_reason = live_service.call("POST", freeze, json={"force": True})
    assert no_reason.status_code == 422 and no_reason.json()["error"]["field"] == "reason", no_reason.text

    frozen = live_service.call("POST", freeze, json={"force": True, "reason": "release cut-off"})
    assert frozen.status_code == 200, frozen.text
    body = frozen.json()
    assert (body["state"], body["unvalidated"]) == ("frozen", 1) and body["frozen_at"]
    assert live_service.call("POST", freeze).status_code == 409  # already frozen
    assert loop.candidate(waiting)["status"] == "unvalidated"
    audit = live_service.call("GET", f"/api/rounds/{round_id}/audit").json()["events"]
    assert [(e["candidate_id"], e["action"], e["reason"]) for e in audit] == [
        (waiting, "forced-freeze", "release cut-off")
    ]

    # An annotator still answers in Label Studio, against the writer: stored late, nothing changes.
    before = loop.candidate(decided)
    loop.vote(decided_task, "C", NEG)
    synced = live_service.call("POST", f"/api/rounds/{round_id}/sync")
    assert synced.status_code == 200, synced.text
    # The webhook's read-back may have stored the late annotation before the sync: counted either way.
    assert "late" in synced.json() and synced.json()["escalations_applied"] == 0
    summary = live_service.call("GET", f"/api/rounds/{round_id}").json()
    assert summary["late_annotations"]["count"] == 1
    [late] = summary["late_annotations"]["latest"]
    assert (late["candidate_id"], late["label"]) == (decided, NEG)
    after = loop.candidate(decided)
    assert after["status"] == before["status"] == "accepted"
    assert after["decision"] == before["decision"]
    assert summary["counts"]["unvalidated"] == 1 and summary["counts"]["by_status"]["accepted"] == 1
    dataset = loop.dataset("jsonl").decode().splitlines()
    assert [json.loads(line)["example_id"] for line in dataset] == [decided]

    override = live_service.call(
        "POST", f"/api/candidates/{decided}/override", json={"outcome": "rejected", "reason": "late vote"}
    )
    assert override.status_code == 409 and "frozen" in override.text

    page = live_service.call("GET", f"/dashboard/rounds/{round_id}").text
    assert 'data-testid="late-count">1<' in page and decided in page and "frozen-note" in page

    # The command line freezes another (closed) round, and says in one line what it cannot do.
    other = Loop(live_service, label_studio_server, label_studio_annotators, "sentiment")
    other.create(tiny_model_dir, "freeze by command")
    env = clean_environment(
        DYNAVAL_DATABASE_URL=live_service.services.settings.resolved_database_url,
        DYNAVAL_DATA_DIR=str(tmp_path / "cli-data"),
        DYNAVAL_LABEL_STUDIO_URL=label_studio_server.url,
        DYNAVAL_LABEL_STUDIO_API_KEY=label_studio_server.api_key,
        DYNAVAL_PUBLIC_URL=live_service.url,
        **GOOD_SECRETS,
    )
    line = assert_one_line_error(
        run_dynaval("round", "freeze", "--round", str(other.round_id), env=env, cwd=tmp_path)
    )
    assert "open" in line and "close it" in line
    line = assert_one_line_error(run_dynaval("round", "freeze", "--round", "999999", env=env, cwd=tmp_path))
    assert "999999" in line
    assert live_service.call("POST", f"/api/rounds/{other.round_id}/close").status_code == 200
    done = run_dynaval("round", "freeze", "--round", str(other.round_id), env=env, cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.strip().startswith(f"round {other.round_id} frozen at ")
    assert live_service.call("GET", f"/api/rounds/{other.round_id}").json()["state"] == "frozen"
