"""The whole loop as one scenario, against a real Label Studio and the real service:
``scripts/loop_demo.py`` run as a user runs it (round 1 on model A, release 1.0.0, train B on
train_r1, gate B against A, ship B, round 2 on B, release 1.1.0 extending 1.0.0, evaluate A and B).

Model A is a tiny model that always answers "neutral", so round 1's outcome does not depend on
random weights; B is really fine-tuned from it by ``dynaval model train``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.scripts import run_script

pytestmark = pytest.mark.labelstudio


def test_the_loop_runs_from_round_one_to_the_evaluation_of_both_models(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    work = tmp_path / "loop"
    ran = run_script("loop_demo.py", "--model-a", str(tiny_model_dir), "--work-dir", str(work))
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "Traceback" not in ran.stdout + ran.stderr
    out = ran.stdout
    steps = [
        "=== round 1: loop round 1 (model A) ===",
        "=== release 1.0.0 ===",
        "=== train model B on train_r1 ===",
        "=== gate B against A (",
        "=== ship B ===",
        "=== round 2: loop round 2 (model B) ===",
        "=== release 1.1.0 ===",
        "=== evaluate model A on every round ===",
        "=== evaluate model B on every round ===",
    ]
    positions = [out.find(step) for step in steps]
    assert all(p >= 0 for p in positions), [s for s, p in zip(steps, positions, strict=True) if p < 0]
    assert positions == sorted(positions), "the loop's steps ran out of order"

    # Model B learned from round 1's train split only, and says so on its card.
    first = json.loads((work / "release-1.0.0" / "manifest.json").read_text(encoding="utf-8"))
    card = (work / "model-B" / "README.md").read_text(encoding="utf-8")
    assert "train_r1" in card and first["content_hash"] in card
    # Release 1.1.0 extends 1.0.0 and keeps round 1's splits unchanged.
    second = json.loads((work / "release-1.1.0" / "manifest.json").read_text(encoding="utf-8"))
    assert second["parent"] is not None and "1.0.0" in json.dumps(second["parent"])
    first_r1 = {s["name"]: s["rows"] for s in _splits(first) if s["name"].endswith("_r1")}
    second_r1 = {s["name"]: s["rows"] for s in _splits(second) if s["name"].endswith("_r1")}
    assert first_r1 and first_r1 == second_r1
    # Round 2 ran on B: its pinned model is B's hash, which the ship step named, and its MER is
    # measured on its own fresh candidates, as printed.
    round_2 = next(r for r in second["rounds"] if r["name"] == "loop round 2 (model B)")
    assert round_2["model"]["hash"] in out
    round_1 = next(r for r in second["rounds"] if r["name"] == "loop round 1 (model A)")
    assert round_2["model"]["hash"] != round_1["model"]["hash"]
    assert round_2["counts"]["collected"] == 16  # the loop demo's round 2 items, none of round 1's
    assert 0 <= round_2["mer"] <= 1 and round_2["mer"] == round_2["counts"]["fooled"] / 16
    printed = out[out.find("=== round 2: loop round 2 (model B) ===") :]
    assert f"MER / VMER                         {round_2['mer']:.2f}" in printed


def _splits(manifest: dict[str, object]) -> list[dict[str, object]]:
    splits = manifest["splits"]
    if isinstance(splits, dict):
        return [{"name": name, **value} for name, value in splits.items()]
    assert isinstance(splits, list)
    return splits
