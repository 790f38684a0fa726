"""``dynaval model build-default`` and ``dynaval model train``: a task's default model, and the next round's
model trained on releases' train splits."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from dynaval.entrypoints.cli.common import CommandError, StepBars, load_settings


def _split_names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def cmd_model_train(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local base folder only: nothing is downloaded
    from dynaval.bootstrap import offline_services
    from dynaval.model_training.train import TrainingRequest, train_next_model

    bars = StepBars()
    try:
        trained = train_next_model(
            TrainingRequest(
                releases=[Path(root) for root in args.release],
                base=Path(args.base),
                out=Path(args.out),
                splits=None if args.splits is None else _split_names(args.splits),
                epochs=args.epochs,
                seed=args.seed,
                with_seed_set=args.with_seed_set,
                learning_rate=args.learning_rate,
                batch_size=args.batch_size,
            ),
            files=offline_services(),
            log=print,
            progress=bars,
        )
    finally:
        bars.close()
    record = trained.record
    print("dev accuracy per round (base model -> trained model):")
    for dev in record.dev:
        before = "n/a" if dev.before is None else f"{dev.before:.3f}"
        after = "n/a" if dev.after is None else f"{dev.after:.3f}"
        print(f"  {dev.split} ({dev.rows} rows): {before} -> {after}")
    print(f"model: {trained.folder}")
    print(f"content hash: {trained.content_hash}")
    return 0


def cmd_build_default_model(args: argparse.Namespace) -> int:
    from dynaval.adapters.label_config import LabelConfigCatalog
    from dynaval.model_builder.default_model import build_default_model

    known = default_model_tasks()
    if args.task not in known:
        raise CommandError(f"no default model for task {args.task!r}; known tasks: {', '.join(known)}")
    if args.epochs is not None and args.epochs < 1:
        raise CommandError("--epochs must be at least 1")
    settings = load_settings(uses_secrets=False)
    out = Path(args.out) if args.out else settings.default_model_dir_for(args.task)
    if out.exists() and not args.force:
        which = "default model" if args.task == "sentiment" else f"default {args.task} model"
        print(f"the {which} is already built in {out} (use --force to rebuild)")
        return 0
    labels = LabelConfigCatalog(settings.resolved_label_config_dir).get(args.task).labels
    if args.task == DIGITS:
        from dynaval.model_builder.digits_model import build_digits_model

        report = build_digits_model(out, labels=labels, epochs=args.epochs, seed=args.seed)
    else:
        report = build_default_model(out, task=args.task, labels=labels, epochs=args.epochs, seed=args.seed)
    print(report.summary())
    return 0


DIGITS = "digits"
"""The image task with a default model: trained on scikit-learn's digits, not on a seed set."""


def default_model_tasks() -> list[str]:
    from dynaval.model_builder.default_model import TASKS  # standard library only: no torch here

    return sorted([*TASKS, DIGITS])


def add_model_commands(commands: Any) -> None:
    from dynaval.model_builder.default_model import TASKS  # standard library only: no torch here

    model = commands.add_parser("model", help="model commands")
    model_commands = model.add_subparsers(dest="model_command", required=True, metavar="MODEL_COMMAND")
    build = model_commands.add_parser(
        "build-default",
        help="fine-tune the shipped MiniLM on a task's seed set into its default model",
        description="Fine-tune the shipped MiniLM on a task's hand-written seed set (offline) and print "
        "its held-out accuracy. Tasks: sentiment (single sentences), nli (premise/hypothesis pairs), "
        "digits (a small image classifier trained on scikit-learn's handwritten digits).",
    )
    build.add_argument(
        "--task",
        default="sentiment",
        help=f"one of {', '.join(default_model_tasks())} (default: sentiment); "
        "its labels, in order, come from label_config/<task>.xml",
    )
    build.add_argument(
        "--out",
        help="folder to write (default: <data dir>/models/sentiment-default, or DYNAVAL_DEFAULT_MODEL_DIR; "
        "for another task its sibling <task>-default, e.g. <data dir>/models/nli-default)",
    )
    from dynaval.model_builder.digits_model import EPOCHS as DIGITS_EPOCHS

    recipes = ", ".join(f"{task.epochs} for {name}" for name, task in sorted(TASKS.items()))
    recipes += f", {DIGITS_EPOCHS} for digits"
    build.add_argument(
        "--epochs", type=int, default=None, help=f"passes over the seed set (default: {recipes})"
    )
    build.add_argument("--seed", type=int, default=13)
    build.add_argument("--force", action="store_true", help="rebuild even if the folder exists")
    build.set_defaults(run=cmd_build_default_model)

    add_model_train(model_commands)


def add_model_train(model_commands: Any) -> None:
    train = model_commands.add_parser(
        "train",
        help="fine-tune a model on releases' train splits (never dev or test) into the next round's model",
        description="Fine-tune the model in --base on the train splits of one or more verified releases "
        "(versions of one release; rows repeated across versions count once), on the CPU and offline. "
        "Prints every round's dev accuracy before and after, and the new folder's content hash; the "
        "folder's README.md is a model card naming the releases, splits and base model. A split that "
        "is not a train split is refused.",
    )
    train.add_argument(
        "--release", action="append", required=True, help="a release folder (repeat for several versions)"
    )
    train.add_argument(
        "--splits", help="train splits to learn from, comma-separated (default: every train_* split)"
    )
    train.add_argument(
        "--base", required=True, help="the model folder to start from; its labels must be the release's"
    )
    train.add_argument("--out", required=True, help="new (or empty) folder to write the model into")
    train.add_argument("--epochs", type=int, default=3, help="passes over the data (default 3)")
    train.add_argument("--seed", type=int, default=13, help="seed of initialisation and order (default 13)")
    train.add_argument(
        "--with-seed-set", action="store_true", help="add the task's hand-written seed set to training"
    )
    train.add_argument(
        "--learning-rate",
        type=float,
        default=None,
        help="AdamW learning rate (default: the task's default-model recipe, else 5e-5)",
    )
    train.add_argument("--batch-size", type=int, default=16, help="examples per step (default 16)")
    train.set_defaults(run=cmd_model_train)
