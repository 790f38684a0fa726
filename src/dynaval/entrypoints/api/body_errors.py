"""A refused body as the API's error: the first thing wrong, the field it names, and the words
that say what is wrong (413 for a size limit of its content, 422 for the rest)."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

from pydantic import (
    BaseModel,
    ValidationError,
)
from pydantic_core import ErrorDetails

from dynaval.domain.errors import DomainError, InvalidInput, TooLarge
from dynaval.entrypoints.api.fields import TOO_LARGE, M, RequestModel, field_path


def validate_body(model: type[M], payload: object) -> M:
    try:
        return model.model_validate(payload)
    except ValidationError as error:
        raise request_error(model, error) from None


# What each kind of pydantic error says, after the field's name.
_SAYS: Mapping[str, str] = {
    "missing": "is required",
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "model_type": "must be a JSON object",
    "model_attributes_type": "must be a JSON object",
    "dict_type": "must be a JSON object",
    "list_type": "must be a list",
    "too_short": "must not be empty",
    "too_long": "must hold at most {max_length} items",
    "greater_than": "must be above {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than": "must be below {lt}",
    "less_than_equal": "must be at most {le}",
    "finite_number": "must be a finite number",
    "literal_error": "must be {expected}",
    "timezone_aware": "must give its time zone (ISO-8601, e.g. 2026-03-01T09:30:00+00:00)",
    "datetime_from_date_parsing": "must be an ISO-8601 date and time with its time zone",
    "datetime_parsing": "must be an ISO-8601 date and time with its time zone",
    "datetime_type": "must be an ISO-8601 date and time with its time zone",
}


def request_error(model: type[RequestModel], error: ValidationError) -> DomainError:
    """The API's error for the first thing wrong in a body: 413 for a size limit of its content, 422
    for the rest, naming the field (``body`` for the body itself)."""
    first: ErrorDetails = error.errors(include_url=False, include_input=False)[0]
    model, loc = model.error_at(tuple(first["loc"]))
    field = model.error_field(loc)
    message = f"{_name(loc)} {_says(model, first, loc)}"
    if first["type"] == TOO_LARGE:
        return TooLarge(message, field=field)
    return InvalidInput(message, field=field)


def _name(loc: tuple[int | str, ...]) -> str:
    """How a message names the field: its own name (``text``), the item (``candidates[1]``), or
    the body."""
    if not loc:
        return "the body"
    return loc[-1] if isinstance(loc[-1], str) else field_path(loc)


def _says(model: type[RequestModel], error: ErrorDetails, loc: tuple[int | str, ...]) -> str:
    if error["type"] == "extra_forbidden":
        allowed = _fields_at(model, loc[:-1])
        return "is not a known field; allowed: " + ", ".join(allowed)
    template = _SAYS.get(error["type"])
    if template is None:  # our own errors (readable text, size limits) say it as we wrote it
        return error["msg"]
    return template.format(**error.get("ctx", {}))


def _fields_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The fields of the object at ``loc`` in a body of ``model``."""
    current: type[BaseModel] | None = model
    for part in loc:
        if current is None:
            break
        if isinstance(part, str):
            field = current.model_fields.get(part)
            current = _model_in(field.annotation) if field is not None else None
    return list(current.model_fields) if current is not None else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model inside a field's type (``list[X]``, ``X | None``, ``Annotated[...]``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in typing.get_args(annotation):
        found = _model_in(argument)
        if found is not None:
            return found
    return None
