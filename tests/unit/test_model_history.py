"""The models page's history, from models, rounds and gate runs made here: which model served
when (an open round's model serves now), in the order they first served, and why each model was
or was not shipped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dynaval.domain.regression.suite import RegisteredModel
from dynaval.domain.validation.round import Round, RoundState
from dynaval.service_layer.dashboard.model_history import history_lines

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def round_(round_id: int, model_hash: str, *, hours: int, closed_after: int | None) -> Round:
    return Round(
        id=round_id,
        name=f"round {round_id}",
        task_type="digits",
        model_dir="/m",
        model_name=f"model {model_hash}",
        model_hash=model_hash,
        labels=["0", "1"],
        policy={},
        state=RoundState.OPEN if closed_after is None else RoundState.CLOSED,
        created_at=T0 + timedelta(hours=hours),
        closed_at=None if closed_after is None else T0 + timedelta(hours=hours + closed_after),
    )


def model(model_hash: str, *, hours: int, shipped: bool = False) -> RegisteredModel:
    registered = RegisteredModel(model_hash, f"model {model_hash}", "/m", T0 + timedelta(hours=hours))
    return (
        registered.ship(by="lea", reason="better on digits", at=T0 + timedelta(hours=hours + 1))
        if shipped
        else registered
    )


def test_models_come_in_the_order_they_served_each_with_its_rounds_and_its_reason() -> None:
    lines = history_lines(
        [model("sha256:b", hours=0), model("sha256:a", hours=5, shipped=True), model("sha256:c", hours=6)],
        [
            round_(1, "sha256:a", hours=1, closed_after=2),
            round_(2, "sha256:b", hours=3, closed_after=None),
            round_(3, "", hours=4, closed_after=1),  # a capture round: no model
        ],
        {
            "sha256:c": {"id": 7, "passed": False, "negative_flips": [{}, {}], "max_flips": 1},
            "sha256:b": {"id": 6, "passed": True, "negative_flips": [], "max_flips": 0},
        },
    )
    # b was registered first but served after a: the serving order wins; c never served.
    assert [line.model_hash for line in lines] == ["sha256:a", "sha256:b", "sha256:c"]
    first, second, third = lines
    assert [(s.round_id, s.since, s.until) for s in first.served] == [
        (1, T0 + timedelta(hours=1), T0 + timedelta(hours=3))
    ]
    assert second.served[0].until is None  # open: it serves now
    assert first.why == "shipped by lea: better on digits" and first.shipped
    assert second.why == "not shipped: passed gate run #6 (0 negative flips, at most 0 allowed)"
    assert third.why == "not shipped: failed gate run #7, 2 negative flips (at most 1 allowed)"
    assert third.served == [] and third.first_seen == T0 + timedelta(hours=6)


def test_a_rounds_model_the_catalog_lacks_has_a_line_of_its_own() -> None:
    lines = history_lines([], [round_(1, "sha256:old", hours=0, closed_after=1)], {})
    assert [(line.name, line.registered_at, line.why) for line in lines] == [
        ("model sha256:old", None, "not shipped: never gated")
    ]
