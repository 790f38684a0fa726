"""Request bodies as pydantic models: each one both checks its body and documents it in /openapi.json.

The rules of a body's shape and size live here and nowhere else: types, required and unknown
fields, lengths (with the configured ``DYNAVAL_MAX_TEXT_CHARS`` and ``DYNAVAL_MAX_BATCH_SIZE``),
readable text and NFC normalisation (:mod:`dynaval.domain.text`). What depends on stored state (the
round's task type and labels, the writer a credential names, a frozen round) is checked by the use
cases and the domain, which take the typed values these models give.

The classes below declare each body. The bodies with a configured limit (a candidate, a batch, gold
items) are built again for each app's limits by :func:`request_models`: validate and document with
``request_models(settings).validate(CandidateBatch, payload)`` and ``.model(CandidateBatch)``,
never with the declared class itself. A refused body is a :class:`~dynaval.domain.errors.DomainError`
naming the field as the API does everywhere (``candidates[2].text``, ``policy.min_votes``, ``body``):
413 for a text or a batch over its limit, 422 for everything else.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, TypeVar, cast

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    RootModel,
    Strict,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    create_model,
    field_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from dynaval.adapters.label_studio import WEBHOOK_ACTIONS
from dynaval.domain.errors import DomainError, InvalidInput, TooLarge
from dynaval.domain.health.near_duplicates import MIN_ROUND_THRESHOLD
from dynaval.domain.text import has_visible_character, normalised
from dynaval.domain.validation.candidate import OverrideOutcome
from dynaval.domain.validation.capture import CaptureSource, CaptureSourceName
from dynaval.domain.validation.policy import (
    ACCEPT_SHARE_ABOVE,
    MAX_GOLD_MIN_ITEMS,
    MAX_GOLD_RATE,
    MAX_VOTES_LIMIT,
    DecisionPolicy,
)
from dynaval.domain.validation.round import RoundKind, RoundKindName
from dynaval.service_layer.regression.revalidation import MAX_CASES as MAX_REVALIDATE_CASES
from dynaval.service_layer.validation.candidates import GivenInputs, NewCandidate
from dynaval.service_layer.validation.captures import NewCapture
from dynaval.service_layer.validation.gold import NewGoldItem
from dynaval.service_layer.validation.webhooks import (
    AnnotationChanged,
    AnnotationsDeleted,
    OtherAction,
    WebhookHint,
)
from dynaval.settings import Settings

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


def _readable_text(
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


def _text_schema(max_chars: int) -> WithJsonSchema:
    # What a client can check before sending; "characters" are counted once NFC-normalised.
    return WithJsonSchema({"type": "string", "minLength": 1, "maxLength": max_chars})


RoundName = Annotated[
    str, AfterValidator(_readable_text(max_chars=MAX_NAME_CHARS, strip=True)), _text_schema(MAX_NAME_CHARS)
]
WriterId = Annotated[
    str,
    AfterValidator(_readable_text(max_chars=MAX_WRITER_ID_CHARS, strip=True)),
    _text_schema(MAX_WRITER_ID_CHARS),
]
Reason = Annotated[
    str,
    AfterValidator(_readable_text(max_chars=MAX_REASON_CHARS, strip=True)),
    _text_schema(MAX_REASON_CHARS),
]


def input_text(max_text_chars: int) -> Any:
    """The type of a candidate's or gold item's input (``text``, ``premise``...) under a limit of
    ``max_text_chars``: kept as written (no strip), stored NFC; past the limit, 413."""
    return Annotated[
        str,
        AfterValidator(_readable_text(max_chars=max_text_chars, strip=False, over_limit=TOO_LARGE)),
        _text_schema(max_text_chars),
    ]


def _at_most(limit: int) -> Callable[[Any], Any]:
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
        return _path(loc)

    @classmethod
    def error_at(cls, loc: tuple[int | str, ...]) -> tuple[type[RequestModel], tuple[int | str, ...]]:
        """The model whose field an error at ``loc`` is, and the location in it (a body of several
        forms names the field of the form it was read as)."""
        return cls, loc


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "body"


# ------------------------------------------------------------------------------------- rounds

_DEFAULT_POLICY = DecisionPolicy()
VoteCount = Annotated[StrictInt, Field(ge=1, le=MAX_VOTES_LIMIT)]
# A share: a JSON number (an integer is read as a float), never a string or a boolean.
Share = Annotated[float, Strict(), Field(allow_inf_nan=False)]


class PolicyOverrides(RequestModel):
    """Overrides of the decision rule's defaults for one round. ``max_votes`` must also be at least
    ``min_votes`` (422 naming ``policy.max_votes``)."""

    model_config = ConfigDict(extra="forbid")

    min_votes: VoteCount = Field(default=_DEFAULT_POLICY.min_votes, description="Validators asked first.")
    max_votes: VoteCount = Field(
        default=_DEFAULT_POLICY.max_votes, description="Escalation asks for votes up to this many."
    )
    accept_share: Share = Field(
        default=_DEFAULT_POLICY.accept_share,
        gt=ACCEPT_SHARE_ABOVE,
        le=1,
        description="Share of the votes the writer's label needs.",
    )
    flag_votes: VoteCount = Field(
        default=_DEFAULT_POLICY.flag_votes, description="Flags that send a candidate to a lead."
    )
    validate_non_fooling: StrictBool = Field(
        default=_DEFAULT_POLICY.validate_non_fooling,
        description="Also validate candidates that did not fool.",
    )
    gold_rate: Share = Field(
        default=_DEFAULT_POLICY.gold_rate,
        ge=0,
        le=MAX_GOLD_RATE,
        description="Share of pushed tasks that are gold (0 turns gold off).",
    )
    gold_min_items: StrictInt = Field(
        default=_DEFAULT_POLICY.gold_min_items,
        ge=1,
        le=MAX_GOLD_MIN_ITEMS,
        description="Gold answers before exclusion may apply.",
    )
    gold_min_accuracy: Share = Field(
        default=_DEFAULT_POLICY.gold_min_accuracy,
        ge=0,
        le=1,
        description="Below this gold accuracy an annotator's votes stop counting.",
    )
    near_duplicates: Literal["allow", "flag", "reject"] = Field(
        default=_DEFAULT_POLICY.near_duplicates,
        description='A near-duplicate of an earlier example at submission: "allow" records it, "flag" '
        'stores and marks the candidate for leads, "reject" refuses it with 409 (nothing stored).',
    )
    near_duplicate_lexical: Share = Field(
        default=_DEFAULT_POLICY.near_duplicate_lexical,
        ge=MIN_ROUND_THRESHOLD,
        le=1,
        description="Lexical near-duplicate threshold: the smallest per-field word-bigram Jaccard.",
    )
    near_duplicate_semantic: Share | None = Field(
        default=_DEFAULT_POLICY.near_duplicate_semantic,
        gt=0,
        le=1,
        description="Semantic near-duplicate threshold: cosine of the embeddings (null: the default).",
    )

    def given(self) -> dict[str, Any]:
        """Only the overrides the body gave (the domain fills in the defaults)."""
        return self.model_dump(exclude_unset=True)


class RoundCreate(RequestModel):
    model_config = ConfigDict(extra="forbid")

    name: RoundName = Field(
        description="At least one visible character; stored NFC-normalised and stripped (annotators "
        "see it as the Label Studio project's title)."
    )
    task: str = Field(description="A task type: the name of a file label_config/<task>.xml, e.g. sentiment.")
    kind: RoundKindName = Field(
        default="adversarial",
        description='"adversarial": writers try to fool the pinned model. "capture": failures found in '
        "production are reported to it (POST /api/rounds/<id>/captures); no model is in the loop, so "
        "model must not be given.",
    )
    model: str = Field(
        default="default",
        description='"default" or the absolute path of a local model folder (adversarial rounds only).',
    )
    policy: PolicyOverrides | None = None

    @field_validator("model")
    @classmethod
    def _no_model_for_a_capture_round(cls, value: str, info: ValidationInfo) -> str:
        if info.data.get("kind") == "capture":
            raise PydanticCustomError(
                "capture_round_model", "must not be given for a capture round: it has no model in the loop"
            )
        return value

    def round_kind(self) -> RoundKind:
        return RoundKind(self.kind)


# --------------------------------------------------------------------------------- candidates

INPUTS_NOTE = (
    "The inputs are the round's task type's fields (GET /api/task-types), in `inputs`: "
    '`{"inputs": {"premise": ..., "hypothesis": ...}}` for NLI, `{"inputs": {"text": ...}}` for '
    'sentiment, which also takes `{"text": ...}`. Each is a text under the same rules. A missing field '
    "or an unknown one is refused (422 naming it: `inputs.hypothesis`)."
)


def _text_description(max_text_chars: int) -> str:
    return (
        f"At least one visible character and at most {max_text_chars} characters (DYNAVAL_MAX_TEXT_CHARS, "
        "413 past it), counted as stored: NFC-normalised."
    )


def _text_or_inputs(value: Any, info: ValidationInfo) -> Any:
    if value is not None and info.data.get("inputs") is not None:
        raise PydanticCustomError("conflict", "give the inputs in inputs, or the one text as text; not both")
    return value


RATIONALE_NOTE = (
    "Optional: why the writer thinks the model is wrong (as ANLI's reason). Stored, exported and shown "
    "to leads; never shown to validators."
)


class CandidateCreate(RequestModel):
    """A writer's candidate."""

    model_config = ConfigDict(extra="forbid")

    inputs: dict[str, str] | None = Field(default=None, description="The task type's input fields.")
    text: str | None = Field(default=None, description="The text, for a task type whose one field is text.")
    writer_label: str = Field(description="The label the writer says the text truly has.")
    writer_id: WriterId | None = Field(
        default=None,
        description="Who wrote it. Required from a collector's token (the writer of its front end it "
        "submits for); a writer's or lead's token is the writer: omit it (or null) or give that token's "
        "own name (any other name is refused with 403). Stored NFC-normalised and stripped.",
    )
    rationale: str | None = Field(default=None, description=RATIONALE_NOTE)

    _text_or_inputs = field_validator("text")(_text_or_inputs)

    def new_candidate(self) -> NewCandidate:
        return NewCandidate(inputs=_inputs(self.text, self.inputs), writer_label=self.writer_label,
                            writer_id=self.writer_id, rationale=self.rationale)  # fmt: skip


