"""DecisionPolicy: defaults, per-round overrides and the field named in each error.

The overrides reach the domain typed: the request model checks each value's type and that no other
key is given (tests/unit/test_request_models.py); the domain keeps its bounds as invariants and
checks the values against one another."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from dynaval.domain.errors import DomainError, InvalidInput
from dynaval.domain.validation.policy import MAX_VOTES_LIMIT, DecisionPolicy


def field_of_error(overrides: Any) -> str | None:
    with pytest.raises(InvalidInput) as caught:
        DecisionPolicy.from_overrides(overrides)
    assert isinstance(caught.value, DomainError)
    assert caught.value.code == "invalid_input"
    assert caught.value.message
    return caught.value.field


@pytest.mark.parametrize("overrides", [None, {}])
def test_defaults_follow_anli(overrides: dict[str, Any] | None) -> None:
    policy = DecisionPolicy.from_overrides(overrides)
    assert policy == DecisionPolicy()
    assert policy.min_votes == 2
    assert policy.max_votes == 3
    assert policy.accept_fraction == Fraction(2, 3)
    assert policy.flag_votes == 2
    assert policy.validate_non_fooling is False


def test_overrides_replace_only_the_fields_given() -> None:
    policy = DecisionPolicy.from_overrides({"min_votes": 3, "max_votes": 5})
    assert (policy.min_votes, policy.max_votes) == (3, 5)
    assert policy.flag_votes == 2
    assert policy.accept_fraction == Fraction(2, 3)


def test_all_fields_can_be_overridden_and_round_trip_through_to_dict() -> None:
    overrides = {
        "min_votes": 1,
        "max_votes": 7,
        "accept_share": 0.75,
        "flag_votes": 3,
        "validate_non_fooling": True,
        "gold_rate": 0.2,
        "gold_min_items": 3,
        "gold_min_accuracy": 0.8,
        "near_duplicates": "reject",
        "near_duplicate_lexical": 0.7,
        "near_duplicate_semantic": 0.9,
        "near_duplicate_image_bits": 4,
    }
    policy = DecisionPolicy.from_overrides(overrides)
    assert policy.to_dict() == overrides
    assert DecisionPolicy.from_overrides(policy.to_dict()) == policy


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"min_votes": 0}, "policy.min_votes"),
        ({"gold_rate": 0.6}, "policy.gold_rate"),
        ({"gold_rate": -0.1}, "policy.gold_rate"),
        ({"gold_min_items": 0}, "policy.gold_min_items"),
        ({"gold_min_items": 1001}, "policy.gold_min_items"),
        ({"gold_min_accuracy": 1.5}, "policy.gold_min_accuracy"),
        ({"min_votes": -1}, "policy.min_votes"),
        ({"min_votes": MAX_VOTES_LIMIT + 1, "max_votes": MAX_VOTES_LIMIT + 1}, "policy.min_votes"),
        ({"max_votes": 1}, "policy.max_votes"),  # below the default min_votes (2)
        ({"min_votes": 4, "max_votes": 3}, "policy.max_votes"),
        ({"max_votes": MAX_VOTES_LIMIT + 1}, "policy.max_votes"),
        ({"flag_votes": 0}, "policy.flag_votes"),
        ({"flag_votes": MAX_VOTES_LIMIT + 1}, "policy.flag_votes"),
        ({"accept_share": 0.5}, "policy.accept_share"),
        ({"accept_share": 0.2}, "policy.accept_share"),
        ({"accept_share": 0}, "policy.accept_share"),
        ({"accept_share": 1.01}, "policy.accept_share"),
        ({"accept_share": 2}, "policy.accept_share"),
        ({"accept_share": float("nan")}, "policy.accept_share"),
        ({"accept_share": float("inf")}, "policy.accept_share"),
    ],
)
def test_bad_field_is_named_in_the_error(overrides: dict[str, Any], field: str) -> None:
    assert field_of_error(overrides) == field


@pytest.mark.parametrize("share", [0.5000001, 0.51, 2 / 3, 0.75, 1.0])
def test_accept_share_bounds_are_above_half_up_to_one(share: float) -> None:
    assert DecisionPolicy.from_overrides({"accept_share": share}).accept_share == share


def test_vote_limits_inclusive() -> None:
    policy = DecisionPolicy.from_overrides(
        {"min_votes": MAX_VOTES_LIMIT, "max_votes": MAX_VOTES_LIMIT, "flag_votes": MAX_VOTES_LIMIT}
    )
    assert policy.max_votes == MAX_VOTES_LIMIT
    assert DecisionPolicy.from_overrides({"min_votes": 1, "max_votes": 1}).max_votes == 1


def test_direct_construction_validates_too() -> None:
    with pytest.raises(InvalidInput) as caught:
        DecisionPolicy(min_votes=3, max_votes=2)
    assert caught.value.field == "policy.max_votes"


def test_accept_fraction_is_exact_for_common_shares() -> None:
    assert DecisionPolicy(accept_share=2 / 3).accept_fraction == Fraction(2, 3)
    assert DecisionPolicy(accept_share=0.75).accept_fraction == Fraction(3, 4)
    assert DecisionPolicy(accept_share=1.0).accept_fraction == 1
    assert DecisionPolicy(accept_share=0.6).accept_fraction == Fraction(3, 5)
