"""An image classifier: ``AutoModelForImageClassification`` and ``AutoImageProcessor`` from one
folder, on the CPU (the service layer's :class:`~dynaval.service_layer.predictions.Predictor` for
image task types).

The image is decoded from its stored PNG and given the model in the mode its config reads (one
channel: grey, ``L``; otherwise ``RGB``); the model's own image processor scales and normalises it,
as it did in training. So any Hugging Face image classification folder works, the default digits
model among them (28x28 grey, the canvas's size).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynaval.domain.errors import InvalidInput
from dynaval.domain.images.image import ImageInput, ImageShape
from dynaval.domain.task_type import InputKind
from dynaval.service_layer.predictions import ModelInput, Prediction

PROCESSOR_CONFIG = "preprocessor_config.json"
"""The file of a model folder's image processor: what makes a folder an image model's (with an
``…ForImageClassification`` architecture in its config)."""


def is_image_model(config: dict[str, Any], folder: Path) -> bool:
    """Whether a model folder (its parsed ``config.json``) holds an image classifier."""
    architectures = config.get("architectures") or []
    named = any(str(name).endswith("ForImageClassification") for name in architectures)
    return named and (folder / PROCESSOR_CONFIG).is_file()


def image_mode(model_config: Any) -> str:
    """The Pillow mode a model reads its images in: ``L`` (grey) for one channel, else ``RGB``."""
    return "L" if getattr(model_config, "num_channels", 3) == 1 else "RGB"


class TransformersImagePredictor:
    """An image classification model and its image processor, loaded from ``folder``."""

    def __init__(self, folder: Path, model_hash: str) -> None:
        import torch  # heavy imports stay out of module import
        from transformers import AutoImageProcessor, AutoModelForImageClassification

        self._torch = torch
        self._folder = folder
        self._hash = model_hash
        try:
            self._processor = AutoImageProcessor.from_pretrained(str(folder), local_files_only=True)
            self._model = AutoModelForImageClassification.from_pretrained(str(folder), local_files_only=True)
        except Exception as exc:  # transformers and safetensors raise many kinds for a broken folder
            detail = " ".join(str(exc).split())[:300]
            raise InvalidInput(f"cannot load the image model in {folder}: {detail}", field="model") from exc
        self._model.eval()
        id2label = self._model.config.id2label
        self._labels = tuple(str(id2label[i]) for i in range(len(id2label)))
        self._mode = image_mode(self._model.config)
        self._lock = threading.Lock()

    @property
    def labels(self) -> tuple[str, ...]:
        return self._labels

    @property
    def model_hash(self) -> str:
        return self._hash

    @property
    def name(self) -> str:
        return self._folder.name

    @property
    def input_kind(self) -> InputKind:
        return InputKind.IMAGE

    @property
    def max_tokens(self) -> int:
        return 1

    @property
    def image_shape(self) -> ImageShape:
        """The size its image processor scales an image to (its ``size``, else its config's
        ``image_size``, else 224), in the mode the model reads."""
        size = getattr(self._processor, "size", None) or {}
        side = getattr(self._model.config, "image_size", 224)
        width = int(size.get("width") or size.get("shortest_edge") or side)
        height = int(size.get("height") or size.get("shortest_edge") or side)
        return ImageShape(width=width, height=height, mode=self._mode)

    def token_counts(self, texts: Sequence[ModelInput]) -> list[int]:
        return [1] * len(texts)

    def predict(self, texts: Sequence[ModelInput]) -> list[Prediction]:
        from PIL import Image

        pictures = []
        for item in texts:
            if not isinstance(item, ImageInput):
                raise InvalidInput("this model reads images; it was given text", field="model")
            with Image.open(io.BytesIO(item.png)) as picture:
                pictures.append(picture.convert(self._mode))
        with self._lock, self._torch.inference_mode():
            batch = self._processor(images=pictures, return_tensors="pt")
            probs = self._torch.softmax(self._model(**batch).logits, dim=-1).tolist()
        out = []
        for row in probs:
            best = max(range(len(row)), key=row.__getitem__)
            probabilities = {lab: float(p) for lab, p in zip(self._labels, row, strict=True)}
            out.append(Prediction(self._labels[best], probabilities))
        return out
