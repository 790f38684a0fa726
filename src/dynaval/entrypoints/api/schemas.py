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

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
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
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)
from pydantic_core import PydanticCustomError

from dynaval.domain.health.near_duplicates import MIN_ROUND_THRESHOLD
from dynaval.domain.images.near_copies import MAX_THRESHOLD as MAX_IMAGE_THRESHOLD
from dynaval.domain.retraining.policy import MAX_BATCH_SIZE, MAX_EPOCHS, MAX_EVERY, MAX_FLIPS, MAX_INTERVAL_S
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
from dynaval.entrypoints.api.fields import (
    MAX_GOLD_ITEMS,
    Reason,
    RequestModel,
    RoundName,
    WriterId,
    readable_text,
    text_schema,
)
from dynaval.service_layer.regression.revalidation import MAX_CASES as MAX_REVALIDATE_CASES
from dynaval.service_layer.validation.candidates import NewCandidate
from dynaval.service_layer.validation.captures import NewCapture
from dynaval.service_layer.validation.gold import NewGoldItem
from dynaval.service_layer.validation.inputs import GivenInputs

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
    near_duplicate_image_bits: StrictInt = Field(
        default=_DEFAULT_POLICY.near_duplicate_image_bits,
        ge=0,
        le=MAX_IMAGE_THRESHOLD,
        description="Image task types: how many of the 144 bits of two images' perceptual hashes may "
        "differ for them to be near-copies (0: the same look only).",
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


def text_description(max_text_chars: int) -> str:
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
    AfterValidator(readable_text(max_chars=MAX_MODEL_FIELD_CHARS, strip=True)),
    text_schema(MAX_MODEL_FIELD_CHARS),
]
CaptureReference = Annotated[
    str,
    AfterValidator(readable_text(max_chars=MAX_REFERENCE_CHARS, strip=True)),
    text_schema(MAX_REFERENCE_CHARS),
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


def capture_form(value: Any) -> str:
    return "batch" if isinstance(value, dict) and "captures" in value else "single"


class CaptureRequest(
    RootModel[
        Annotated[
            Annotated[CaptureCreate, Tag("single")] | Annotated[CaptureBatch, Tag("batch")],
            Discriminator(capture_form),
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


class RetrainingPolicyRequest(RequestModel):
    """A lead sets a task type's retraining policy (``{"every": null}`` turns it off)."""

    model_config = ConfigDict(extra="forbid")

    every: StrictInt | None = Field(
        ge=1, le=MAX_EVERY, description="Retrain after every N newly accepted examples; null: off."
    )
    ship: Literal["next_round", "swap"] = Field(
        default="next_round",
        description="next_round: close the open round and open the next one on the new model; "
        "swap: replace the open round's model.",
    )
    min_interval_s: StrictInt = Field(
        default=0, ge=0, le=MAX_INTERVAL_S, description="Seconds at least between two runs."
    )
    base: Literal["round", "shipped"] = Field(
        default="round", description="Fine-tune the open round's model, or the newest shipped one."
    )
    max_flips: StrictInt = Field(
        default=0,
        ge=0,
        le=MAX_FLIPS,
        description="Suite cases the replaced model got right that the new one may miss.",
    )
    epochs: StrictInt = Field(default=3, ge=1, le=MAX_EPOCHS, description="Passes over the data.")
    seed: StrictInt = Field(default=13, ge=0, le=2**32 - 1, description="Seed of initialisation and order.")
    learning_rate: StrictFloat | None = Field(
        default=None, gt=0, le=1, description="AdamW learning rate (default: the task's recipe)."
    )
    batch_size: StrictInt = Field(default=16, ge=1, le=MAX_BATCH_SIZE, description="Examples per step.")
    with_seed_set: StrictBool = Field(default=False, description="Add the task's hand-written seed set.")


class TrainRequest(RequestModel):
    """A lead asks for a model trained on releases' train splits (never dev or test), as a job."""

    model_config = ConfigDict(extra="forbid")

    releases: list[Annotated[StrictInt, Field(ge=1, le=2**31 - 1)]] = Field(
        min_length=1, max_length=20, description="Release ids: versions of one release."
    )
    base: StrictStr = Field(
        min_length=1,
        max_length=4096,
        description="The model to start from: a registered model's hash (sha256:...) or the absolute path "
        "of a model folder; its labels must be the release's, in order.",
    )
    name: StrictStr = Field(
        min_length=1,
        max_length=80,
        description="The new model's name (lower-case letters, digits, '.', '-', '_'); one active job each.",
    )
    splits: list[Annotated[StrictStr, Field(min_length=1, max_length=40)]] | None = Field(
        default=None, max_length=100, description="Train splits to learn from (default: every train_* split)."
    )
    epochs: StrictInt = Field(default=3, ge=1, le=100, description="Passes over the data.")
    seed: StrictInt = Field(default=13, ge=0, le=2**31 - 1, description="Seed of initialisation and order.")
    learning_rate: StrictFloat | None = Field(
        default=None, gt=0, le=1, description="AdamW learning rate (default: the task's recipe, else 5e-5)."
    )
    batch_size: StrictInt = Field(default=16, ge=1, le=512, description="Examples per step.")
    with_seed_set: StrictBool = Field(default=False, description="Add the task's hand-written seed set.")


class EvaluateRequest(RequestModel):
    """A lead asks for a model to be run over the regression suite, as a job."""

    model_config = ConfigDict(extra="forbid")

    model: StrictStr = Field(
        min_length=1, max_length=4096, description="The absolute path of a local model folder."
    )
