"""The whole loop, for real (``scripts/loop_demo``): collect → validate → release → train → gate →
next round, against a real Label Studio and the real service.

1. Round 1 with model A (the default sentiment model): writers submit, annotators vote in Label
   Studio, the round is frozen and released as 1.0.0.
2. Model B is fine-tuned from A on ``train_r1`` (``dynaval model train``); never on dev or test.
3. B is gated against A (``dynaval gate``); the result is printed, whatever it is.
4. B is shipped (``dynaval models ship``).
5. Round 2 is pinned on B; its writers submit fresh candidates, so its MER is B's.
6. Round 2 is frozen and released as 1.1.0, which extends 1.0.0 (round 1's splits unchanged).
7. A and B are evaluated on every round's dev and test cases (``dynaval evaluate``).

Both servers then stay up until Ctrl-C (``--exit`` stops them at once).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

import httpx
from demo import (  # the same folder: the demo's servers, simulated writers and annotators
    CLIENT_KEEPALIVE_S,
    MODELS_DIR,
    REPO_ROOT,
    DemoError,
    Item,
    Running,
    _cli,
    export_round,
    freeze_round,
    guarded,
    keep_running,
    print_access,
    print_summary,
    run_round,
    sentiment_items,
    servers_up,
)

MODEL_A = MODELS_DIR / "sentiment-default"
"""Model A, round 1's model, unless ``--model-a`` names another: the default sentiment model
``scripts/loop_demo`` builds once."""

# Round 2's fresh candidates, written against model B: (text, the writer's label, the label careful
# annotators would give).
ROUND_2: list[tuple[str, str, str | None]] = [
    ("I was ready to walk out, and then the second half won me over.", "positive", "positive"),
    ("Honestly, nothing about the battery life disappointed me.", "positive", "positive"),
    ("The plot twists were so clever I forgave the slow start.", "positive", "positive"),
    ("Who knew a budget hotel could feel this luxurious?", "positive", "positive"),
    ("You could not pay me to sit through that again.", "negative", "negative"),
    ("Lovely staff, shame the room smelled of damp.", "negative", "negative"),
    ("Brilliant, the app logged me out for the tenth time today.", "negative", "negative"),
    ("It looked delicious in the photos, less so on the plate.", "negative", "negative"),
    ("The charger is sold separately.", "neutral", "neutral"),
    ("The course runs for six weeks, on Monday evenings.", "neutral", "neutral"),
    ("The museum is closed on public holidays.", "neutral", "neutral"),
    ("A stunning finale to a series that lost its way in the middle.", "positive", "positive"),
    ("I'd rather have stayed home, but the dessert was perfect.", "positive", "positive"),
    ("The screen is gorgeous; the speakers are a crime.", "negative", "negative"),
    # Writers who are wrong about their own example: validators should reject these.
    ("The train leaves from platform four.", "negative", "neutral"),
    ("The manual is printed in three languages.", "positive", "neutral"),
]

TRAIN_EPOCHS = 3
SEED = 7


def round_2_items() -> list[Item]:
    return [Item({"text": text}, label, truth) for text, label, truth in ROUND_2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/loop_demo", description=__doc__)
    parser.add_argument("--exit", action="store_true", help="stop both servers after the loop")
    parser.add_argument("--port", type=int, default=8000, help="the service's port (default 8000, else free)")
    parser.add_argument("--label-studio-port", type=int, default=8080)
    parser.add_argument(
        "--model-a", type=Path, default=MODEL_A, help="round 1's model folder (sentiment labels)"
    )
    parser.add_argument(
        "--work-dir", type=Path, default=REPO_ROOT / ".dynaval" / "loop-demo",
        help="the loop's folder: database, Label Studio, releases, model B (emptied first)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    demo_dir = args.work_dir.resolve()
    return guarded("loop demo", demo_dir, lambda: run_loop(args, demo_dir))


def run_loop(args: argparse.Namespace, demo_dir: Path) -> int:
    model_a = args.model_a.resolve()
    if not (model_a / "config.json").is_file():
        raise DemoError(f"no model in {model_a}: run scripts/loop_demo (it builds one) or pass --model-a")
    try:
        with servers_up(demo_dir, MODELS_DIR, args.port, args.label_studio_port) as up:
            run_steps(up, model_a, demo_dir)
            if not args.exit:
                keep_running()
    except KeyboardInterrupt:
        pass
    return 0


def run_steps(up: Running, model_a: Path, demo_dir: Path) -> None:
    """The loop's steps, each printed as it ends."""
    env = up.env
    annotators = up.server.create_annotators(4)
    rng = random.Random(SEED)
    api = httpx.Client(
        base_url=up.service.url, timeout=60, limits=httpx.Limits(keepalive_expiry=CLIENT_KEEPALIVE_S)
    )

    def round_with(model: Path, name: str, items: list[Item]) -> dict[str, Any]:
        print(f"running {name} ...", flush=True)
        summary = run_round(api, task="sentiment", name=name, items=items, lead=up.lead, writers=up.writers,
                            collector=up.collector, server=up.server, annotators=annotators, rng=rng,
                            model=str(model))  # fmt: skip
        print_summary(summary, export_round(env, summary["id"], demo_dir))
        freeze_round(up.service.url, up.lead, summary["id"])
        return summary

    round_1 = round_with(model_a, "loop round 1 (model A)", sentiment_items())
    release_1 = release(env, demo_dir, [round_1["id"]], "1.0.0")

    model_b = demo_dir / "model-B"
    step("train model B on train_r1", cli(env, "model", "train", "--release", str(release_1),
         "--splits", "train_r1", "--base", str(model_a), "--out", str(model_b),
         "--epochs", str(TRAIN_EPOCHS), "--seed", str(SEED)))  # fmt: skip
    hash_a = registered_hash(env, model_a, "model-A")
    hash_b = registered_hash(env, model_b, "model-B")
    gated = _cli(env, "gate", "--candidate", str(model_b), "--baseline", hash_a)
    if gated.returncode not in (0, 1):  # 0 passed, 1 failed with the flips listed, 2 bad input
        raise DemoError(f"gate failed to run: {gated.stderr.strip()}")
    step("gate B against A (" + ("passed" if gated.returncode == 0 else "failed") + ")", gated.stdout)
    step("ship B", cli(env, "models", "ship", "--model", hash_b, "--reason", "trained on round 1"))

    round_2 = round_with(model_b, "loop round 2 (model B)", round_2_items())
    release_2 = release(env, demo_dir, [round_1["id"], round_2["id"]], "1.1.0")
    for name, folder in (("A", model_a), ("B", model_b)):
        step(f"evaluate model {name} on every round", cli(env, "evaluate", "--model", str(folder)))
    print(f"\nrelease: {release_1}\nrelease: {release_2}\nmodel B: {model_b}")
    print_access(up.service.url, up.server, [{"email": a.email, "id": a.id} for a in annotators], up.tokens)


