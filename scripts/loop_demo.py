"""The whole loop, for real (``scripts/loop_demo``): collect → validate → release → retrain → gate
→ next round, against a real Label Studio and the real service, the retraining by a policy.

1. Round 1 with model A (the default sentiment model): writers submit, annotators vote in Label
   Studio, the round is frozen and released as 1.0.0 (its dev and test examples: the suite).
2. A retraining policy is set (``dynaval retraining set --task sentiment --every N``).
3. Round 2 on A: writers submit, annotators vote. The N-th accepted example starts the policy's
   run, by itself: it places the writers, trains model B from A on train writers' examples only,
   gates B against A on the suite and, when B passes, ships it: round 2 closes and round 3 opens on
   B. Each automatic step is printed from the retraining audit log.
4. Round 3's writers submit fresh candidates, so its MER is B's.
5. Round 2 is frozen and released as 1.1.0, which extends 1.0.0 (round 1's splits unchanged).
6. A and B are evaluated on every round's dev and test cases (``dynaval evaluate``).

Both servers then stay up until Ctrl-C (``--exit`` stops them at once).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
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

# Round 2's candidates, written against model A: (text, the writer's label, the label careful
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

# Round 3's fresh candidates, written against model B.
ROUND_3: list[tuple[str, str, str | None]] = [
    ("The waiter apologised so sweetly that I forgot the burnt toast.", "positive", "positive"),
    ("Five stars for the view, zero for the mattress.", "negative", "negative"),
    ("The sequel is exactly as long as the first film.", "neutral", "neutral"),
    ("I laughed so hard at the ending that I cried.", "positive", "positive"),
    ("Sure, the update is faster, if you never open the camera.", "negative", "negative"),
    ("The shop opens at nine on weekdays.", "neutral", "neutral"),
    ("Not the worst pizza in town, but close.", "negative", "negative"),
    ("Against my expectations, the tiny tent kept us dry all night.", "positive", "positive"),
]

TRAIN_EPOCHS = 3
SEED = 7
RETRAIN_EVERY = 3
"""The policy retrains after every 3 newly accepted examples (the demo's rounds are small: round 2
accepts 4 of its 16 candidates against model A)."""
MIN_INTERVAL_S = 3600
"""And at most once an hour: votes go on in round 2 once the policy closed it, and three more
accepted there would start a second run during the demo."""
RUN_WAIT_S = 1800.0
START_WAIT_S = 120.0
"""A due policy's run starts at the next read-back of votes or the minute's sweep."""


def items_of(rows: list[tuple[str, str, str | None]]) -> list[Item]:
    return [Item({"text": text}, label, truth) for text, label, truth in rows]


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

    def round_with(
        model: Path | None, name: str, items: list[Item], existing: int | None = None
    ) -> dict[str, Any]:
        print(f"running {name} ...", flush=True)
        summary = run_round(api, task="sentiment", name=name, items=items, lead=up.lead, writers=up.writers,
                            collector=up.collector, server=up.server, annotators=annotators, rng=rng,
                            model=None if model is None else str(model), existing=existing)  # fmt: skip
        print_summary(summary, export_round(env, summary["id"], demo_dir))
        return summary

    round_1 = round_with(model_a, "loop round 1 (model A)", sentiment_items())
    freeze_round(up.service.url, up.lead, round_1["id"])
    release_1 = release(env, demo_dir, [round_1["id"]], "1.0.0")
    hash_a = registered_hash(env, model_a, "model-A")

    step(
        f"set the retraining policy: every {RETRAIN_EVERY} accepted examples",
        cli(
            env,
            "retraining",
            "set",
            "--task",
            "sentiment",
            "--every",
            str(RETRAIN_EVERY),
            "--min-interval-s",
            str(MIN_INTERVAL_S),
            "--epochs",
            str(TRAIN_EPOCHS),
            "--seed",
            str(SEED),
        ),
    )
    round_2 = round_with(model_a, "loop round 2 (model A)", items_of(ROUND_2))
    run = finished_run(env)
    for event in reversed(run["events"]):
        if event["step"] != "policy-set":
            step(f"automatic: {event['step']}", describe(event))
    result = run["runs"][0].get("result") or {}
    if run["runs"][0]["state"] != "done":
        raise DemoError(f"the retraining run {run['runs'][0]['state']}: {run['runs'][0].get('error')}")
    model_b = Path(result["model"]["folder"])
    if result["shipped"]:
        round_3 = result["next_round"]
        round_with(None, round_3["name"], items_of(ROUND_3), existing=round_3["id"])
    freeze_round(up.service.url, up.lead, round_2["id"])
    release_2 = release(env, demo_dir, [round_1["id"], round_2["id"]], "1.1.0")
    for name, folder in (("A", model_a), ("B", model_b)):
        step(f"evaluate model {name} on every round", cli(env, "evaluate", "--model", str(folder)))
    print(f"\nrelease: {release_1}\nrelease: {release_2}\nmodel A: {hash_a}\nmodel B: {model_b}")
    print_access(up.service.url, up.server, [{"email": a.email, "id": a.id} for a in annotators], up.tokens)


def finished_run(env: dict[str, str]) -> dict[str, Any]:
    """The policy as ``dynaval retraining show --json`` shows it, once its first run has ended."""
    started = time.monotonic()
    while True:
        view: dict[str, Any] = json.loads(cli(env, "retraining", "show", "--task", "sentiment", "--json"))
        runs = view["runs"]
        if runs and runs[0]["state"] not in ("queued", "running"):
            return view
        waited = time.monotonic() - started
        if not runs and waited > START_WAIT_S:
            raise DemoError(f"the retraining policy started no run: it waits for {view['waiting_for']}")
        if waited > RUN_WAIT_S:
            raise DemoError(f"the retraining run did not end within {RUN_WAIT_S:.0f} s")
        time.sleep(2)


def describe(event: dict[str, Any]) -> str:
    """One step of the retraining audit log, in a few lines."""
    detail = event["detail"]
    if event["step"] == "triggered":
        return (
            f"{detail['new_examples']} newly accepted examples (policy: every {detail['every']}); "
            f"round {detail['round']['id']} ({detail['round']['name']}) on {detail['round']['model']}"
        )
    if event["step"] == "trained":
        examples = detail["examples"]
        dev = "; ".join(
            f"{d['split']} ({d['rows']} rows): {d['before']:.3f} -> {d['after']:.3f}"
            for d in detail["dev"]
            if d["before"] is not None and d["after"] is not None
        )
        return (
            f"model B {detail['model']} from {detail['base']}\n"
            f"  trained on {examples['trained_on']} of {examples['accepted']} accepted examples "
            f"({examples['held_out']} held out, {examples['withheld']} withheld, "
            f"{examples['near_held_out']} near a held-out one)" + (f"\n  {dev}" if dev else "")
        )
    if event["step"] == "gated":
        if "reason" in detail:
            return f"gate FAIL: {detail['reason']}"
        return (
            f"gate {'PASS' if detail['passed'] else 'FAIL'}: {len(detail['negative_flips'])} negative flips "
            f"(allowed {detail['max_flips']}), {detail['positive_flips']} positive flips over "
            f"{detail['paired_cases']} paired cases against {detail['baseline']}"
        )
    if event["step"] == "shipped":
        return (
            f"B shipped: round {detail['closed_round']} closed, round {detail['next_round']['id']} "
            f"({detail['next_round']['name']}) open on B"
        )
    return json.dumps(detail, ensure_ascii=False)


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
