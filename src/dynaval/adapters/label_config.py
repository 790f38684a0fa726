"""Reads task types from ``label_config/<task>.xml`` with the SDK's ``LabelInterface``.

The XML is the single source of the label set and field names: nothing else repeats them.
"""

from __future__ import annotations

import re
from pathlib import Path

from label_studio_sdk.label_interface import LabelInterface

from dynaval.domain.errors import InvalidInput
from dynaval.domain.task_type import InputKind, TaskType

LABEL_CONTROL = "label"
FLAG_CONTROL = "flag"
REASON_CONTROL = "flag_reason"
_TASK_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")  # matched whole: ``$`` takes a final newline
TEXT_OBJECTS = frozenset({"Text", "HyperText", "Paragraphs"})
"""The object tags that show a text: a task type with them reads texts."""
IMAGE_OBJECTS = frozenset({"Image"})
"""The object tags that show an image: a task type with one reads an image."""


class LabelConfigCatalog:
    """The task types found in one folder of labelling configs."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._cache: dict[str, TaskType] = {}

    def names(self) -> list[str]:
        return sorted(p.stem for p in self._folder.glob("*.xml"))

    def get(self, name: str) -> TaskType:
        if name in self._cache:
            return self._cache[name]
        path = self._folder / f"{name}.xml"
        if not _TASK_NAME.fullmatch(name) or not path.is_file():
            raise InvalidInput(f"unknown task type; known: {', '.join(self.names()) or 'none'}", field="task")
        try:
            task_type = parse_task_type(name, path.read_text(encoding="utf-8"))
        except ValueError as exc:  # the config is the server's: its fault said, and nothing made
            raise InvalidInput(f"task type {name} cannot be used: {exc}", field="task") from None
        self._cache[name] = task_type
        return task_type


def parse_task_type(name: str, xml: str) -> TaskType:
    """Build a :class:`TaskType` from a labelling config, checking the controls we rely on."""
    interface = LabelInterface(xml)
    controls = {c.name: c for c in interface.controls}
    label = controls.get(LABEL_CONTROL)
    if label is None or label.tag != "Choices" or not label.labels:
        raise ValueError(f'{name}.xml needs a <Choices name="{LABEL_CONTROL}"> with at least one <Choice>')
    flag = controls.get(FLAG_CONTROL)
    reason = controls.get(REASON_CONTROL)
    shown = [o for o in interface.objects if o.value and o.value.startswith("$")]
    fields = tuple(o.value.lstrip("$") for o in shown)
    if not fields:
        raise ValueError(f"{name}.xml shows no task data field ($name)")
    input_kind = _input_kind(name, {o.tag for o in shown}, len(fields))
    return TaskType(
        name=name,
        labels=tuple(label.labels),
        data_fields=fields,
        label_control=LABEL_CONTROL,
        flag_control=FLAG_CONTROL if flag is not None else None,
        reason_control=REASON_CONTROL if reason is not None else None,
        object_name=label.to_name[0],
        label_config=xml,
        input_kind=input_kind,
    )


def _input_kind(name: str, tags: set[str], fields: int) -> InputKind:
    """Texts or an image, from the object tags the config shows its data with: a config mixing
    them, showing several images, or showing a kind dynaval cannot send a model, is refused."""
    images, texts = tags & IMAGE_OBJECTS, tags & TEXT_OBJECTS
    unknown = tags - IMAGE_OBJECTS - TEXT_OBJECTS
    if unknown:
        raise ValueError(
            f"{name}.xml shows its data with <{'>, <'.join(sorted(unknown))}>: "
            "a task type shows texts (<Text>) or one image (<Image>)"
        )
    if images and texts:
        raise ValueError(
            f"{name}.xml mixes an <Image> with <Text>: a task type's model reads texts or one image, not both"
        )
    if images:
        if fields != 1:
            raise ValueError(f"{name}.xml shows {fields} images: an image task type shows one")
        return InputKind.IMAGE
    return InputKind.TEXT