def cli(env: dict[str, str], *command: str) -> str:
    """Run one ``dynaval`` command; what it printed, or a :class:`DemoError` with its error line."""
    ran = _cli(env, *command)
    if ran.returncode != 0:
        raise DemoError(f"dynaval {' '.join(command[:2])} failed: {ran.stderr.strip() or ran.stdout.strip()}")
    return ran.stdout


def step(title: str, printed: str) -> None:
    print(f"\n=== {title} ===")
    print(printed.rstrip(), flush=True)


def registered_hash(env: dict[str, str], folder: Path, name: str) -> str:
    """Register the model folder (idempotent) and return its content hash."""
    printed = cli(env, "models", "register", str(folder), "--name", name)
    for word in printed.split():
        if word.startswith("sha256:"):
            return word
    raise DemoError(f"dynaval models register printed no hash: {printed.strip()}")


def release(env: dict[str, str], demo_dir: Path, round_ids: list[int], version: str) -> Path:
    """Release ``version`` of the frozen rounds and verify the copy; the release's folder."""
    out = demo_dir / f"release-{version}"
    made = cli(env, "release", "create", "--rounds", ",".join(map(str, round_ids)), "--version", version,
               "--out", str(out), "--license", "cc-by-4.0")  # fmt: skip
    step(f"release {version}", made)
    cli(env, "release", "verify", str(out))
    return out


if __name__ == "__main__":
    sys.exit(main())
