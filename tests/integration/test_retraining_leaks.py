"""The leak rule of a retraining run, on SQLite and PostgreSQL: no example that is, or could later
be, in a dev or test split or the suite, and no near-duplicate of one, reaches a training set.

Round one is released (its dev and test examples are the suite; its writers placed by the
release). Round two's writers, new ones, each write a near-copy of a round-one example (its last
word changed): placed in train by their own draw, the near-copies of held-out examples must still
be left out, found by the release build's leak scan; the near-copies of train examples stay in.
"""

from __future__ import annotations

import itertools
import random

from dynaval.adapters.db.orm import CandidateRow
from dynaval.domain.clock import utcnow
from dynaval.domain.releases.release import SplitKind
from dynaval.model_training.retraining_data import choose_training_set
from dynaval.service_layer.dataset_records.round_dataset import iter_round_dataset
from dynaval.service_layer.regression import suite as regression_suite
from dynaval.service_layer.services import Services
from tests.integration.test_releases import release, rows_of
from tests.support.release_seed import TOPICS, WORDS, seed_frozen_round

SENTIMENT = ["positive", "negative", "neutral"]
EXAMPLES = 60


def sentences(rng: random.Random) -> list[str]:
    """Distinct sentences: four topics and twelve words drawn at random, then a number."""
    return [
        " ".join(rng.sample(TOPICS, 4)) + ": " + " ".join(rng.choice(WORDS) for _ in range(12)) + f" #{i}"
        for i in range(EXAMPLES)
    ]


def near_copy(text: str) -> str:
    return text.rsplit(" ", 1)[0] + " changed"


def bigrams(text: str) -> set[tuple[str, str]]:
    words = text.split()
    return set(itertools.pairwise(words))


def jaccard(a: str, b: str) -> float:
    x, y = bigrams(a), bigrams(b)
    return len(x & y) / len(x | y)


def test_no_held_out_example_nor_a_near_copy_of_one_is_trained_on(services: Services) -> None:
    assert services.database is not None
    originals = sentences(random.Random(4))
    first = seed_frozen_round(
        services.database, task_type="sentiment", labels=SENTIMENT, fields=["text"], accepted=EXAMPLES,
        writers=20, rng=random.Random(1), name="round one",
        make_inputs=lambda i, _label: {"text": originals[i]},
    ).round_id  # fmt: skip
    release(services, [first], "1.0.0")
    regression_suite.sync_suite(services)
    second = seed_frozen_round(
        services.database, task_type="sentiment", labels=SENTIMENT, fields=["text"], accepted=EXAMPLES,
        writers=30, rng=random.Random(2), name="round two", writer_prefix="late", annotation_base=10**6,
        make_inputs=lambda i, _label: {"text": near_copy(originals[i])},
    ).round_id  # fmt: skip

    chosen = choose_training_set(services, services.catalog.get("sentiment"))

    with services.uow(read_only=True) as uow:
        kinds = uow.releases.writer_kinds("sentiment")
        suite = [case.inputs["text"] for case in uow.regression.cases() if case.task_type == "sentiment"]
    records = [r for round_id in (first, second) for r in iter_round_dataset(services, round_id)]
    held_out = [r["inputs"]["text"] for r in records if kinds[r["writer"]] is not SplitKind.TRAIN] + suite
    assert suite and held_out
    trained = {e.example_id: e.inputs["text"] for e in chosen.train}
    assert trained
    # Only train writers' examples, and none near a held-out text (the planted pairs are 0.88 alike).
    by_id = {r["example_id"]: r for r in records}
    assert all(kinds[by_id[i]["writer"]] is SplitKind.TRAIN for i in trained)
    closest = max(jaccard(text, other) for text in trained.values() for other in held_out)
    assert closest < 0.5, closest
    # The scan found the near-copies of held-out examples among train writers' ones and left them out.
    planted = {
        r["example_id"]
        for r in records
        if kinds[r["writer"]] is SplitKind.TRAIN
        and any(jaccard(r["inputs"]["text"], h) > 0.8 for h in held_out)
    }
    assert planted and planted == chosen.near
    # A train writer's near-copy of a train example is no leak: both stay in.
    kept_pairs = [
        i
        for i, text in trained.items()
        if any(jaccard(text, other) > 0.8 for other in trained.values() if other != text)
    ]
    assert kept_pairs
    assert chosen.counts()["trained_on"] == len(trained) and chosen.counts()["near_held_out"] == len(planted)


def test_a_release_keeps_a_trained_on_text_in_train_whatever_order_it_reads_the_examples_in(
    services: Services,
) -> None:
    """A train writer's example was trained on; a test writer wrote the same text afterwards (the
    placement withheld it from training). The build reads examples by round and id, and here it
    reads the test writer's first: it must still keep the text in train and withhold the other."""
    assert services.database is not None
    texts = sentences(random.Random(9))
    round_id = seed_frozen_round(
        services.database, task_type="sentiment", labels=SENTIMENT, fields=["text"], accepted=EXAMPLES,
        writers=20, rng=random.Random(5), name="round one", weak_share=0.0,
        make_inputs=lambda i, _label: {"text": texts[i]},
    ).round_id  # fmt: skip
    records = sorted(iter_round_dataset(services, round_id), key=lambda r: r["example_id"])
    first_read = records[0]  # the build reads it first
    trained = next(r for r in reversed(records) if r["writer"] != first_read["writer"])
    shared = "A text both writers wrote, word for word, about the same rainy holiday."
    with services.database.unit_of_work() as session:
        for example_id in (first_read["example_id"], trained["example_id"]):
            row = session.get(CandidateRow, example_id)
            assert row is not None
            row.inputs = {"text": shared}
            session.add(row)
        session.commit()
    with services.uow() as uow:
        uow.releases.place_writers(
            "sentiment",
            {trained["writer"]: SplitKind.TRAIN, first_read["writer"]: SplitKind.TEST},
            at=utcnow(),
        )
        uow.retraining.record_trained(
            "sentiment", [trained["example_id"]], job_id=None, model_hash="sha256:" + "0" * 64, at=utcnow()
        )
        uow.commit()

    splits = rows_of(release(services, [round_id], "1.0.0"))
    where = {row["example_id"]: split for split, rows in splits.items() for row in rows}
    assert where[trained["example_id"]] == "train_r1"
    assert first_read["example_id"] not in where  # withheld: its text is in train
    assert not [
        row
        for split, rows in splits.items()
        if not split.startswith("train")
        for row in rows
        if row["text"] == shared
    ]
