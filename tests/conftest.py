"""Test session setup: offline model loading and the shared fixtures.

Fixtures live in tests/fixtures/ by what they need: models, a real Label Studio server, the
dynaval service on a real database (SQLite and PostgreSQL).
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

pytest_plugins = [
    "tests.fixtures.models",
    "tests.fixtures.label_studio",
    "tests.fixtures.service",
    "tests.fixtures.browser",
]
