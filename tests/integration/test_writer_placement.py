"""Writers placed at their first accepted example, on SQLite and PostgreSQL: before any release of
their round, each writer of the task type gets a kind (sticky, beside the releases' own), the
examples a model may be trained on never share a text with a dev, test or suite example, and the
release made afterwards keeps every placement.

NLI rounds with premises shared across writers (the text keys that group writers), seeded into the
database as released rounds are (``tests/support/release_seed.py``)."""

from __future__ import annotations

import random

import pytest

from dynaval.domain.releases.release import SplitKind, split_kind_of, text_keys
from dynaval.service_layer.dataset_records.round_dataset import iter_round_dataset
from dynaval.service_layer.regression import suite as regression_suite
from dynaval.service_layer.retraining.placement import place_accepted_writers
from dynaval.service_layer.services import Services
from tests.integration.test_releases import release, rows_of
from tests.support.release_seed import seed_frozen_round

NLI = ["entailment", "neutral", "contradiction"]
FIELDS = ["premise", "hypothesis"]


def nli_round(services: Services, seed: int, *, prefix: str, base: int) -> int:
    assert services.database is not None
    return seed_frozen_round(
        services.database, task_type="nli", labels=NLI, fields=FIELDS, accepted=90, writers=24,
        rng=random.Random(seed), name=f"round {seed}", writer_prefix=prefix, annotation_base=base,
        shared_premises=8, weak_share=0.0,
    ).round_id  # fmt: skip


@pytest.fixture
def rounds(services: Services) -> tuple[int, int]:
    return nli_round(services, 1, prefix="early", base=1), nli_round(services, 2, prefix="late", base=10**6)


def keys_of(services: Services, round_ids: tuple[int, ...]) -> dict[str, tuple[str, ...]]:
    return {
        record["example_id"]: text_keys(record["inputs"], FIELDS)
        for round_id in round_ids
        for record in iter_round_dataset(services, round_id)
    }


def test_writers_are_placed_before_a_release_and_the_release_keeps_them(
    services: Services, rounds: tuple[int, int]
) -> None:
    first, second = rounds
    release(services, [first], "1.0.0")  # round one's writers placed by a release
    regression_suite.sync_suite(services)  # its dev and test examples are suite cases
    with services.uow(read_only=True) as uow:
        by_release = uow.releases.writer_kinds("nli")
        suite = [c for c in uow.regression.cases() if c.task_type == "nli"]
    assert suite

    placed = place_accepted_writers(services, "nli")

    # Round two's new writers are placed now; round one's keep the release's kind.
    keys = keys_of(services, rounds)
    writers = {
        record["example_id"]: record["writer"] for r in rounds for record in iter_round_dataset(services, r)
    }
    assert placed.placed_now and not set(placed.placed_now) & set(by_release)
    assert set(placed.placed_now) | set(by_release) == set(writers.values())
    with services.uow(read_only=True) as uow:
        kinds = uow.releases.writer_kinds("nli")
    assert {w: kinds[w] for w in by_release} == by_release
    assert set(kinds.values()) <= set(SplitKind)

    # Nothing trainable shares a text with a held-out example or a suite case.
    trained_keys = {key for example in placed.trainable for key in keys[example]}
    held_keys = {key for example in placed.held_out for key in keys[example]}
    suite_keys = {key for case in suite for key in text_keys(case.inputs, FIELDS)}
    assert placed.trainable and placed.held_out
    assert not trained_keys & held_keys and not trained_keys & suite_keys
    assert all(kinds[writers[e]] is SplitKind.TRAIN for e in placed.trainable)
    assert all(kinds[writers[e]] is not SplitKind.TRAIN for e in placed.held_out)
    assert set(placed.trainable) | set(placed.held_out) | set(placed.withheld) == set(keys)

    # Again: nobody new, the same fates (the order of acceptance decides, not the time it runs).
    again = place_accepted_writers(services, "nli")
    assert again.placed_now == {}
    assert (again.trainable, again.held_out, again.withheld) == (
        placed.trainable,
        placed.held_out,
        placed.withheld,
    )

    # The next release keeps every writer where the placement put them, and trains on no held-out
    # example: what was trained on before the release stays in its train split.
    rows = rows_of(release(services, [first, second], "1.1.0"))
    for split, split_rows in rows.items():
        for row in split_rows:
            assert kinds[row["writer"]] is split_kind_of(split), (split, row["writer"])
    in_train = {
        row["example_id"]
        for split, split_rows in rows.items()
        if split.startswith("train")
        for row in split_rows
    }
    in_held_out = {
        row["example_id"]
        for split, split_rows in rows.items()
        if not split.startswith("train")
        for row in split_rows
    }
    assert not set(placed.held_out) & in_train
    assert not set(placed.trainable) & in_held_out


def test_a_task_type_with_no_accepted_example_places_nobody(services: Services) -> None:
    placed = place_accepted_writers(services, "sentiment")
    assert (placed.placed_now, placed.trainable, placed.held_out, placed.withheld) == ({}, [], [], {})
