"""A tiny image classifier for tests: a ResNet of one grey channel with random weights and the
image processor of the default digits model (28x28 grey), built from a config in a second. It is
saved and loaded through the same transformers classes and files as a real one. With ``always`` the
classifier answers that label for every image."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dynaval.model_builder.digits_model import LABELS, image_processor, new_model


def build_tiny_image_model(
    folder: Path, labels: Sequence[str] = LABELS, *, always: str | None = None, seed: int = 0
) -> Path:
    import torch

    model = new_model(list(labels), seed)
    if always is not None:
        with torch.no_grad():
            model.classifier[-1].weight.zero_()
            model.classifier[-1].bias.copy_(
                torch.tensor([8.0 if label == always else 0.0 for label in labels])
            )
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    image_processor().save_pretrained(folder)
    return folder
