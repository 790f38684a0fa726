"""The running alpha equals alpha recomputed from scratch after any sequence of vote changes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaval.domain.agreement import LEVELS, Level, round_alpha
from dynaval.domain.agreement.incremental import RunningAlpha

VALUES = {"nominal": ["a", "b", "c", "d"], "ordinal": ["a", "b", "c", "d"]}
NUMBERS = {"a": -1.0, "b": 1.0, "c": 2.5, "d": 7.0}

# One step: annotator ``who`` sets (label) or withdraws (None) their vote on ``item``.
steps = st.lists(
    st.tuples(st.integers(0, 7), st.integers(0, 4), st.one_of(st.none(), st.sampled_from("abcd"))),
    max_size=80,
)


def start(level: Level) -> RunningAlpha:
    return RunningAlpha.start(level=level, values=VALUES.get(level, NUMBERS))


@settings(max_examples=120, deadline=None)
@given(level=st.sampled_from(LEVELS), changes=steps)
def test_running_alpha_equals_alpha_from_scratch(
    level: Level, changes: list[tuple[int, int, str | None]]
) -> None:
    state = start(level)
    ballots: dict[int, dict[int, str]] = {}
    for item, who, label in changes:
        before = list(ballots.get(item, {}).values())
        votes = ballots.setdefault(item, {})
        if label is None:
            votes.pop(who, None)
        else:
            votes[who] = label
        state = state.replace_item(before=before, after=list(votes.values()))
    numeric = level in ("interval", "ratio")
    triples: list[tuple[int, int, str | float]] = [
        (item, who, NUMBERS[label] if numeric else label)
        for item, votes in ballots.items()
        for who, label in votes.items()
    ]
    expected = round_alpha(
        triples, level=level, values=VALUES.get(level, list(NUMBERS.values())), bootstrap=0
    )
    assert state.items == expected.items
    assert state.pairable_values == expected.pairable_values
    if expected.alpha is None:
        assert state.alpha is None and state.undefined_reason
    else:
        assert state.alpha == pytest.approx(expected.alpha, abs=1e-9)


def test_running_alpha_needs_the_label_set() -> None:
    with pytest.raises(ValueError, match="needs values"):
        RunningAlpha.start(level="nominal", values=None)  # type: ignore[arg-type]


def test_running_alpha_refuses_labels_outside_values() -> None:
    with pytest.raises(ValueError, match="outside values"):
        start("nominal").replace_item(before=[], after=["a", "z"])
