"""The request models (``entrypoints/api/schemas.py``): one model per body both checks the body and
documents it, with the configured limits; a refusal is the API's error naming the field.

The same rules over HTTP, against the live service: tests/e2e/test_bad_input.py, test_limits.py,
test_leaks_and_lax_input.py and test_api_contract.py (the published document)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from dynaval.domain.errors import DomainError, InvalidInput, TooLarge
from dynaval.domain.task_type import TaskType
from dynaval.domain.validation.policy import MAX_VOTES_LIMIT, DecisionPolicy
from dynaval.entrypoints.api.fields import RequestModel
from dynaval.entrypoints.api.limited_models import RequestModels, request_models
from dynaval.entrypoints.api.schemas import (
    CandidateBatch,
    CandidateCreate,
    CaptureRequest,
    ExclusionChange,
    GoldUpload,
    OverrideCreate,
    PredictRequest,
    RoundCreate,
)
from dynaval.entrypoints.api.webhook_payload import read_webhook
from dynaval.service_layer.validation.candidates import GivenInputs, task_inputs
from dynaval.service_layer.validation.webhooks import AnnotationChanged, AnnotationsDeleted, OtherAction
from dynaval.settings import Settings

POS = "positive"


def settings(tmp_path: Path, **limits: int) -> Settings:
    return Settings(development=True, data_dir=tmp_path, **limits)


@pytest.fixture
def models(tmp_path: Path) -> RequestModels:
    """The models of an app configured with 50 characters per text and 7 candidates per batch."""
    return request_models(settings(tmp_path, max_text_chars=50, max_batch_size=7))


def refusal(models: RequestModels, declared: type[RequestModel], payload: object) -> DomainError:
    with pytest.raises(DomainError) as refused:
        models.validate(declared, payload)
    error = refused.value
    assert isinstance(error, InvalidInput | TooLarge), error
    assert error.message.strip() and error.field, error
    return error


def field_and_status(models: RequestModels, declared: type[RequestModel], payload: object) -> tuple[str, int]:
    error = refusal(models, declared, payload)
    return str(error.field), 413 if isinstance(error, TooLarge) else 422


# ------------------------------------------------------------------------------ configured limits


def test_the_models_are_built_once_per_set_of_limits(tmp_path: Path) -> None:
    first = request_models(settings(tmp_path, max_text_chars=50, max_batch_size=7))
    again = request_models(settings(tmp_path / "other", max_text_chars=50, max_batch_size=7))
    default = request_models(settings(tmp_path))
    assert again is first and default is not first
    assert first.model(CandidateBatch) is not default.model(CandidateBatch)
    # A body with no configured limit is checked by its own class in every app.
    assert first.model(RoundCreate) is RoundCreate is default.model(RoundCreate)


def test_the_configured_limits_are_the_ones_checked_and_published(tmp_path: Path) -> None:
    limited = request_models(settings(tmp_path, max_text_chars=50, max_batch_size=7))
    default = request_models(settings(tmp_path))
    for models, chars, batch in ((limited, 50, 7), (default, 2000, 100)):
        schema = models.model(CandidateBatch).model_json_schema()
        candidate = schema["$defs"]["CandidateCreate"]
        assert schema["properties"]["candidates"]["maxItems"] == batch
        assert str(batch) in schema["properties"]["candidates"]["description"]
        assert {"type": "string", "minLength": 1, "maxLength": chars} in candidate["properties"]["text"][
            "anyOf"
        ]
        assert candidate["additionalProperties"] is False
        text_schema = {"type": "string", "minLength": 1, "maxLength": chars}
        # An input is a text or (an image task type) an image's data URL: its schema says both limits.
        input_schema = candidate["properties"]["inputs"]["anyOf"][0]["additionalProperties"]
        assert input_schema["anyOf"][0] == {**text_schema, "description": "A text."}
        assert input_schema["anyOf"][1]["maxLength"] == len("data:image/jpeg;base64,") + 1048576 // 3 * 4 + 4
        assert text_schema in candidate["properties"]["rationale"]["anyOf"]
        gold = models.model(GoldUpload).model_json_schema()["$defs"]["GoldItem"]
        assert gold["properties"]["inputs"]["anyOf"][0]["additionalProperties"] == input_schema
        too_long_input = {"inputs": {"text": "é" * (chars + 1)}, "writer_label": POS}
        error = refusal(models, CandidateCreate, too_long_input)
        assert isinstance(error, TooLarge) and error.field == "inputs.text" and str(chars) in error.message

        good = {"text": "é" * chars, "writer_label": POS}
        assert models.validate(CandidateCreate, good).text == "é" * chars
        too_long = {**good, "text": "é" * (chars + 1)}
        error = refusal(models, CandidateCreate, too_long)
        assert isinstance(error, TooLarge) and error.field == "text" and str(chars) in error.message
        assert (
            models.validate(CandidateBatch, {"candidates": [good] * batch}).candidates[-1].text
            == good["text"]
        )
        error = refusal(models, CandidateBatch, {"candidates": [good] * (batch + 1)})
        assert isinstance(error, TooLarge) and error.field == "candidates" and str(batch) in error.message
        items = [good, good, good, too_long]
        assert field_and_status(models, CandidateBatch, {"candidates": items}) == ("candidates[3].text", 413)
        gold_items = {"items": [{"text": "é" * (chars + 1), "label": POS}]}
        assert field_and_status(models, GoldUpload, gold_items) == ("items[0].text", 413)


def test_the_length_limit_counts_the_text_as_stored_nfc(models: RequestModels) -> None:
    decomposed = "e\u0301" * 50  # 100 code points as sent, 50 once composed
    candidate = models.validate(CandidateCreate, {"text": decomposed, "writer_label": POS})
    assert candidate.text == "\u00e9" * 50
    assert field_and_status(models, CandidateCreate, {"text": "e\u0301" * 51, "writer_label": POS}) == (
        "text",
        413,
    )


# ----------------------------------------------------------------------------------- candidates


def test_a_task_types_inputs_are_texts_under_the_same_rules(models: RequestModels) -> None:
    inputs = {"premise": "A man sleeps.", "hypothesis": "Cre\u0300me."}
    nli = {"inputs": inputs, "writer_label": "entailment", "rationale": "Cre\u0300me is not a sleep."}
    candidate = models.validate(CandidateCreate, nli).new_candidate()
    assert candidate.inputs == GivenInputs(
        {"premise": "A man sleeps.", "hypothesis": "Crème."}, in_object=True
    )
    assert (candidate.writer_label, candidate.writer_id) == ("entailment", None)
    assert candidate.rationale == "Crème is not a sleep."

    def body(**changed: Any) -> dict[str, Any]:
        return {**nli, "inputs": {**inputs, **changed}}

    assert field_and_status(models, CandidateCreate, body(premise=5)) == ("inputs.premise", 422)
    assert field_and_status(models, CandidateCreate, body(hypothesis="\u200b ")) == ("inputs.hypothesis", 422)
    assert field_and_status(models, CandidateCreate, body(premise="p" * 51)) == ("inputs.premise", 413)
    assert field_and_status(models, CandidateCreate, {**nli, "rationale": "r" * 51}) == ("rationale", 413)
    assert field_and_status(models, CandidateCreate, {**nli, "rationale": " "}) == ("rationale", 422)
    batch = {"candidates": [nli, body(hypothesis=None)]}
    assert field_and_status(models, CandidateBatch, batch) == ("candidates[1].inputs.hypothesis", 422)
    # Input fields at the top level are unknown fields; text and inputs together are refused.
    assert field_and_status(models, CandidateCreate, {**inputs, "writer_label": "entailment"}) == (
        "premise",
        422,
    )
    both = {"text": "A text.", "inputs": {"text": "A text."}, "writer_label": POS}
    assert field_and_status(models, CandidateCreate, both) == ("text", 422)
    short = models.validate(CandidateCreate, {"text": "A text.", "writer_label": POS}).new_candidate()
    assert short.inputs == GivenInputs({"text": "A text."}, in_object=False)
    gold = models.validate(GoldUpload, {"items": [{"inputs": inputs, "label": "neutral"}]})
    assert gold.items[0].new_gold_item().inputs.values == {"premise": "A man sleeps.", "hypothesis": "Crème."}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"text": "", "writer_label": POS}, "text"),
        ({"text": " \n\t\u3000\u200b", "writer_label": POS}, "text"),
        ({"text": 42, "writer_label": POS}, "text"),
        ({"text": "Fine."}, "writer_label"),
        ({"text": "Fine.", "writer_label": None}, "writer_label"),
        ({"text": "Fine.", "writer_label": POS, "writer_id": ""}, "writer_id"),
        ({"text": "Fine.", "writer_label": POS, "writer_id": 7}, "writer_id"),
        ({"text": "Fine.", "writer_label": POS, "writer_id": " \u200b"}, "writer_id"),
        ({"text": "Fine.", "writer_label": POS, "writer_id": "w" * 201}, "writer_id"),
        ("just a string", "body"),
        (None, "body"),  # no JSON body at all
    ],
)
def test_a_bad_candidate_is_422_naming_the_field(models: RequestModels, body: object, field: str) -> None:
    assert field_and_status(models, CandidateCreate, body) == (field, 422)


BLANK_TEXTS = (
    "\u2800\u2800",  # Braille pattern blank
    "\u0301\u034f\ufe0f",  # combining marks, with no base character
    " \u0301",
)
CAPTURE = {
    "observed_output": "positive",
    "reported_label": "negative",
    "source": "monitoring",
    "model_name": "prod",
    "model_version": "7",
    "observed_at": "2026-03-01T09:30:00+00:00",
}


@pytest.mark.parametrize("blank", BLANK_TEXTS)
@pytest.mark.parametrize(
    ("declared", "body", "field"),
    [
        (CandidateCreate, lambda t: {"text": t, "writer_label": POS}, "text"),
        (CandidateCreate, lambda t: {"inputs": {"text": t}, "writer_label": POS}, "inputs.text"),
        (CandidateCreate, lambda t: {"text": "Fine.", "writer_label": POS, "rationale": t}, "rationale"),
        (PredictRequest, lambda t: {"text": t}, "text"),
        (PredictRequest, lambda t: {"inputs": {"premise": "A man.", "hypothesis": t}}, "inputs.hypothesis"),
        (GoldUpload, lambda t: {"items": [{"text": t, "label": POS}]}, "items[0].text"),
        (CaptureRequest, lambda t: {**CAPTURE, "inputs": {"text": t}}, "inputs.text"),
        (
            CaptureRequest,
            lambda t: {**CAPTURE, "inputs": {"text": "Fine."}, "observed_output": t},
            "observed_output",
        ),
    ],
)
def test_text_that_draws_nothing_is_refused_by_every_body_that_takes_text(
    models: RequestModels, declared: type[RequestModel], body: Any, field: str, blank: str
) -> None:
    assert field_and_status(models, declared, body(blank)) == (field, 422)


def test_text_is_kept_as_written_and_writer_ids_are_stripped(models: RequestModels) -> None:
    body = {"text": "  Fine, I guess.  ", "writer_label": POS, "writer_id": " field-writer-1\u3000"}
    candidate = models.validate(CandidateCreate, body)
    assert candidate.text == "  Fine, I guess.  " and candidate.writer_id == "field-writer-1"
    assert models.validate(CandidateCreate, {**body, "writer_id": None}).writer_id is None
    error = refusal(models, CandidateCreate, {**body, "writer_id": "w" * 201})
    assert isinstance(error, InvalidInput) and "200" in error.message  # a name, not a text: 422


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"candidates": []}, "candidates"),
        ({"candidates": {"text": "x"}}, "candidates"),
        ({}, "candidates"),
        ({"candidates": [{"text": "x", "writer_label": POS}], "round": 1}, "round"),
        ({"candidates": [{"text": "x", "writer_label": POS}, "a string"]}, "candidates[1]"),
        ([{"text": "x", "writer_label": POS}], "body"),
    ],
)
def test_a_bad_batch_is_422_naming_the_field(models: RequestModels, body: object, field: str) -> None:
    assert field_and_status(models, CandidateBatch, body) == (field, 422)


def test_an_unknown_field_is_named_and_the_allowed_ones_listed(models: RequestModels) -> None:
    error = refusal(models, CandidateBatch, {"candidates": [{"text": "x", "writer_label": POS}], "round": 1})
    assert error.field == "round" and "candidates" in error.message
    error = refusal(models, RoundCreate, {"name": "r", "task": "sentiment", "colour": "red"})
    assert error.field == "colour"
    assert all(name in error.message for name in ("name", "task", "model", "policy"))


# ----------------------------------------------------------------- what the use cases check


NLI = TaskType(
    name="nli",
    labels=("entailment", "neutral", "contradiction"),
    data_fields=("premise", "hypothesis"),
    label_control="label",
    flag_control=None,
    reason_control=None,
    object_name="premise",
    label_config="<View/>",
)


def test_which_inputs_a_body_gives_is_the_rounds_task_types() -> None:
    given = {"hypothesis": "It rains.", "premise": "Clouds."}
    assert list(task_inputs(NLI, GivenInputs(given)).values) == ["premise", "hypothesis"]  # the task's order
    with pytest.raises(InvalidInput) as missing:
        task_inputs(NLI, GivenInputs({"premise": "Clouds."}), field_prefix="candidates[2].")
    assert missing.value.field == "candidates[2].inputs.hypothesis"
    with pytest.raises(InvalidInput) as unknown:
        task_inputs(NLI, GivenInputs({**given, "colour": "red"}))
    assert unknown.value.field == "inputs.colour" and "premise, hypothesis" in unknown.value.message
    with pytest.raises(InvalidInput) as short_form:
        task_inputs(NLI, GivenInputs({"text": "A sentiment text."}, in_object=False))
    assert short_form.value.field == "inputs.premise"


# ---------------------------------------------------------------------------------- a round's policy


def policy_field_of_error(models: RequestModels, policy: Any) -> str | None:
    """The field a round's body with ``policy`` is refused for, checked as the route does: the
    request model, then the domain's rules between values."""
    try:
        body = models.validate(RoundCreate, {"name": "r", "task": "sentiment", "policy": policy})
        DecisionPolicy.from_overrides(body.policy.given() if body.policy else None)
    except InvalidInput as error:
        return error.field
    return None


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"min_votes": 0}, "policy.min_votes"),
        ({"min_votes": -1}, "policy.min_votes"),
        ({"min_votes": MAX_VOTES_LIMIT + 1, "max_votes": MAX_VOTES_LIMIT + 1}, "policy.min_votes"),
        ({"min_votes": "2"}, "policy.min_votes"),
        ({"min_votes": 2.0}, "policy.min_votes"),
        ({"min_votes": None}, "policy.min_votes"),
        ({"max_votes": 1}, "policy.max_votes"),  # below the default min_votes (2): the domain's rule
        ({"min_votes": 4, "max_votes": 3}, "policy.max_votes"),
        ({"max_votes": MAX_VOTES_LIMIT + 1}, "policy.max_votes"),
        ({"max_votes": 3.5}, "policy.max_votes"),
        ({"flag_votes": 0}, "policy.flag_votes"),
        ({"flag_votes": "two"}, "policy.flag_votes"),
        ({"accept_share": 0.5}, "policy.accept_share"),
        ({"accept_share": 1.01}, "policy.accept_share"),
        ({"accept_share": math.nan}, "policy.accept_share"),
        ({"accept_share": math.inf}, "policy.accept_share"),
        ({"accept_share": "2/3"}, "policy.accept_share"),
        ({"accept_share": None}, "policy.accept_share"),
        ({"gold_rate": 0.6}, "policy.gold_rate"),
        ({"gold_rate": "often"}, "policy.gold_rate"),
        ({"gold_min_items": 0}, "policy.gold_min_items"),
        ({"gold_min_items": 2.5}, "policy.gold_min_items"),
        ({"gold_min_accuracy": 1.5}, "policy.gold_min_accuracy"),
        ({"gold_min_accuracy": True}, "policy.gold_min_accuracy"),
        ({"validate_non_fooling": 1}, "policy.validate_non_fooling"),
        ({"validate_non_fooling": "yes"}, "policy.validate_non_fooling"),
        ({"validate_non_fooling": None}, "policy.validate_non_fooling"),
        ({"quorum": 3}, "policy.quorum"),
        ([], "policy"),
        ("min_votes=2", "policy"),
        (3, "policy"),
    ],
)
def test_a_bad_policy_names_its_field(models: RequestModels, policy: Any, field: str) -> None:
    assert policy_field_of_error(models, policy) == field