class PredictRequest(RequestModel):
    """An example's inputs, to ask the round's model about before submitting it: the inputs a
    candidate gives, as it gives them, and nothing else (no label, no writer, no rationale).
    Nothing is stored."""

    model_config = ConfigDict(extra="forbid")

    inputs: dict[str, str] | None = Field(default=None, description="The task type's input fields.")
    text: str | None = Field(default=None, description="The text, for a task type whose one field is text.")

    _text_or_inputs = field_validator("text")(_text_or_inputs)

    def given(self) -> GivenInputs:
        return _inputs(self.text, self.inputs)


class CandidateBatch(RequestModel):
    """Several candidates for one round, stored all or none."""

    model_config = ConfigDict(extra="forbid")

    candidates: list[CandidateCreate] = Field(min_length=1)


class GoldItem(RequestModel):
    """A gold item: inputs as a candidate's, and the known label."""

    model_config = ConfigDict(extra="forbid")

    inputs: dict[str, str] | None = Field(default=None, description="The task type's input fields.")
    text: str | None = Field(default=None, description="The text, for a task type whose one field is text.")
    label: str = Field(description="The known label; one of the round's labels.")

    _text_or_inputs = field_validator("text")(_text_or_inputs)

    def new_gold_item(self) -> NewGoldItem:
        return NewGoldItem(inputs=_inputs(self.text, self.inputs), label=self.label)


