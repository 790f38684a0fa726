"""A round's health figures on a large round: how long the near-duplicate pass takes, and the Health
page and ``GET /api/rounds/<id>/health`` cold and warm.

A fresh SQLite database is filled in bulk with one round of ``--candidates`` candidates (100,000 by
default: 12-word sentences over a 300-word vocabulary from 2,000 writers, and 1 % of them tricks,
each repeated by its writer 20 times with one word changed) and a small earlier round of the same
task type, written straight into the database and so not in the near-duplicate index. Then: the
figures computed directly with nothing indexed (every candidate's band keys computed), the index
filled (``dynaval near-duplicates reindex``), the figures computed directly again from the stored
band keys (wall and CPU time each), the page's first view (computed and cached), ``--repeats``
warm views of the page and of the API (the median), and a view after one more candidate (indexed,
as a submission is; the fingerprint moved: the recompute starts in the background; the previous
figures are shown, marked, until it ends).

    .venv/bin/python benchmarks/round_health.py
    .venv/bin/python benchmarks/round_health.py --candidates 20000
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from harness import InProcessApp, in_process_services, timed, timed_cpu
from sqlalchemy import insert

from dynaval.adapters.db.orm import CandidateRow, RoundRow
from dynaval.domain.health.minhash import band_keys
from dynaval.domain.health.near_duplicates import field_shingles
from dynaval.domain.validation.policy import DecisionPolicy
from dynaval.service_layer.health.near_duplicates import reindex
from dynaval.service_layer.health.round_health import compute_round_health
from dynaval.service_layer.services import Services

CHUNK = 5000
WARM_GOAL_MS = 100.0
"""A lead's warm view of the page: as quick as the other dashboard pages."""
FIRST_VIEW_GOAL_S = 120.0
"""The first view waits for the computation at most this long (then 503): FIRST_COMPUTATION_WAIT_S."""


def _vocabulary(rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 8))) for _ in range(300)]


def seed_round(services: Services, *, name: str, candidates: int, rng: random.Random, start: datetime) -> int:
    assert services.database is not None
    vocabulary = _vocabulary(random.Random(1))
    with services.database.unit_of_work() as session:
        row = RoundRow(
            name=name, task_type="sentiment", state="open", model_dir="/m", model_name="bench",
            model_hash="sha256:" + "ab" * 32, labels=["positive", "negative", "neutral"],
            policy=DecisionPolicy().to_dict(), label_studio_project_id=rng.randrange(1, 10**6),
        )  # fmt: skip
        session.add(row)
        session.commit()
        assert row.id is not None
        round_id = row.id
    rows: list[dict[str, Any]] = []
    trick: list[str] = []
    remaining = 0
    writer = ""
    for i in range(candidates):
        if remaining:
            words = list(trick)
            words[rng.randrange(len(words))] = rng.choice(vocabulary)  # one word changed
            remaining -= 1
        else:
            writer = f"writer-{rng.randrange(2000)}"
            words = [rng.choice(vocabulary) for _ in range(12)]
            if rng.random() < 0.01 / 20:  # 1 % of the candidates end up in tricks of 20
                trick, remaining = words, 19
        text = " ".join(words)
        fooled = rng.random() < 0.4
        at = start + timedelta(seconds=i)
        rows.append(
            {
                "id": str(uuid.UUID(int=rng.getrandbits(128), version=4)), "round_id": round_id,
                "inputs": {"text": text}, "writer_label": "positive", "writer_id": writer,
                "submitted_by": writer, "collected_by": None,
                "status": "accepted" if fooled else "not_fooled",
                "model_prediction": "negative" if fooled else "positive", "fooled": fooled,
                "submitted_at": at, "scored_at": at, "wanted_votes": 0, "label_studio_overlap": 0,
                "version": 1,
            }
        )  # fmt: skip
        if len(rows) >= CHUNK:
            with services.database.engine.begin() as connection:
                connection.execute(insert(CandidateRow), rows)
            rows.clear()
    if rows:
        with services.database.engine.begin() as connection:
            connection.execute(insert(CandidateRow), rows)
    return round_id


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--candidates", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        # The Health figures use the lexical band keys only: the reindex need not encode vectors.
        services = in_process_services(Path(folder), near_duplicate_semantic=False)
        rng = random.Random(7)
        start = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
        seed_round(services, name="earlier round", candidates=2000, rng=rng, start=start)
        big = seed_round(services, name="large round", candidates=args.candidates, rng=rng, start=start)

        direct = timed_cpu(lambda: compute_round_health(services, big))
        indexing = timed_cpu(lambda: reindex(services))
        stored = timed_cpu(lambda: compute_round_health(services, big))
        health = compute_round_health(services, big)

        app = InProcessApp(services)
        page, api = app.get(f"/dashboard/rounds/{big}/health"), app.get(f"/api/rounds/{big}/health")
        first = timed(page)
        warm_page = statistics.median(timed(page) for _ in range(args.repeats))
        warm_api = statistics.median(timed(api) for _ in range(args.repeats))
        assert services.database is not None
        late = str(uuid.uuid4())
        with services.database.engine.begin() as connection:
            at = start + timedelta(days=30)
            connection.execute(
                insert(CandidateRow),
                [
                    {
                        "id": late, "round_id": big, "inputs": {"text": "one more candidate"},
                        "writer_label": "positive", "writer_id": "late", "submitted_by": "late",
                        "status": "not_fooled", "fooled": False, "submitted_at": at, "scored_at": at,
                        "wanted_votes": 0, "label_studio_overlap": 0, "version": 1,
                    }
                ],
            )  # fmt: skip
        with services.uow() as uow:  # indexed, as the submission check indexes every candidate
            keys = band_keys(field_shingles({"text": "one more candidate"}, ["text"]))
            uow.near_duplicates.add(late, "sentiment", keys)
            uow.commit()
        after_new = timed(page)
        started = time.perf_counter()
        app.cache.settle(timeout_s=600)
        ready = time.perf_counter() - started + after_new
        app.close()

    ms = 1000
    lines = [
        f"round of {args.candidates:,} candidates: {len(health.clusters):,} repeated patterns holding "
        f"{health.clustered:,} candidates; distinct-2 {health.diversity.value:.3f}",
        f"figures computed directly, nothing indexed (band keys computed): {direct[0]:.1f} s "
        f"({direct[1]:.1f} s CPU)",
        f"index filled (near-duplicates reindex, both rounds): {indexing[0]:.1f} s ({indexing[1]:.1f} s CPU)",
        f"figures computed directly from the stored band keys: {stored[0]:.1f} s ({stored[1]:.1f} s CPU)",
        f"page, first view (computed and cached): {first:.1f} s (goal: under {FIRST_VIEW_GOAL_S:.0f} s)",
        f"page, warm (median of {args.repeats}): {warm_page * ms:.0f} ms (goal: under {WARM_GOAL_MS:.0f} ms)",
        f"API, warm (median of {args.repeats}): {warm_api * ms:.0f} ms (goal: under {WARM_GOAL_MS:.0f} ms)",
        f"page after one new candidate: {after_new * ms:.0f} ms (previous figures, marked); "
        f"new ones ready after {ready:.1f} s",
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
