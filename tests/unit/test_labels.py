"""A model's labels matched to a task's: case-insensitive names, a model that knows more labels,
and the refusals that name ``model``."""

from __future__ import annotations

import math

import pytest

from dynaval.domain.errors import InvalidInput
from dynaval.domain.labels import LabelMapping

NLI = ("entailment", "neutral", "contradiction")


def test_the_same_labels_in_another_order_read_as_they_are() -> None:
    mapping = LabelMapping.between(("contradiction", "entailment", "neutral"), NLI, task="nli")
    assert mapping.model_labels == NLI
    label, probabilities = mapping.read({"contradiction": 0.2, "entailment": 0.5, "neutral": 0.3})
    assert label == "entailment"
    assert probabilities == {"contradiction": 0.2, "entailment": 0.5, "neutral": 0.3}


def test_names_in_another_case_map_to_the_tasks_names() -> None:
    mapping = LabelMapping.between(("ENTAILMENT", "Neutral", "contradiction"), NLI, task="nli")
    assert mapping.model_labels == ("ENTAILMENT", "Neutral", "contradiction")
    label, probabilities = mapping.read({"ENTAILMENT": 0.1, "Neutral": 0.2, "contradiction": 0.7})
    assert label == "contradiction"
    assert set(probabilities) == set(NLI)
    assert math.isclose(probabilities["neutral"], 0.2)


def test_a_model_with_more_labels_is_read_over_the_tasks_labels_renormalised() -> None:
    mapping = LabelMapping.between(
        ("positive", "negative", "neutral", "mixed"), ("positive", "negative"), task="t"
    )
    label, probabilities = mapping.read({"positive": 0.2, "negative": 0.1, "neutral": 0.1, "mixed": 0.6})
    assert label == "positive"  # "mixed" is likelier, but not a label of the task
    assert set(probabilities) == {"positive", "negative"}
    assert math.isclose(probabilities["positive"], 2 / 3)
    assert math.isclose(sum(probabilities.values()), 1.0)


def test_a_model_that_does_not_cover_the_labels_is_refused_naming_model_and_what_is_missing() -> None:
    with pytest.raises(InvalidInput) as caught:
        LabelMapping.between(("positive", "negative", "neutral"), NLI, task="nli")
    assert caught.value.field == "model"
    assert "missing entailment, contradiction" in caught.value.message
    with pytest.raises(InvalidInput) as caught:
        LabelMapping.between(("Entailment", "entailment", "neutral", "contradiction"), NLI, task="nli")
    assert caught.value.field == "model"
    assert "entailment" in caught.value.message
