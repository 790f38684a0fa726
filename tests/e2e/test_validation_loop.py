"""The whole loop through the HTTP API and a real Label Studio with four annotator users.

35 candidates cover accept, reject, escalate-then-accept, escalate-then-reject, flag to a lead,
a changed vote that flips a decision, a deleted vote, a cancelled annotation, a duplicate vote by
the same annotator, webhooks that never arrived (fixed by sync) and candidates that did not fool
the model. The tiny test model always answers "neutral", so a writer's positive or negative label
fools it. Runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from label_studio_sdk import LabelStudio

from dynaval.domain.provenance import pseudonym, verify_prediction, writer_pseudonym
from dynaval.domain.validation.policy import RULE_VERSION
from tests.fixtures.service import (
    COLLECTOR_NAME,
    COLLECTOR_TOKEN,
    LEAD_TOKEN,
    OTHER_WRITER_NAME,
    OTHER_WRITER_TOKEN,
    PSEUDONYM_SECRET,
    SECRETS,
    SIGNING_SECRET,
    WRITER_NAME,
    WRITER_TOKEN,
    LiveService,
)
from tests.support.waiting import wait_for, wait_verified

pytestmark = pytest.mark.labelstudio

POS, NEG, NEU = "positive", "negative", "neutral"
WRITERS = ["alice@example.org", "bob.writer", "陈作者"]  # a collector's writers, by their raw ids


@dataclass(frozen=True)
class Submitter:
    """Who sends a case: a writer with their own token, or the collector naming one of its writers."""

    token: str
    name: str  # the token's name
    writer_id: str | None = None  # what the collector names

    @property
    def body(self) -> dict[str, str]:
        return {} if self.writer_id is None else {"writer_id": self.writer_id}

    @property
    def pseudonym(self) -> str:
        if self.writer_id is None:
            return writer_pseudonym(PSEUDONYM_SECRET, self.name, None)
        return writer_pseudonym(PSEUDONYM_SECRET, self.writer_id, self.name)


SUBMITTERS = [
    Submitter(WRITER_TOKEN, WRITER_NAME),
    Submitter(OTHER_WRITER_TOKEN, OTHER_WRITER_NAME),
    *(Submitter(COLLECTOR_TOKEN, COLLECTOR_NAME, writer) for writer in WRITERS),
]


@dataclass
class Case:
    kind: str
    text: str
    writer_label: str
    submitter: Submitter
    id: str = ""
    task_id: int = 0
    annotations: dict[str, int] = field(default_factory=dict)  # "A" -> id of that annotator's vote
    final_votes: dict[str, str | None] = field(default_factory=dict)  # "A" -> label of the current vote


def build_cases() -> list[Case]:
    texts = iter(
        [
            "The ending made me smile for a week.",
            "Crème brûlée was perfect, merci beaucoup! 😍",
            "这家餐厅的服务非常好，我很满意。",  # noqa: RUF001
            "Honestly the best support call I have ever had.",
            "Battery lasts two full days, impressive.",
            "The hotel staff went out of their way for us.",
            "Fast delivery and the box was intact.",
            "I would watch it again tomorrow.",
            "Not worth the ticket price at all.",
            "The app crashes every time I open it.",
            "Cold soup and a rude waiter.",
            "Three hours of my life I will not get back.",
            "Well, that was something else entirely.",
            "The plot twist was unexpected, to say the least.",
            "It did exactly what the box said.",
            "The sequel is nothing like the first one.",
            "Support answered within the hour.",
            "The room had a view of the car park.",
            "They changed the recipe again.",
            "Interesting choice of colours for a hospital.",
            "The update moved every button.",
            "Great, another meeting that could have been an email.",
            "This is fine.",
            "Sure, the food arrives eventually.",
            "Lovely weather for ducks today.",
            "The cast clearly had fun making it.",
            "My order arrived, in a manner of speaking.",
            "Nothing happened for the first hour, then everything did.",
            "Quiet street, thin walls.",
            "The museum was closed on the one day we could go.",
            "It rained all week but the cabin was cosy.",
            "The printer works if you talk to it nicely.",
            "The water is wet.",
            "The train leaves at nine.",
            "Paris is in France.",
        ]
    )
    plan = (
        [("accept", POS)] * 5
        + [("accept", NEG)] * 3
        + [("reject", POS)] * 2
        + [("reject", NEG)] * 2
        + [("escalate_accept", POS)] * 2
        + [("escalate_accept", NEG)] * 2
        + [("escalate_reject", POS)] * 3
        + [("escalate_split", POS)]
        + [("flag", NEG)] * 2
        + [("changed_vote", POS)] * 2
        + [("deleted_vote", NEG)] * 2
        + [("cancelled", POS)] * 2
        + [("duplicate", POS)] * 2
        + [("lost_webhook", NEG)] * 2
        + [("not_fooled", NEU)] * 3
    )
    return [
        Case(kind, next(texts), label, SUBMITTERS[i % len(SUBMITTERS)])
        for i, (kind, label) in enumerate(plan)
    ]


def other(label: str) -> str:
    return NEG if label == POS else POS


class Round:
    """Helpers over one round of the live service and the real Label Studio."""

    def __init__(self, service: LiveService, label_studio: Any, annotators: list[Any]) -> None:
        self.service = service
        self.ls_server = label_studio
        self.ls = LabelStudio(base_url=label_studio.url, api_key=label_studio.api_key)
        self.annotators = dict(zip("ABCD", annotators, strict=False))
        self.id = 0

    def candidate(self, case: Case) -> dict[str, Any]:
        """The candidate as the API shows it, once the round's webhooks so far were read back."""
        wait_verified(self.service.call, self.id)
        response = self.service.call("GET", f"/api/candidates/{case.id}")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def status(self, case: Case) -> str:
        return str(self.candidate(case)["status"])

    def vote(self, case: Case, who: str, label: str | None, **kwargs: Any) -> int:
        annotation_id = int(self.ls_server.annotate(case.task_id, self.annotators[who].id, label, **kwargs))
        if not kwargs.get("cancelled"):
            case.annotations[who] = annotation_id
            case.final_votes[who] = label
        return annotation_id

    def wait_overlap(self, case: Case, overlap: int) -> None:
        def raised() -> bool:
            task = self.ls.tasks.get(id=case.task_id)
            return int(task.overlap) == overlap and not task.is_labeled

        wait_for(f"task {case.task_id} overlap {overlap}", raised, timeout_s=30.0)


