"""``dynaval retraining``: set and show a task type's retraining policy, and start a run now (what
``PUT/GET /api/task-types/<task>/retraining`` and ``POST .../retraining/run`` do)."""

from __future__ import annotations

import argparse
import json
from contextlib import closing
from typing import Any

from dynaval.entrypoints.cli.common import open_services, operator_name


def _print_view(view: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(view, indent=2, ensure_ascii=False))
        return
    policy = view["policy"]
    if not view["on"]:
        print(f"{view['task_type']}: retraining is off")
    else:
        print(
            f"{view['task_type']}: retrain after every {policy['every']} newly accepted examples, "
            f"from the {policy['base']} model, ship by {policy['ship']}, at most {policy['max_flips']} "
            f"negative flips, at least {policy['min_interval_s']} s apart"
        )
        print(
            f"  training: {policy['epochs']} epochs, seed {policy['seed']}, learning rate "
            f"{policy['learning_rate'] or 'of the recipe'}, batch {policy['batch_size']}, seed set "
            f"{'yes' if policy['with_seed_set'] else 'no'}"
        )
        due = "yes" if view["due"] else "no"
        print(f"  new examples: {view['new_examples']} of {policy['every']}; due: {due}")
        if not view["due"]:
            print(f"  waiting for: {view['waiting_for']}")
    for run in view["runs"][:5]:
        result = run.get("result") or {}
        outcome = run.get("error") or (
            ("shipped " if result.get("shipped") else "kept, not shipped: ") + str(result.get("reason", ""))
            if result
            else ""
        )
        print(f"  run: job {run['id']} {run['state']} {outcome}".rstrip())


def cmd_retraining_show(args: argparse.Namespace) -> int:
    from dynaval.service_layer.retraining.policies import policy_view

    with closing(open_services()) as services:
        _print_view(policy_view(services, args.task), args.json)
    return 0


def cmd_retraining_set(args: argparse.Namespace) -> int:
    from dynaval.service_layer.retraining.policies import policy_view, set_policy

    settings: dict[str, Any] = {"every": None if args.off else args.every}
    for name in (
        "ship",
        "min_interval_s",
        "base",
        "max_flips",
        "epochs",
        "seed",
        "learning_rate",
        "batch_size",
    ):
        value = getattr(args, name)
        if value is not None:
            settings[name] = value
    if args.with_seed_set:
        settings["with_seed_set"] = True
    with closing(open_services()) as services:
        set_policy(services, args.task, settings, by=operator_name())
        _print_view(policy_view(services, args.task), args.json)
    return 0


def cmd_retraining_run(args: argparse.Namespace) -> int:
    from dynaval.entrypoints.cli.jobs import follow_job
    from dynaval.service_layer.retraining.policies import start_run_now

    with closing(open_services()) as services:
        job = start_run_now(services, args.task, by=operator_name())
        assert job.id is not None
        if not args.wait:
            queued = f"job {job.id}: a retraining run of {args.task} queued"
            print(f"{queued}; follow it with `dynaval jobs wait {job.id}`")
            return 0
        return follow_job(services, job.id, timeout=args.timeout, as_json=args.json)


def add_retraining_commands(commands: Any) -> None:
    retraining = commands.add_parser(
        "retraining",
        help="a task type's retraining policy: retrain, gate and ship after every N accepted examples",
        description="A policy retrains a task type's model after every N newly accepted examples, as a "
        "job: trained on train writers' examples only, gated against the model it would replace, and "
        "shipped (the next round opens on it) only when it passes.",
    )
    sub = retraining.add_subparsers(dest="retraining_command", required=True, metavar="RETRAINING_COMMAND")
    show = sub.add_parser("show", help="the policy, where its count stands, its runs")
    show.add_argument("--task", required=True, help="the task type (e.g. sentiment, digits)")
    show.add_argument("--json", action="store_true")
    show.set_defaults(run=cmd_retraining_show)

    setting = sub.add_parser("set", help="set the policy (its count of new examples starts now)")
    setting.add_argument("--task", required=True, help="the task type (e.g. sentiment, digits)")
    turn = setting.add_mutually_exclusive_group(required=True)
    turn.add_argument("--every", type=int, help="retrain after every N newly accepted examples")
    turn.add_argument("--off", action="store_true", help="turn the policy off")
    setting.add_argument(
        "--ship", choices=["next_round", "swap"], help="how a passing model ships (next_round)"
    )
    setting.add_argument("--min-interval-s", dest="min_interval_s", type=int, help="seconds between runs (0)")
    setting.add_argument("--base", choices=["round", "shipped"], help="train from the round's model (round)")
    setting.add_argument("--max-flips", dest="max_flips", type=int, help="negative flips the gate allows (0)")
    setting.add_argument("--epochs", type=int, help="passes over the data (3)")
    setting.add_argument("--seed", type=int, help="seed of initialisation and order (13)")
    setting.add_argument(
        "--learning-rate", dest="learning_rate", type=float, help="default: the task's recipe"
    )
    setting.add_argument("--batch-size", dest="batch_size", type=int, help="examples per step (16)")
    setting.add_argument("--with-seed-set", action="store_true", help="add the task's hand-written seed set")
    setting.add_argument("--json", action="store_true")
    setting.set_defaults(run=cmd_retraining_set)

    running = sub.add_parser(
        "run", help="start a run now, whatever the count (a worker runs it: the service's, or dynaval worker)"
    )
    running.add_argument("--task", required=True, help="the task type (e.g. sentiment, digits)")
    running.add_argument(
        "--wait",
        action="store_true",
        help="follow the run with a progress bar until it ends (exit 1 unless done)",
    )
    running.add_argument(
        "--timeout", type=float, default=None, help="with --wait: give up after this many seconds"
    )
    running.add_argument("--json", action="store_true")
    running.set_defaults(run=cmd_retraining_run)
