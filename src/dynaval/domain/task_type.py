"""What is being labelled: the label set and the data fields of one task type, and whether its
examples are texts or an image."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class InputKind(StrEnum):
    """What a task type's examples are: one or two texts (``<Text>`` objects in its labelling
    config), or one image (an ``<Image>``)."""

    TEXT = "text"
    IMAGE = "image"


IMAGE_FORMATS = ("png", "jpeg")
"""The image formats a candidate's image may come in."""


@dataclass(frozen=True)
class TaskType:
    """One task type, as read from its Label Studio labelling config.

    ``label_control`` is the Choices tag whose values are the labels, ``flag_control`` the Choices
    tag an annotator ticks to flag an example and ``reason_control`` the TextArea for the reason.
    ``data_fields`` are the task-data keys the config displays (``text`` for sentiment,
    ``premise`` and ``hypothesis`` for NLI, ``image`` for digits); the first one is the candidate's
    main field. ``input_kind`` says whether they are texts or one image.
    """

    name: str
    labels: tuple[str, ...]
    data_fields: tuple[str, ...]
    label_control: str
    flag_control: str | None
    reason_control: str | None
    object_name: str
    label_config: str
    input_kind: InputKind = InputKind.TEXT

    @property
    def main_field(self) -> str:
        return self.data_fields[0]

    @property
    def reads_images(self) -> bool:
        return self.input_kind is InputKind.IMAGE

    def fields(self) -> list[dict[str, object]]:
        """What a candidate gives, as the API describes it: each input field (required, in the
        body's ``inputs``, in the config's order), then the optional ``rationale``."""
        inputs: list[dict[str, object]] = [
            {"name": name, "in": "inputs", "required": True, "kind": str(self.input_kind)}
            for name in self.data_fields
        ]
        if self.reads_images:
            for field in inputs:
                field["formats"] = list(IMAGE_FORMATS)
        return [*inputs, {"name": "rationale", "in": "body", "required": False}]
