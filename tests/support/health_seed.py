"""Two frozen sentiment rounds for the Health page and ``GET /api/rounds/<id>/health``, written
straight into the database (as ``release_seed`` does): round one has varied texts and a MER of 0.5;
round two repeats one trick ten times (by two writers, with small edits) and has a higher MER and a
lower distinct-2, so it is marked as possible score inflation. Every candidate's text is planted
here, so a test knows every figure; the fooled candidates have real votes (from
:func:`~tests.support.release_seed.seed_frozen_round`), so alpha is defined.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import insert, update
from sqlmodel import col

from dynaval.adapters.db.database import Database
from dynaval.adapters.db.orm import CandidateRow
from tests.support.release_seed import T0, seed_frozen_round

SENTIMENT = ["positive", "negative", "neutral"]
MARKUP = "<script>alert('trick')</script>"
TRICK = "the movie was not bad at all and i would happily watch it again tomorrow"
TRICK_EDITS = [
    TRICK,
    TRICK.replace("movie", "film"),
    TRICK.replace("tomorrow", "today"),
    TRICK.replace("happily", "gladly"),
    TRICK.replace("movie", "show"),
    TRICK.replace("again", "twice"),
    TRICK.replace("bad", "awful"),
    TRICK.replace("would", "could"),
    TRICK.replace("movie", "series"),
    TRICK.replace("tomorrow", "tonight"),
]
TRICK_WRITERS = ["ana"] * 7 + ["cy"] * 3
VOCABULARY = [
    "hotel",
    "waiter",
    "phone",
    "screen",
    "plot",
    "actor",
    "pizza",
    "train",
    "bed",
    "song",
    "park",
    "coffee",
    "room",
    "staff",
    "price",
    "view",
    "music",
    "garden",
    "ticket",
    "driver",
    "window",
    "menu",
    "chair",
    "lamp",
    "beach",
    "road",
    "bus",
    "shop",
    "cake",
    "soup",
    "movie",
    "book",
    "slow",
    "bright",
    "noisy",
    "cheap",
    "warm",
    "stale",
    "huge",
    "tiny",
    "late",
    "clean",
    "odd",
    "fine",
    "loud",
    "soft",
    "dull",
    "rich",
    "was",
    "seemed",
    "felt",
    "looked",
    "stayed",
    "became",
    "sounded",
    "tasted",
    "and",
    "but",
    "yet",
    "so",
    "very",
    "quite",
    "rather",
    "never",
]


@dataclass
class HealthRounds:
    first: int
    second: int
    texts: dict[int, list[str]] = field(default_factory=dict)
    """Round id -> every candidate's text, in submission order."""
    fooled: dict[int, list[bool]] = field(default_factory=dict)
    writers: dict[int, list[str]] = field(default_factory=dict)
    """Round id -> every candidate's raw writer id, in submission order."""
    trick_ids: list[str] = field(default_factory=list)
    """Round two's trick candidates, in submission order."""


def varied(i: int) -> str:
    """The i-th of many different sentences: ten words drawn from a vocabulary of 64 (two of them
    share about one word pair in ten: never near-duplicates)."""
    rng = random.Random(i)
    return " ".join(rng.choice(VOCABULARY) for _ in range(10))


def _plant(
    database: Database, seeded_ids: list[str], texts: list[str], writers: list[str], start: int
) -> None:
    """Give the seeded (accepted, fooled) candidates planted texts, writers and submission times."""
    with database.engine.begin() as connection:
        for n, (candidate_id, text, writer) in enumerate(zip(seeded_ids, texts, writers, strict=True)):
            connection.execute(
                update(CandidateRow)
                .where(col(CandidateRow.id) == candidate_id)
                .values(
                    inputs={"text": text},
                    writer_id=writer,
                    submitted_by=writer,
                    submitted_at=T0 + timedelta(days=start, seconds=2 * n),
                )
            )


def _not_fooled(database: Database, round_id: int, texts: list[str], writers: list[str], start: int) -> None:
    rows = []
    for n, (text, writer) in enumerate(zip(texts, writers, strict=True)):
        at = T0 + timedelta(days=start, seconds=2 * n + 1)
        rows.append(
            {
                "id": str(uuid.UUID(int=random.Random(f"{round_id}-{n}").getrandbits(128), version=4)),
                "round_id": round_id, "inputs": {"text": text}, "writer_label": "positive",
                "writer_id": writer, "submitted_by": writer, "collected_by": None, "rationale": None,
                "status": "not_fooled", "model_prediction": "positive",
                "model_probabilities": {"positive": 0.9, "negative": 0.05, "neutral": 0.05},
                "model_signature": "sig", "fooled": False, "submitted_at": at, "scored_at": at,
                "wanted_votes": 0, "label_studio_overlap": 0, "version": 1,
            }
        )  # fmt: skip
    with database.engine.begin() as connection:
        connection.execute(insert(CandidateRow), rows)


def seed_health_rounds(database: Database) -> HealthRounds:
    """Round one: 24 fooled and 24 not fooled, all different, 8 writers. Round two: 20 fooled (the
    trick ten times, its first with markup, and ten different ones) and 6 not fooled, 6 writers."""
    first = seed_frozen_round(
        database, task_type="sentiment", labels=SENTIMENT, fields=["text"], accepted=24, writers=8,
        rng=random.Random(3), name="round one", annotation_base=1,
    )  # fmt: skip
    second = seed_frozen_round(
        database, task_type="sentiment", labels=SENTIMENT, fields=["text"], accepted=20, writers=6,
        rng=random.Random(4), name="round two <i>", annotation_base=10**5,
    )  # fmt: skip
    rounds = HealthRounds(first.round_id, second.round_id)

    texts_1 = [varied(i) for i in range(24)]
    writers_1 = [f"w{i % 8}" for i in range(24)]
    _plant(database, first.candidate_ids, texts_1, writers_1, start=0)
    calm_1 = [varied(100 + i) for i in range(24)]
    calm_writers_1 = [f"w{i % 8}" for i in range(24)]
    _not_fooled(database, first.round_id, calm_1, calm_writers_1, start=0)
    # Submission order interleaves them: fooled at even seconds, not fooled at odd.
    rounds.texts[first.round_id] = [t for pair in zip(texts_1, calm_1, strict=True) for t in pair]
    rounds.writers[first.round_id] = [w for pair in zip(writers_1, calm_writers_1, strict=True) for w in pair]
    rounds.fooled[first.round_id] = [True, False] * 24

    trick = [MARKUP + " " + TRICK_EDITS[0], *TRICK_EDITS[1:]]
    texts_2 = trick + [varied(200 + i) for i in range(10)]
    writers_2 = TRICK_WRITERS + [f"v{i % 4}" for i in range(10)]
    _plant(database, second.candidate_ids, texts_2, writers_2, start=10)
    rounds.trick_ids = second.candidate_ids[:10]
    calm_2 = [varied(300 + i) for i in range(6)]
    calm_writers_2 = [f"v{i % 4}" for i in range(6)]
    _not_fooled(database, second.round_id, calm_2, calm_writers_2, start=10)
    order_2 = sorted(
        [(2 * n, t, w, True) for n, (t, w) in enumerate(zip(texts_2, writers_2, strict=True))]
        + [(2 * n + 1, t, w, False) for n, (t, w) in enumerate(zip(calm_2, calm_writers_2, strict=True))]
    )
    rounds.texts[second.round_id] = [t for _s, t, _w, _f in order_2]
    rounds.writers[second.round_id] = [w for _s, _t, w, _f in order_2]
    rounds.fooled[second.round_id] = [f for _s, _t, _w, f in order_2]
    return rounds
