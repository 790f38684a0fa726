"""The pieces every request body is made of: readable text fields (NFC, a visible character, a
length), lists of at most so many items, and :class:`RequestModel`, the base that names a field the
way the API does (``candidates[2].text``)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from dynaval.domain.images.image import MEDIA_TYPES, ImageUpload
from dynaval.domain.text import has_visible_character, normalised

MAX_NAME_CHARS = 200
MAX_WRITER_ID_CHARS = 200
MAX_REASON_CHARS = 2000
MAX_GOLD_ITEMS = 1000
MAX_DELETED_IDS = 5000
"""Annotation ids one deletion webhook may name: Label Studio's own batch (``WEBHOOK_BATCH_SIZE``)."""

TOO_LARGE = "too_large"
"""The error type of a size limit a client may meet with a well-formed body (a text over
``DYNAVAL_MAX_TEXT_CHARS``, a batch over ``DYNAVAL_MAX_BATCH_SIZE``): answered 413, not 422."""

M = TypeVar("M", bound="RequestModel")


# ------------------------------------------------------------------------------------------ text


def readable_text(
    *, max_chars: int, strip: bool, over_limit: str = "string_too_long"
) -> Callable[[str], str]:
    """A check of a string field: NFC-normalised (and ``strip``-ped) as it is stored, with at least
    one visible character, and at most ``max_chars`` characters as stored (``over_limit`` is the
    error type past that)."""

    def check(value: str) -> str:
        value = normalised(value)
        if strip:
            value = value.strip()
        if not has_visible_character(value):
            raise PydanticCustomError(
                "invisible_text",
                "must not be empty: it has no visible character (only spaces or invisible ones)",
            )
        if len(value) > max_chars:
            raise PydanticCustomError(
                over_limit, "must be at most {max_length} characters", {"max_length": max_chars}
            )
        return value

    return check


def text_schema(max_chars: int) -> WithJsonSchema:
    # What a client can check before sending; "characters" are counted once NFC-normalised.
    return WithJsonSchema({"type": "string", "minLength": 1, "maxLength": max_chars})


RoundName = Annotated[
    str, AfterValidator(readable_text(max_chars=MAX_NAME_CHARS, strip=True)), text_schema(MAX_NAME_CHARS)
]
WriterId = Annotated[
    str,
    AfterValidator(readable_text(max_chars=MAX_WRITER_ID_CHARS, strip=True)),
    text_schema(MAX_WRITER_ID_CHARS),
]
Reason = Annotated[
    str,
    AfterValidator(readable_text(max_chars=MAX_REASON_CHARS, strip=True)),
    text_schema(MAX_REASON_CHARS),
]


def input_text(max_text_chars: int) -> Any:
    """The type of a candidate's or gold item's input (``text``, ``premise``...) under a limit of
    ``max_text_chars``: kept as written (no strip), stored NFC; past the limit, 413."""
    return Annotated[
        str,
        AfterValidator(readable_text(max_chars=max_text_chars, strip=False, over_limit=TOO_LARGE)),
        text_schema(max_text_chars),
    ]


def input_value(max_text_chars: int, max_image_bytes: int) -> Any:
    """The type of a value in a body's ``inputs``: a text under :func:`input_text`'s rules, or an
    image as a data URL (``data:image/png;base64,...``; a value that starts with ``data:`` is read
    as one), kept as an :class:`~dynaval.domain.images.image.ImageUpload` of its bytes. An image
    over ``max_image_bytes`` is refused (413) before its base64 is decoded; which kind a field
    must be is the round's task type's affair, checked by the use case."""
    text = readable_text(max_chars=max_text_chars, strip=False, over_limit=TOO_LARGE)

    def check(value: Any) -> Any:
        if not isinstance(value, str):
            raise PydanticCustomError("string_type", "must be a string (a text, or an image as a data: URL)")
        if value[:5].lower() == "data:":
            return image_from_data_url(value, max_image_bytes)
        return text(value)

    return Annotated[
        Any, BeforeValidator(check), WithJsonSchema(input_schema(max_text_chars, max_image_bytes))
    ]


def input_schema(max_text_chars: int, max_image_bytes: int) -> dict[str, Any]:
    """An input's published schema: a text under its limit, or an image's data URL under its own."""
    data_url_chars = len("data:image/jpeg;base64,") + -(-max_image_bytes // 3) * 4
    return {
        "anyOf": [
            {"type": "string", "minLength": 1, "maxLength": max_text_chars, "description": "A text."},
            {
                "type": "string",
                "pattern": "^data:image/(png|jpeg);base64,",
                "maxLength": data_url_chars,
                "description": f"An image task type's image: a PNG or JPEG as a data URL, at most "
                f"{max_image_bytes} bytes decoded (DYNAVAL_MAX_IMAGE_BYTES).",
            },
        ]
    }


def image_from_data_url(value: str, max_image_bytes: int) -> ImageUpload:
    """The bytes of a ``data:<type>;base64,<data>`` URL of a PNG or JPEG."""
    head, comma, data = value.partition(",")
    parts = head[5:].split(";")
    media_type = parts[0].strip().lower()
    if not comma or "base64" not in [p.strip().lower() for p in parts[1:]]:
        raise PydanticCustomError(
            "data_url", "must be a base64 data URL: data:image/png;base64,... or data:image/jpeg;base64,..."
        )
    if media_type not in MEDIA_TYPES:
        raise PydanticCustomError(
            "image_type",
            "must be an image/png or image/jpeg data URL, not {media_type}",
            {"media_type": media_type or "no type"},
        )
    data = "".join(data.split())  # a data URL may be wrapped over lines
    if len(data) // 4 * 3 - 2 > max_image_bytes:
        raise PydanticCustomError(
            TOO_LARGE,
            "the image is over {limit} bytes (DYNAVAL_MAX_IMAGE_BYTES)",
            {"limit": max_image_bytes},
        )
    try:
        decoded = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise PydanticCustomError("data_url", "the data URL's base64 is not valid") from None
    if len(decoded) > max_image_bytes:
        raise PydanticCustomError(
            TOO_LARGE,
            "the image is {size} bytes; at most {limit} (DYNAVAL_MAX_IMAGE_BYTES)",
            {"size": len(decoded), "limit": max_image_bytes},
        )
    return ImageUpload(decoded, media_type)


def at_most(limit: int) -> Callable[[Any], Any]:
    """A check, before a list's items are, that it has at most ``limit`` items (413 past that)."""

    def check(value: Any) -> Any:
        if isinstance(value, list) and len(value) > limit:
            raise PydanticCustomError(
                TOO_LARGE,
                "holds at most {limit} items; this one holds {count}",
                {"limit": limit, "count": len(value)},
            )
        return value

    return check


# -------------------------------------------------------------------------------- the base model


class RequestModel(BaseModel):
    """A request body's model; :meth:`error_field` names the field of a validation error."""

    @classmethod
    def error_field(cls, loc: tuple[int | str, ...]) -> str:
        """The field an error at ``loc`` names, as the API writes it: ``candidates[2].text``."""
        return field_path(loc)

    @classmethod
    def error_at(cls, loc: tuple[int | str, ...]) -> tuple[type[RequestModel], tuple[int | str, ...]]:
        """The model whose field an error at ``loc`` is, and the location in it (a body of several
        forms names the field of the form it was read as)."""
        return cls, loc


def field_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "body"
