"""Label Studio's webhook payload: read leniently, for the action and the ids it names only (the
task is then read back from Label Studio with the service's key: nothing else in it is trusted)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    field_validator,
)
from pydantic_core import PydanticCustomError

from dynaval.adapters.label_studio import WEBHOOK_ACTIONS
from dynaval.entrypoints.api.body_errors import validate_body
from dynaval.entrypoints.api.fields import MAX_DELETED_IDS, RequestModel, at_most
from dynaval.service_layer.validation.webhooks import (
    AnnotationChanged,
    AnnotationsDeleted,
    OtherAction,
    WebhookHint,
)

# ------------------------------------------------------------------------- Label Studio's webhook

LabelStudioId = Annotated[StrictInt, Field(ge=1, le=2**63 - 1)]
_ID_SCHEMA = {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}


def _id_of_task(value: Any) -> Any:
    # Label Studio writes the task as its id, or as the task object.
    return value.get("id") if isinstance(value, dict) else value


class WebhookProject(RequestModel):
    model_config = ConfigDict(extra="allow")

    id: LabelStudioId = Field(description="The round's Label Studio project.")


class WebhookAnnotation(RequestModel):
    """Only ``task`` is read: the task is then read back from Label Studio with the service's key
    (any Label Studio user can read the webhook's secret, so nothing else in the body is trusted)."""

    model_config = ConfigDict(extra="allow")

    task: Annotated[
        LabelStudioId,
        BeforeValidator(_id_of_task),
        WithJsonSchema(
            {"anyOf": [_ID_SCHEMA, {"type": "object", "required": ["id"], "properties": {"id": _ID_SCHEMA}}]}
        ),
    ] = Field(description="A task of the round's project (a candidate or a gold item): its id, or the task.")


class WebhookDeletedAnnotation(RequestModel):
    model_config = ConfigDict(extra="allow")

    id: LabelStudioId


_CHANGED = ("ANNOTATION_CREATED", "ANNOTATION_UPDATED")
_DELETED = "ANNOTATIONS_DELETED"
# Which parts of the body each action reads; the others are not looked at.
_READ_BY: Mapping[str, frozenset[str]] = {
    "project": frozenset(WEBHOOK_ACTIONS),
    "annotation": frozenset(_CHANGED),
    "annotations": frozenset({_DELETED}),
}


class LabelStudioWebhook(RequestModel):
    """What Label Studio posts: a hint that a task changed. Actions other than the three annotation
    actions are answered 200 and ignored, whatever else the body holds; ``annotation`` goes with the
    first two, ``annotations`` (at most 5,000) with ``ANNOTATIONS_DELETED``. Lenient where Label
    Studio may be odd: other keys are allowed and not read (``NaN`` among them included). The answer
    says how many tasks now wait to be read back from Label Studio (``tasks_to_verify``); votes
    change only once they were."""

    model_config = ConfigDict(extra="allow")

    action: str = Field(
        description="Read: " + ", ".join(WEBHOOK_ACTIONS) + "; any other action is ignored.",
        examples=list(WEBHOOK_ACTIONS),
    )
    project: WebhookProject | None = Field(default=None, validate_default=True)
    annotation: WebhookAnnotation | None = Field(default=None, validate_default=True)
    annotations: (
        Annotated[
            list[WebhookDeletedAnnotation],
            BeforeValidator(at_most(MAX_DELETED_IDS)),
            Field(json_schema_extra={"maxItems": MAX_DELETED_IDS}),
        ]
        | None
    ) = Field(default=None, validate_default=True)

    @field_validator("project", "annotation", "annotations", mode="wrap")
    @classmethod
    def _read_if_the_action_does(
        cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> Any:
        # A part the action does not read is not checked either (nor kept); a part it reads is
        # required. A bad or missing action is the one error then.
        if info.field_name is None or info.data.get("action") not in _READ_BY[info.field_name]:
            return None
        checked = handler(value)
        if checked is None:
            raise PydanticCustomError("missing", "is required for this action")
        return checked

    @classmethod
    def error_field(cls, loc: tuple[int | str, ...]) -> str:
        # Named by what is read from each part: whatever is wrong with ``project``, its id is missing;
        # a deletion's list is named whole.
        match loc:
            case ("project", *_):
                return "project.id"
            case ("annotation", "task", *_):
                return "annotation.task"
            case ("annotation", *_):
                return "annotation"
            case ("annotations", *_):
                return "annotations"
        return super().error_field(loc)

    def hint(self) -> WebhookHint:
        """What the use case takes: the action and the ids it names."""
        if self.project is not None and self.action == _DELETED and self.annotations is not None:
            return AnnotationsDeleted(self.project.id, tuple(a.id for a in self.annotations))
        if self.project is not None and self.action in _CHANGED and self.annotation is not None:
            return AnnotationChanged(self.action, self.project.id, self.annotation.task)
        return OtherAction(self.action)


def read_webhook(payload: object) -> WebhookHint:
    """A webhook's body (parsed leniently), checked by :class:`LabelStudioWebhook`."""
    return validate_body(LabelStudioWebhook, payload).hint()
