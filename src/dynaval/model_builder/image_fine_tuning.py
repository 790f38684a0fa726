"""Fine-tune an image classifier (``AutoModelForImageClassification`` and its image processor, from
one folder) on labelled images, and measure a saved one: the image counterpart of
:mod:`dynaval.model_builder.fine_tuning`, for image task types (the MNIST example's retraining).

Images are read from their PNG files in the mode the model's config reads (one channel: grey),
through the folder's own image processor, as the service reads them
(:class:`~dynaval.adapters.image_classifier.TransformersImagePredictor`, which also measures the
saved model, so a figure is what the service will see).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynaval.adapters.image_classifier import image_mode
from dynaval.model_builder.fine_tuning import FineTuned, Recipe, train_loop

BATCH_FOR_EVALUATION = 64


@dataclass(frozen=True)
class LabelledImage:
    """An image example: the PNG file it is read from, and its label."""

    path: Path
    label: str


def fine_tune_images(
    base: Path,
    train: list[LabelledImage],
    labels: Sequence[str],
    into: Path,
    *,
    recipe: Recipe,
    seed: int,
    rng: random.Random,
    log: Callable[[str], None] = print,
    on_step: Callable[[int, int], None] | None = None,
) -> FineTuned:
    """Load the image model in ``base`` (its labels must be ``labels``, in order), train it on
    ``train`` (shuffled each epoch by ``rng``; AdamW, linear warm-up and decay, clipped gradients)
    and save the model and its image processor into the new folder ``into``. ``on_step(done,
    total)`` is told after each step; what it raises stops the training and nothing is written."""
    import torch
    from transformers import AutoImageProcessor, AutoModelForImageClassification

    if not train:
        raise ValueError("no examples to train on")
    label2id = {label: index for index, label in enumerate(labels)}
    unknown = sorted({example.label for example in train} - set(label2id))
    if unknown:
        raise ValueError(f"training labels {unknown} are not among the model's labels {list(labels)}")
    torch.manual_seed(seed)
    log(f"loading the base image model from {base}")
    processor = AutoImageProcessor.from_pretrained(str(base), local_files_only=True)
    model = AutoModelForImageClassification.from_pretrained(str(base), local_files_only=True)
    mode = image_mode(model.config)
    started = time.monotonic()

    def pixels(batch: list[LabelledImage]) -> dict[str, Any]:
        read = processor(images=[_read(example.path, mode) for example in batch], return_tensors="pt")
        return {"pixel_values": read["pixel_values"]}

    epochs_run, _stopped, last_loss = train_loop(
        model, train, pixels, label2id, recipe=recipe, rng=rng, deadline=None, log=log, on_step=on_step
    )
    model.eval()
    into.mkdir()
    model.save_pretrained(str(into))
    processor.save_pretrained(str(into))
    return FineTuned(epochs_run, False, last_loss, time.monotonic() - started)


def evaluate_image_folder(
    folder: Path, heldout: Sequence[LabelledImage], labels: tuple[str, ...]
) -> tuple[float, dict[str, float]]:
    """Accuracy (overall and per label) on ``heldout`` of the image model saved in ``folder``, read
    back by the service's own image predictor."""
    from dynaval.adapters.image_classifier import TransformersImagePredictor
    from dynaval.domain.images.image import ImageInput

    predictor = TransformersImagePredictor(folder, model_hash="")
    if predictor.labels != labels:
        raise RuntimeError(f"the saved model has labels {predictor.labels}, expected {labels}")
    correct: dict[str, int] = dict.fromkeys(labels, 0)
    seen: dict[str, int] = dict.fromkeys(labels, 0)
    for start in range(0, len(heldout), BATCH_FOR_EVALUATION):
        batch = heldout[start : start + BATCH_FOR_EVALUATION]
        inputs = [ImageInput(sha256=example.path.stem, png=example.path.read_bytes()) for example in batch]
        for example, prediction in zip(batch, predictor.predict(inputs), strict=True):
            seen[example.label] += 1
            correct[example.label] += int(prediction.label == example.label)
    total = sum(seen.values())
    per_label = {label: (correct[label] / seen[label] if seen[label] else 0.0) for label in labels}
    return (sum(correct.values()) / total if total else 0.0), per_label


def _read(path: Path, mode: str) -> Any:
    from PIL import Image

    with Image.open(path) as picture:
        return picture.convert(mode)
