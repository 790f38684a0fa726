"""What a hostile pass sent, over HTTP on SQLite and PostgreSQL: names, versions and ids with a
trailing newline, carriage return, tab or NUL; a repeated JSON key; gold items for a frozen round.
Each is refused with the field named, and nothing is written.

A release's name and version become a folder, a file name and a download header: ``"1.0.0\\n"`` was
accepted beside an existing ``1.0.0`` (the "version exists" rule passed it by), wrote a folder whose
name ends in a newline and answered every download of it with a 500.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import text

from dynaval.adapters.label_config import LabelConfigCatalog
from dynaval.domain.errors import InvalidInput
from dynaval.domain.releases.release import check_release_name, check_version
from dynaval.service_layer.jobs import jobs
from dynaval.service_layer.services import Services
from dynaval.settings import Settings
from tests.fixtures.service import LEAD_TOKEN, WRITER_TOKEN
from tests.support.release_seed import seed_frozen_round

SUFFIXES = ["\n", "\r", "\t", "\x00", "\r\n"]
LEAD = {"Authorization": f"Bearer {LEAD_TOKEN}"}
TABLES = ("round", "candidate", "gold_item")


@pytest.fixture
def frozen_round(services: Services) -> int:
    assert services.database is not None
    return seed_frozen_round(
        services.database, task_type="sentiment", labels=["positive", "negative", "neutral"],
        fields=["text"], accepted=12, writers=6, rng=random.Random(7), name="frozen",
    ).round_id  # fmt: skip


def releases_written(services: Services) -> list[str]:
    folder = services.settings.data_dir / "releases"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def refused(answer: Any, status: int, field: str) -> None:
    assert answer.status_code == status, answer.get_data(as_text=True)
    assert answer.json["error"]["field"] == field, answer.json


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_a_release_name_or_version_with_a_trailing_control_character_is_refused(
    app: Flask, services: Services, frozen_round: int, suffix: str
) -> None:
    client = app.test_client()
    made = client.post("/api/releases", json={"rounds": [frozen_round], "version": "1.0.0", "name": "vtest"},
                       headers=LEAD)  # fmt: skip
    assert made.status_code == 202, made.json
    built = jobs.run_job(services, made.json["id"])  # this app has no worker: the test is the worker
    assert built is not None and built.result is not None, built
    release_id = built.result["release"]["id"]
    before = (releases_written(services), client.get("/api/releases", headers=LEAD).json)

    for body, field in (
        ({"version": "1.0.0" + suffix, "name": "vtest"}, "version"),
        ({"version": "1.0.1", "name": "vtest" + suffix}, "name"),
        ({"version": "1.0.1", "name": "vtest", "license": "mit" + suffix}, "license"),
    ):
        refused(
            client.post("/api/releases", json={"rounds": [frozen_round], **body}, headers=LEAD), 422, field
        )

    assert (releases_written(services), client.get("/api/releases", headers=LEAD).json) == before
    download = client.get(f"/api/releases/{release_id}/download", headers=LEAD)
    assert download.status_code == 200


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_every_checked_name_refuses_a_trailing_control_character(suffix: str, tmp_path: Path) -> None:
    """The checks themselves, for every caller (the API, the command line, a manifest read back)."""
    for check, good in (
        (check_version, "1.0.0"),
        (check_version, "2.1.0-rc1"),
        (check_release_name, "dynaval-nli"),
    ):
        assert check(good) == good
        with pytest.raises(InvalidInput):
            check(good + suffix)
    catalog = LabelConfigCatalog(Settings(development=True, data_dir=tmp_path).resolved_label_config_dir)
    assert catalog.get("sentiment").name == "sentiment"
    with pytest.raises(InvalidInput) as unknown:
        catalog.get("sentiment" + suffix)
    assert unknown.value.field == "task"


def test_a_version_in_another_scripts_digits_is_refused() -> None:
    # ``\\d`` takes every script's digits: 1.0.0 in Arabic-Indic digits was a version.
    for version in ("\u0661.\u0660.\u0660", "1.0.\uff10", "1.\u0968.0"):
        with pytest.raises(InvalidInput):
            check_version(version)


def rows(services: Services) -> dict[str, int]:
    assert services.database is not None
    with services.database.engine.connect() as connection:
        return {t: connection.execute(text(f'SELECT count(*) FROM "{t}"')).scalar_one() for t in TABLES}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"text": "first", "text": "second", "writer_label": "positive"}', "text"),
        ('{"text": "fine", "writer_label": "positive", "writer_label": "negative"}', "writer_label"),
        ('{"inputs": {"text": "a", "text": "b"}, "writer_label": "positive"}', "inputs.text"),
    ],
)
def test_a_body_that_repeats_a_key_is_refused_naming_it(
    app: Flask, services: Services, frozen_round: int, body: str, field: str
) -> None:
    client = app.test_client()
    before = rows(services)
    answer = client.post(
        f"/api/rounds/{frozen_round}/candidates",
        data=body,
        headers={**LEAD, "Content-Type": "application/json"},
    )
    refused(answer, 422, field)
    assert "more than once" in answer.json["error"]["message"]
    batch = '{"candidates": [{"text": "ok", "writer_label": "positive"}, ' + body + "]}"
    answer = client.post(
        f"/api/rounds/{frozen_round}/candidates/batch",
        data=batch,
        headers={**LEAD, "Content-Type": "application/json"},
    )
    refused(answer, 422, f"candidates[1].{field}")
    # A repeated key is refused before anything else is looked at, the round's state included.
    refused(
        app.test_client().post(
            "/api/rounds", data='{"name": "a", "name": "b", "task": "sentiment"}',
            headers={**LEAD, "Content-Type": "application/json"},
        ),
        422,
        "name",
    )  # fmt: skip
    assert rows(services) == before


def test_gold_items_are_refused_for_a_frozen_round(app: Flask, services: Services, frozen_round: int) -> None:
    client = app.test_client()
    items = {"items": [{"text": "A lovely film.", "label": "positive"}]}
    refused(client.post(f"/api/rounds/{frozen_round}/gold", json=items, headers=LEAD), 409, "round_id")
    assert rows(services)["gold_item"] == 0
    writer = {"Authorization": f"Bearer {WRITER_TOKEN}"}
    refused(client.post(f"/api/rounds/{frozen_round}/gold", json=items, headers=writer), 403, "Authorization")