class GoldUpload(RequestModel):
    model_config = ConfigDict(extra="forbid")

    items: list[GoldItem] = Field(min_length=1, max_length=MAX_GOLD_ITEMS)


def _inputs(text: str | None, inputs: Mapping[str, str] | None) -> GivenInputs:
    """A body's input fields, from ``inputs`` or the short form ``text`` (each checked as a text;
    not both: see :func:`_text_or_inputs`)."""
    if inputs is not None:
        return GivenInputs(dict(inputs), in_object=True)
    return GivenInputs({} if text is None else {"text": text}, in_object=False)


# ---------------------------------------------------------------------------------- captures

MAX_MODEL_FIELD_CHARS = 200
MAX_REFERENCE_CHARS = 200
ModelField = Annotated[
    str,
    AfterValidator(_readable_text(max_chars=MAX_MODEL_FIELD_CHARS, strip=True)),
    _text_schema(MAX_MODEL_FIELD_CHARS),
]
CaptureReference = Annotated[
    str,
    AfterValidator(_readable_text(max_chars=MAX_REFERENCE_CHARS, strip=True)),
    _text_schema(MAX_REFERENCE_CHARS),
]


def _iso_text(value: Any) -> Any:
    # A time as ISO-8601 text only (pydantic would also read a number as seconds since 1970).
    if not isinstance(value, str):
        raise PydanticCustomError("iso_datetime", "must be an ISO-8601 date and time with its time zone")
    return value


