"""A task type's retraining policy (settings, checks, when it is due) and the placement of writers
at their first accepted example, which keeps every held-out example out of training: pure domain
rules, no database."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaval.domain.errors import InvalidInput
from dynaval.domain.releases.release import SplitKind, SplitRule
from dynaval.domain.retraining.placement import OTHER_KIND, Ledger, drawn_kind
from dynaval.domain.retraining.policy import RetrainingPolicy, ShipMode, TrainFrom

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def policy(accepted: int = 0, **given_settings: Any) -> RetrainingPolicy:
    return RetrainingPolicy.set_by(
        "digits", {"every": 10, **given_settings}, accepted=accepted, by="lea", at=NOW
    )


def test_a_policy_takes_the_walkthroughs_settings_and_shows_them_as_they_were_set() -> None:
    made = policy(ship="swap", min_interval_s=600, base="shipped", max_flips=2, epochs=2, learning_rate=0.001)
    assert made.on and made.ship is ShipMode.SWAP and made.base is TrainFrom.SHIPPED
    assert made.settings() == {
        "every": 10,
        "ship": "swap",
        "min_interval_s": 600,
        "base": "shipped",
        "max_flips": 2,
        "epochs": 2,
        "seed": 13,
        "learning_rate": 0.001,
        "batch_size": 16,
        "with_seed_set": False,
    }
    assert made.updated_by == "lea" and made.updated_at == NOW


def test_the_defaults_are_the_dynabench_way_and_every_null_is_off() -> None:
    made = policy()
    assert made.ship is ShipMode.NEXT_ROUND and made.base is TrainFrom.ROUND and made.min_interval_s == 0
    off = RetrainingPolicy.set_by("digits", {"every": None}, accepted=5, by="lea", at=NOW)
    assert not off.on and off.due(10_000, NOW).due is False
    assert off.due(10_000, NOW).waiting_for == "the policy is off"


@pytest.mark.parametrize(
    ("given_settings", "field"),
    [
        ({"every": 0}, "every"),
        ({"every": -3}, "every"),
        ({"every": 2.5}, "every"),
        ({"every": True}, "every"),
        ({"every": "10"}, "every"),
        ({"every": 10, "ship": "later"}, "ship"),
        ({"every": 10, "base": "best"}, "base"),
        ({"every": 10, "min_interval_s": -1}, "min_interval_s"),
        ({"every": 10, "min_interval_s": 10**9}, "min_interval_s"),
        ({"every": 10, "epochs": 0}, "epochs"),
        ({"every": 10, "batch_size": 100_000}, "batch_size"),
        ({"every": 10, "learning_rate": 0}, "learning_rate"),
        ({"every": 10, "learning_rate": 2.0}, "learning_rate"),
        ({"every": 10, "seed": -1}, "seed"),
        ({"every": 10, "max_flips": -1}, "max_flips"),
        ({"every": 10, "max_flips": 1.5}, "max_flips"),
        ({"every": 10, "with_seed_set": "yes"}, "with_seed_set"),
        ({"every": 10, "epoch": 3}, "epoch"),
        ({"ship": "swap"}, "every"),
    ],
)
def test_a_bad_setting_is_refused_naming_it(given_settings: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        RetrainingPolicy.set_by("digits", given_settings, accepted=0, by="lea", at=NOW)
    assert refused.value.field == field


def test_it_is_due_after_every_n_newly_accepted_examples_counted_from_when_it_was_set() -> None:
    made = policy(accepted=37)  # 37 accepted before the policy: they do not count
    assert made.due(37, NOW).due is False
    assert made.due(46, NOW).waiting_for == "1 more accepted examples (9 of 10)"
    assert made.due(47, NOW).due is True
    after = made.ran(47, NOW)
    assert after.due(47, NOW).due is False and after.new_examples(50) == 3
    assert after.new_examples(40) == 0  # a decision that left accepted lowers the total


def test_the_minimum_interval_holds_a_due_policy_back() -> None:
    made = policy(min_interval_s=3600).ran(0, NOW)
    assert made.due(10, NOW + timedelta(minutes=59)).due is False
    assert "minimum interval" in made.due(10, NOW + timedelta(minutes=59)).waiting_for
    assert made.due(10, NOW + timedelta(hours=1)).due is True


def test_a_writers_drawn_kind_follows_the_shares_and_depends_on_nothing_but_the_writer() -> None:
    rule = SplitRule(shares=(0.8, 0.1, 0.1), seed=0)
    drawn = Counter(drawn_kind("digits", f"writer-{i}", rule) for i in range(20_000))
    assert abs(drawn[SplitKind.TRAIN] / 20_000 - 0.8) < 0.02
    assert abs(drawn[SplitKind.TEST] / 20_000 - 0.1) < 0.02
    assert drawn_kind("digits", "writer-7", rule) == drawn_kind("digits", "writer-7", SplitRule(seed=0))
    assert all(
        drawn_kind("digits", f"w{i}", SplitRule(shares=(1.0, 0.0, 0.0))) is SplitKind.TRAIN for i in range(99)
    )


def test_a_writer_is_placed_once_and_a_new_writer_sharing_a_text_takes_its_kind() -> None:
    ledger = Ledger("digits", writers={"tess": SplitKind.TEST})
    assert ledger.accept("tess", ["k1"]).kind is SplitKind.TEST
    joined = ledger.accept("newcomer", ["k1", "k2"])  # shares k1 with a test writer
    assert joined.kind is SplitKind.TEST and not joined.trainable
    assert ledger.writers["newcomer"] is SplitKind.TEST


def test_a_train_writers_example_near_a_held_out_one_is_withheld_and_never_trained_on() -> None:
    ledger = Ledger("digits", writers={"tom": SplitKind.TRAIN, "tess": SplitKind.TEST})
    ledger.hold_out(["suite-case"])
    assert ledger.accept("tom", ["suite-case"]).withheld == OTHER_KIND
    assert ledger.accept("tess", ["t"]).kind is SplitKind.TEST
    assert not ledger.accept("tom", ["t", "fresh"]).trainable  # a near-duplicate of a test example
    assert ledger.accept("tom", ["fresh"]).trainable
    ledger.hold_out(["fresh"])  # a key held out later: its later examples are withheld
    assert not ledger.accept("tom", ["fresh"]).trainable


examples = st.lists(
    st.tuples(st.integers(0, 30), st.lists(st.integers(0, 40), min_size=1, max_size=3)), max_size=120
)


@settings(max_examples=300, deadline=None)
@given(examples=examples, suite=st.sets(st.integers(0, 40), max_size=6), seed=st.integers(0, 2**32 - 1))
def test_no_dev_test_or_suite_example_nor_a_near_duplicate_of_one_is_ever_trained_on(
    examples: list[tuple[int, list[int]]], suite: set[int], seed: int
) -> None:
    """Any order of acceptance, any sharing of texts and near-duplicates between writers."""
    ledger = Ledger("nli", rule=SplitRule(shares=(0.6, 0.2, 0.2), seed=seed))
    ledger.hold_out(f"k{key}" for key in suite)
    trained: set[str] = set()
    held_out: set[str] = {f"k{key}" for key in suite}
    kinds: dict[str, set[SplitKind]] = {}
    for writer_number, keys in examples:
        writer, example_keys = f"w{writer_number}", [f"k{key}" for key in keys]
        placed = ledger.accept(writer, example_keys)
        kinds.setdefault(writer, set()).add(placed.kind)
        if placed.trainable:
            trained.update(example_keys)
        elif placed.withheld is None:
            held_out.update(example_keys)
    assert not trained & held_out
    assert all(len(writer_kinds) == 1 for writer_kinds in kinds.values())  # sticky, writer-disjoint
