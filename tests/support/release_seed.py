"""Frozen rounds of accepted candidates with votes, written straight into the database: the rows a
release is built from, without Label Studio (the end-to-end tests make them through the real one).

Used by the release integration tests and by ``benchmarks/release.py``; core ``executemany`` in
chunks, so a million rows take a minute, not an hour.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import insert

from dynaval.adapters.db.database import Database
from dynaval.adapters.db.orm import AnnotationRow, CandidateRow, RoundRow
from dynaval.domain.clock import utcnow
from dynaval.domain.regression.suite import RegressionCase
from dynaval.domain.validation.policy import RULE_VERSION, DecisionPolicy

T0 = datetime(2026, 6, 1, 9, 0, 0, tzinfo=UTC)
WORDS = [
    "the",
    "movie",
    "plot",
    "actor",
    "food",
    "room",
    "staff",
    "price",
    "phone",
    "screen",
    "was",
    "not",
    "bad",
    "at",
    "all",
    "really",
    "good",
]
CHUNK = 10_000


@dataclass
class SeededRound:
    round_id: int
    candidate_ids: list[str] = field(default_factory=list)
    writers: dict[str, str] = field(default_factory=dict)
    """Candidate id -> raw writer id."""


_TOPIC_LINES = (
    "harbour violin glacier tractor lantern volcano bakery orchard satellite canyon parrot",
    "blanket compass dentist ferry garlic helmet island jacket kettle ladder magnet napkin oyster pencil",
    "quilt rocket saddle tunnel umbrella vase walnut yacht zipper anchor bicycle cactus dolphin engine",
    "feather guitar hammer igloo jungle kayak lemon mirror needle ocean pyramid rabbit spider tomato",
    "unicorn village wizard barrel candle desert forest garden hospital library market museum prison",
    "stadium temple theatre airport bridge castle chimney cottage factory fountain highway meadow",
    "monastery pharmacy railway river school tower valley windmill",
)
TOPICS = tuple(" ".join(_TOPIC_LINES).split())
"""Words that give each seeded text its own subject: texts drawn from ``WORDS`` alone all say much
the same thing, so the semantic near-duplicate check (MiniLM) would join most of them."""


def _text(rng: random.Random, n: int) -> str:
    words = " ".join(rng.choice(WORDS) for _ in range(n))
    number = rng.randrange(10**9)
    # Drawn from the number, not from ``rng``: the rounds' other draws stay as they were.
    subject = " ".join(random.Random(number).sample(TOPICS, 4))
    return f"{subject}: {words} #{number}"


def seed_frozen_round(
    database: Database,
    *,
    task_type: str,
    labels: Sequence[str],
    fields: Sequence[str],
    accepted: int,
    writers: int,
    rng: random.Random,
    annotators: int = 12,
    votes: int = 3,
    weak_share: float = 0.2,
    rejected: int = 0,
    shared_premises: int = 0,
    name: str = "seeded round",
    writer_prefix: str = "writer",
    annotation_base: int = 1,
    make_inputs: Callable[[int, str], dict[str, str]] | None = None,
) -> SeededRound:
    """A frozen round with ``accepted`` accepted candidates from ``writers`` writers (raw ids
    ``<writer_prefix>-<n>``), each with ``votes`` votes; ``weak_share`` of them have only one vote
    for the writer's label (accepted all the same, as an override would), the rest all agree.
    ``shared_premises`` > 0 makes NLI-like premises repeat across candidates (of one writer each).
    ``make_inputs(i, label)``: the ``i``-th candidate's inputs for its label, instead of seeded texts
    (an image task type's, stored by the caller)."""
    policy = DecisionPolicy().to_dict()
    with database.unit_of_work() as session:
        round_row = RoundRow(
            name=name,
            task_type=task_type,
            state="frozen",
            model_dir="/models/seeded",
            model_name=f"{task_type}-seeded",
            model_hash="sha256:" + "cd" * 32,
            labels=list(labels),
            policy=policy,
            label_studio_project_id=rng.randrange(1, 10**6),
            closed_at=T0,
            frozen_at=T0 + timedelta(days=1),
        )
        session.add(round_row)
        session.commit()
        assert round_row.id is not None
        round_id = round_row.id
    seeded = SeededRound(round_id)
    candidates: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    annotation_id = annotation_base
    premises = [_text(rng, 12) for _ in range(max(1, shared_premises))]

    def flush(force: bool = False) -> None:
        if len(candidates) >= CHUNK or (force and candidates):
            with database.engine.begin() as connection:
                connection.execute(insert(CandidateRow), candidates)
                if annotations:
                    connection.execute(insert(AnnotationRow), annotations)
            candidates.clear()
            annotations.clear()

    for i in range(accepted + rejected):
        candidate_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        writer = f"{writer_prefix}-{rng.randrange(writers)}"
        label = labels[i % len(labels)]
        prediction = labels[(i + 1) % len(labels)]
        weak = rng.random() < weak_share
        is_accepted = i < accepted
        inputs: dict[str, str] = make_inputs(i, label) if make_inputs is not None else {}
        for n, name_ in enumerate(fields if make_inputs is None else ()):
            if n == 0 and len(fields) > 1 and shared_premises:
                inputs[name_] = premises[int(writer.rsplit("-", 1)[1]) % len(premises)] + f" ({writer})"
            else:
                inputs[name_] = _text(rng, 8)
        at = T0 + timedelta(seconds=i)
        probabilities = {lab: 0.9 if lab == prediction else 0.1 / (len(labels) - 1) for lab in labels}
        agreeing = 1 if weak else votes
        decision = {
            "outcome": "accepted" if is_accepted else "rejected",
            "reason": "seeded",
            "rule_version": RULE_VERSION,
            "item_agreement": 1.0 if not weak else 1 / 3,
            "majority_label": label if not weak else prediction,
            "majority_share": agreeing / votes,
            "writer_label_share": agreeing / votes,
            "label_counts": {label: agreeing},
        }
        candidates.append(
            {
                "id": candidate_id, "round_id": round_id, "inputs": inputs, "writer_label": label,
                "writer_id": writer, "submitted_by": writer, "collected_by": None, "rationale": None,
                "status": "accepted" if is_accepted else "rejected", "model_prediction": prediction,
                "model_probabilities": probabilities,
                "model_signature": "sig-" + candidate_id[:8], "fooled": True, "submitted_at": at,
                "scored_at": at, "pushed_at": at, "label_studio_task_id": annotation_id,
                "wanted_votes": votes, "label_studio_overlap": votes, "decision": decision,
                "decided_at": at + timedelta(minutes=5), "version": 1,
            }
        )  # fmt: skip
        chosen = rng.sample(range(annotators), votes)
        for v, who in enumerate(chosen):
            annotations.append(
                {
                    "id": annotation_id, "candidate_id": candidate_id, "round_id": round_id,
                    "annotator_id": str(100 + who), "label": label if v < agreeing else prediction,
                    "flagged": False, "flag_reason": None, "was_cancelled": False, "lead_time_s": 4.5,
                    "created_at": at + timedelta(minutes=1), "updated_at": at + timedelta(minutes=1),
                    "received_at": at + timedelta(minutes=1), "source": "reconcile",
                }
            )  # fmt: skip
            annotation_id += 1
        if is_accepted:
            seeded.candidate_ids.append(candidate_id)
            seeded.writers[candidate_id] = writer
        flush()
    flush(force=True)
    return seeded


def set_inputs(database: Database, candidate_id: str, inputs: dict[str, str]) -> None:
    """Give a seeded candidate other inputs (to plant a duplicate or a leak)."""
    from sqlmodel import select

    with database.unit_of_work() as session:
        row = session.exec(select(CandidateRow).where(CandidateRow.id == candidate_id)).one()
        row.inputs = inputs
        session.add(row)
        session.commit()


def seed_suite(
    services: Any, *, seed: int, annotation_base: int = 1, suspect_label: str | None = None
) -> list[RegressionCase]:
    """Six cases of a seeded frozen sentiment round (two of each label), taken into the suite as a
    release would give them (``dev_r1``); with ``suspect_label``, that label's cases marked suspect."""
    assert services.database is not None
    seeded = seed_frozen_round(
        services.database, task_type="sentiment", labels=["positive", "negative", "neutral"],
        fields=["text"], accepted=6, writers=3, rng=random.Random(seed), name="round one",
        annotation_base=annotation_base,
    )  # fmt: skip
    with services.uow() as uow:
        candidates = uow.candidates.get_many(seeded.candidate_ids)
        cases = [
            RegressionCase(
                id=c.id,
                round_id=seeded.round_id,
                split="dev_r1",
                task_type="sentiment",
                inputs=dict(c.inputs),
                label=c.writer_label,
                source="release:dynaval-sentiment@1.0.0",
            )
            for c in candidates.values()
        ]
        uow.regression.add_cases(cases, at=utcnow())
        if suspect_label is not None:
            uow.regression.mark_suspect(sorted(c.id for c in cases if c.label == suspect_label))
        uow.commit()
    return cases
