"""Test session setup: offline model loading and the shared fixtures.

Fixtures live in tests/fixtures/ by what they need: models, a real Label Studio server, the
dynaval service on a real database (SQLite and PostgreSQL).
"""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

pytest_plugins = [
    "tests.fixtures.models",
    "tests.fixtures.label_studio",
    "tests.fixtures.service",
    "tests.fixtures.browser",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``postgres`` every test that runs on the ``database_url`` fixture's PostgreSQL case
    (given by the fixture or named by the test), so that ``-m "not postgres and not labelstudio"``
    is the fast tier: SQLite only, no server but the machine's own files."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("database_url") == "postgres":
            item.add_marker(pytest.mark.postgres)
