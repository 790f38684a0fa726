"""Re-validation of suspect cases on SQLite and PostgreSQL, with our Label Studio port faked (the
end-to-end test, tests/e2e/test_revalidation.py, runs it against the real one): who may be sent,
never twice, what settling does, and what a revalidation round may not become (suite cases, a
release)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import update

from dynaval.adapters.db.orm import RoundRow
from dynaval.domain.errors import Conflict, InvalidInput
from dynaval.domain.releases.release import SplitRule
from dynaval.domain.validation.candidate import CandidateStatus
from dynaval.domain.validation.round import RoundKind
from dynaval.entrypoints.cli import main as cli
from dynaval.service_layer.regression import revalidation
from dynaval.service_layer.regression import suite as regression_suite
from dynaval.service_layer.releases.releases import ReleaseRequest, create_release
from dynaval.service_layer.services import Services
from tests.fixtures.service import EXPORTER_TOKEN, LEAD_TOKEN, cli_environment
from tests.integration.conftest import RecordedWork
from tests.support.label_studio_copy import LabelStudioCopy
from tests.support.release_seed import seed_suite


class ProjectMaker(LabelStudioCopy):
    """Our Label Studio port's fake, making projects and webhooks too (a round's creation asks)."""

    def create_project(self, *, title: str, label_config: str, overlap: int) -> int:
        return self.project_id

    def register_webhook(self, *, project_id: int, url: str, secret: str) -> int:
        return 1


@pytest.fixture
def suite(services: Services) -> Iterator[dict[str, list[str]]]:
    """Six cases of a frozen round, the two labelled "neutral" suspect; Label Studio faked."""
    services.label_studio = ProjectMaker(project_id=77)  # type: ignore[assignment]
    services.work = RecordedWork()
    cases = seed_suite(services, seed=5, suspect_label="neutral")
    neutral = sorted(c.id for c in cases if c.label == "neutral")
    assert len(neutral) == 2
    yield {"suspect": neutral, "other": sorted(c.id for c in cases if c.label != "neutral")}


def set_status(services: Services, candidate_id: str, status: CandidateStatus) -> None:
    with services.uow() as uow:
        candidate = uow.candidates.get(candidate_id, for_update=True)
        assert candidate is not None
        candidate.status = status
        uow.candidates.save(candidate)
        uow.commit()


def test_suspects_are_sent_once_blind_and_settled_by_their_outcome(
    services: Services, suite: dict[str, list[str]]
) -> None:
    rejected_case, confirmed_case = suite["suspect"]
    sent = revalidation.send_suspects_to_revalidation(services, case_ids=None, by="lead-ana")
    ((round_id, cases),) = sent.rounds.items()
    assert sorted(cases) == suite["suspect"] == sorted(sent.cases)
    with services.uow(read_only=True) as uow:
        round_ = uow.rounds.get(round_id)
        links = uow.revalidations.of_cases(cases)
        candidates = uow.candidates.get_many([r.candidate_id for r in links.values()])
        events = {c: uow.audit.of_candidate(c) for c in cases}
    assert round_.kind is RoundKind.REVALIDATION and round_.task_type == "sentiment" and not round_.has_model
    for case_id, link in links.items():
        candidate = candidates[link.candidate_id]
        assert candidate.id != case_id  # the task in Label Studio carries a fresh id, not the case's
        assert candidate.round_id == round_id and candidate.status is CandidateStatus.QUEUED
        assert candidate.writer_label == "neutral" and candidate.writer_id == "lead-ana"
        (event,) = events[case_id]
        assert event.action == "send_to_revalidation" and event.by == "lead-ana"
        assert str(round_id) in event.reason and link.candidate_id in event.reason

    # Not sent twice: every suspect is under re-validation, and naming one is refused.
    assert revalidation.send_suspects_to_revalidation(services, case_ids=None, by="lead-ana").rounds == {}
    with pytest.raises(Conflict) as twice:
        revalidation.send_suspects_to_revalidation(services, case_ids=[rejected_case], by="lead-bo")
    assert (
        twice.value.field == "cases" and rejected_case in str(twice.value) and "already" in str(twice.value)
    )
    queue = {c["id"]: c for c in revalidation.suspect_queue(services)}
    assert {c["revalidation_state"] for c in queue.values()} == {"under_revalidation"}
    assert queue[rejected_case]["revalidation"]["status"] == "queued"

    # Undecided: nothing settles. Decided while the round is open: nothing settles either, since a
    # later vote or an override may still change the decision.
    assert revalidation.settle_revalidations(services).waiting == 2
    set_status(services, links[rejected_case].candidate_id, CandidateStatus.REJECTED)
    set_status(services, links[confirmed_case].candidate_id, CandidateStatus.FLAGGED)
    settled = revalidation.settle_revalidations(services)
    assert (settled.retired, settled.confirmed, settled.waiting) == (0, 0, 2)
    set_status(services, links[confirmed_case].candidate_id, CandidateStatus.ACCEPTED)
    # Frozen, its decisions are final: the rejected case is retired, the accepted one confirmed.
    assert services.database is not None
    with services.database.engine.begin() as connection:
        connection.execute(update(RoundRow).where(RoundRow.id == round_id).values(state="frozen"))
    settled = revalidation.settle_revalidations(services)
    assert (settled.retired, settled.confirmed, settled.waiting) == (1, 1, 0)
    assert revalidation.settle_revalidations(services) == revalidation.Settled()  # idempotent

    (retired,) = regression_suite.list_cases(services, retired=True)
    assert retired.id == rejected_case and retired.retired_by == "system"
    assert f"round {round_id}" in (retired.retired_reason or "")
    assert links[rejected_case].candidate_id in (retired.retired_reason or "")
    with services.uow(read_only=True) as uow:
        logged = uow.audit.of_candidate(rejected_case)[-1]
        confirmed_log = uow.audit.of_candidate(confirmed_case)[-1]
        confirmed = uow.regression.case(confirmed_case)
    assert (logged.action, logged.by, logged.reason) == ("retire_case", "system", retired.retired_reason)
    assert confirmed.confirmed and not confirmed.suspect and not confirmed.retired
    assert confirmed_log.action == "confirm_case" and confirmed_log.by == "system"
    assert revalidation.suspect_queue(services) == []
    # A confirmed case is not marked suspect again when every model still fails it.
    with services.uow() as uow:
        assert uow.regression.mark_suspect([confirmed_case]) == 0
        uow.commit()

    # The round's accepted candidate is no new suite case, and the round is never released.
    assert regression_suite.sync_suite(services) == 0
    with pytest.raises(InvalidInput) as refused:
        create_release(
            services,
            ReleaseRequest(round_ids=[round_id], version="9.0.0", created_by="lead", rule=SplitRule()),
        )
    assert refused.value.field == "rounds" and "revalidation" in str(refused.value)


def test_a_frozen_round_leaves_its_undecided_cases_suspect_to_be_sent_again(
    services: Services, suite: dict[str, list[str]]
) -> None:
    first = revalidation.send_suspects_to_revalidation(services, case_ids=suite["suspect"][:1], by="lead")
    ((round_id, _),) = first.rounds.items()
    assert services.database is not None
    with services.database.engine.begin() as connection:
        connection.execute(update(RoundRow).where(RoundRow.id == round_id).values(state="frozen"))
    assert revalidation.settle_revalidations(services).unresolved == 1
    (queued,) = [c for c in revalidation.suspect_queue(services) if c["id"] == suite["suspect"][0]]
    assert queued["revalidation_state"] == "unresolved"
    again = revalidation.send_suspects_to_revalidation(services, case_ids=None, by="lead", name="second look")
    assert sorted(again.cases) == suite["suspect"]
    with services.uow(read_only=True) as uow:
        assert uow.rounds.get(next(iter(again.rounds))).name == "second look"


@pytest.mark.parametrize(
    ("which", "error", "words"),
    [
        ("unknown", InvalidInput, "no case"),
        ("other", Conflict, "not suspect"),
        ("retired", Conflict, "retired"),
    ],
)
def test_a_named_case_must_be_a_suspect_in_the_suite(
    services: Services, suite: dict[str, list[str]], which: str, error: type[Exception], words: str
) -> None:
    case_id = {"unknown": "no-such-case", "other": suite["other"][0], "retired": suite["suspect"][0]}[which]
    if which == "retired":
        regression_suite.retire_case(services, case_id, by="lead", reason="bad label")
    with pytest.raises(error) as refused:
        revalidation.send_suspects_to_revalidation(
            services, case_ids=[suite["suspect"][1], case_id], by="lead"
        )
    assert getattr(refused.value, "field", None) == "cases" and case_id in str(refused.value)
    assert words in str(refused.value)
    with services.uow(read_only=True) as uow:  # nothing was made, not even the round
        assert [r for r in uow.rounds.all() if r.kind is RoundKind.REVALIDATION] == []


def test_post_revalidate_and_the_suspect_queue(
    app: Flask, services: Services, suite: dict[str, list[str]]
) -> None:
    client = app.test_client()
    lead = {"Authorization": f"Bearer {LEAD_TOKEN}"}
    exporter = {"Authorization": f"Bearer {EXPORTER_TOKEN}"}
    assert client.post("/api/suite/revalidate", json={}, headers=exporter).status_code == 403
    assert client.get("/api/suite/suspects", headers=exporter).status_code == 403
    for body, field in (
        ({"cases": []}, "cases"),
        ({"cases": ["no-such-case"]}, "cases"),
        ({"cases": "abc"}, "cases"),
        ({"name": " \u200b "}, "name"),
        ({"round": 1}, "round"),
    ):
        answer = client.post("/api/suite/revalidate", json=body, headers=lead)
        assert answer.status_code == 422, (body, answer.json)
        assert answer.json["error"]["field"] == field, (body, answer.json)
    listed = client.get("/api/suite/suspects", headers=lead)
    assert listed.status_code == 200
    assert [c["revalidation_state"] for c in listed.json["cases"]] == ["not_sent", "not_sent"]
    answer = client.post("/api/suite/revalidate", json={"cases": suite["suspect"][:1]}, headers=lead)
    assert answer.status_code == 201, answer.json
    body: dict[str, Any] = answer.json
    assert body["cases"] == suite["suspect"][:1] and body["rounds"][0]["cases"] == suite["suspect"][:1]
    again = client.post("/api/suite/revalidate", json={"cases": suite["suspect"][:1]}, headers=lead)
    assert again.status_code == 409 and again.json["error"]["field"] == "cases"
    states = {
        c["id"]: c["revalidation_state"]
        for c in client.get("/api/suite/suspects", headers=lead).json["cases"]
    }
    assert states == {suite["suspect"][0]: "under_revalidation", suite["suspect"][1]: "not_sent"}


def test_cli_revalidate_refuses_bad_input_and_settle_reports(
    services: Services,
    suite: dict[str, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli_environment(services, monkeypatch)
    for argv, words in (
        (["--case", "no-such-case"], "no case"),
        (["--case", suite["other"][0]], "not suspect"),
        (["--name", "\u200b"], "name"),
    ):
        assert cli.main(["suite", "revalidate", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err and "Traceback" not in err
    assert cli.main(["suite", "settle"]) == 0
    assert "confirmed 0, retired 0" in capsys.readouterr().out