@pytest.mark.parametrize("key", ["min_votes", "max_votes", "flag_votes", "gold_min_items", "accept_share"])
@pytest.mark.parametrize("value", [True, False])
def test_booleans_are_no_numbers(models: RequestModels, key: str, value: bool) -> None:
    # bool is a subclass of int in Python; True must not silently mean 1.
    assert policy_field_of_error(models, {key: value}) == f"policy.{key}"


def test_a_policy_gives_only_its_overrides_and_an_integer_share_is_a_number(models: RequestModels) -> None:
    body = models.validate(RoundCreate, {"name": "r", "task": "sentiment", "policy": {"accept_share": 1}})
    assert body.policy is not None and body.policy.given() == {"accept_share": 1.0}
    assert isinstance(body.policy.given()["accept_share"], float)
    assert DecisionPolicy.from_overrides(body.policy.given()) == DecisionPolicy(accept_share=1.0)
    error = refusal(models, RoundCreate, {"name": "r", "task": "sentiment", "policy": {"max_vote": 5}})
    assert error.field == "policy.max_vote"
    for allowed in ("accept_share", "flag_votes", "max_votes", "min_votes", "validate_non_fooling"):
        assert allowed in error.message


def test_a_rounds_name_is_readable_text_stripped_and_nfc(models: RequestModels) -> None:
    body = models.validate(RoundCreate, {"name": "  Cre\u0300me round ", "task": "sentiment"})
    assert (body.name, body.model, body.policy) == ("Crème round", "default", None)
    assert field_and_status(models, RoundCreate, {"name": " \u3000", "task": "sentiment"}) == ("name", 422)
    error = refusal(models, RoundCreate, {"name": "x" * 201, "task": "sentiment"})
    assert isinstance(error, InvalidInput) and error.field == "name" and "200" in error.message
    assert field_and_status(models, RoundCreate, {"name": 5, "task": "sentiment"}) == ("name", 422)
    assert field_and_status(models, RoundCreate, {"task": "sentiment"}) == ("name", 422)