ObservedAt = Annotated[
    AwareDatetime,
    BeforeValidator(_iso_text),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]

CAPTURE_NOTE = (
    "Validators in Label Studio see the inputs only: never the reported label, the observed output "
    "or the model's name. The reporter is the token's name (no body field says who reports)."
)


class CaptureCreate(RequestModel):
    """A failure found in production: the inputs, what the model answered, and the right label."""

    model_config = ConfigDict(extra="forbid")

    inputs: dict[str, str] = Field(description="The task type's input fields.")
    observed_output: str = Field(description="What the model in production answered.")
    reported_label: str = Field(
        description="The label the reporter says is right; one of the round's labels."
    )
    source: CaptureSourceName = Field(description="Where the failure was found.")
    model_name: ModelField = Field(description="The production model's name.")
    model_version: ModelField = Field(description="The production model's version.")
    observed_at: ObservedAt = Field(description="When the output was observed: ISO-8601 with a time zone.")
    reference: CaptureReference | None = Field(
        default=None,
        description="The reporter's own id for it (ticket, alert); a second capture with the same "
        "reference in the round is refused (409, naming the first).",
    )

    def new_capture(self) -> NewCapture:
        return NewCapture(
            inputs=GivenInputs(dict(self.inputs), in_object=True),
            observed_output=self.observed_output,
            reported_label=self.reported_label,
            source=CaptureSource(self.source),
            model_name=self.model_name,
            model_version=self.model_version,
            observed_at=self.observed_at,
            reference=self.reference,
        )


class CaptureBatch(RequestModel):
    """Several captures for one round, stored all or none."""

    model_config = ConfigDict(extra="forbid")

    captures: list[CaptureCreate] = Field(min_length=1)


def _capture_form(value: Any) -> str:
    return "batch" if isinstance(value, dict) and "captures" in value else "single"


class CaptureRequest(
    RootModel[
        Annotated[
            Annotated[CaptureCreate, Tag("single")] | Annotated[CaptureBatch, Tag("batch")],
            Discriminator(_capture_form),
        ]
    ],
    RequestModel,
):
    """One capture, or ``{"captures": [...]}`` (a body with ``captures`` is read as a batch)."""

    single: ClassVar[type[RequestModel]] = CaptureCreate
    batch: ClassVar[type[RequestModel]] = CaptureBatch

    @classmethod
    def error_at(cls, loc: tuple[int | str, ...]) -> tuple[type[RequestModel], tuple[int | str, ...]]:
        # The form's tag leads every error's location: the error is the form's own.
        form = cls.batch if loc[:1] == ("batch",) else cls.single
        return form, loc[1:]

    def new_captures(self) -> tuple[list[NewCapture], bool]:
        """The captures given, and whether they came as a batch."""
        given = self.root
        if isinstance(given, CaptureBatch):
            return [c.new_capture() for c in given.captures], True
        return [given.new_capture()], False


# ------------------------------------------------------------------------------ a lead's changes


class ExclusionChange(RequestModel):
    model_config = ConfigDict(extra="forbid")

    excluded: StrictBool
    reason: Reason = Field(description="Why; recorded in the exclusion log (NFC-normalised, stripped).")


class OverrideCreate(RequestModel):
    """A lead's override of a candidate's decision."""

    model_config = ConfigDict(extra="forbid")

    outcome: OverrideOutcome
    reason: Reason = Field(description="Why; recorded in the audit log (NFC-normalised, stripped).")


class ReleaseShares(RequestModel):
    """Target shares of new writers; they must add up to 1."""

    model_config = ConfigDict(extra="forbid")

    train: StrictFloat | StrictInt = Field(ge=0, le=1)
    dev: StrictFloat | StrictInt = Field(ge=0, le=1)
    test: StrictFloat | StrictInt = Field(ge=0, le=1)


