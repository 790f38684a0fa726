"""Builds the default digits model: a small ResNet image classifier trained offline on the
handwritten digits that ship inside scikit-learn (``sklearn.datasets.load_digits``: 1,797 digits of
8x8 pixels, from 43 writers), scaled to the writers' canvas (28x28 grey, white ink on black, as
MNIST), and saved as an ordinary ``AutoModelForImageClassification`` folder with its image
processor, so the service loads it like any image model.

Each 8x8 digit is scaled up to 20x20 and set in a 28x28 field with its ink's centre of mass in the
middle, as MNIST's digits are. Training adds copies turned by up to 12°, moved by up to 2 pixels,
with strokes made thinner or thicker and ink made sharper, so that a digit drawn with a brush on the
canvas is in reach (on the drawn digits of the tests, 0.54 of them right without these, 0.73 with).
A fifth of the digits (stratified, fixed seed) is held out and never trained on; the report gives
the accuracy on them, overall and per digit. It is a demo model: 8x8 scans scaled up are not
drawings, and a writer finds digits that fool it quickly, which is what a round is for.
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynaval.model_builder.default_model import BuildReport
from dynaval.model_builder.fine_tuning import cpu_training, move_into_place, scratch_folder

TASK = "digits"
SIDE = 28
"""The canvas's side, and what the model reads: 28x28 grey pixels."""
DIGIT_SIDE = 20
HELDOUT_SHARE = 0.2
EPOCHS = 20
LEARNING_RATE = 2e-3
BATCH_SIZE = 64
LABELS = tuple(str(digit) for digit in range(10))


def digit_images() -> tuple[list[Any], list[str]]:
    """scikit-learn's digits as 28x28 grey images (white ink on black, centred by mass) and labels."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = []
    for pixels in digits.images:
        small = Image.fromarray((pixels * 255 / 16).astype(np.uint8), mode="L")
        images.append(centred(small.resize((DIGIT_SIDE, DIGIT_SIDE), Image.Resampling.BILINEAR)))
    return images, [str(int(label)) for label in digits.target]


def centred(digit: Any) -> Any:
    """``digit`` in a 28x28 black field, its ink's centre of mass in the middle."""
    import numpy as np
    from PIL import Image

    ink = np.asarray(digit, dtype=np.float64)
    total = ink.sum() or 1.0
    rows, cols = np.indices(ink.shape)
    cy, cx = float((rows * ink).sum() / total), float((cols * ink).sum() / total)
    field = Image.new("L", (SIDE, SIDE), 0)
    field.paste(digit, (round(SIDE / 2 - 0.5 - cx), round(SIDE / 2 - 0.5 - cy)))
    return field


def _augmented(image: Any, rng: random.Random) -> Any:
    """A training copy: turned and moved a little; half the time with thinner strokes, sometimes
    thicker ones, and half the time with sharper ink (a brush's edge, not a scan's blur)."""
    from PIL import Image, ImageFilter

    turned = image.rotate(
        rng.uniform(-12, 12),
        resample=Image.Resampling.BILINEAR,
        translate=(rng.randint(-2, 2), rng.randint(-2, 2)),
    )
    stroke = rng.random()
    if stroke < 0.5:
        turned = turned.filter(ImageFilter.MinFilter(3))
    elif stroke < 0.65:
        turned = turned.filter(ImageFilter.MaxFilter(3))
    if rng.random() < 0.5:
        turned = turned.point(_sharper)
    return turned


def _sharper(value: int) -> int:
    return 255 if value > 100 else int(value * 1.5)


def image_processor() -> Any:
    """What the model reads, saved with it: 28x28 grey, scaled to [-1, 1]."""
    import transformers

    # The Pillow backend by name: the default one would want torchvision, and say so. A transformers
    # from before the backends were split has the one processor.
    processor: Any = getattr(transformers, "ViTImageProcessorPil", None) or transformers.ViTImageProcessor
    return processor(
        do_resize=True,
        size={"height": SIDE, "width": SIDE},
        do_rescale=True,
        do_normalize=True,
        image_mean=[0.5],
        image_std=[0.5],
    )


def new_model(labels: Sequence[str], seed: int) -> Any:
    """A small ResNet for one grey channel (about 75,000 weights)."""
    import torch
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(seed)
    make_config: Any = ResNetConfig  # num_labels and the label maps are PretrainedConfig's keywords
    config = make_config(
        num_channels=1,
        embedding_size=16,
        hidden_sizes=[32, 64],
        depths=[1, 1],
        layer_type="basic",
        downsample_in_first_stage=False,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
    )
    return ResNetForImageClassification(config)


def build_digits_model(
    out_dir: Path,
    *,
    labels: Sequence[str] = LABELS,
    epochs: int | None = None,
    seed: int = 13,
    threads: int | None = None,
) -> BuildReport:
    """Train and save the default digits model into ``out_dir`` (replacing one there), with
    ``labels`` in the labelling config's order (each a digit, ``"0"`` to ``"9"``)."""
    import torch
    from sklearn.model_selection import train_test_split

    unknown = sorted(set(labels) - set(LABELS))
    if unknown:
        raise ValueError(f"the digits model knows the digits 0 to 9, not: {', '.join(unknown)}")
    started = time.monotonic()
    images, targets = digit_images()
    train_at, held_at = train_test_split(
        list(range(len(images))), test_size=HELDOUT_SHARE, random_state=seed, stratify=targets
    )
    label2id = {label: i for i, label in enumerate(labels)}
    processor = image_processor()
    rng = random.Random(seed)
    epochs = epochs or EPOCHS
    with cpu_training(threads):
        model = new_model(labels, seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.01)
        steps = epochs * -(-len(train_at) // BATCH_SIZE)
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=LEARNING_RATE, total_steps=steps)
        train_started = time.monotonic()
        loss = None
        for _epoch in range(epochs):
            model.train()
            order = list(train_at)
            rng.shuffle(order)
            for start in range(0, len(order), BATCH_SIZE):
                batch = order[start : start + BATCH_SIZE]
                pixels = processor([_augmented(images[i], rng) for i in batch], return_tensors="pt")
                wanted = torch.tensor([label2id[targets[i]] for i in batch])
                loss = model(pixel_values=pixels["pixel_values"], labels=wanted).loss
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                schedule.step()
        train_seconds = time.monotonic() - train_started
        model.eval()
        with torch.inference_mode():
            pixels = processor([images[i] for i in held_at], return_tensors="pt")["pixel_values"]
            guessed = model(pixel_values=pixels).logits.argmax(-1).tolist()
        tmp_dir = scratch_folder(out_dir)
        try:
            model.save_pretrained(tmp_dir)
            processor.save_pretrained(tmp_dir)
            move_into_place(tmp_dir, out_dir)
        except BaseException:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            raise
    right = [labels[g] == targets[i] for g, i in zip(guessed, held_at, strict=True)]
    per_digit = {
        label: sum(r for r, i in zip(right, held_at, strict=True) if targets[i] == label)
        / max(1, sum(1 for i in held_at if targets[i] == label))
        for label in labels
    }
    return BuildReport(
        out_dir=out_dir,
        labels=tuple(labels),
        train_examples=len(train_at),
        heldout_examples=len(held_at),
        heldout_accuracy=sum(right) / len(right),
        per_label_accuracy=per_digit,
        seconds=time.monotonic() - started,
        epochs_completed=float(epochs),
        train_seconds=train_seconds,
        final_loss=float(loss.item()) if loss is not None else None,
        task=TASK,
        unit="digits",
    )
