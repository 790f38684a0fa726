"""The lead's dashboard on a large round: how long each page takes.

A fresh SQLite database (or ``--database-url``) is filled directly through the ORM, in bulk: one
round of ``--candidates`` candidates (100,000 by default) with two or three votes each from a pool
of annotators (about 250,000 votes; about a fifth of the candidates disagree, so the round has
escalated, rejected and flagged candidates as well as accepted ones), each candidate's decision
taken by the real rule, plus two small rounds so that the rounds page has several lines. Then every
page is requested with the Flask test client and a lead's bearer token: once cold (the round's
agreement figures are computed and cached) and ``--repeats`` times warm; the median is printed.
A new vote, which changes the round's fingerprint, is timed too: the next view starts the
recompute in the background and, when it takes longer than the cache's wait, shows the previous
figures marked as such; the time until the new figures are ready is printed with it.

    .venv/bin/python benchmarks/dashboard.py                   # 100,000 candidates
    .venv/bin/python benchmarks/dashboard.py --candidates 20000
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from harness import InProcessApp, in_process_services, timed
from sqlalchemy import insert
from sqlmodel import select

from dynaval.adapters.db.orm import AnnotationRow, CandidateRow, RoundRow
from dynaval.domain.validation.decision import Ballot, decide
from dynaval.domain.validation.policy import DecisionPolicy

LABELS = ["positive", "negative", "neutral"]
WORDS = (
    "the",
    "a",
    "movie",
    "plot",
    "actor",
    "service",
    "food",
    "room",
    "staff",
    "price",
    "phone",
    "battery",
)
CHUNK = 5000


def seed_round(
    services: Any, *, name: str, candidates: int, annotators: int, rng: random.Random, start: datetime
) -> tuple[int, list[str]]:
    """One round filled in bulk: candidates, their votes (2 or 3 each) and the rule's decisions."""
    policy = DecisionPolicy()
    with services.database.unit_of_work() as session:
        row = RoundRow(
            name=name,
            task_type="sentiment",
            state="closed",
            model_dir="/nonexistent/benchmark-model",
            model_name="benchmark-model",
            model_hash="sha256:" + uuid.uuid4().hex * 2,
            labels=LABELS,
            policy=policy.to_dict(),
            label_studio_project_id=rng.randrange(1, 10**6),
        )
        session.add(row)
        session.commit()
        session.refresh(row)
        round_id = row.id
        next_annotation = (
            session.exec(select(AnnotationRow.id).order_by(AnnotationRow.id.desc())).first() or 0
        ) + 1  # type: ignore[attr-defined]
        next_task = next_annotation
    assert round_id is not None
    pool = [f"ls-user-{i}" for i in range(annotators)]
    # Each annotator's reliability: most are good, a few are poor.
    skill = {a: rng.uniform(0.55, 0.95) for a in pool}
    ids: list[str] = []
    for first in range(0, candidates, CHUNK):
        candidate_rows: list[dict[str, Any]] = []
        annotation_rows: list[dict[str, Any]] = []
        for i in range(first, min(first + CHUNK, candidates)):
            cid = str(uuid.UUID(int=rng.getrandbits(128)))
            ids.append(cid)
            writer_label = rng.choice(LABELS)
            truth = writer_label if rng.random() < 0.85 else rng.choice(LABELS)
            prediction = rng.choice([label for label in LABELS if label != writer_label])
            submitted = start + timedelta(seconds=i)
            voters = rng.sample(pool, 3 if rng.random() < 0.5 else 2)
            ballots = []
            for annotator in voters:
                label = truth if rng.random() < skill[annotator] else rng.choice(LABELS)
                flagged = rng.random() < 0.01
                ballots.append(Ballot(annotator, label, flagged, "spam" if flagged else None))
                annotation_rows.append(
                    {
                        "id": next_annotation,
                        "candidate_id": cid,
                        "round_id": round_id,
                        "annotator_id": annotator,
                        "label": label,
                        "flagged": flagged,
                        "flag_reason": "spam" if flagged else None,
                        "was_cancelled": False,
                        "lead_time_s": round(rng.uniform(3, 40), 1),
                        "created_at": submitted + timedelta(minutes=5),
                        "updated_at": submitted + timedelta(minutes=5),
                        "received_at": submitted + timedelta(minutes=5),
                        "source": "webhook",
                    }
                )
                next_annotation += 1
            decision = decide(ballots, writer_label, policy)
            figures = decision.to_dict()
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(8, 30)))
            candidate_rows.append(
                {
                    "id": cid,
                    "round_id": round_id,
                    "inputs": {"text": f"{text} #{i}"},
                    "writer_label": writer_label,
                    "writer_id": f"writer-{rng.randrange(200)}",
                    "status": decision.outcome.value,
                    "model_prediction": prediction,
                    "model_probabilities": {label: 1 / 3 for label in LABELS},
                    "model_signature": uuid.uuid4().hex * 2,
                    "fooled": True,
                    "submitted_at": submitted,
                    "scored_at": submitted,
                    "pushed_at": submitted,
                    "label_studio_task_id": next_task,
                    "wanted_votes": decision.wanted_votes,
                    "label_studio_overlap": 2,
                    "decision": {
                        **figures,
                        "ballots": [
                            {
                                "annotator": b.annotator,
                                "label": b.label,
                                "flagged": b.flagged,
                                "reason": b.reason,
                            }
                            for b in ballots
                        ],
                    },
                    "decided_at": submitted + timedelta(minutes=5) if decision.outcome.is_final else None,
                    "version": 1,
                }
            )
            next_task += 1
        with services.database.unit_of_work() as session:
            session.execute(insert(CandidateRow), candidate_rows)
            session.execute(insert(AnnotationRow), annotation_rows)
            session.commit()
    return round_id, ids


