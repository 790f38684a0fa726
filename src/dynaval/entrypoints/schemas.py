"""Request bodies as pydantic models: the shapes the OpenAPI document publishes.

The use cases check the same rules and name the failing field; these models only describe them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class PolicyOverrides(BaseModel):
    """Overrides of the decision rule's defaults for one round."""

    model_config = ConfigDict(extra="forbid")

    min_votes: int = Field(default=2, ge=1, le=15, description="Validators asked first.")
    max_votes: int = Field(default=3, ge=1, le=15, description="Escalation asks for votes up to this many.")
    accept_share: float = Field(default=2 / 3, gt=0.5, le=1, description="Share the writer's label needs.")
    flag_votes: int = Field(default=2, ge=1, le=15, description="Flags that send a candidate to a lead.")
    validate_non_fooling: bool = Field(
        default=False, description="Also validate candidates that did not fool."
    )
    gold_rate: float = Field(default=0.1, ge=0, le=0.5, description="Share of pushed tasks that are gold.")
    gold_min_items: int = Field(
        default=5, ge=1, le=1000, description="Gold answers before exclusion may apply."
    )
    gold_min_accuracy: float = Field(
        default=0.7, ge=0, le=1, description="Below this gold accuracy an annotator's votes stop counting."
    )


class RoundCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    task: str = Field(description="A task type: the name of a file label_config/<task>.xml, e.g. sentiment.")
    model: str = Field(
        default="default", description='"default" or the absolute path of a local model folder.'
    )
    policy: PolicyOverrides | None = None


class CandidateCreate(BaseModel):
    """A writer's candidate. Task types with context fields (e.g. premise) take them as extra keys."""

    model_config = ConfigDict(extra="allow")

    text: str = Field(
        min_length=1, max_length=2000, description="At least one visible character; stored NFC-normalised."
    )
    writer_label: str = Field(description="The label the writer says the text truly has.")
    writer_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="Who wrote it. Required from a collector's token (the writer of its front end it "
        "submits for); a writer's or lead's token is the writer: omit it or give that token's own "
        "name (any other name is refused with 403).",
    )


class CandidateBatch(BaseModel):
    """Several candidates for one round, stored all or none."""

    model_config = ConfigDict(extra="forbid")

    candidates: list[CandidateCreate] = Field(
        min_length=1, max_length=100, description="At most DYNAVAL_MAX_BATCH_SIZE (default 100)."
    )


class GoldItem(BaseModel):
    model_config = ConfigDict(extra="allow")

    text: str = Field(
        min_length=1, max_length=2000, description="At least one visible character; stored NFC-normalised."
    )
    label: str = Field(description="The known label; one of the round's labels.")


class GoldUpload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[GoldItem] = Field(min_length=1, max_length=1000)


class ExclusionChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    excluded: bool
    reason: str = Field(min_length=1, max_length=2000)


class OverrideCreate(BaseModel):
    """A lead's override of a candidate's decision."""

    model_config = ConfigDict(extra="forbid")

    outcome: Literal["accepted", "rejected"]
    reason: str = Field(min_length=1, max_length=2000, description="Why; recorded in the audit log.")


LabelStudioId = Annotated[int, Field(ge=1, le=2**63 - 1)]


class WebhookProject(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: LabelStudioId = Field(description="The round's Label Studio project.")


class WebhookAnnotation(BaseModel):
    """Only ``task`` is read: the task is then read back from Label Studio with the service's key
    (any Label Studio user can read the webhook's secret, so nothing else in the body is trusted)."""

    model_config = ConfigDict(extra="allow")

    task: LabelStudioId = Field(description="A task of the round's project (a candidate or a gold item).")


class WebhookDeletedAnnotation(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: LabelStudioId


class LabelStudioWebhook(BaseModel):
    """What Label Studio posts: a hint that a task changed. Actions other than the three annotation
    actions are answered 200 and ignored; ``annotation`` goes with the first two, ``annotations``
    (at most 5,000) with ``ANNOTATIONS_DELETED``. The answer says how many tasks now wait to be read
    back from Label Studio (``tasks_to_verify``); votes change only once they were."""

    model_config = ConfigDict(extra="allow")

    action: Literal["ANNOTATION_CREATED", "ANNOTATION_UPDATED", "ANNOTATIONS_DELETED"] | str
    project: WebhookProject
    annotation: WebhookAnnotation | None = None
    annotations: list[WebhookDeletedAnnotation] | None = None
