"""``dynaval retraining set`` and ``show`` on SQLite and PostgreSQL, tried as a new user would: a
policy is set, shown with what it waits for, refused with one line naming a bad value (nothing
changed), and turned off; every step is in the retraining audit log."""

from __future__ import annotations

import random

import pytest

from dynaval.adapters.db.orm import RoundRow
from dynaval.domain.validation.policy import DecisionPolicy
from dynaval.entrypoints.cli.main import main
from dynaval.service_layer.retraining.policies import policy_view
from dynaval.service_layer.services import Services
from tests.fixtures.service import cli_environment
from tests.support.release_seed import seed_frozen_round


def test_a_lead_sets_shows_and_turns_off_a_policy_from_the_command_line(
    services: Services, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert services.database is not None
    seed_frozen_round(
        services.database, task_type="sentiment", labels=["positive", "negative", "neutral"], fields=["text"],
        accepted=12, writers=4, rng=random.Random(3),
    )  # fmt: skip
    cli_environment(services, monkeypatch)

    assert (
        main(
            ["retraining", "set", "--task", "sentiment", "--every", "5", "--max-flips", "1", "--epochs", "2"]
        )
        == 0
    )
    shown = capsys.readouterr().out
    assert (
        "sentiment: retrain after every 5 newly accepted examples" in shown and "at most 1 negative" in shown
    )
    # Its count starts now: the 12 examples accepted before it do not make it due.
    assert "new examples: 0 of 5; due: no" in shown
    view = policy_view(services, "sentiment")
    assert view["accepted"] == 12 and view["policy"]["epochs"] == 2 and view["updated_by"]

    for argv, field in (
        (["--every", "0"], "every"),
        (["--every", "5", "--learning-rate", "3"], "learning_rate"),
        (["--every", "5", "--base", "shipped", "--batch-size", "0"], "batch_size"),
        (["--every", "5", "--max-flips", "-1"], "max_flips"),
    ):
        assert main(["retraining", "set", "--task", "sentiment", *argv]) == 2
        said = capsys.readouterr()
        assert said.err.startswith(f"dynaval: {field}: ") and "Traceback" not in said.err
        assert said.err.count("\n") == 1
    assert policy_view(services, "sentiment")["policy"]["epochs"] == 2  # nothing changed
    assert main(["retraining", "set", "--task", "nope", "--every", "5"]) == 2
    assert "task_type: no task type 'nope'" in capsys.readouterr().err

    assert main(["retraining", "show", "--task", "sentiment"]) == 0
    assert "waiting for: 5 more accepted examples (0 of 5)" in capsys.readouterr().out
    assert main(["retraining", "set", "--task", "sentiment", "--off"]) == 0
    assert "sentiment: retraining is off" in capsys.readouterr().out
    view = policy_view(services, "sentiment")
    assert view["on"] is False and [e["step"] for e in view["events"]] == ["policy-set", "policy-set"]


def test_a_lead_starts_a_run_now_and_waits_for_it_from_the_command_line(
    services: Services, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No worker runs here: the run stays queued, ``--wait`` gives up at its timeout (exit 2,
    saying how to wait again), and a second run is refused while the first is active."""
    assert services.database is not None
    cli_environment(services, monkeypatch)
    assert main(["retraining", "run", "--task", "sentiment"]) == 2
    assert "task_type: sentiment has no open adversarial round" in capsys.readouterr().err

    with services.database.unit_of_work() as session:
        session.add(
            RoundRow(
                name="open round", task_type="sentiment", model_dir="/models/x", model_name="x",
                model_hash="sha256:" + "ab" * 32, labels=["positive", "negative", "neutral"],
                policy=DecisionPolicy().to_dict(),
            )
        )  # fmt: skip
        session.commit()
    assert main(["retraining", "run", "--task", "sentiment", "--wait", "--timeout", "0.5"]) == 2
    waited = capsys.readouterr().err
    assert "is still queued after 0.5 s; wait again with `dynaval jobs wait" in waited
    assert main(["retraining", "run", "--task", "sentiment"]) == 2
    assert "(retrain 'sentiment') is queued: wait for it or cancel it" in capsys.readouterr().err

    view = policy_view(services, "sentiment")
    run = view["runs"][0]
    assert run["kind"] == "retrain" and run["state"] == "queued" and run["params"]["round_id"]
    assert [e["step"] for e in view["events"]] == ["triggered"]
    assert view["events"][0]["by"] != "retraining" and view["events"][0]["detail"]["every"] is None
    assert main(["jobs", "cancel", str(run["id"])]) == 0
