"""The request models with a configured limit (a text, a batch), built again for each app's
limits: what validates a body and what ``/openapi.json`` publishes are the same model."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, cast

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    create_model,
)

from dynaval.entrypoints.api.body_errors import validate_body
from dynaval.entrypoints.api.fields import (
    MAX_GOLD_ITEMS,
    M,
    RequestModel,
    at_most,
    input_text,
    input_value,
)
from dynaval.entrypoints.api.schemas import (
    CAPTURE_NOTE,
    INPUTS_NOTE,
    RATIONALE_NOTE,
    CandidateBatch,
    CandidateCreate,
    CaptureBatch,
    CaptureCreate,
    CaptureRequest,
    GoldItem,
    GoldUpload,
    PredictRequest,
    capture_form,
    text_description,
)
from dynaval.settings import Settings

# --------------------------------------------------------------------- the app's models and errors


@dataclass(frozen=True)
class RequestModels:
    """The request models of one app: the declared classes, those with a configured limit rebuilt
    with it."""

    max_text_chars: int
    max_batch_size: int
    limited: Mapping[type[RequestModel], type[RequestModel]]

    def model(self, declared: type[M]) -> type[M]:
        """The model that checks and documents the body declared as ``declared``."""
        return cast(type[M], self.limited.get(declared, declared))

    def validate(self, declared: type[M], payload: object) -> M:
        """``payload`` (a parsed JSON value; None when the body was no JSON) as the model of
        ``declared``, or the :class:`DomainError` naming the first bad field."""
        return validate_body(self.model(declared), payload)


def request_models(settings: Settings) -> RequestModels:
    """The request models with ``settings``' limits (built once per set of limits)."""
    return _request_models(settings.max_text_chars, settings.max_batch_size, settings.max_image_bytes)


@functools.lru_cache(maxsize=16)
def _request_models(max_text_chars: int, max_batch_size: int, max_image_bytes: int) -> RequestModels:
    text = input_text(max_text_chars)
    # dict[str, value], spelt so as a type checker sees a value: the type is built at run time.
    texts_by_name: Any = dict.__class_getitem__((str, input_value(max_text_chars, max_image_bytes)))
    description = text_description(max_text_chars)
    candidate = create_model(
        "CandidateCreate",
        __base__=CandidateCreate,
        __doc__=f"{CandidateCreate.__doc__} {INPUTS_NOTE}",
        inputs=(
            texts_by_name | None,
            Field(default=None, description=f"The task type's fields. {description}"),
        ),
        text=(text | None, Field(default=None, description=f"The short form of inputs.text. {description}")),
        rationale=(text | None, Field(default=None, description=f"{RATIONALE_NOTE} {description}")),
    )
    predict = create_model(
        "PredictRequest",
        __base__=PredictRequest,
        __doc__=f"{PredictRequest.__doc__} {INPUTS_NOTE}",
        inputs=(
            texts_by_name | None,
            Field(default=None, description=f"The task type's fields. {description}"),
        ),
        text=(text | None, Field(default=None, description=f"The short form of inputs.text. {description}")),
    )
    batch = create_model(
        "CandidateBatch",
        __base__=CandidateBatch,
        candidates=(
            Annotated[list[candidate], BeforeValidator(at_most(max_batch_size))],
            Field(
                min_length=1,
                description=f"1 to {max_batch_size} candidates (DYNAVAL_MAX_BATCH_SIZE, 413 past it).",
                json_schema_extra={"maxItems": max_batch_size},
            ),
        ),
    )
    gold_item = create_model(
        "GoldItem",
        __base__=GoldItem,
        __doc__=f"{GoldItem.__doc__} {INPUTS_NOTE}",
        inputs=(
            texts_by_name | None,
            Field(default=None, description=f"The task type's fields. {description}"),
        ),
        text=(text | None, Field(default=None, description=f"The short form of inputs.text. {description}")),
    )
    gold_upload = create_model(
        "GoldUpload",
        __base__=GoldUpload,
        items=(
            list[gold_item],
            Field(min_length=1, max_length=MAX_GOLD_ITEMS, description=f"1 to {MAX_GOLD_ITEMS} items."),
        ),
    )
    capture = create_model(
        "CaptureCreate",
        __base__=CaptureCreate,
        __doc__=f"{CaptureCreate.__doc__} {CAPTURE_NOTE}",
        inputs=(texts_by_name, Field(description=f"The task type's fields, as a candidate's. {description}")),
        observed_output=(text, Field(description=f"What the model in production answered. {description}")),
    )
    capture_batch = create_model(
        "CaptureBatch",
        __base__=CaptureBatch,
        captures=(
            Annotated[list[capture], BeforeValidator(at_most(max_batch_size))],
            Field(
                min_length=1,
                description=f"1 to {max_batch_size} captures (DYNAVAL_MAX_BATCH_SIZE, 413 past it).",
                json_schema_extra={"maxItems": max_batch_size},
            ),
        ),
    )
    capture_request = _capture_request(capture, capture_batch)
    return RequestModels(
        max_text_chars=max_text_chars,
        max_batch_size=max_batch_size,
        limited={
            CaptureCreate: capture,
            CaptureBatch: capture_batch,
            CaptureRequest: capture_request,
            CandidateCreate: candidate,
            CandidateBatch: batch,
            PredictRequest: predict,
            GoldItem: gold_item,
            GoldUpload: gold_upload,
        },
    )


def _capture_request(single: Any, batch: Any) -> type[CaptureRequest]:
    """:class:`CaptureRequest` over these (limited) forms."""
    form: Any = Annotated[
        Annotated[single, Tag("single")] | Annotated[batch, Tag("batch")], Discriminator(capture_form)
    ]
    limited = create_model(
        "CaptureRequest", __base__=CaptureRequest, __doc__=CaptureRequest.__doc__, root=(form, ...)
    )
    limited.single, limited.batch = single, batch
    return limited