# ------------------------------------------------------------------------------- a lead's changes


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"outcome": "maybe", "reason": "why"}, "outcome"),
        ({"outcome": None, "reason": "why"}, "outcome"),
        ({"reason": "why"}, "outcome"),
        ({"outcome": "accepted", "reason": ""}, "reason"),
        ({"outcome": "accepted", "reason": " \u200b"}, "reason"),
        ({"outcome": "accepted", "reason": 3}, "reason"),
        ({"outcome": "accepted"}, "reason"),
        ({"outcome": "accepted", "reason": "r" * 2001}, "reason"),
        ({"outcome": "accepted", "reason": "why", "by": "someone else"}, "by"),
    ],
)
def test_a_bad_override_names_the_field(models: RequestModels, body: object, field: str) -> None:
    assert field_and_status(models, OverrideCreate, body) == (field, 422)


def test_a_reason_is_stored_stripped_and_nfc(models: RequestModels) -> None:
    override = models.validate(OverrideCreate, {"outcome": "accepted", "reason": " sarcasm, cre\u0300me "})
    assert (override.outcome, override.reason) == ("accepted", "sarcasm, crème")
    change = models.validate(ExclusionChange, {"excluded": False, "reason": " ok "})
    assert (change.excluded, change.reason) == (False, "ok")
    assert field_and_status(models, ExclusionChange, {"excluded": "true", "reason": "x"}) == ("excluded", 422)
    assert field_and_status(models, ExclusionChange, {"excluded": 1, "reason": "x"}) == ("excluded", 422)


