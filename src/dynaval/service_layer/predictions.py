"""The model in the loop, as the use cases see it: what it reads, what it answers, and the registry
that loads a round's model once per process. The adapter (:mod:`dynaval.adapters.predictor`) is a
transformers classifier behind a micro-batcher; tests hand in fakes of these ports."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dynaval.domain.images.image import ImageInput, ImageShape
from dynaval.domain.task_type import InputKind

ModelInput = str | tuple[str, str] | ImageInput
"""What the model reads for one example: a text, a pair of texts (an NLI premise and hypothesis)
encoded as the tokenizer encodes pairs, or an image."""


@dataclass(frozen=True)
class Prediction:
    label: str
    probabilities: dict[str, float]


class Predictor(Protocol):
    """One loaded model: its labels, its content hash, how many tokens it reads, a batch predict."""

    @property
    def labels(self) -> tuple[str, ...]: ...

    @property
    def model_hash(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def input_kind(self) -> InputKind:
        """What it reads: texts, or an image."""

    @property
    def image_shape(self) -> ImageShape | None:
        """The size and mode of the images an image model reads; None for a text model."""

    @property
    def max_tokens(self) -> int:
        """The most tokens it reads of an example; the rest is cut (an image model: 1, an image
        being read whole)."""

    def token_counts(self, texts: Sequence[ModelInput]) -> list[int]:
        """How many tokens each example is, as the model would read it uncut."""

    def predict(self, texts: Sequence[ModelInput]) -> list[Prediction]: ...


class BatchedModel(Protocol):
    """A loaded model shared by concurrent requests, which it serves in shared forward passes."""

    @property
    def predictor(self) -> Predictor: ...

    def predict_many(self, texts: Sequence[ModelInput], *, timeout_s: float = 30.0) -> list[Prediction]:
        """Predictions in the order of ``texts``; :class:`~dynaval.domain.errors.Unavailable` when the
        model fails or does not answer in time."""


@dataclass(frozen=True)
class ModelFolder:
    """What is at a path given as a model's folder, as the file system says."""

    path: Path
    """The path with its links and ``..`` resolved (the path itself when it cannot be)."""
    is_dir: bool
    has_model: bool
    """It holds a transformers model (its ``config.json``)."""


class Models(Protocol):
    """The models of rounds, loaded once per process and kept; and models loaded for one use."""

    after_load: Callable[[], None] | None
    """Called once a new model is loaded (the service freezes long-lived objects there)."""

    def get(self, folder: Path) -> BatchedModel:
        """The model in ``folder``, loaded on first use (``InvalidInput`` naming ``model``, or
        ``OSError``, when it cannot be)."""

    def get_path(self, folder: str | Path) -> BatchedModel: ...

    def load_alone(self, folder: Path) -> Predictor:
        """The model in ``folder`` loaded for this caller only, from the folder as it is now, and
        not kept (an evaluation of a model that may change between runs)."""

    def folder_hash(self, folder: Path) -> str:
        """The content hash of a model folder, as a loaded model of it reports it."""

    def look_at(self, folder: Path) -> ModelFolder:
        """What is at ``folder``: a directory, a model (a name the file system refuses is neither)."""

    def close(self) -> None: ...
