"""From Label Studio annotations to votes: one per annotator, the latest non-cancelled one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from dynaval.domain.validation.decision import Ballot
from dynaval.domain.validation.votes import AnnotationRecord, current_ballots, current_votes

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def record(
    annotation_id: int,
    annotator: str,
    label: str | None = "positive",
    *,
    minutes: int = 0,
    flagged: bool = False,
    reason: str | None = None,
    cancelled: bool = False,
) -> AnnotationRecord:
    return AnnotationRecord(
        annotation_id=annotation_id,
        annotator=annotator,
        label=label,
        flagged=flagged,
        reason=reason,
        was_cancelled=cancelled,
        updated_at=T0 + timedelta(minutes=minutes),
    )


def test_no_annotations_no_votes() -> None:
    assert current_votes([]) == []
    assert current_ballots([]) == []


def test_one_vote_per_annotator_sorted_by_annotator() -> None:
    votes = current_votes([record(1, "bob"), record(2, "alice", "negative")])
    assert [v.annotator for v in votes] == ["alice", "bob"]


def test_latest_update_wins_regardless_of_input_order() -> None:
    old = record(1, "alice", "positive", minutes=0)
    new = record(2, "alice", "negative", minutes=5)
    assert current_votes([old, new]) == [new]
    assert current_votes([new, old]) == [new]


def test_later_update_wins_even_with_lower_annotation_id() -> None:
    # An annotation edited later is the annotator's current opinion, even if it was created first.
    edited = record(1, "alice", "neutral", minutes=10)
    newer_id = record(2, "alice", "negative", minutes=5)
    assert current_votes([newer_id, edited]) == [edited]


def test_same_update_time_is_broken_by_higher_annotation_id() -> None:
    low = record(7, "alice", "positive", minutes=3)
    high = record(8, "alice", "negative", minutes=3)
    assert current_votes([high, low]) == [high]
    assert current_votes([low, high]) == [high]


def test_cancelled_annotation_is_ignored() -> None:
    assert current_votes([record(1, "alice", cancelled=True)]) == []


def test_cancelled_later_annotation_leaves_earlier_vote_in_place() -> None:
    vote = record(1, "alice", "positive", minutes=0)
    skipped = record(2, "alice", "negative", minutes=9, cancelled=True)
    assert current_votes([vote, skipped]) == [vote]


def test_empty_annotation_is_ignored() -> None:
    assert current_votes([record(1, "alice", None)]) == []
    vote = record(1, "alice", "negative", minutes=0)
    empty = record(2, "alice", None, minutes=9)
    assert current_votes([vote, empty]) == [vote]


def test_flagged_without_label_is_a_vote_for_flags() -> None:
    flag = record(1, "alice", None, flagged=True, reason="not English")
    assert current_votes([flag]) == [flag]
    (ballot,) = current_ballots([flag])
    assert ballot == Ballot(annotator="alice", label=None, flagged=True, reason="not English")


def test_ballots_carry_label_flag_and_reason() -> None:
    ballots = current_ballots(
        [
            record(1, "bob", "negative", flagged=True, reason="sarcasm?"),
            record(2, "alice", "positive"),
            record(3, "carol", "neutral", cancelled=True),
        ]
    )
    assert ballots == [
        Ballot("alice", "positive", False, None),
        Ballot("bob", "negative", True, "sarcasm?"),
    ]


annotation_rows = st.lists(
    st.builds(
        record,
        annotation_id=st.integers(1, 30),
        annotator=st.sampled_from(["alice", "bob", "carol"]),
        label=st.sampled_from(["positive", "negative", None]),
        minutes=st.integers(0, 5),
        flagged=st.booleans(),
        cancelled=st.booleans(),
    ),
    max_size=15,
    unique_by=lambda r: r.annotation_id,
)


@settings(max_examples=200, deadline=None)
@given(rows=annotation_rows, data=st.data())
def test_current_votes_are_the_latest_meaningful_annotation_per_annotator(
    rows: list[AnnotationRecord], data: st.DataObject
) -> None:
    votes = current_votes(rows)
    assert votes == current_votes(data.draw(st.permutations(rows)))
    assert len({v.annotator for v in votes}) == len(votes)
    for vote in votes:
        assert not vote.was_cancelled
        assert vote.label is not None or vote.flagged
        candidates = [
            r
            for r in rows
            if r.annotator == vote.annotator and not r.was_cancelled and (r.label is not None or r.flagged)
        ]
        assert vote == max(candidates, key=lambda r: (r.updated_at, r.annotation_id))
    voters = {r.annotator for r in rows if not r.was_cancelled and (r.label is not None or r.flagged)}
    assert {v.annotator for v in votes} == voters