class ReleaseCreate(RequestModel):
    """A release of frozen rounds of one task type."""

    model_config = ConfigDict(extra="forbid")

    rounds: list[Annotated[StrictInt, Field(ge=1, le=2**31 - 1)]] = Field(
        min_length=1, max_length=100, description="The frozen rounds to release (one task type)."
    )
    version: StrictStr = Field(
        min_length=5, max_length=40, description="A semantic version such as 1.0.0; never reused."
    )
    name: StrictStr | None = Field(
        default=None, max_length=80, description="The release's name (default: dynaval-<task>)."
    )
    license: StrictStr = Field(
        default="unknown",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9.+-]{0,63}$",
        description="License id for the card.",
    )
    seed: StrictInt = Field(default=0, ge=0, le=2**32 - 1, description="Seed of the new writers' assignment.")
    shares: ReleaseShares | None = Field(default=None, description="Default: train 0.8, dev 0.1, test 0.1.")
    min_agreeing_validators: StrictInt = Field(
        default=2,
        ge=0,
        le=50,
        description="Dev and test hold examples this many counted validators agreed on.",
    )
    balance_dev_test: StrictBool = Field(
        default=False, description="Balance dev and test by label x model prediction (DynaSent)."
    )


class GateRequest(RequestModel):
    """A lead asks whether a candidate model may ship: does it keep every case the baseline got right?"""

    model_config = ConfigDict(extra="forbid")

    candidate: StrictStr = Field(
        min_length=1,
        max_length=4096,
        description="The absolute path of a local model folder (the candidate).",
    )
    baseline: StrictStr | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="A registered model's hash (sha256:...) or the absolute path of a model folder; "
        "default: every shipped model (a case counts as passed if any of them got it right).",
    )
    max_flips: StrictInt = Field(
        default=0, ge=0, le=2**31 - 1, description="Negative flips allowed (default 0: none)."
    )


class RevalidateRequest(RequestModel):
    """A lead sends suspect regression cases back to Label Studio, blind, in a new revalidation round
    per task type. Without ``cases``: every suspect case not yet under re-validation."""

    model_config = ConfigDict(extra="forbid")

    cases: list[Annotated[StrictStr, Field(min_length=1, max_length=36)]] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_REVALIDATE_CASES,
        description="Case ids (a case's id is its candidate's); each a suspect case still in the suite "
        "and not under re-validation (422 naming cases for an unknown one, 409 otherwise). Left out: "
        "every such suspect case.",
    )
    name: RoundName | None = Field(
        default=None,
        description="The revalidation rounds' name (annotators see it as the project's title); default: "
        "re-validation of N suspect cases.",
    )


class FreezeRequest(RequestModel):
    """A lead freezes a closed round. While candidates still wait for votes it is refused (409),
    unless ``force`` is true, which needs a ``reason`` (422 naming ``reason`` without one): those
    candidates are then left ``unvalidated``. The body may be left out (no force)."""

    model_config = ConfigDict(extra="forbid")

    force: StrictBool = Field(
        default=False, description="Freeze even though candidates still wait; they are left unvalidated."
    )
    reason: Reason | None = Field(
        default=None,
        description="Why, required with force; recorded in the audit log (NFC-normalised, stripped).",
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
            BeforeValidator(_at_most(MAX_DELETED_IDS)),
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
    return _validate(LabelStudioWebhook, payload).hint()


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
        return _validate(self.model(declared), payload)


def request_models(settings: Settings) -> RequestModels:
    """The request models with ``settings``' limits (built once per set of limits)."""
    return _request_models(settings.max_text_chars, settings.max_batch_size)


@functools.lru_cache(maxsize=16)
def _request_models(max_text_chars: int, max_batch_size: int) -> RequestModels:
    text = input_text(max_text_chars)
    # dict[str, text], spelt so as a type checker sees a value: text is built at run time.
    texts_by_name: Any = dict.__class_getitem__((str, text))
    description = _text_description(max_text_chars)
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
            Annotated[list[candidate], BeforeValidator(_at_most(max_batch_size))],
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
            Annotated[list[capture], BeforeValidator(_at_most(max_batch_size))],
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
        Annotated[single, Tag("single")] | Annotated[batch, Tag("batch")], Discriminator(_capture_form)
    ]
    limited = create_model(
        "CaptureRequest", __base__=CaptureRequest, __doc__=CaptureRequest.__doc__, root=(form, ...)
    )
    limited.single, limited.batch = single, batch
    return limited


def _validate(model: type[M], payload: object) -> M:
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
    return loc[-1] if isinstance(loc[-1], str) else _path(loc)


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
