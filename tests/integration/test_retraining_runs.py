"""A retraining run run again after its worker stopped, on SQLite and PostgreSQL: once the earlier
attempt registered its model (a swapped round may be answering with it), the run never trains
again into that folder nor deletes it; it fails saying so, and the audit log says where it stopped."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from dynaval.adapters.db.orm import RoundRow
from dynaval.domain.validation.policy import DecisionPolicy
from dynaval.model_training.retraining_run import retrained_folder
from dynaval.service_layer.jobs import jobs
from dynaval.service_layer.regression.model_catalog import register_model
from dynaval.service_layer.retraining.policies import policy_view, start_run_now
from dynaval.service_layer.services import Services
from tests.support.release_seed import seed_frozen_round


def test_a_run_never_trains_again_over_a_model_an_earlier_attempt_registered(
    services: Services, tiny_model_dir: Path
) -> None:
    assert services.database is not None
    seed_frozen_round(
        services.database, task_type="sentiment", labels=["positive", "negative", "neutral"], fields=["text"],
        accepted=30, writers=10, rng=random.Random(2),
    )  # fmt: skip
    base = register_model(services, tiny_model_dir)
    with services.database.unit_of_work() as session:
        session.add(
            RoundRow(
                name="open round", task_type="sentiment", model_dir=str(tiny_model_dir), model_name=base.name,
                model_hash=base.hash, labels=["positive", "negative", "neutral"],
                policy=DecisionPolicy().to_dict(),
            )
        )  # fmt: skip
        session.commit()
    job = start_run_now(services, "sentiment", by="lead")
    # What an earlier attempt left: its model, written and registered (then its worker stopped).
    out = retrained_folder(services, job)
    shutil.copytree(tiny_model_dir, out)
    (out / "README.md").write_text("the first attempt's card\n", encoding="utf-8")  # a model of its own
    register_model(services, out, name="left by the first attempt")
    assert job.id is not None

    ended = jobs.run_job(services, job.id)

    assert ended is not None and ended.state.value == "failed"
    assert ended.error is not None and "an earlier attempt of this run registered the model" in ended.error
    assert (out / "config.json").is_file()  # still there
    events = policy_view(services, "sentiment")["events"]
    assert [e["step"] for e in events][:2] == ["failed", "triggered"]
    assert "registered the model" in events[0]["detail"]["error"]
