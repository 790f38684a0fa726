"""The whole loop as one scenario, against a real Label Studio and the real service:
``scripts/loop_demo.py`` run as a user runs it (round 1 on model A, release 1.0.0, a retraining
policy set, round 2 on A until the policy trains B, gates it against A and ships it by opening
round 3 on B, by itself; round 3 on B, release 1.1.0 extending 1.0.0, evaluate A and B).

Model A is a tiny model that always answers "neutral", so round 1's outcome does not depend on
random weights; B is really fine-tuned from it by the policy's run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.scripts import run_script

pytestmark = pytest.mark.labelstudio


def test_the_loop_runs_by_a_retraining_policy_from_round_one_to_the_evaluation_of_both_models(
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
        "=== set the retraining policy: every 3 accepted examples ===",
        "=== round 2: loop round 2 (model A) ===",
        "=== automatic: triggered ===",
        "=== automatic: trained ===",
        "=== automatic: gated ===",
        "=== automatic: shipped ===",
        "=== round 3: sentiment round 3 ===",
        "=== release 1.1.0 ===",
        "=== evaluate model A on every round ===",
        "=== evaluate model B on every round ===",
    ]
    positions = [out.find(step) for step in steps]
    assert all(p >= 0 for p in positions), [s for s, p in zip(steps, positions, strict=True) if p < 0]
    assert positions == sorted(positions), "the loop's steps ran out of order"
    assert "gate PASS: 0 negative flips (allowed 0)" in out
    assert "B shipped: round 2 closed, round 3 (sentiment round 3) open on B" in out

    # Model B learned from train writers' accepted examples only, and its card says so.
    trained = re.search(r"model B (sha256:[0-9a-f]{64}) from (sha256:[0-9a-f]{64})", out)
    assert trained is not None
    hash_b, hash_a = trained.groups()
    folder_b = Path(out.split("\nmodel B: ")[1].split("\n")[0])
    card = (folder_b / "README.md").read_text(encoding="utf-8")
    assert "accepted (train writers)" in card and hash_a in card
    # Release 1.1.0 extends 1.0.0 and keeps round 1's splits unchanged.
    first = json.loads((work / "release-1.0.0" / "manifest.json").read_text(encoding="utf-8"))
    second = json.loads((work / "release-1.1.0" / "manifest.json").read_text(encoding="utf-8"))
    assert second["parent"] is not None and "1.0.0" in json.dumps(second["parent"])
    first_r1 = {s["name"]: s["rows"] for s in _splits(first) if s["name"].endswith("_r1")}
    second_r1 = {s["name"]: s["rows"] for s in _splits(second) if s["name"].endswith("_r1")}
    assert first_r1 and first_r1 == second_r1
    # Round 2 ran on A; round 3, opened by the policy, on B, with its own fresh candidates.
    round_2 = next(r for r in second["rounds"] if r["name"] == "loop round 2 (model A)")
    assert round_2["model"]["hash"] == hash_a != hash_b
    printed = out[out.find("=== round 3: sentiment round 3 ===") :]
    assert re.search(r"candidates\s+8\n", printed)


def _splits(manifest: dict[str, object]) -> list[dict[str, object]]:
    splits = manifest["splits"]
    if isinstance(splits, dict):
        return [{"name": name, **value} for name, value in splits.items()]
    assert isinstance(splits, list)
    return splits