def timed_ms(call: Callable[[], object]) -> float:
    return timed(call) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--candidates", type=int, default=100_000)
    parser.add_argument("--annotators", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--database-url", default=None, help="default: a SQLite file in a temporary folder")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        services = in_process_services(Path(folder), args.database_url)
        rng = random.Random(7)
        start = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
        started = time.perf_counter()
        big, ids = seed_round(
            services,
            name="large round",
            candidates=args.candidates,
            annotators=args.annotators,
            rng=rng,
            start=start,
        )
        for n in (2000, 3000):
            seed_round(services, name=f"small round {n}", candidates=n, annotators=8, rng=rng, start=start)
        with services.database.unit_of_work() as session:
            votes = len(session.exec(select(AnnotationRow.id).where(AnnotationRow.round_id == big)).all())
        seeding = time.perf_counter() - started
        backend = services.database.url.split(":")[0]
        print(f"seeded {args.candidates:,} candidates and {votes:,} votes in {seeding:.1f} s ({backend})")

        app = InProcessApp(services)
        cache = app.cache
        middle = ids[len(ids) // 2]
        pages = [
            ("rounds page", "/dashboard/rounds"),
            ("queue, page 1", f"/dashboard/rounds/{big}"),
            ("queue, page 1000", f"/dashboard/rounds/{big}?page=1000"),
            ("queue, last page", f"/dashboard/rounds/{big}?page={(args.candidates + 49) // 50}"),
            ("queue, status=rejected, page 20", f"/dashboard/rounds/{big}?status=rejected&page=20"),
            ("queue, text search", f"/dashboard/rounds/{big}?q=battery+price"),
            ("candidate page", f"/dashboard/candidates/{middle}"),
            ("annotators page", f"/dashboard/rounds/{big}/annotators"),
            ("export page", f"/dashboard/rounds/{big}/export"),
        ]
        rows = []
        for name, path in pages:
            cold = timed_ms(app.get(path))
            warm = statistics.median(timed_ms(app.get(path)) for _ in range(args.repeats))
            rows.append((name, cold, warm))
        print(f"\n{'page':36} {'first view':>12} {'median of ' + str(args.repeats):>14}")
        for name, cold, warm in rows:
            print(f"{name:36} {cold:10.1f} ms {warm:11.1f} ms")

        # A new vote changes the round's fingerprint: the next view recomputes, the one after is cached.
        with services.database.unit_of_work() as session:
            last = session.exec(select(AnnotationRow).order_by(AnnotationRow.id.desc())).first()  # type: ignore[attr-defined]
            assert last is not None
            session.add(
                AnnotationRow(
                    id=last.id + 1,
                    candidate_id=middle,
                    round_id=big,
                    annotator_id="ls-user-new",
                    label="positive",
                    created_at=datetime.now(UTC),
                    updated_at=datetime.now(UTC),
                )
            )
            session.commit()
        misses = cache.misses
        voted_at = time.perf_counter()
        after_vote = timed_ms(app.get("/dashboard/rounds"))
        cache.settle()
        recomputed_in = (time.perf_counter() - voted_at) * 1000
        again = statistics.median(timed_ms(app.get("/dashboard/rounds")) for _ in range(args.repeats))
        print(f"{'rounds page after a new vote':36} {after_vote:10.1f} ms {again:11.1f} ms")
        print(
            f"  (the view after the vote waits at most {cache.wait_s * 1000:.0f} ms and shows the previous"
            f" figures, marked; the new ones were ready {recomputed_in:,.0f} ms after the vote)"
        )
        recomputed = cache.misses - misses
        print(f"\nfigure cache: {cache.hits} hits, {cache.misses} computations ({recomputed} after the vote)")
        app.close()


if __name__ == "__main__":
    main()
