"""The regression loop's results, made by the real use cases, for the tests of the models page.

A frozen sentiment round (written straight into the database, as ``release_seed`` does) is
released as 1.0.0; a frozen capture round adds failure captures. Three tiny real models that ignore
their input are evaluated and gated: A answers "positive" (evaluated, then shipped), B "negative"
(gated against A: it loses every positive case, so its gate run fails with those flips), A2
"positive" with other weights (gated: passes; as the third model evaluated it makes every neutral
case suspect, since no model answers "neutral"). A lead then retires one suspect. Every text holds
markup, and so does the retirement's reason: the page must show it as text.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import insert, select, update

from dynaval.adapters.db.orm import CandidateRow, CaptureRow
from dynaval.adapters.predictor import hash_model_folder
from dynaval.domain.releases.release import SplitRule
from dynaval.service_layer.regression import evaluation, gate, model_catalog
from dynaval.service_layer.regression import suite as regression_suite
from dynaval.service_layer.releases.releases import ReleaseRequest, create_release
from dynaval.service_layer.services import Services
from tests.support.release_seed import seed_frozen_round
from tests.support.tiny_model import build_tiny_model

SENTIMENT = ["positive", "negative", "neutral"]
MARKUP = ' <b>bold</b> & <script>alert("case")</script>'
RETIRE_REASON = "The label is wrong <i>(the source says so)</i>"
LEAD = "grace"
"""The lead who ships, gates and retires (a named lead token of the tests' settings)."""
ANSWERS = {"A": "positive", "B": "negative", "A2": "positive"}


def build_models(root: Path) -> dict[str, Path]:
    """The three tiny models (A and A2 answer the same, with other weights and another hash)."""
    return {
        "A": build_tiny_model(root / "model-a", always="positive"),
        "B": build_tiny_model(root / "model-b", always="negative"),
        "A2": build_tiny_model(root / "model-a2", always="positive", seed=1),
    }


@dataclass
class ModelsScenario:
    hashes: dict[str, str]
    """"A", "B", "A2" -> the model's content hash."""
    cases: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    """Every case the suite took: id -> (split, label, text)."""
    retired_id: str = ""
    failed_run: int = 0
    passed_run: int = 0

    def current(self) -> dict[str, tuple[str, str, str]]:
        """The cases still in the suite."""
        return {k: v for k, v in self.cases.items() if k != self.retired_id}

    def split_cases(self, split: str) -> list[str]:
        return sorted(k for k, (s, _label, _text) in self.current().items() if s == split)


def _mark_up_texts(services: Services, round_id: int) -> None:
    assert services.database is not None
    with services.database.engine.begin() as connection:
        rows = connection.execute(
            select(CandidateRow.id, CandidateRow.inputs).where(CandidateRow.round_id == round_id)
        ).all()
        for candidate_id, inputs in rows:
            connection.execute(
                update(CandidateRow)
                .where(CandidateRow.id == candidate_id)
                .values(inputs={"text": inputs["text"] + MARKUP})
            )


def _capture_round(services: Services) -> None:
    """A frozen round whose accepted candidates are failure captures (they join the suite)."""
    assert services.database is not None
    captured = seed_frozen_round(
        services.database, task_type="sentiment", labels=SENTIMENT, fields=["text"], accepted=3,
        writers=2, rng=random.Random(11), name="captures", annotation_base=10**6,
    )  # fmt: skip
    _mark_up_texts(services, captured.round_id)
    at = datetime(2026, 11, 30, tzinfo=UTC)
    with services.database.engine.begin() as connection:
        connection.execute(
            insert(CaptureRow),
            [
                {"candidate_id": c, "round_id": captured.round_id, "source": "monitoring",
                 "observed_output": "positive", "model_name": "prod", "model_version": "7",
                 "observed_at": at, "reference": None, "reporter": "monitor", "reported_at": at}
                for c in captured.candidate_ids
            ],
        )  # fmt: skip


def seed_models_scenario(services: Services, models: dict[str, Path]) -> ModelsScenario:
    """Release, captures, evaluations, two gate runs, suspects and a retired case, all real."""
    assert services.database is not None
    round_id = seed_frozen_round(
        services.database, task_type="sentiment", labels=SENTIMENT, fields=["text"], accepted=120,
        writers=30, rng=random.Random(7), weak_share=0.0, name="round one",
    ).round_id  # fmt: skip
    _mark_up_texts(services, round_id)
    create_release(
        services,
        ReleaseRequest(round_ids=[round_id], version="1.0.0", created_by="test lead", rule=SplitRule()),
    )
    _capture_round(services)
    scenario = ModelsScenario(hashes={key: hash_model_folder(folder) for key, folder in models.items()})

    evaluation.evaluate(services, models["A"], name="model A")
    model_catalog.ship_model(services, scenario.hashes["A"], by=LEAD, reason="the first model")
    failed = gate.run_gate(services, models["B"], by=LEAD)
    passed = gate.run_gate(services, models["A2"], by=LEAD)
    assert not failed.result.passed and passed.result.passed
    scenario.failed_run, scenario.passed_run = failed.run_id, passed.run_id

    for case in regression_suite.list_cases(services):
        scenario.cases[case.id] = (case.split, case.label, case.inputs["text"])
    suspects = sorted(c.id for c in regression_suite.list_cases(services, suspect=True))
    assert suspects == sorted(k for k, (_s, label, _t) in scenario.cases.items() if label == "neutral")
    scenario.retired_id = suspects[0]
    regression_suite.retire_case(services, scenario.retired_id, by=LEAD, reason=RETIRE_REASON)
    return scenario