def test_validation_loop_end_to_end(
    live_service: LiveService, label_studio_server: Any, label_studio_annotators: list[Any], tmp_path: Path
) -> None:
    rnd = Round(live_service, label_studio_server, label_studio_annotators)
    cases = build_cases()
    assert len(cases) >= 30

    # A lead creates the round.
    created = live_service.call(
        "POST", "/api/rounds", json={"name": "e2e round", "task": "sentiment", "model": "default"}
    )
    assert created.status_code == 201, created.text
    round_body = created.json()
    rnd.id = round_body["id"]
    assert round_body["labels"] == [POS, NEG, NEU]
    assert round_body["model_hash"].startswith("sha256:")
    assert round_body["state"] == "open"
    project_id = round_body["label_studio_project_id"]
    project = rnd.ls.projects.get(id=project_id)
    assert project.maximum_annotations == 2

    # Writers (and a collector for its writers) submit; the model answers at once.
    for case in cases:
        response = live_service.call(
            "POST",
            f"/api/rounds/{rnd.id}/candidates",
            token=case.submitter.token,
            json={"text": case.text, "writer_label": case.writer_label, **case.submitter.body},
        )
        assert response.status_code == 201, response.text
        body = response.json()
        case.id = body["id"]
        assert body["model_prediction"] == NEU
        assert set(body["model_probabilities"]) == {POS, NEG, NEU}
        assert abs(sum(body["model_probabilities"].values()) - 1) < 1e-5
        assert body["fooled"] is (case.writer_label != NEU)
        assert body["status"] == ("queued" if body["fooled"] else "not_fooled")

    # The background worker pushes the fooled ones to Label Studio in bulk, blind.
    fooled = [c for c in cases if c.kind != "not_fooled"]
    wait_for(
        "every fooled candidate in Label Studio",
        lambda: all(rnd.status(c) == "in_validation" for c in fooled),
        timeout_s=30.0,
    )
    for case in cases:
        body = rnd.candidate(case)
        if case.kind == "not_fooled":
            assert body["status"] == "not_fooled" and body["label_studio_task_id"] is None
            continue
        case.task_id = body["label_studio_task_id"]
        task = rnd.ls.tasks.get(id=case.task_id)
        assert task.data == {"candidate_id": case.id, "text": case.text}  # no writer label, no model answer
    task_ids = [t.id for t in rnd.ls.tasks.list(project=project_id)]
    assert sorted(task_ids) == sorted(c.task_id for c in fooled)  # each imported exactly once

    by_kind: dict[str, list[Case]] = {}
    for case in cases:
        by_kind.setdefault(case.kind, []).append(case)

    for case in by_kind["accept"]:
        rnd.vote(case, "A", case.writer_label)
        assert rnd.status(case) == "in_validation"
        rnd.vote(case, "B", case.writer_label)
        assert rnd.status(case) == "accepted"

    for case in by_kind["reject"]:
        rnd.vote(case, "A", other(case.writer_label))
        rnd.vote(case, "B", other(case.writer_label))
        body = rnd.candidate(case)
        assert body["status"] == "rejected"
        assert body["decision"]["validators_label"] == other(case.writer_label)

    for kind, third in (("escalate_accept", "writer"), ("escalate_reject", "other"), ("escalate_split", NEU)):
        for case in by_kind[kind]:
            rnd.vote(case, "A", case.writer_label)
            rnd.vote(case, "B", other(case.writer_label))
            body = rnd.candidate(case)
            assert body["status"] == "escalated"
            assert body["wanted_votes"] == 3
            rnd.wait_overlap(case, 3)  # Label Studio now asks for a third annotation
            label = {"writer": case.writer_label, "other": other(case.writer_label)}.get(third, third)
            rnd.vote(case, "C", label)
            body = rnd.candidate(case)
            if kind == "escalate_accept":
                assert body["status"] == "accepted"
                assert body["agreement"]["writer_label_share"] == pytest.approx(2 / 3)
            else:
                assert body["status"] == "rejected"
                expected = other(case.writer_label) if kind == "escalate_reject" else None
                assert body["decision"]["validators_label"] == expected

    for case in by_kind["flag"]:
        rnd.vote(case, "A", case.writer_label, flag_reason="This is two sentences glued together")
        assert rnd.status(case) == "in_validation"
        rnd.vote(case, "B", None, flag_reason="Not a real review")
        body = rnd.candidate(case)
        assert body["status"] == "flagged"
        reasons = sorted(v["reason"] for v in body["votes"])
        assert reasons == ["Not a real review", "This is two sentences glued together"]

    for case in by_kind["changed_vote"]:
        rnd.vote(case, "A", case.writer_label)
        rnd.vote(case, "B", case.writer_label)
        assert rnd.status(case) == "accepted"
        rnd.ls_server.update_annotation(case.annotations["B"], other(case.writer_label))
        case.final_votes["B"] = other(case.writer_label)
        assert rnd.status(case) == "escalated"
        rnd.wait_overlap(case, 3)
        rnd.vote(case, "C", other(case.writer_label))
        assert rnd.status(case) == "rejected"
        history = [h["outcome"] for h in rnd.candidate(case)["history"]]
        assert "accepted" in history and history[-1] == "rejected"

    for case in by_kind["deleted_vote"]:
        rnd.vote(case, "A", case.writer_label)
        rnd.vote(case, "B", other(case.writer_label))
        assert rnd.status(case) == "escalated"
        rnd.ls_server.delete_annotation(case.annotations.pop("B"))
        del case.final_votes["B"]
        body = rnd.candidate(case)
        assert body["status"] == "in_validation" and len(body["votes"]) == 1
        rnd.vote(case, "D", case.writer_label)
        assert rnd.status(case) == "accepted"

    for case in by_kind["cancelled"]:
        rnd.vote(case, "A", case.writer_label, cancelled=True)
        body = rnd.candidate(case)
        assert body["status"] == "in_validation"
        assert body["votes"] == [] and body["cancelled_annotations"] == 1
        rnd.vote(case, "B", case.writer_label)
        rnd.vote(case, "C", case.writer_label)
        body = rnd.candidate(case)
        assert body["status"] == "accepted" and len(body["votes"]) == 2

    for case in by_kind["duplicate"]:
        rnd.vote(case, "A", other(case.writer_label))
        rnd.vote(case, "A", case.writer_label)  # the same annotator again: the latest wins
        body = rnd.candidate(case)
        assert body["status"] == "in_validation"
        assert [v["label"] for v in body["votes"]] == [case.writer_label]
        rnd.vote(case, "B", case.writer_label)
        body = rnd.candidate(case)
        assert body["status"] == "accepted" and len(body["votes"]) == 2

    # Webhooks that never arrive: the service is not listening while annotators vote.
    live_service.stop_listening()
    try:
        for case in by_kind["lost_webhook"]:
            rnd.vote(case, "A", case.writer_label)
            rnd.vote(case, "C", case.writer_label)
    finally:
        live_service.start_listening()
    for case in by_kind["lost_webhook"]:
        assert rnd.status(case) == "in_validation" and rnd.candidate(case)["votes"] == []
    synced = live_service.call("POST", f"/api/rounds/{rnd.id}/sync")
    assert synced.status_code == 200, synced.text
    assert synced.json()["added_or_updated"] == 4
    for case in by_kind["lost_webhook"]:
        assert rnd.status(case) == "accepted"

    # A second sync changes nothing: stored votes already equal Label Studio's.
    again = live_service.call("POST", f"/api/rounds/{rnd.id}/sync").json()
    assert again["added_or_updated"] == 0 and again["deleted"] == 0 and again["decisions_changed"] == 0

    expected_status = {
        "accept": "accepted",
        "reject": "rejected",
        "escalate_accept": "accepted",
        "escalate_reject": "rejected",
        "escalate_split": "rejected",
        "flag": "flagged",
        "changed_vote": "rejected",
        "deleted_vote": "accepted",
        "cancelled": "accepted",
        "duplicate": "accepted",
        "lost_webhook": "accepted",
        "not_fooled": "not_fooled",
    }
    for case in cases:
        body = rnd.candidate(case)
        assert body["status"] == expected_status[case.kind], case.kind
        votes = {v["annotator"]: v["label"] for v in body["votes"]}
        expected_votes = {
            pseudonym(PSEUDONYM_SECRET, "annotator", str(rnd.annotators[who].id)): label
            for who, label in case.final_votes.items()
        }
        assert votes == expected_votes, case.kind
        if body["decision"] is not None:
            assert body["decision"]["rule_version"] == RULE_VERSION

    # Round figures.
    summary = live_service.call("GET", f"/api/rounds/{rnd.id}", token=WRITER_TOKEN).json()
    accepted = [c for c in cases if expected_status[c.kind] == "accepted"]
    counts = summary["counts"]
    assert counts["collected"] == len(cases)
    assert counts["fooled"] == len(fooled)
    assert counts["by_status"] == {
        "accepted": len(accepted),
        "flagged": 2,
        "not_fooled": 3,
        "rejected": sum(1 for c in cases if expected_status[c.kind] == "rejected"),
    }
    assert summary["mer"] == pytest.approx(len(fooled) / len(cases))
    assert summary["vmer"] == pytest.approx(len(accepted) / len(cases))
    alpha = summary["agreement"]
    assert alpha["level"] == "nominal" and alpha["undefined_reason"] is None
    assert -1 <= alpha["alpha"] <= 1

    # The round dataset over HTTP: exactly the accepted candidates, with provenance.
    response = live_service.call("GET", f"/api/rounds/{rnd.id}/dataset?format=jsonl")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("application/x-ndjson")
    raw_export = response.content.decode("utf-8")
    records = [json.loads(line) for line in raw_export.splitlines()]
    check_dataset(records, accepted, rnd, round_body)
    for secret in SECRETS:
        assert secret not in raw_export
    for writer in [*WRITERS, WRITER_NAME, OTHER_WRITER_NAME]:  # raw writer ids and writers' token names
        assert writer not in raw_export
    for annotator in label_studio_annotators:
        assert annotator.email not in raw_export and annotator.username not in raw_export

    # The same dataset from the command line, as JSONL and as Parquet (UTF-8 round trip).
    env = {
        **os.environ,
        "DYNAVAL_DATABASE_URL": live_service.services.settings.resolved_database_url,
        "DYNAVAL_DATA_DIR": str(tmp_path / "cli-data"),
        "DYNAVAL_PSEUDONYM_SECRET": PSEUDONYM_SECRET,
        "DYNAVAL_SIGNING_SECRET": SIGNING_SECRET,
        "DYNAVAL_WEBHOOK_SECRET": "cli-webhook-secret-0123456789",
        "DYNAVAL_WRITER_TOKENS": WRITER_TOKEN,
        "DYNAVAL_LEAD_TOKENS": LEAD_TOKEN,
    }
    for fmt in ("jsonl", "parquet"):
        out = tmp_path / f"round.{fmt}"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "dynaval.entrypoints.cli",
                "export",
                "--round",
                str(rnd.id),
                "--format",
                fmt,
                "--out",
                str(out),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert f"wrote {len(accepted)} accepted examples" in done.stdout
        if fmt == "jsonl":
            assert out.read_text(encoding="utf-8") == raw_export
        else:
            table = pq.read_table(io.BytesIO(out.read_bytes())).to_pylist()
            assert [row["example_id"] for row in table] == [r["example_id"] for r in records]
            assert [row["text"] for row in table] == [r["inputs"]["text"] for r in records]
            assert [json.loads(row["votes"]) for row in table] == [r["votes"] for r in records]
    non_ascii = {c.text for c in accepted if not c.text.isascii()}
    assert len(non_ascii) == 2 and non_ascii <= {r["inputs"]["text"] for r in records}

    # The round's agreement over HTTP, and the same alpha from Label Studio's own export.
    agreement = live_service.call("GET", f"/api/rounds/{rnd.id}/agreement?bootstrap=200&seed=3").json()
    assert agreement["alpha"] == pytest.approx(alpha["alpha"], abs=1e-12)
    low, high = agreement["ci95"]
    assert low <= agreement["alpha"] <= high
    assert {row["annotator"] for row in agreement["per_annotator"]} == {
        pseudonym(PSEUDONYM_SECRET, "annotator", str(a.id)) for a in rnd.annotators.values()
    }
    assert agreement["validation_cost"]["validated_candidates"] == len(fooled)
    aggregate = agreement["dawid_skene"]
    assert {row["annotator"] for row in aggregate["annotators"]} == {
        row["annotator"] for row in agreement["per_annotator"]
    }
    assert aggregate["labels"] == [POS, NEG, NEU]
    export_file = tmp_path / "label-studio-export.json"
    export_file.write_bytes(
        b"".join(
            rnd.ls.projects.exports.download_sync(project_id, export_type="JSON", download_all_tasks=True)
        )
    )
    command = [
        sys.executable,
        "-m",
        "dynaval.entrypoints.cli",
        "agreement",
        str(export_file),
        "--bootstrap",
        "0",
    ]
    ambiguous = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert ambiguous.returncode == 2 and "--from-name" in ambiguous.stderr  # label and flag are both choices
    assert len(ambiguous.stderr.strip().splitlines()) == 1
    done = subprocess.run(
        [*command, "--from-name", "label", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    from_export = json.loads(done.stdout)
    assert from_export["alpha"] == pytest.approx(alpha["alpha"], abs=1e-12)
    assert (
        from_export["items"] == alpha["items"] and from_export["pairable_values"] == alpha["pairable_values"]
    )
    assert from_export["source"]["cancelled_ignored"] == 2
    assert from_export["dawid_skene"]["item_count"] == len(fooled)  # every validated candidate got a vote


def check_dataset(
    records: list[dict[str, Any]], accepted: list[Case], rnd: Round, round_body: dict[str, Any]
) -> None:
    assert sorted(r["example_id"] for r in records) == sorted(c.id for c in accepted)
    by_id = {c.id: c for c in accepted}
    for record in records:
        case = by_id[record["example_id"]]
        assert record["round"]["id"] == rnd.id and record["round"]["name"] == "e2e round"
        assert record["task_type"] == "sentiment"
        assert record["inputs"] == {"text": case.text}
        assert record["writer_label"] == case.writer_label
        assert record["writer"] == case.submitter.pseudonym
        assert record["collected_by"] == (COLLECTOR_NAME if case.submitter.writer_id else None)
        assert record["submitted_at"]
        model = record["model"]
        assert model["hash"] == round_body["model_hash"]
        assert model["prediction"] == NEU and model["fooled"] is True
        assert verify_prediction(
            SIGNING_SECRET,
            model["signature"],
            model["hash"],
            record["inputs"],
            model["prediction"],
            model["probabilities"],
        )
        assert not verify_prediction(
            SIGNING_SECRET,
            model["signature"],
            model["hash"],
            record["inputs"],
            POS,
            model["probabilities"],
        )
        assert record["label_studio"] == {
            "project_id": round_body["label_studio_project_id"],
            "task_id": case.task_id,
        }
        expected_votes = sorted(
            (
                pseudonym(PSEUDONYM_SECRET, "annotator", str(rnd.annotators[who].id)),
                label,
                case.annotations[who],
            )
            for who, label in case.final_votes.items()
        )
        got_votes = sorted((v["annotator"], v["label"], v["annotation_id"]) for v in record["votes"])
        assert got_votes == expected_votes
        for vote in record["votes"]:
            assert vote["flagged"] is False and vote["created_at"] and vote["updated_at"]
        assert record["agreement"]["majority_label"] == case.writer_label
        decision = record["decision"]
        assert decision["outcome"] == "accepted"
        assert decision["rule_version"] == RULE_VERSION
        assert decision["policy"]["min_votes"] == 2 and decision["decided_at"]
