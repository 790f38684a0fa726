"""Request bodies as pydantic models: the shapes the OpenAPI document publishes.

The use cases check the same rules and name the failing field; these models only describe them.
"""

from __future__ import annotations

from typing import Literal

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

    text: str = Field(min_length=1, max_length=2000)
    writer_label: str = Field(description="The label the writer says the text truly has.")
    writer_id: str = Field(min_length=1, max_length=200)


class GoldItem(BaseModel):
    model_config = ConfigDict(extra="allow")

    text: str = Field(min_length=1, max_length=2000)
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