# ------------------------------------------------------------------------- Label Studio's webhook


def webhook(**changes: Any) -> dict[str, Any]:
    annotation = {"id": 5, "task": 55, "completed_by": 7, "result": [], "lead_time": math.nan}
    return {"action": "ANNOTATION_CREATED", "project": {"id": 3, "title": "x"}, "annotation": annotation,
            **changes}  # fmt: skip


def test_a_webhook_gives_only_its_action_and_ids() -> None:
    assert read_webhook(webhook()) == AnnotationChanged("ANNOTATION_CREATED", 3, 55)  # NaN and all
    assert read_webhook(webhook(annotation={"task": {"id": 56, "data": {}}})) == AnnotationChanged(
        "ANNOTATION_CREATED", 3, 56
    )
    deleted = {"action": "ANNOTATIONS_DELETED", "project": {"id": 3}, "annotations": [{"id": 8}, {"id": 9}]}
    assert read_webhook(deleted) == AnnotationsDeleted(3, (8, 9))
    assert read_webhook(
        {**deleted, "annotations": [{"id": i} for i in range(1, 5001)]}
    ) == AnnotationsDeleted(3, tuple(range(1, 5001)))
    # Any other action is ignored whatever the rest of the body holds.
    assert read_webhook({"action": "PROJECT_UPDATED", "project": "odd", "annotation": 5}) == OtherAction(
        "PROJECT_UPDATED"
    )
    # What the action does not read is not looked at.
    assert read_webhook(webhook(annotations="not read")) == AnnotationChanged("ANNOTATION_CREATED", 3, 55)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (["ANNOTATION_CREATED"], "body"),
        (None, "body"),
        ({"project": {"id": 3}}, "action"),
        (webhook(action=5), "action"),
        (webhook(project="x"), "project.id"),
        (webhook(project=3), "project.id"),
        (webhook(project=None), "project.id"),
        *[(webhook(project={"id": value}), "project.id") for value in ("12", 2**63, -1, 0, True, 1.5, None)],
        (webhook(annotation="x"), "annotation"),
        (webhook(annotation=None), "annotation"),
        ({"action": "ANNOTATION_UPDATED", "project": {"id": 3}}, "annotation"),
        (webhook(annotation={"id": 1}), "annotation.task"),
        *[
            (webhook(annotation={"task": value}), "annotation.task")
            for value in (2**64, "55", [55], True, 1.5)
        ],
        (webhook(annotation={"task": {"id": "55"}}), "annotation.task"),
        *[
            ({"action": "ANNOTATIONS_DELETED", "project": {"id": 3}, "annotations": value}, "annotations")
            for value in ("all", [{"id": 2**63}], [{"id": "1"}], [1, 2], [{"id": -1}], None)
        ],
    ],
)
def test_a_malformed_webhook_is_422_naming_what_is_read(payload: object, field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        read_webhook(payload)
    assert refused.value.field == field and refused.value.message


def test_a_deletion_webhook_names_at_most_5000_annotations() -> None:
    too_many = {"action": "ANNOTATIONS_DELETED", "project": {"id": 3}, "annotations": [{"id": i} for i in
                range(1, 5002)]}  # fmt: skip
    with pytest.raises(TooLarge) as refused:
        read_webhook(too_many)
    assert refused.value.field == "annotations" and "5000" in refused.value.message
