"""What is being labelled: the label set and the data fields of one task type."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TaskType:
    """One task type, as read from its Label Studio labelling config.

    ``label_control`` is the Choices tag whose values are the labels, ``flag_control`` the Choices
    tag an annotator ticks to flag an example and ``reason_control`` the TextArea for the reason.
    ``data_fields`` are the task-data keys the config displays (``text`` for sentiment,
    ``premise`` and ``hypothesis`` for NLI); the first one is the candidate's main text.
    """

    name: str
    labels: tuple[str, ...]
    data_fields: tuple[str, ...]
    label_control: str
    flag_control: str | None
    reason_control: str | None
    object_name: str
    label_config: str

    @property
    def main_field(self) -> str:
        return self.data_fields[0]

    def fields(self) -> list[dict[str, object]]:
        """What a candidate gives, as the API describes it: each input field (required, in the
        body's ``inputs``, in the config's order), then the optional ``rationale``."""
        inputs: list[dict[str, object]] = [
            {"name": name, "in": "inputs", "required": True} for name in self.data_fields
        ]
        return [*inputs, {"name": "rationale", "in": "body", "required": False}]
