"""The regression suite's and the gate's rules, without I/O: flips, history, the gate decision, the
suspect rule, McNemar on known tables, and a case's retirement."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dynaval.domain.errors import Conflict, InvalidInput
from dynaval.domain.regression.gate import Answer, decide, mcnemar_test
from dynaval.domain.regression.suite import (
    CaseResult,
    RegisteredModel,
    RegressionCase,
    accuracy_with_ci,
    case_history,
    latest_outcomes,
    suspect_cases,
)

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def case(case_id: str, *, split: str = "dev_r1", label: str = "positive") -> RegressionCase:
    return RegressionCase(
        id=case_id, round_id=1, split=split, task_type="sentiment", inputs={"text": f"text {case_id}"},
        label=label, source="release:dynaval-sentiment@1.0.0", added_at=T0,
    )  # fmt: skip


def result(case_id: str, model: str, correct: bool, minutes: int = 0) -> CaseResult:
    return CaseResult(
        case_id=case_id, model_hash=model, prediction="positive" if correct else "negative",
        probabilities={}, correct=correct, evaluated_at=T0 + timedelta(minutes=minutes),
    )  # fmt: skip


def answer(correct: bool, model: str = "m") -> Answer:
    return Answer("positive" if correct else "negative", correct, model)


def test_history_names_first_and_last_pass_and_each_right_to_wrong_flip() -> None:
    results = [
        result("c", "A", False, 0),
        result("c", "B", True, 1),
        result("c", "C", False, 2),  # flips B's pass
        result("c", "D", False, 3),  # wrong after wrong: no flip
        result("c", "E", True, 4),
        result("c", "F", False, 5),  # flips E's pass
    ]
    history = case_history("c", results)
    assert history.evaluations == 6
    assert history.first_passed is not None and history.first_passed.model_hash == "B"
    assert history.last_passed is not None and history.last_passed.model_hash == "E"
    assert [p.model_hash for p in history.flipped_by] == ["C", "F"]
    assert history.to_dict()["first_passed"]["at"] == (T0 + timedelta(minutes=1)).isoformat()


def test_a_case_never_passed_has_no_pass_and_no_flip() -> None:
    history = case_history("c", [result("c", "A", False), result("c", "B", False, 1)])
    assert history.first_passed is None and history.last_passed is None and history.flipped_by == []


def test_the_gate_lists_negative_flips_and_counts_positive_ones() -> None:
    cases = [case("a"), case("b"), case("c", split="test_r1"), case("d", split="test_r1"), case("e")]
    baseline = {
        "a": answer(True),
        "b": answer(True),
        "c": answer(False),
        "d": answer(True),
        "e": answer(True),
    }
    candidate = {"a": answer(True), "b": answer(False), "c": answer(True), "d": answer(False)}  # e unanswered
    gated = decide(cases, baseline=baseline, candidate=candidate)
    assert not gated.passed
    assert [f.case.id for f in gated.negative_flips] == ["b", "d"]
    assert gated.negative_flips[0].to_dict()["baseline_prediction"] == "positive"
    assert gated.negative_flips[0].to_dict()["candidate_prediction"] == "negative"
    assert gated.positive_flips == 1 and gated.paired_cases == 4
    assert gated.per_round["dev_r1"] == {
        "cases": 2, "baseline_accuracy": 1.0, "candidate_accuracy": 0.5, "change": -0.5,
        "negative_flips": 1, "positive_flips": 0,
    }  # fmt: skip
    assert gated.per_round["test_r1"]["change"] == 0.0
    assert decide(cases, baseline=baseline, candidate=candidate, max_flips=2).passed
    assert not decide(cases, baseline=baseline, candidate=candidate, max_flips=1).passed


def test_the_gate_passes_a_candidate_that_keeps_every_passed_case() -> None:
    cases = [case("a"), case("b")]
    gated = decide(
        cases,
        baseline={"a": answer(True), "b": answer(False)},
        candidate={"a": answer(True), "b": answer(True)},
    )
    assert gated.passed and gated.negative_flips == [] and gated.positive_flips == 1


def test_the_gate_refuses_a_negative_tolerance() -> None:
    with pytest.raises(InvalidInput) as refused:
        decide([], baseline={}, candidate={}, max_flips=-1)
    assert refused.value.field == "max_flips"


def test_mcnemar_exact_on_a_small_table_and_chi_square_on_a_large_one() -> None:
    # 0 vs 5 discordant pairs: the exact two-sided binomial p is 2 * 0.5**5.
    small = mcnemar_test(both_right=10, baseline_only=0, candidate_only=5, both_wrong=1)
    assert small.exact and small.p_value == pytest.approx(0.0625)
    # 10 vs 30: (|10 - 30| - 1)**2 / 40 = 9.025, chi-square with one degree of freedom.
    large = mcnemar_test(both_right=50, baseline_only=10, candidate_only=30, both_wrong=5)
    assert not large.exact
    assert large.statistic == pytest.approx(9.025)
    assert large.p_value == pytest.approx(0.002663, rel=1e-3)
    none = mcnemar_test(both_right=3, baseline_only=0, candidate_only=0, both_wrong=1)
    assert none.p_value is None and none.to_dict()["method"] == "exact binomial"


def test_a_case_every_model_fails_is_suspect_once_three_models_tried_it() -> None:
    results = [
        result("hard", "A", False), result("hard", "B", False, 1),
        result("wrong-label", "A", False), result("wrong-label", "B", False, 1),
        result("wrong-label", "C", False, 2), result("fine", "A", True), result("fine", "B", False, 1),
        result("fine", "C", False, 2), result("fixed", "A", False), result("fixed", "B", False, 1),
        result("fixed", "C", False, 2), result("fixed", "C", True, 3),  # C's latest result is right
    ]  # fmt: skip
    latest = latest_outcomes((r.case_id, r.model_hash, r.correct) for r in results)
    assert suspect_cases(latest) == {"wrong-label"}
    assert suspect_cases(latest, min_models=2) == {"wrong-label", "hard"}


def test_a_retired_case_records_who_and_why_and_is_retired_once() -> None:
    retired = case("c").retire(by="lead", reason="  the text is two examples  ", at=T0)
    assert (
        retired.retired
        and retired.retired_by == "lead"
        and retired.retired_reason == "the text is two examples"
    )
    with pytest.raises(Conflict):
        retired.retire(by="lead", reason="again", at=T0)
    with pytest.raises(InvalidInput) as blank:
        case("d").retire(by="lead", reason="  ", at=T0)
    assert blank.value.field == "reason"


def test_a_model_is_shipped_once_with_a_reason() -> None:
    model = RegisteredModel(hash="sha256:ab", name="m", folder="/m", registered_at=T0)
    shipped = model.ship(by="lead", reason="passed the gate", at=T0)
    assert shipped.shipped and shipped.shipped_reason == "passed the gate"
    with pytest.raises(Conflict):
        shipped.ship(by="lead", reason="again", at=T0)


def test_accuracy_with_a_fixed_seed_bootstrap_interval() -> None:
    outcomes = [True, False, True, True] * 10
    first, again = accuracy_with_ci(outcomes, seed=3), accuracy_with_ci(outcomes, seed=3)
    assert first == again and first["accuracy"] == 0.75 and first["cases"] == 40
    low, high = first["ci95"]
    assert 0.55 < low < 0.75 < high < 0.9
    assert accuracy_with_ci([True])["ci95"] is None
    assert accuracy_with_ci([])["accuracy"] is None
    assert accuracy_with_ci([False, False])["ci95"] == [0.0, 0.0]
