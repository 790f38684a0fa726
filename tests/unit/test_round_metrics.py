"""Round metrics: MER, VMER (unvalidated never counts as verified), still in validation."""

from __future__ import annotations

import pytest

from dynaval.domain.validation.metrics import round_counts


def test_empty_round_has_no_rates() -> None:
    counts = round_counts({})
    assert counts.collected == 0
    assert counts.mer is None
    assert counts.vmer is None
    assert counts.still_in_validation == 0
    assert counts.to_dict()["mer"] is None
    assert counts.to_dict()["vmer"] is None


def test_zero_count_rows_are_still_an_empty_round() -> None:
    counts = round_counts({("queued", True): 0})
    assert counts.mer is None
    assert counts.vmer is None


def test_mer_is_fooled_over_collected() -> None:
    counts = round_counts({("accepted", True): 3, ("queued", True): 2, ("accepted", False): 5})
    assert counts.collected == 10
    assert counts.fooled == 5
    assert counts.mer == pytest.approx(0.5)


def test_vmer_counts_only_accepted_fooled_candidates() -> None:
    counts = round_counts(
        {
            ("accepted", True): 2,
            ("accepted", False): 4,  # accepted but did not fool the model
            ("rejected", True): 3,
            ("flagged", True): 1,
            ("in_validation", True): 6,
            ("escalated", True): 4,
        }
    )
    assert counts.collected == 20
    assert counts.accepted_fooled == 2
    assert counts.vmer == pytest.approx(2 / 20)
    assert counts.mer == pytest.approx(16 / 20)


def test_unvalidated_never_counts_as_verified() -> None:
    # dynabench issue #543: fooled-but-unvalidated examples must not raise the verified rate.
    counts = round_counts(
        {("scoring", True): 1, ("queued", True): 2, ("in_validation", True): 3, ("escalated", True): 4}
    )
    assert counts.mer == pytest.approx(1.0)
    assert counts.vmer == 0.0
    assert counts.accepted_fooled == 0
    assert counts.still_in_validation == 10


def test_still_in_validation_counts_open_statuses_fooled_or_not() -> None:
    counts = round_counts(
        {
            ("scoring", False): 1,
            ("queued", True): 2,
            ("in_validation", False): 3,
            ("escalated", True): 4,
            ("accepted", True): 5,
            ("rejected", True): 6,
            ("flagged", True): 7,
        }
    )
    assert counts.still_in_validation == 10
    assert counts.collected == 28


def test_by_status_sums_fooled_and_not_fooled_and_is_sorted() -> None:
    counts = round_counts({("rejected", True): 1, ("accepted", True): 2, ("accepted", False): 3})
    assert counts.by_status == {"accepted": 5, "rejected": 1}
    assert list(counts.by_status) == sorted(counts.by_status)


def test_to_dict_reports_everything() -> None:
    data = round_counts({("accepted", True): 1, ("queued", True): 1, ("rejected", False): 2}).to_dict()
    assert data == {
        "collected": 4,
        "fooled": 2,
        "accepted_fooled": 1,
        "still_in_validation": 1,
        "unvalidated": 0,
        "by_status": {"accepted": 1, "queued": 1, "rejected": 2},
        "mer": 0.5,
        "vmer": 0.25,
    }


def test_unvalidated_candidates_are_counted_apart_and_never_as_verified() -> None:
    counts = round_counts({("accepted", True): 1, ("unvalidated", True): 2, ("escalated", True): 1})
    assert counts.unvalidated == 2
    assert counts.still_in_validation == 1
    assert counts.accepted_fooled == 1 and counts.vmer == 0.25
    assert counts.to_dict()["unvalidated"] == 2
