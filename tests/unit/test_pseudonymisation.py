"""Pseudonymous ids and signed model predictions.

docs/dataset.md, "Round dataset: provenance of an accepted example".
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaval.domain.provenance import pseudonym, sign_prediction, verify_prediction

SECRET = "round-secret-1"
OTHER_SECRET = "round-secret-2"


# --- pseudonyms ----------------------------------------------------------------------------------


def test_pseudonym_is_stable_for_same_secret_and_id() -> None:
    assert pseudonym(SECRET, "annotator", "alice") == pseudonym(SECRET, "annotator", "alice")


def test_pseudonym_differs_across_ids() -> None:
    assert pseudonym(SECRET, "annotator", "alice") != pseudonym(SECRET, "annotator", "bob")


def test_pseudonym_differs_across_secrets() -> None:
    assert pseudonym(SECRET, "annotator", "alice") != pseudonym(OTHER_SECRET, "annotator", "alice")


def test_pseudonym_differs_across_kinds_beyond_the_prefix() -> None:
    annotator = pseudonym(SECRET, "annotator", "alice")
    writer = pseudonym(SECRET, "writer", "alice")
    assert annotator.startswith("annotator_")
    assert writer.startswith("writer_")
    # The same person as writer and as annotator cannot be linked through the digest either.
    assert annotator.split("_", 1)[1] != writer.split("_", 1)[1]


@pytest.mark.parametrize("kind", ["annotator", "writer"])
@pytest.mark.parametrize("raw_id", ["alice", "42", "alice@example.org", "", "x" * 500])
def test_pseudonym_has_fixed_format(kind: str, raw_id: str) -> None:
    value = pseudonym(SECRET, kind, raw_id)
    assert re.fullmatch(rf"{kind}_[0-9a-f]{{32}}", value)
    assert len(value) == len(kind) + 1 + 32


@pytest.mark.parametrize("raw_id", ["alice", "alice@example.org", "1234567", "Ångström-用户"])
def test_pseudonym_does_not_contain_the_raw_id(raw_id: str) -> None:
    value = pseudonym(SECRET, "annotator", raw_id)
    assert raw_id not in value
    assert raw_id.lower() not in value.lower()


def test_pseudonym_cannot_be_matched_without_the_secret() -> None:
    # Someone who guesses the username but not the secret computes a different value,
    # including with an empty secret or a plain hash-like guess.
    target = pseudonym(SECRET, "annotator", "alice")
    guesses = {pseudonym(secret, "annotator", "alice") for secret in ("", "secret", OTHER_SECRET, "alice")}
    assert target not in guesses


@settings(max_examples=200, deadline=None)
@given(raw_a=st.text(), raw_b=st.text())
def test_pseudonym_is_injective_in_practice(raw_a: str, raw_b: str) -> None:
    same = pseudonym(SECRET, "annotator", raw_a) == pseudonym(SECRET, "annotator", raw_b)
    assert same == (raw_a == raw_b)


@settings(max_examples=100, deadline=None)
@given(secret=st.text(min_size=1), raw_id=st.text())
def test_pseudonym_format_holds_for_any_text(secret: str, raw_id: str) -> None:
    assert re.fullmatch(r"annotator_[0-9a-f]{32}", pseudonym(secret, "annotator", raw_id))


# --- signed predictions ------------------------------------------------------------------------------

MODEL_HASH = "sha256:" + "ab" * 32
INPUTS = {"text": "The food was fine, I guess."}
PREDICTION = "positive"
PROBS = {"positive": 0.7, "negative": 0.2, "neutral": 0.1}


def signed() -> str:
    return sign_prediction(SECRET, MODEL_HASH, INPUTS, PREDICTION, PROBS)


def test_signature_verifies() -> None:
    signature = signed()
    assert re.fullmatch(r"[0-9a-f]{64}", signature)
    assert verify_prediction(SECRET, signature, MODEL_HASH, INPUTS, PREDICTION, PROBS)


def test_signature_is_deterministic_and_independent_of_input_field_order() -> None:
    nli = {"premise": "A dog runs.", "hypothesis": "An animal moves."}
    reordered = {"hypothesis": "An animal moves.", "premise": "A dog runs."}
    assert sign_prediction(SECRET, MODEL_HASH, nli, "entailment", PROBS) == sign_prediction(
        SECRET, MODEL_HASH, reordered, "entailment", PROBS
    )
    assert signed() == signed()
    reordered_probs = dict(reversed(list(PROBS.items())))
    assert sign_prediction(SECRET, MODEL_HASH, INPUTS, PREDICTION, reordered_probs) == signed()


def test_tampered_prediction_fails() -> None:
    assert not verify_prediction(SECRET, signed(), MODEL_HASH, INPUTS, "negative", PROBS)


@pytest.mark.parametrize(
    "probs",
    [
        {"positive": 0.2, "negative": 0.7, "neutral": 0.1},
        {"positive": 0.7, "negative": 0.2},
        {"positive": 0.7, "negative": 0.2, "neutral": 0.1, "mixed": 0.0},
        {"positive": 0.71, "negative": 0.19, "neutral": 0.1},
    ],
)
def test_tampered_probabilities_fail(probs: dict[str, float]) -> None:
    assert not verify_prediction(SECRET, signed(), MODEL_HASH, INPUTS, PREDICTION, probs)


@pytest.mark.parametrize(
    "inputs",
    [
        {"text": "The food was fine, I guess!"},
        {"text": "the food was fine, I guess."},
        {"text": "The food was fine, I guess. "},
        {"text": "The food was fine, I guess.", "context": ""},
        {"body": "The food was fine, I guess."},
        {},
    ],
)
def test_tampered_input_text_fails(inputs: dict[str, str]) -> None:
    assert not verify_prediction(SECRET, signed(), MODEL_HASH, inputs, PREDICTION, PROBS)


def test_tampered_model_hash_fails() -> None:
    assert not verify_prediction(SECRET, signed(), "sha256:" + "cd" * 32, INPUTS, PREDICTION, PROBS)


def test_wrong_secret_fails() -> None:
    assert not verify_prediction(OTHER_SECRET, signed(), MODEL_HASH, INPUTS, PREDICTION, PROBS)


@pytest.mark.parametrize("signature", ["", "0" * 64, "X", "not-hex"])
def test_garbage_signature_fails(signature: str) -> None:
    assert not verify_prediction(SECRET, signature, MODEL_HASH, INPUTS, PREDICTION, PROBS)


def test_non_ascii_inputs_sign_and_verify() -> None:
    inputs = {"text": "Ça ne m'a pas plu 😞 — 这家餐厅很差", "context": "Größe: naïve café"}
    signature = sign_prediction(SECRET, MODEL_HASH, inputs, "négatif", PROBS)
    assert verify_prediction(SECRET, signature, MODEL_HASH, inputs, "négatif", PROBS)
    tampered = {**inputs, "text": inputs["text"].replace("😞", "😀")}
    assert not verify_prediction(SECRET, signature, MODEL_HASH, tampered, "négatif", PROBS)
    # Unicode normal forms are different texts: é precomposed vs e + combining accent.
    decomposed = {**inputs, "context": "Größe: nai\u0308ve cafe\u0301"}
    assert not verify_prediction(SECRET, signature, MODEL_HASH, decomposed, "négatif", PROBS)


def test_non_ascii_secret_works() -> None:
    signature = sign_prediction("sécret-秘密", MODEL_HASH, INPUTS, PREDICTION, PROBS)
    assert verify_prediction("sécret-秘密", signature, MODEL_HASH, INPUTS, PREDICTION, PROBS)
    assert not verify_prediction("secret-秘密", signature, MODEL_HASH, INPUTS, PREDICTION, PROBS)


@settings(max_examples=100, deadline=None)
@given(
    text=st.text(),
    prediction=st.sampled_from(["positive", "negative", "neutral"]),
    probs=st.dictionaries(st.sampled_from(["positive", "negative", "neutral"]), st.floats(0, 1), min_size=1),
    other_text=st.text(),
)
def test_sign_verify_round_trip_and_text_tampering(
    text: str, prediction: str, probs: dict[str, float], other_text: str
) -> None:
    signature = sign_prediction(SECRET, MODEL_HASH, {"text": text}, prediction, probs)
    assert verify_prediction(SECRET, signature, MODEL_HASH, {"text": text}, prediction, probs)
    if other_text != text:
        assert not verify_prediction(SECRET, signature, MODEL_HASH, {"text": other_text}, prediction, probs)
