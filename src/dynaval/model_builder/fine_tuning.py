"""Fine-tuning a transformers sequence classifier on labelled examples, on the CPU: the one training
loop that both the default models (:mod:`dynaval.model_builder.default_model`, on a seed set) and
the next round's model (:mod:`dynaval.model_training`, on a release's train splits) use.

Sentences are encoded one each; NLI pairs as a real sentence pair, ``[CLS] premise [SEP]
hypothesis [SEP]`` with the hypothesis's token type 1 (:func:`tokenize_batch`), in training and in
evaluation, as the service's predictor encodes them.
"""

from __future__ import annotations

import os
import random
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar


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


@dataclass(frozen=True)
class Recipe:
    """How to train: passes over the data, the AdamW learning rate, the batch size and the longest
    encoding in tokens."""

    epochs: int
    learning_rate: float
    batch_size: int = 16
    max_length: int = 128


@dataclass(frozen=True)
class FineTuned:
    """What a fine-tuning run did."""

    epochs_completed: float
    """Epochs actually run; less than asked when a deadline stopped training early."""
    stopped_early: bool
    final_loss: float | None
    train_seconds: float


@contextmanager
def cpu_training(threads: int | None = None) -> Iterator[None]:
    """Torch on ``threads`` CPU threads (default: the cores, at most 8), transformers' expected
    "classifier newly initialised" report and progress bars silenced; all restored on exit."""
    import torch
    import transformers.utils.logging

    hf_logging: Any = transformers.utils.logging  # partly untyped
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(max(1, threads or min(os.cpu_count() or 1, 8)))
    previous_verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    progress_bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        torch.set_num_threads(previous_threads)
        hf_logging.set_verbosity(previous_verbosity)
        if progress_bars:
            hf_logging.enable_progress_bar()


def fine_tune(
    base: Path,
    train: list[Example],
    labels: Sequence[str],
    into: Path,
    *,
    recipe: Recipe,
    seed: int,
    rng: random.Random,
    deadline: float | None = None,
    log: Callable[[str], None] = print,
    on_step: Callable[[int, int], None] | None = None,
) -> FineTuned:
    """Load the model in ``base`` with ``labels`` as its ``id2label`` (a head of another shape is
    initialised anew, from ``seed``), train it on ``train`` (shuffled each epoch by ``rng``) and save
    the model and its tokenizer into the new folder ``into``.

    Deterministic given ``seed``, ``rng``'s state and the data, on one machine and thread count.
    Run it inside :func:`cpu_training`. ``on_step(done, total)`` is told after each optimiser step
    (what it raises stops the training, and nothing is written).
    """
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if recipe.epochs < 1:
        raise ValueError("epochs must be at least 1")
    if not train:
        raise ValueError("no examples to train on")
    label_list = list(labels)
    label2id = {label: index for index, label in enumerate(label_list)}
    unknown = sorted({example.label for example in train} - set(label2id))
    if unknown:
        raise ValueError(f"training labels {unknown} are not among the model's labels {label_list}")
    torch.manual_seed(seed)
    log(f"loading the base model from {base}")
    tokenizer = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(
        str(base),
        num_labels=len(label_list),
        id2label=dict(enumerate(label_list)),
        label2id=label2id,
        local_files_only=True,
    )
    started = time.monotonic()
    epochs_completed, stopped_early, final_loss = train_loop(
        model,
        train,
        lambda batch: tokenize_batch(tokenizer, batch, max_length=recipe.max_length),
        label2id,
        recipe=recipe,
        rng=rng,
        deadline=deadline,
        log=log,
        on_step=on_step,
    )
    train_seconds = time.monotonic() - started
    model.eval()
    into.mkdir()
    model.save_pretrained(str(into))
    tokenizer.save_pretrained(str(into))
    return FineTuned(epochs_completed, stopped_early, final_loss, train_seconds)


def scratch_folder(out_dir: Path, purpose: str = "building") -> Path:
    """A hidden sibling of ``out_dir`` to build in (not created), renamed into place when done."""
    return out_dir.parent / f".{out_dir.name}.{purpose}-{uuid.uuid4().hex[:8]}"


class Labelled(Protocol):
    """A training example of any kind: what the loop needs of it is its label."""

    @property
    def label(self) -> str: ...


ExampleT = TypeVar("ExampleT", bound=Labelled)


def train_loop(
    model: Any,
    train: Sequence[ExampleT],
    batch_inputs: Callable[[list[ExampleT]], Mapping[str, Any]],
    label2id: Mapping[str, int],
    *,
    recipe: Recipe,
    rng: random.Random,
    deadline: float | None,
    log: Callable[[str], None],
    on_step: Callable[[int, int], None] | None = None,
) -> tuple[float, bool, float | None]:
    """A plain AdamW loop with linear warm-up and decay and clipped gradients, over ``train``
    shuffled each epoch by ``rng``; ``batch_inputs`` turns a batch into the model's keyword inputs
    (tokens for a text model, pixels for an image model). Returns (epochs run, stopped early at the
    ``deadline``, last loss)."""
    import torch

    epochs, batch_size = recipe.epochs, recipe.batch_size
    steps_per_epoch = (len(train) + batch_size - 1) // batch_size
    total_steps = steps_per_epoch * epochs
    warmup = max(1, total_steps // 10)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate, weight_decay=0.01)

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
            targets = torch.tensor([label2id[example.label] for example in batch])
            loss = model(**batch_inputs(batch), labels=targets).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            last_loss = float(loss.item())
            running += last_loss * len(batch)
            if on_step is not None:
                on_step(step, total_steps)
            if deadline is not None and time.monotonic() >= deadline:
                log(f"time budget reached after {step} steps (epoch {epoch + 1}); stopping training")
                return step / steps_per_epoch, True, last_loss
        log(f"epoch {epoch + 1}/{epochs}: mean training loss {running / len(order):.4f}")
    return float(epochs), False, last_loss


def evaluate_folder(
    folder: Path, heldout: Sequence[Example], labels: tuple[str, ...], *, max_length: int
) -> tuple[float, dict[str, float]]:
    """Accuracy (overall and per label) on ``heldout`` of the model saved in ``folder``, reloaded from it.

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


def move_into_place(tmp_dir: Path, out_dir: Path) -> None:
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
