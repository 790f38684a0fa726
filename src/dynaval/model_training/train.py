"""Train the next round's model: fine-tune a base model on the accumulated train splits of verified
releases (and, if asked, the task's hand-written seed set), measure it on every round's dev split
before and after, and write it with its model card.

Every check comes first, so a refused request writes nothing: each release must pass
``dynaval release verify``, the releases must be versions of one release, every split asked for must
be a train split one of them holds, the base model's labels must be the release's labels in order,
and the output folder must be new or empty. Training runs on the CPU, offline, and is deterministic
given the seed (on one machine).
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynaval.adapters.files.release_files import file_sha256
from dynaval.adapters.image_classifier import is_image_model
from dynaval.adapters.predictor import hash_model_folder
from dynaval.domain.errors import InvalidInput
from dynaval.model_builder.default_model import TASKS, load_task_seed
from dynaval.model_builder.fine_tuning import (
    Example,
    Recipe,
    cpu_training,
    evaluate_folder,
    fine_tune,
    move_into_place,
    scratch_folder,
)
from dynaval.model_builder.image_fine_tuning import LabelledImage, evaluate_image_folder, fine_tune_images
from dynaval.model_training.card import (
    DevAccuracy,
    ReleaseUsed,
    TrainingRecord,
    render_model_card,
)
from dynaval.model_training.release_data import (
    ReleaseFolder,
    TrainingExample,
    check_one_lineage,
    dev_splits,
    open_verified_release,
    split_examples,
    train_splits,
)
from dynaval.service_layer.files import FileServices
from dynaval.service_layer.progress import Progress, Unwatched

DEFAULT_EPOCHS = 3
DEFAULT_LEARNING_RATE = 5e-5
DEFAULT_MAX_LENGTH = 128
IMAGE_LEARNING_RATE = 1e-3
"""An image classifier's default learning rate (a small network fine-tuned on few drawings)."""
WEIGHTS_FILE = "model.safetensors"


@dataclass(frozen=True)
class TrainingRequest:
    releases: Sequence[Path]
    base: Path
    out: Path
    splits: Sequence[str] | None = None
    """Train splits to learn from; None: every train split of the releases."""
    epochs: int = DEFAULT_EPOCHS
    seed: int = 13
    with_seed_set: bool = False
    learning_rate: float | None = None
    """None: the task's default-model recipe, or 5e-5 for a task without one."""
    batch_size: int = 16
    threads: int | None = None


@dataclass(frozen=True)
class TrainedModel:
    folder: Path
    content_hash: str
    """:func:`hash_model_folder` over the folder as written, card included."""
    record: TrainingRecord


