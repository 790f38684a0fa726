"""The model in the loop: a transformers sequence classifier loaded from a local folder,
served through a micro-batcher so that one forward pass answers several waiting writers."""

from __future__ import annotations

import hashlib
import json
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from dynaval.adapters.image_classifier import TransformersImagePredictor, is_image_model
from dynaval.domain.errors import InvalidInput, Unavailable
from dynaval.domain.images.image import ImageInput, ImageShape
from dynaval.domain.task_type import InputKind
from dynaval.service_layer.predictions import ModelFolder, ModelInput, Prediction, Predictor

__all__ = ["MicroBatcher", "ModelInput", "ModelRegistry", "Prediction", "Predictor", "TransformersPredictor"]

PredictorFactory = Callable[[Path], Predictor]

MODEL_CONFIG = "config.json"
"""The file that makes a folder a transformers model's."""

T = TypeVar("T")


def hash_model_folder(folder: Path) -> str:
    """SHA-256 over every file's relative path and bytes, in a fixed order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if any(part.startswith(".") for part in rel.split("/")):
            continue
        digest.update(rel.encode() + b"\0")
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        digest.update(b"\0")
    return "sha256:" + digest.hexdigest()


MAX_TOKENS = 256
"""The most tokens a predictor reads of an example (a pair's two texts together) unless told
otherwise: the rest is cut. A model made for fewer reads its own number (:func:`model_token_limit`).
The service's models read ``DYNAVAL_MODEL_MAX_TOKENS`` (the same default)."""


def model_token_limit(config: Any, tokenizer: Any) -> int | None:
    """The most tokens a model can read, as its tokenizer or its position embeddings say; None when
    neither says. A tokenizer that knows no limit says a huge number, and is not believed."""
    limits = []
    declared = getattr(tokenizer, "model_max_length", None)
    if isinstance(declared, int) and 0 < declared < 1_000_000:
        limits.append(declared)
    positions = getattr(config, "max_position_embeddings", None)
    if isinstance(positions, int) and positions > 0:
        limits.append(positions)
    return min(limits, default=None)


class TransformersPredictor:
    """``AutoModelForSequenceClassification`` + ``AutoTokenizer`` from one folder, on the CPU.

    It reads at most ``max_length`` tokens of an example, or the model's own limit when that is
    smaller: a longer input would not fit the model's position embeddings, and its forward pass
    would fail.
    """

    def __init__(self, folder: Path, *, max_length: int = MAX_TOKENS) -> None:
        import torch  # heavy imports stay out of module import
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        if not (folder / MODEL_CONFIG).is_file():
            raise InvalidInput(f"no transformers model in {folder} (config.json missing)", field="model")
        self._torch = torch
        self._folder = folder
        self._hash = hash_model_folder(folder)
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
            # A second one counts tokens of new examples, so that a count never waits for a
            # forward pass (a fast tokenizer is not to be used by two threads at once).
            self._counter = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
            self._model = AutoModelForSequenceClassification.from_pretrained(
                str(folder), local_files_only=True
            )
        except Exception as exc:  # transformers and safetensors raise many kinds for a broken folder
            detail = " ".join(str(exc).split())[:300]  # one line: their messages run over several
            raise InvalidInput(f"cannot load the model in {folder}: {detail}", field="model") from exc
        self._model.eval()
        id2label = self._model.config.id2label
        self._labels = tuple(str(id2label[i]) for i in range(len(id2label)))
        limit = model_token_limit(self._model.config, self._tokenizer)
        self._max_length = max_length if limit is None else min(max_length, limit)
        self._lock = threading.Lock()
        self._counter_lock = threading.Lock()

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
        return InputKind.TEXT

    @property
    def image_shape(self) -> ImageShape | None:
        return None

    @property
    def max_tokens(self) -> int:
        """The most tokens it reads of an example (special tokens included)."""
        return self._max_length

    def token_counts(self, texts: Sequence[ModelInput]) -> list[int]:
        return _in_order(texts, self._count)

    def predict(self, texts: Sequence[ModelInput]) -> list[Prediction]:
        """Predictions in the order of ``texts``. Single texts and pairs may be mixed: each kind is
        encoded in a forward pass of its own."""
        return _in_order(texts, self._forward)

    def _count(self, texts: Sequence[ModelInput]) -> list[int]:
        with self._counter_lock:
            encoded = self._counter(*_encode_args(texts), truncation=False, verbose=False)
        return [len(ids) for ids in encoded["input_ids"]]

    def _forward(self, texts: Sequence[ModelInput]) -> list[Prediction]:
        encode_args = _encode_args(texts)
        with self._lock, self._torch.inference_mode():
            batch = self._tokenizer(
                *encode_args, padding=True, truncation=True, max_length=self._max_length, return_tensors="pt"
            )
            logits = self._model(**batch).logits
            probs = self._torch.softmax(logits, dim=-1).tolist()
        out = []
        for row in probs:
            best = max(range(len(row)), key=row.__getitem__)
            out.append(
                Prediction(
                    self._labels[best], {lab: float(p) for lab, p in zip(self._labels, row, strict=True)}
                )
            )
        return out


def _in_order(texts: Sequence[ModelInput], run: Callable[[Sequence[ModelInput]], list[T]]) -> list[T]:
    """``run`` over the single texts and over the pairs, apart (a tokenizer takes one kind per call),
    its answers put back in the order of ``texts``."""
    out: list[T | None] = [None] * len(texts)
    singles = [i for i, t in enumerate(texts) if isinstance(t, str)]
    pairs = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    for positions in (singles, pairs):
        if positions:
            for position, answer in zip(positions, run([texts[i] for i in positions]), strict=True):
                out[position] = answer
    return [a for a in out if a is not None]


def _encode_args(texts: Sequence[ModelInput]) -> tuple[list[str], ...]:
    """The tokenizer's arguments for texts of one kind: the texts, or the pairs' first and second."""
    singles: list[str] = []
    firsts: list[str] = []
    seconds: list[str] = []
    for text in texts:
        if isinstance(text, ImageInput):
            raise InvalidInput("this model reads texts; it was given an image", field="model")
        if isinstance(text, str):
            singles.append(text)
        else:
            firsts.append(text[0])
            seconds.append(text[1])
    return (singles,) if singles else (firsts, seconds)


def load_model_folder(folder: Path, *, max_length: int = MAX_TOKENS) -> Predictor:
    """The predictor of a model folder: an image classifier when the folder holds one (see
    :func:`~dynaval.adapters.image_classifier.is_image_model`), a text classifier otherwise."""
    config_path = folder / MODEL_CONFIG
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None  # the text predictor names what is wrong with the folder
    if isinstance(config, dict) and is_image_model(config, folder):
        return TransformersImagePredictor(folder, hash_model_folder(folder))
    return TransformersPredictor(folder, max_length=max_length)


class MicroBatcher:
    """Collects concurrent single predictions into batches for one forward pass each.

    A request waits at most ``max_wait_s`` for company; a batch holds at most ``max_batch``
    texts. One worker thread owns the model, so the model is never run concurrently.
    """

    def __init__(self, predictor: Predictor, *, max_batch: int = 32, max_wait_s: float = 0.005) -> None:
        self._predictor = predictor
        self._max_batch = max_batch
        self._max_wait_s = max_wait_s
        self._queue: queue.Queue[tuple[ModelInput, Future[Prediction]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="dynaval-batcher", daemon=True)
        self._started = False
        self._start_lock = threading.Lock()
        self.batches_run = 0

    @property
    def predictor(self) -> Predictor:
        return self._predictor

    def predict_one(self, text: ModelInput, *, timeout_s: float = 30.0) -> Prediction:
        return self.predict_many([text], timeout_s=timeout_s)[0]

    def predict_many(self, texts: Sequence[ModelInput], *, timeout_s: float = 30.0) -> list[Prediction]:
        """Predictions in the order of ``texts``, queued at once so that they share forward passes
        (with each other and with concurrent writers)."""
        self._ensure_started()
        futures: list[Future[Prediction]] = []
        for text in texts:
            future: Future[Prediction] = Future()
            self._queue.put((text, future))
            futures.append(future)
        deadline = time.monotonic() + timeout_s
        try:
            return [f.result(timeout=max(0.0, deadline - time.monotonic())) for f in futures]
        except TimeoutError as exc:
            raise Unavailable("the model did not answer in time") from exc

    def close(self) -> None:
        if self._started:
            self._queue.put(None)
            self._thread.join(timeout=5)

    def _ensure_started(self) -> None:
        with self._start_lock:
            if not self._started:
                self._thread.start()
                self._started = True

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            try:
                # Whatever is already waiting joins at once; then wait briefly for more.
                while len(batch) < self._max_batch:
                    item = self._queue.get(timeout=self._max_wait_s)
                    if item is None:
                        stop = True
                        break
                    batch.append(item)
            except queue.Empty:
                pass
            self._serve(batch)
            if stop:
                return

    def _serve(self, batch: list[tuple[ModelInput, Future[Prediction]]]) -> None:
        try:
            predictions = self._predictor.predict([text for text, _ in batch])
        except Exception as exc:  # the model failing must fail the waiting requests, not the thread
            for _, future in batch:
                future.set_exception(Unavailable(f"the model failed: {type(exc).__name__}"))
            return
        self.batches_run += 1
        for (_, future), prediction in zip(batch, predictions, strict=True):
            future.set_result(prediction)


@dataclass
class ModelRegistry:
    """Loaded models by folder, each behind its own micro-batcher (the service layer's
    :class:`~dynaval.service_layer.predictions.Models`)."""

    factory: PredictorFactory
    max_batch: int = 32
    max_wait_s: float = 0.005
    after_load: Callable[[], None] | None = None
    """Called once a new model is loaded (the service freezes long-lived objects there)."""
    _batchers: dict[Path, MicroBatcher] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, folder: Path) -> MicroBatcher:
        key = folder.resolve()
        with self._lock:
            batcher = self._batchers.get(key)
            if batcher is None:
                batcher = MicroBatcher(
                    self.factory(key), max_batch=self.max_batch, max_wait_s=self.max_wait_s
                )
                self._batchers[key] = batcher
                if self.after_load is not None:
                    self.after_load()
            return batcher

    def get_path(self, folder: str | Path) -> MicroBatcher:
        return self.get(Path(folder))

    def close(self) -> None:
        with self._lock:
            for batcher in self._batchers.values():
                batcher.close()
            self._batchers.clear()

    def load_alone(self, folder: Path) -> Predictor:
        return self.factory(folder)

    def folder_hash(self, folder: Path) -> str:
        return hash_model_folder(folder)

    def look_at(self, folder: Path) -> ModelFolder:
        try:
            is_dir, has_model = folder.is_dir(), (folder / MODEL_CONFIG).is_file()
            resolved = folder.resolve()
        except (OSError, ValueError):  # a NUL byte, a name too long for the file system
            return ModelFolder(path=folder, is_dir=False, has_model=False)
        return ModelFolder(path=resolved, is_dir=is_dir, has_model=has_model)
