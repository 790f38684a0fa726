"""``scripts/demo.py`` run as a new user runs it: twice in a row in one folder, ``--exit`` each time.

The second run used to end with ``release failed: ... dynaval-sentiment-1.0.0 exists already in the
releases folder`` and exit 1: the demo emptied its own folder but not the service's data folder,
where the first run's releases stayed. Every credential the demo makes is printed, one a line, the
token last, an exporter and a reporter among them. Tiny models stand in for the default ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.scripts import run_script
from tests.support.tiny_image_model import build_tiny_image_model
from tests.support.tiny_model import build_tiny_model

pytestmark = pytest.mark.labelstudio


def test_the_demo_runs_twice_in_a_row_and_prints_every_roles_token(tmp_path: Path) -> None:
    models = tmp_path / "models"
    build_tiny_model(models / "sentiment-default")
    build_tiny_model(models / "nli-default", labels=("entailment", "neutral", "contradiction"))
    build_tiny_image_model(models / "digits-default")
    work = tmp_path / "demo"
    for run in ("first", "second"):
        ran = run_script("demo.py", "--models", str(models), "--work-dir", str(work))
        assert ran.returncode == 0, f"{run} run:\n" + ran.stdout[-3000:] + ran.stderr[-3000:]
        assert "Traceback" not in ran.stdout + ran.stderr
        releases = [line for line in ran.stdout.splitlines() if line.startswith("release: ")]
        assert len(releases) == 3, ran.stdout[-3000:]
        tokens = ran.stdout.split("=== tokens ===", 1)[1].strip().splitlines()
        roles = [line.split()[0] for line in tokens]
        assert roles == ["lead", "writer", "writer", "writer", "writer", "collector", "exporter", "reporter"]
        assert all(line.split()[1] == "token" and len(line.split()[-1]) >= 16 for line in tokens), tokens
    # Everything the service wrote lies in the demo's own folder, which each run empties first.
    assert {p.name for p in (work / "data" / "releases").iterdir()} == {
        "dynaval-sentiment-1.0.0",
        "dynaval-nli-1.0.0",
        "dynaval-digits-1.0.0",
    }
    assert any((work / "data" / "releases" / "dynaval-digits-1.0.0" / "images").iterdir())
    assert not (models / "releases").exists()