def train_next_model(
    request: TrainingRequest,
    *,
    files: FileServices,
    log: Callable[[str], None],
    progress: Progress | None = None,
) -> TrainedModel:
    """Fine-tune ``request.base`` on the releases' train splits into ``request.out`` (see the module);
    ``files`` reads and verifies the releases."""
    progress = progress or Unwatched()
    if request.epochs < 1:
        raise InvalidInput("must be at least 1", field="epochs")
    if request.batch_size < 1:
        raise InvalidInput("must be at least 1", field="batch_size")
    if request.learning_rate is not None and not request.learning_rate > 0:
        raise InvalidInput("must be a positive number", field="learning_rate")
    if not request.releases:
        raise InvalidInput("name at least one release folder", field="release")
    out = Path(request.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InvalidInput(f"{out} exists and is not an empty folder; name a new folder", field="out")
    progress.step("verifying the releases", len(request.releases))
    releases = []
    for root in request.releases:
        releases.append(open_verified_release(Path(root), files))
        progress.advance(len(releases))
    check_one_lineage(releases)
    task_type, labels = releases[0].task_type, releases[0].labels
    reads_images = releases[0].reads_images
    _check_base(request.base, labels, images=reads_images)
    chosen = train_splits(releases, request.splits)
    seed_rows = _seed_set(task_type, labels) if request.with_seed_set else None  # refused before training

    train: list[TrainingExample] = []
    split_rows: dict[str, int] = {}
    trained_ids: set[str] = set()
    for split in chosen:
        rows = split_examples(releases, split)
        split_rows[split] = len(rows)
        trained_ids.update(example_id for example_id, _ in rows)
        train.extend(example for _, example in rows)
    dev = {
        split: [example for _, example in split_examples(releases, split)] for split in dev_splits(releases)
    }
    _check_no_leak(releases, trained_ids)
    if not train and seed_rows is None:
        raise InvalidInput(f"the splits {', '.join(chosen)} hold no rows", field="splits")
    return fit_model(
        TrainingData(
            task_type=task_type,
            labels=labels,
            reads_images=reads_images,
            train=train,
            split_rows=split_rows,
            dev=dev,
            releases=tuple(ReleaseUsed(r.name, r.version, r.content_hash) for r in releases),
            described=", ".join(r.describe() for r in releases),
        ),
        request,
        log=log,
        progress=progress,
    )


@dataclass(frozen=True)
class TrainingData:
    """What a model learns from and is measured on: checked already (no dev or test row in ``train``)."""

    task_type: str
    labels: tuple[str, ...]
    reads_images: bool
    train: list[TrainingExample]
    split_rows: dict[str, int]
    """Where the training rows come from (a train split, or accepted examples) -> how many."""
    dev: dict[str, list[TrainingExample]]
    """Dev set -> its rows, measured before and after."""
    releases: tuple[ReleaseUsed, ...]
    described: str
    """Where the rows come from, in words, for the log."""


def fit_model(
    data: TrainingData,
    request: TrainingRequest,
    *,
    log: Callable[[str], None],
    progress: Progress,
) -> TrainedModel:
    """Fine-tune ``request.base`` on ``data`` into ``request.out`` (a new or empty folder), measure
    it on the dev sets before and after, and write its card; a failure leaves nothing there."""
    out = Path(request.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InvalidInput(f"{out} exists and is not an empty folder; name a new folder", field="out")
    _check_base(request.base, data.labels, images=data.reads_images)
    labels = data.labels
    seed_rows = _seed_set(data.task_type, labels) if request.with_seed_set else None
    train: list[TrainingExample] = [*data.train, *(seed_rows or [])]
    if not train:
        raise InvalidInput("there is nothing to train on", field="splits")
    recipe_of_task = TASKS.get(data.task_type)
    recipe = Recipe(
        epochs=request.epochs,
        learning_rate=request.learning_rate
        or (
            IMAGE_LEARNING_RATE
            if data.reads_images
            else recipe_of_task.learning_rate
            if recipe_of_task
            else DEFAULT_LEARNING_RATE
        ),
        batch_size=request.batch_size,
        max_length=recipe_of_task.max_length if recipe_of_task else DEFAULT_MAX_LENGTH,
    )
    log(
        f"training on {len(train)} rows ("
        + ", ".join(f"{split} {rows}" for split, rows in data.split_rows.items())
        + (f", seed set {len(seed_rows)}" if seed_rows is not None else "")
        + f") of {data.described}"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = scratch_folder(out, "training")
    try:
        with cpu_training(request.threads):
            progress.step("evaluating the base model on dev", len(data.dev))
            before = _dev_accuracy(request.base, data.dev, labels, recipe.max_length)
            progress.step("training", recipe.epochs * -(-len(train) // recipe.batch_size))
            tune = fine_tune_images if data.reads_images else fine_tune
            tuned = tune(
                request.base,
                train,  # type: ignore[arg-type]  # all images, or all texts: one task type's rows
                labels,
                scratch,
                recipe=recipe,
                seed=request.seed,
                rng=random.Random(request.seed),
                log=log,
                on_step=lambda done, total: progress.advance(done, total),
            )
            progress.step("evaluating the trained model on dev", len(data.dev))
            after = _dev_accuracy(scratch, data.dev, labels, recipe.max_length)
        record = TrainingRecord(
            task_type=data.task_type,
            labels=labels,
            releases=data.releases,
            split_rows=data.split_rows,
            seed_set_rows=None if seed_rows is None else len(seed_rows),
            base_name=request.base.name,
            base_hash=hash_model_folder(request.base),
            seed=request.seed,
            epochs=recipe.epochs,
            learning_rate=recipe.learning_rate,
            batch_size=recipe.batch_size,
            max_length=recipe.max_length,
            dev=[
                DevAccuracy(split, len(rows), before[split], after[split]) for split, rows in data.dev.items()
            ],
            weights_file=WEIGHTS_FILE,
            weights_sha256=file_sha256(scratch / WEIGHTS_FILE),
            final_loss=tuned.final_loss,
        )
        (scratch / "README.md").write_text(render_model_card(record), encoding="utf-8")
        move_into_place(scratch, out)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)
    return TrainedModel(out, hash_model_folder(out), record)


def _check_base(base: Path, labels: tuple[str, ...], *, images: bool) -> None:
    """The base model reads what the data holds (images or texts) and has its labels, in order."""
    config = _read_config(base)
    _check_base_reads(base, config, images=images)
    base_labels = _labels_of(base, config)
    if base_labels != labels:
        raise InvalidInput(
            f"the base model's labels {list(base_labels)} are not the release's labels {list(labels)} "
            "(same names, same order)",
            field="base",
        )


def _read_config(folder: Path) -> dict[str, Any]:
    """The model's ``config.json``; 422 naming ``base`` when it cannot be read."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise InvalidInput(
            f"no transformers model in {folder} (no readable config.json)", field="base"
        ) from None
    if not isinstance(config, dict):
        raise InvalidInput(f"{folder / 'config.json'} is not a JSON object", field="base")
    return config


def _labels_of(folder: Path, config: dict[str, Any]) -> tuple[str, ...]:
    """The model's ``id2label``, in id order."""
    try:
        id2label = config["id2label"]
        return tuple(str(id2label[str(i)]) for i in range(len(id2label)))
    except (KeyError, TypeError):
        raise InvalidInput(
            f"{folder / 'config.json'} has no id2label with ids 0 to n-1", field="base"
        ) from None


def _seed_set(task_type: str, labels: tuple[str, ...]) -> list[Example]:
    if task_type not in TASKS:
        raise InvalidInput(
            f"task {task_type!r} has no seed set (tasks with one: {', '.join(sorted(TASKS))})",
            field="with_seed_set",
        )
    rows = load_task_seed(task_type, "train")
    unknown = sorted({row.label for row in rows} - set(labels))
    if unknown:
        raise InvalidInput(f"the seed set has labels {unknown} the release does not", field="with_seed_set")
    return rows


def _check_no_leak(releases: Sequence[ReleaseFolder], trained_ids: set[str]) -> None:
    """No example learned from may sit in a dev or test split of any of the releases (a verified
    release of one lineage never does this; the check costs one read of those splits)."""
    for release in releases:
        for split, kind in release.split_kinds.items():
            if kind == "train":
                continue
            leaked = [
                example_id for example_id, _ in split_examples([release], split) if example_id in trained_ids
            ]
            if leaked:
                raise InvalidInput(
                    f"example {leaked[0]} is in {split} of {release.root} and in a train split: refusing "
                    f"to train on it ({len(leaked)} such)",
                    field="splits",
                )


def _dev_accuracy(
    folder: Path, dev: dict[str, list[TrainingExample]], labels: tuple[str, ...], max_length: int
) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for split, rows in dev.items():
        images = [example for example in rows if isinstance(example, LabelledImage)]
        texts = [example for example in rows if not isinstance(example, LabelledImage)]
        if images:
            out[split] = evaluate_image_folder(folder, images, labels)[0]
        else:
            out[split] = evaluate_folder(folder, texts, labels, max_length=max_length)[0] if texts else None
    return out


def _check_base_reads(base: Path, config: dict[str, Any], *, images: bool) -> None:
    """An image release trains an image classifier, a text release a text one."""
    if is_image_model(config, base) != images:
        kind, other = ("an image", "a text") if images else ("a text", "an image")
        raise InvalidInput(
            f"the release is of {kind} task type, and {base} holds {other} classifier", field="base"
        )
