"""The Health figures' repeated patterns read the band keys the submission check stored, on SQLite
and PostgreSQL: the same clusters whether the keys are stored, computed for candidates the index
does not hold yet, or a mix, and the same as every pair of the round compared exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import combinations
from pathlib import Path

import pytest
from flask import Flask
from sqlalchemy import update
from sqlmodel import col

from dynaval.adapters.db.orm import NearDuplicateExampleRow
from dynaval.domain.health.minhash import band_keys
from dynaval.domain.health.near_duplicates import field_shingles, is_near_duplicate
from dynaval.domain.health.round_health import HealthCandidate, RoundHealth, round_health
from dynaval.entrypoints.app import shutdown
from dynaval.service_layer.health.near_duplicates import reindex
from dynaval.service_layer.health.round_health import compute_round_health
from dynaval.service_layer.services import Services
from tests.fixtures.service import offline_app
from tests.support.health_seed import HealthRounds, seed_health_rounds

FIELDS = ["text"]


@pytest.fixture
def services(database_url: str, tmp_path: Path) -> Iterator[Services]:
    application: Flask = offline_app(database_url, tmp_path)
    try:
        yield application.extensions["dynaval"]
    finally:
        shutdown(application)


@pytest.fixture
def rounds(services: Services) -> HealthRounds:
    assert services.database is not None
    return seed_health_rounds(services.database)


def _exact(services: Services, round_id: int) -> RoundHealth:
    """The figures with every pair of the round's candidates compared by the rule: no index."""
    computed = compute_round_health(services, round_id)
    with services.uow(read_only=True) as uow:
        written = uow.round_queries.written_candidates(round_id)
    shingles = {c.id: field_shingles(c.inputs, FIELDS) for c in written}
    pairs = [
        (a, b) for a, b in combinations(sorted(shingles), 2) if is_near_duplicate(shingles[a], shingles[b])
    ]
    # Only the clusters are compared, so the other inputs are taken from the computed figures.
    candidates = [HealthCandidate(c.id, c.inputs, "w", c.fooled, c.status) for c in written]
    exact = round_health(candidates, FIELDS, pairs)
    assert exact.collected == computed.collected
    return exact


def _shape(health: RoundHealth) -> list[tuple[int, str, list[str], int, int]]:
    return [(c.size, c.first_id, c.candidate_ids, c.fooled, c.accepted) for c in health.clusters]


def test_stored_and_computed_band_keys_give_the_same_clusters(
    services: Services, rounds: HealthRounds
) -> None:
    """Seeded rows are not in the index (as before ``dynaval near-duplicates reindex``): the keys
    are computed. Half the round indexed, then all of it: the same clusters, patterns and fooled
    rate, and the same clusters as comparing every pair exactly (a round's threshold is never below
    the one the stored keys are made for, ``MIN_ROUND_THRESHOLD``)."""
    computed = compute_round_health(services, rounds.second)
    assert [c.size for c in computed.clusters] == [10]
    assert computed.clusters[0].candidate_ids == rounds.trick_ids
    with services.uow() as uow:
        assert set(uow.near_duplicates.round_band_keys(rounds.second)) == set()
        half = uow.near_duplicates.unindexed(1000)[::2]
        uow.near_duplicates.add_many(
            [
                (c, task, band_keys(field_shingles(inputs, FIELDS)), None)
                for c, task, inputs in half
                if task == "sentiment"
            ]
        )
        uow.commit()
    with services.uow(read_only=True) as uow:
        partly = set(uow.near_duplicates.round_band_keys(rounds.second))
    assert 0 < len(partly) < len(rounds.texts[rounds.second])
    mixed = compute_round_health(services, rounds.second)
    reindex(services)
    with services.uow(read_only=True) as uow:
        assert len(uow.near_duplicates.round_band_keys(rounds.second)) == len(rounds.texts[rounds.second])
    stored = compute_round_health(services, rounds.second)
    for health in (mixed, stored):
        assert health.clusters == computed.clusters
        assert (health.patterns, health.fooled_patterns) == (computed.patterns, computed.fooled_patterns)
    for round_id in (rounds.first, rounds.second):
        assert _shape(compute_round_health(services, round_id)) == _shape(_exact(services, round_id))


def test_indexed_candidates_are_paired_by_their_stored_keys(services: Services, rounds: HealthRounds) -> None:
    """Once indexed, a candidate is paired only through the keys stored for it: without the trick's
    stored keys there is no cluster."""
    reindex(services)
    assert services.database is not None
    with services.database.engine.begin() as connection:
        connection.execute(
            update(NearDuplicateExampleRow)
            .where(col(NearDuplicateExampleRow.candidate_id).in_(rounds.trick_ids))
            .values(band_keys=None)
        )
    assert compute_round_health(services, rounds.second).clusters == []
