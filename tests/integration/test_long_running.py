"""What a long-running service process does to its garbage collector (gunicorn's workers)."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from pathlib import Path

from flask import Flask

from dynaval.adapters.predictor import ModelRegistry, Prediction
from dynaval.domain.task_type import InputKind
from dynaval.entrypoints.app import freeze_long_lived_objects, prepare_long_running_process
from dynaval.service_layer.services import Services


class FixedPredictor:
    """The predictor port, answering "neutral" for everything."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @property
    def labels(self) -> tuple[str, ...]:
        return ("positive", "negative", "neutral")

    @property
    def model_hash(self) -> str:
        return "sha256:fixed"

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def max_tokens(self) -> int:
        return 256

    @property
    def input_kind(self) -> InputKind:
        return InputKind.TEXT

    @property
    def image_shape(self) -> None:
        return None

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        raise AssertionError("not called here")

    def predict(self, texts: Sequence[str]) -> list[Prediction]:
        raise AssertionError("not called here")


def test_the_registry_calls_after_load_once_per_model_it_loads(tmp_path: Path) -> None:
    loaded: list[str] = []
    registry = ModelRegistry(factory=FixedPredictor)
    registry.after_load = lambda: loaded.append("after")
    try:
        first = registry.get(tmp_path / "a")
        assert registry.get(tmp_path / "a") is first  # cached: nothing loaded again
        registry.get(tmp_path / "b")
        assert loaded == ["after", "after"]
    finally:
        registry.close()


def test_a_long_running_process_freezes_what_it_loaded_and_each_model_after(
    app: Flask,
    services: Services,
) -> None:
    gc.unfreeze()
    try:
        assert services.models.after_load is None  # an app alone (tests, the CLI) freezes nothing
        prepare_long_running_process(app)
        assert gc.get_freeze_count() > 0
        assert services.models.after_load is freeze_long_lived_objects
    finally:
        gc.unfreeze()  # the rest of the test session collects as usual
