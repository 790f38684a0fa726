"""A writer's own candidates and figures (the writers' page), on fakes of the ports.

MER is the share of the writer's own candidates that fooled the model, VMER the share that fooled
it and were accepted by validation; both count every candidate the writer submitted in the round
(still scoring, not fooled, in validation...), as the round's own figures do, and nobody else's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dynaval.domain.errors import NotFound
from dynaval.domain.validation.candidate import Candidate, CandidateStatus
from dynaval.domain.validation.policy import DecisionPolicy
from dynaval.domain.validation.round import Round
from dynaval.service_layer.validation import candidate_views
from tests.unit.fakes import FakeStore, fake_services

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
S = CandidateStatus


def store_with(rows: list[tuple[str, CandidateStatus, bool | None]], *, round_id: int = 1) -> FakeStore:
    """A round and, for each (submitter, status, fooled), one candidate, a minute apart."""
    store = FakeStore()
    for rid in (1, 2):
        store.rounds[rid] = Round(
            id=rid,
            name=f"round {rid}",
            task_type="sentiment",
            model_dir="/models/m",
            model_name="m",
            model_hash="sha256:m",
            labels=["positive", "negative", "neutral"],
            policy=DecisionPolicy().to_dict(),
        )
    for i, (submitter, status, fooled) in enumerate(rows):
        cid = f"c{i:02d}"
        store.candidates[cid] = Candidate(
            id=cid,
            round_id=round_id,
            inputs={"text": f"text {i}"},
            writer_label="positive",
            writer_id=submitter,
            submitted_by=submitter,
            status=status,
            fooled=fooled,
            model_prediction=None if fooled is None else ("neutral" if fooled else "positive"),
            submitted_at=T0 + timedelta(minutes=i),
        )
    return store


ANA = [
    ("ana", S.ACCEPTED, True),
    ("ana", S.ACCEPTED, True),
    ("ana", S.REJECTED, True),
    ("ana", S.ESCALATED, True),
    ("ana", S.NOT_FOOLED, False),
    ("ana", S.ACCEPTED, False),  # validated though it did not fool: accepted, yet no model error
    ("ana", S.SCORING, None),  # the model has not answered yet: submitted, not fooled (yet)
    ("ana", S.FLAGGED, True),
]
BO = [("bo", S.ACCEPTED, True), ("bo", S.QUEUED, True)]


def test_mer_and_vmer_are_shares_of_the_writers_own_submissions() -> None:
    services = fake_services(store_with([*ANA, *BO]))
    ana = candidate_views.own_candidates(services, 1, submitted_by="ana")
    assert ana["total"] == ana["counts"]["collected"] == 8
    assert (ana["counts"]["fooled"], ana["counts"]["accepted_fooled"]) == (5, 2)
    assert ana["mer"] == pytest.approx(5 / 8)
    assert ana["vmer"] == pytest.approx(2 / 8)
    assert ana["counts"]["still_in_validation"] == 2  # escalated, scoring
    bo = candidate_views.own_candidates(services, 1, submitted_by="bo")
    assert (bo["total"], bo["mer"], bo["vmer"]) == (2, 1.0, 0.5)
    assert {c["id"] for c in bo["candidates"]} == {"c08", "c09"}


def test_no_candidates_means_no_rates_and_an_unknown_round_is_not_found() -> None:
    services = fake_services(store_with(ANA))
    nobody = candidate_views.own_candidates(services, 1, submitted_by="carla")
    assert (nobody["total"], nobody["mer"], nobody["vmer"], nobody["candidates"]) == (0, None, None, [])
    other_round = candidate_views.own_candidates(services, 2, submitted_by="ana")
    assert other_round["total"] == 0
    with pytest.raises(NotFound) as refused:
        candidate_views.own_candidates(services, 3, submitted_by="ana")
    assert refused.value.field == "round_id"


def test_pages_go_from_the_newest_and_keep_the_figures() -> None:
    services = fake_services(store_with([*ANA, *BO]))
    pages = [
        candidate_views.own_candidates(services, 1, submitted_by="ana", page=p, limit=3) for p in (1, 2, 3, 4)
    ]
    assert [[c["id"] for c in p["candidates"]] for p in pages] == [
        ["c07", "c06", "c05"],
        ["c04", "c03", "c02"],
        ["c01", "c00"],
        [],
    ]
    assert {(p["total"], p["mer"], p["vmer"]) for p in pages} == {(8, 5 / 8, 2 / 8)}
    newest = pages[0]["candidates"][0]
    assert newest == {
        "id": "c07",
        "status": "flagged",
        "inputs": {"text": "text 7"},
        "writer_label": "positive",
        "model_prediction": "neutral",
        "model_probabilities": None,
        "fooled": True,
        "submitted_at": (T0 + timedelta(minutes=7)).isoformat(),
        "decided_at": None,
        "rationale": None,
    }
