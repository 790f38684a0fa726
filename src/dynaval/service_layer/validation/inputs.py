"""An example's inputs: the fields a body gave, checked against the round's task type (its texts,
or its one image), and what the model reads of them.

A text comes checked by the request model (readable, NFC, within ``DYNAVAL_MAX_TEXT_CHARS``); an
image comes as the bytes the body sent (a data URL's, a file part's), and is decoded and checked
here (:mod:`dynaval.service_layer.images.stored_images`). Stored, an image input is a reference to
the image store (``{"image": "sha256:…"}``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dynaval.domain.errors import InvalidInput
from dynaval.domain.images.image import ImageUpload, StoredImage, is_image_ref
from dynaval.domain.task_type import TaskType
from dynaval.service_layer.images import stored_images
from dynaval.service_layer.images.ports import ImageServices
from dynaval.service_layer.predictions import ModelInput

IMAGE_EXPECTED = (
    "must be an image: a PNG or JPEG as a data URL (data:image/png;base64,...) or as a file part "
    "of a multipart/form-data body"
)


@dataclass(frozen=True)
class GivenInputs:
    """The input fields a body gave: in its ``inputs`` object, or (``in_object`` false) as the
    short form ``{"text": ...}`` of a task type whose one field is ``text``. A value is a checked
    text, or the bytes of an image."""

    values: Mapping[str, str | ImageUpload]
    in_object: bool = True

    def field(self, name: str) -> str:
        """Where the body has (or should have) the input ``name``, as an error names it."""
        return f"inputs.{name}" if self.in_object or name != "text" else "text"


@dataclass(frozen=True)
class CheckedInputs:
    """An example's inputs as they are stored (texts, and references to images), and the images they
    refer to, checked but not kept yet (:func:`~dynaval.service_layer.images.stored_images.keep`)."""

    values: dict[str, str]
    images: tuple[StoredImage, ...] = field(default=())

    def known_images(self) -> dict[str, StoredImage]:
        return {image.sha256: image for image in self.images}


def task_inputs(
    task_type: TaskType,
    given: GivenInputs,
    *,
    field_prefix: str = "",
    images: ImageServices | None = None,
) -> CheckedInputs:
    """The task type's data fields (``text``; ``premise`` and ``hypothesis``; ``image``) from the
    input fields a body gave, in the task type's order: every one of them, and no other, each of
    the kind the task type reads. An image is decoded and checked with ``images`` (an error names
    its field, and nothing is kept)."""
    takes = ", ".join(task_type.data_fields)
    values: dict[str, str] = {}
    checked: list[StoredImage] = []
    for name in task_type.data_fields:
        where = field_prefix + given.field(name)
        if name not in given.values:
            kind = "an image" if task_type.reads_images else "a string"
            raise InvalidInput(
                f"{name} is required and must be {kind} (the inputs of task {task_type.name}: {takes})",
                field=where,
            )
        value = given.values[name]
        if task_type.reads_images:
            if not isinstance(value, ImageUpload) or images is None:
                raise InvalidInput(f"{IMAGE_EXPECTED}; task {task_type.name} reads an image", field=where)
            image = stored_images.checked_image(images, value, field=where)
            checked.append(image)
            values[name] = image.ref
        elif isinstance(value, ImageUpload):
            raise InvalidInput(f"must be text: task {task_type.name} reads texts, not images", field=where)
        else:
            values[name] = value
    for name in given.values:
        if name not in values:
            raise InvalidInput(
                f"unknown field; the inputs of task {task_type.name} are: {takes}",
                field=field_prefix + given.field(name),
            )
    return CheckedInputs(values, tuple(checked))


def model_inputs(
    task_type: TaskType,
    inputs: Sequence[Mapping[str, str]],
    *,
    images: ImageServices | None,
    known: Mapping[str, StoredImage] | None = None,
) -> list[ModelInput]:
    """What the model reads of each example: its one text, its two texts as a pair (premise,
    hypothesis), in the task type's order; or its image, from ``known`` (checked in this request)
    or the image store."""
    if not task_type.reads_images:
        texts = [[given[name] for name in task_type.data_fields] for given in inputs]
        return [values[0] if len(values) == 1 else (values[0], values[1]) for values in texts]
    if images is None:
        raise RuntimeError("an image task type's examples need the image services")
    refs = [given[task_type.main_field] for given in inputs]
    for ref in refs:
        if not is_image_ref(ref):
            raise InvalidInput(f"{task_type.main_field} {IMAGE_EXPECTED}", field=task_type.main_field)
    read: list[ModelInput] = list(stored_images.model_inputs(images, refs, known))
    return read
