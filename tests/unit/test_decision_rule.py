"""The decision rule (docs/validation.md, "Decision rule"): examples first, then properties."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaval.domain.validation.decision import Ballot, Decision, Outcome, decide, pairwise_agreement
from dynaval.domain.validation.policy import RULE_VERSION, DecisionPolicy

POS, NEG, NEU = "positive", "negative", "neutral"
LABELS = (POS, NEG, NEU)
DEFAULT = DecisionPolicy()


def ballots(*labels: str | None, flagged: tuple[int, ...] = ()) -> list[Ballot]:
    """One ballot per label, from annotators a0, a1, ...; indexes in ``flagged`` also flag."""
    return [
        Ballot(annotator=f"a{i}", label=label, flagged=i in flagged, reason="bad" if i in flagged else None)
        for i, label in enumerate(labels)
    ]


# --- the default rule: two votes, escalation to three, 2/3 share -----------------------------------


def test_waits_for_first_votes_below_min_votes() -> None:
    for votes in ([], ballots(POS)):
        decision = decide(votes, POS, DEFAULT)
        assert decision.outcome is Outcome.IN_VALIDATION
        assert decision.wanted_votes == DEFAULT.min_votes
        assert not decision.outcome.is_final


def test_accepts_when_first_two_votes_agree_with_writer() -> None:
    decision = decide(ballots(POS, POS), POS, DEFAULT)
    assert decision.outcome is Outcome.ACCEPTED
    assert decision.wanted_votes == 2
    assert decision.votes_counted == 2
    assert decision.validators_label is None


def test_escalates_when_first_two_votes_disagree() -> None:
    for pair in ((POS, NEG), (NEG, POS), (NEU, POS)):
        decision = decide(ballots(*pair), POS, DEFAULT)
        assert decision.outcome is Outcome.ESCALATED, pair
        assert decision.wanted_votes == 3
        assert not decision.outcome.is_final


def test_rejects_early_when_neither_first_vote_is_for_the_writer() -> None:
    # docs/validation.md, "Decision rule": no escalation once "the outcome can no longer change": the writer's
    # label cannot reach 2 of 3 any more, so no third vote is asked for.
    decision = decide(ballots(NEG, NEU), POS, DEFAULT)
    assert decision.outcome is Outcome.REJECTED
    assert decision.wanted_votes == 2
    assert decision.validators_label is None  # no single label the validators agree on


def test_two_votes_against_the_writer_reject_at_once_with_their_label() -> None:
    # The writer's label can no longer win (best case 1 of 3), so no third vote is asked for.
    decision = decide(ballots(NEG, NEG), POS, DEFAULT)
    assert decision.outcome is Outcome.REJECTED
    assert decision.wanted_votes == 2
    assert decision.validators_label == NEG
    assert decision.majority_label == NEG


def test_escalated_candidate_accepted_when_third_vote_agrees_with_writer() -> None:
    decision = decide(ballots(POS, NEG, POS), POS, DEFAULT)
    assert decision.outcome is Outcome.ACCEPTED
    assert decision.wanted_votes == 3
    assert decision.label_counts == {NEG: 1, POS: 2}
    assert decision.validators_label is None


def test_escalated_candidate_rejected_when_third_vote_disagrees() -> None:
    decision = decide(ballots(POS, NEG, NEU), POS, DEFAULT)
    assert decision.outcome is Outcome.REJECTED
    assert decision.wanted_votes == 3
    assert decision.majority_label is None  # three-way tie
    assert decision.validators_label is None


def test_rejects_with_validators_label_when_majority_chooses_other_label() -> None:
    decision = decide(ballots(POS, NEG, NEG), POS, DEFAULT)
    assert decision.outcome is Outcome.REJECTED
    assert decision.majority_label == NEG
    assert decision.validators_label == NEG
    assert decision.writer_label_share == pytest.approx(1 / 3)
    assert decision.majority_share == pytest.approx(2 / 3)


def test_two_flags_send_candidate_to_lead() -> None:
    decision = decide(ballots(POS, POS, flagged=(0, 1)), POS, DEFAULT)
    assert decision.outcome is Outcome.FLAGGED
    assert decision.flags == 2
    assert decision.outcome.is_final


def test_flags_without_labels_send_candidate_to_lead_before_any_label_vote() -> None:
    decision = decide(ballots(None, None, flagged=(0, 1)), POS, DEFAULT)
    assert decision.outcome is Outcome.FLAGGED
    assert decision.votes_counted == 0
    assert decision.wanted_votes == DEFAULT.min_votes


def test_single_flag_does_not_flag() -> None:
    decision = decide(ballots(POS, POS, flagged=(0,)), POS, DEFAULT)
    assert decision.outcome is Outcome.ACCEPTED
    assert decision.flags == 1


def test_flag_only_ballot_is_not_a_label_vote() -> None:
    decision = decide(ballots(POS, None, flagged=(1,)), POS, DEFAULT)
    assert decision.outcome is Outcome.IN_VALIDATION
    assert decision.votes_counted == 1
    assert decision.flags == 1


def test_excluded_annotators_votes_do_not_count() -> None:
    votes = ballots(POS, NEG, NEG)
    decision = decide(votes, POS, DEFAULT, excluded={"a1", "a2", "never-voted"})
    assert decision.outcome is Outcome.IN_VALIDATION
    assert decision.votes_counted == 1
    assert decision.label_counts == {POS: 1}
    assert decision.excluded_annotators == ("a1", "a2")  # only those who actually voted, sorted
    # Without the exclusion the same ballots reject.
    assert decide(votes, POS, DEFAULT).outcome is Outcome.REJECTED


def test_excluded_annotators_flags_do_not_count() -> None:
    decision = decide(ballots(POS, POS, flagged=(0, 1)), POS, DEFAULT, excluded={"a1"})
    assert decision.outcome is Outcome.IN_VALIDATION
    assert decision.flags == 1


def test_excluded_annotators_recorded_when_ballots_is_a_generator() -> None:
    votes = ballots(POS, NEG, NEG)
    decision = decide((b for b in votes), POS, DEFAULT, excluded={"a1"})
    assert decision.votes_counted == 2
    assert decision.excluded_annotators == ("a1",)


def test_more_votes_than_max_still_decides() -> None:
    # Label Studio does not cap annotations: four or five votes must still give a final answer.
    assert decide(ballots(POS, NEG, POS, POS), POS, DEFAULT).outcome is Outcome.ACCEPTED
    rejected = decide(ballots(POS, NEG, POS, NEG), POS, DEFAULT)  # 2 of 4, no strict majority
    assert rejected.outcome is Outcome.REJECTED
    assert rejected.wanted_votes == 4
    five = decide(ballots(POS, NEG, POS, NEG, NEG), POS, DEFAULT)
    assert five.outcome is Outcome.REJECTED
    assert five.validators_label == NEG


def test_accept_share_is_exact_for_two_of_three() -> None:
    # 2/3 as a float is 0.666...6 < 2/3; the comparison must still accept 2 of 3 votes.
    assert DEFAULT.accept_fraction == Fraction(2, 3)
    assert decide(ballots(POS, NEG, POS), POS, DEFAULT).outcome is Outcome.ACCEPTED
    explicit = DecisionPolicy(accept_share=0.6666666666666666)
    assert decide(ballots(POS, NEG, POS), POS, explicit).outcome is Outcome.ACCEPTED
    # Four of six meets 2/3 as well (no strict-majority problem: 4 > 2).
    six = DecisionPolicy(min_votes=2, max_votes=6)
    assert decide(ballots(POS, POS, POS, POS, NEG, NEG), POS, six).outcome is Outcome.ACCEPTED


# --- custom policies ---------------------------------------------------------------------------------


def test_min_votes_three_waits_for_three_votes() -> None:
    policy = DecisionPolicy(min_votes=3, max_votes=3)
    assert decide(ballots(POS, POS), POS, policy).outcome is Outcome.IN_VALIDATION
    assert decide(ballots(POS, POS), POS, policy).wanted_votes == 3
    assert decide(ballots(POS, POS, NEG), POS, policy).outcome is Outcome.ACCEPTED
    assert decide(ballots(POS, NEG, NEG), POS, policy).outcome is Outcome.REJECTED


DYNASENT = DecisionPolicy(min_votes=3, max_votes=5)


def test_dynasent_policy_escalates_one_vote_at_a_time_up_to_five() -> None:
    split = decide(ballots(POS, POS, NEG), POS, DYNASENT)
    assert split.outcome is Outcome.ESCALATED
    assert split.wanted_votes == 4
    four = decide(ballots(POS, POS, NEG, POS), POS, DYNASENT)
    assert four.outcome is Outcome.ESCALATED  # 3 of 5 or 4 of 5 are both still possible
    assert four.wanted_votes == 5
    # 2 of 4: even a fifth vote for the writer gives 3 of 5 = 0.6 < 2/3.
    assert decide(ballots(POS, POS, NEG, NEG), POS, DYNASENT).outcome is Outcome.REJECTED


def test_dynasent_policy_decides_at_five_votes() -> None:
    # 4 of 5 = 0.8 >= 2/3 accepts; 3 of 5 = 0.6 < 2/3 rejects even though it is a majority.
    assert decide(ballots(POS, POS, NEG, POS, POS), POS, DYNASENT).outcome is Outcome.ACCEPTED
    three_of_five = decide(ballots(POS, POS, NEG, NEG, POS), POS, DYNASENT)
    assert three_of_five.outcome is Outcome.REJECTED
    assert three_of_five.majority_label == POS
    assert three_of_five.validators_label is None  # the majority was the writer's label


def test_dynasent_policy_accepts_early_when_outcome_is_settled() -> None:
    # 4 of 4 for the writer: even a fifth vote against leaves 4 of 5 >= 2/3.
    decision = decide(ballots(POS, POS, POS, POS), POS, DYNASENT)
    assert decision.outcome is Outcome.ACCEPTED
    assert decision.wanted_votes == 4


def test_dynasent_policy_rejects_early_when_writer_cannot_win() -> None:
    # 1 of 3 for the writer: even two more votes give 3 of 5 = 0.6 < 2/3.
    decision = decide(ballots(POS, NEG, NEG), POS, DYNASENT)
    assert decision.outcome is Outcome.REJECTED
    assert decision.validators_label == NEG


def test_dynasent_policy_accepts_when_first_three_votes_agree_with_writer() -> None:
    assert decide(ballots(POS, POS, POS), POS, DYNASENT).outcome is Outcome.ACCEPTED


def test_unanimity_policy_needs_every_vote_for_the_writer() -> None:
    policy = DecisionPolicy(accept_share=1.0)
    # One vote against can never be undone at share 1.0.
    early = decide(ballots(POS, NEG), POS, policy)
    assert early.outcome is Outcome.REJECTED
    assert early.wanted_votes == 2
    assert decide(ballots(POS, POS, POS), POS, policy).outcome is Outcome.ACCEPTED
    assert decide(ballots(POS, POS, NEG), POS, policy).outcome is Outcome.REJECTED


def test_unanimity_policy_with_min_equal_max_accepts_two_of_two() -> None:
    policy = DecisionPolicy(min_votes=2, max_votes=2, accept_share=1.0)
    assert decide(ballots(POS, POS), POS, policy).outcome is Outcome.ACCEPTED
    assert decide(ballots(POS, NEG), POS, policy).outcome is Outcome.REJECTED


def test_flag_votes_threshold_is_configurable() -> None:
    one = DecisionPolicy(flag_votes=1)
    assert decide(ballots(POS, POS, flagged=(0,)), POS, one).outcome is Outcome.FLAGGED
    three = DecisionPolicy(flag_votes=3)
    assert decide(ballots(POS, POS, flagged=(0, 1)), POS, three).outcome is Outcome.ACCEPTED


# --- what a decision records ------------------------------------------------------------------------


def test_decision_records_rule_version_counts_and_agreement() -> None:
    decision = decide(ballots(POS, NEG, POS), POS, DEFAULT)
    assert decision.rule_version == RULE_VERSION
    assert decision.label_counts == {NEG: 1, POS: 2}
    assert list(decision.label_counts) == sorted(decision.label_counts)
    assert decision.votes_counted == 3
    assert decision.majority_label == POS
    assert decision.majority_share == pytest.approx(2 / 3)
    assert decision.writer_label_share == pytest.approx(2 / 3)
    # Ordered pairs: 2*1 agreeing out of 3*2.
    assert decision.item_agreement == pytest.approx(1 / 3)
    assert decision.reason


def test_item_agreement_undefined_below_two_votes() -> None:
    assert decide([], POS, DEFAULT).item_agreement is None
    assert decide(ballots(POS), POS, DEFAULT).item_agreement is None
    assert decide(ballots(POS, POS), POS, DEFAULT).item_agreement == 1.0
    assert decide(ballots(POS, NEG), POS, DEFAULT).item_agreement == 0.0


def test_pairwise_agreement() -> None:
    assert pairwise_agreement([]) is None
    assert pairwise_agreement([1]) is None
    assert pairwise_agreement([3]) == 1.0
    assert pairwise_agreement([1, 1, 1]) == 0.0
    assert pairwise_agreement([2, 2]) == pytest.approx(4 / 12)


def test_decision_to_dict_is_plain_data() -> None:
    decision = decide(ballots(POS, NEG, NEG), POS, DEFAULT, excluded={"zz"})
    data = decision.to_dict()
    assert data["outcome"] == "rejected"
    assert data["rule_version"] == RULE_VERSION
    assert data["label_counts"] == {NEG: 2, POS: 1}
    assert data["validators_label"] == NEG
    assert data["excluded_annotators"] == []
    assert data["wanted_votes"] == 3


def test_empty_ballots_record_no_shares() -> None:
    decision = decide([], POS, DEFAULT)
    assert decision.votes_counted == 0
    assert decision.label_counts == {}
    assert decision.majority_label is None
    assert decision.majority_share is None
    assert decision.writer_label_share is None


# --- properties ----------------------------------------------------------------------------------------

policies = st.builds(
    lambda min_votes, extra, share, flag_votes: DecisionPolicy(
        min_votes=min_votes, max_votes=min_votes + extra, accept_share=share, flag_votes=flag_votes
    ),
    st.integers(1, 5),
    st.integers(0, 4),
    st.sampled_from([0.51, 0.6, 2 / 3, 0.7, 0.75, 0.8, 1.0]),
    st.integers(1, 4),
)

ballot_lists = st.lists(st.tuples(st.sampled_from((*LABELS, None)), st.booleans()), max_size=12).map(
    lambda rows: [
        # a ballot with neither label nor flag is no vote (see votes.current_votes): flag it
        Ballot(annotator=f"a{i}", label=label, flagged=flagged or label is None)
        for i, (label, flagged) in enumerate(rows)
    ]
)

label_only_ballots = st.lists(st.sampled_from(LABELS), max_size=12).map(lambda labels: ballots(*labels))


def _same(a: Decision, b: Decision) -> bool:
    return a.to_dict() == b.to_dict()


@settings(max_examples=200, deadline=None)
@given(votes=ballot_lists, writer=st.sampled_from(LABELS), policy=policies, data=st.data())
def test_decide_is_deterministic_and_independent_of_ballot_order(
    votes: list[Ballot], writer: str, policy: DecisionPolicy, data: st.DataObject
) -> None:
    shuffled = data.draw(st.permutations(votes))
    excluded = data.draw(st.sets(st.sampled_from([f"a{i}" for i in range(12)]), max_size=3))
    first = decide(votes, writer, policy, excluded=excluded)
    assert _same(first, decide(list(votes), writer, policy, excluded=set(excluded)))
    assert _same(first, decide(shuffled, writer, policy, excluded=excluded))
    assert _same(first, decide(tuple(reversed(votes)), writer, policy, excluded=sorted(excluded)))


@settings(max_examples=200, deadline=None)
@given(votes=ballot_lists, writer=st.sampled_from(LABELS), policy=policies)
def test_never_accepted_unless_writer_label_is_strict_majority_with_enough_share(
    votes: list[Ballot], writer: str, policy: DecisionPolicy
) -> None:
    decision = decide(votes, writer, policy)
    if decision.outcome is not Outcome.ACCEPTED:
        return
    counts = decision.label_counts
    n = sum(counts.values())
    writer_votes = counts.get(writer, 0)
    assert n >= policy.min_votes
    assert all(writer_votes > c for label, c in counts.items() if label != writer)
    assert Fraction(writer_votes, n) >= policy.accept_fraction
    assert decision.majority_label == writer
    assert decision.validators_label is None
    assert decision.flags < policy.flag_votes


@settings(max_examples=200, deadline=None)
@given(votes=ballot_lists, writer=st.sampled_from(LABELS), policy=policies)
def test_outcome_is_final_whenever_votes_reach_max_votes(
    votes: list[Ballot], writer: str, policy: DecisionPolicy
) -> None:
    decision = decide(votes, writer, policy)
    if decision.votes_counted >= policy.max_votes:
        assert decision.outcome.is_final
        assert decision.outcome is not Outcome.ESCALATED


@settings(max_examples=200, deadline=None)
@given(votes=ballot_lists, writer=st.sampled_from(LABELS), policy=policies)
def test_wanted_votes_never_exceed_max_votes_while_escalated(
    votes: list[Ballot], writer: str, policy: DecisionPolicy
) -> None:
    decision = decide(votes, writer, policy)
    # Annotations without a counted label still fill a Label Studio slot, so they are asked for on top.
    uncounted = len(votes) - decision.votes_counted
    if decision.outcome is Outcome.ESCALATED:
        assert decision.votes_counted < decision.wanted_votes - uncounted <= policy.max_votes
        assert decision.wanted_votes == decision.votes_counted + 1 + uncounted
    if decision.outcome is Outcome.IN_VALIDATION:
        assert decision.wanted_votes == policy.min_votes + uncounted
    assert decision.wanted_votes >= min(decision.votes_counted, policy.max_votes)


@settings(max_examples=200, deadline=None)
@given(votes=label_only_ballots, writer=st.sampled_from(LABELS), policy=policies)
def test_early_decision_agrees_with_every_completion_up_to_max_votes(
    votes: list[Ballot], writer: str, policy: DecisionPolicy
) -> None:
    """An accept or reject before max_votes is the answer every possible remaining vote gives,
    except the rule's first step: unanimous first votes for the writer accept at once."""
    decision = decide(votes, writer, policy)
    n = decision.votes_counted
    if not (decision.outcome in (Outcome.ACCEPTED, Outcome.REJECTED) and n < policy.max_votes):
        return
    if decision.label_counts == {writer: n}:
        return
    remaining = policy.max_votes - n
    for other in LABELS:
        for k in range(remaining + 1):
            # k more votes for `other`, the rest for the writer's label
            extra = ballots(*([other] * k + [writer] * (remaining - k)))
            more = [Ballot(f"x{i}", b.label) for i, b in enumerate(extra)]
            assert decide(votes + more, writer, policy).outcome is decision.outcome


@settings(max_examples=200, deadline=None)
@given(votes=ballot_lists, writer=st.sampled_from(LABELS), policy=policies)
def test_another_vote_for_writer_never_turns_accepted_into_anything_else(
    votes: list[Ballot], writer: str, policy: DecisionPolicy
) -> None:
    decision = decide(votes, writer, policy)
    if decision.outcome is not Outcome.ACCEPTED:
        return
    more = decide([*votes, Ballot("newcomer", writer)], writer, policy)
    assert more.outcome is Outcome.ACCEPTED


@settings(max_examples=200, deadline=None)
@given(votes=label_only_ballots, writer=st.sampled_from(LABELS), policy=policies)
def test_a_vote_against_the_writer_never_turns_a_reject_into_anything_else(
    votes: list[Ballot], writer: str, policy: DecisionPolicy
) -> None:
    """Monotonicity the other way round."""
    decision = decide(votes, writer, policy)
    if decision.outcome is not Outcome.REJECTED:
        return
    for other in LABELS:
        if other == writer:
            continue
        assert decide([*votes, Ballot("newcomer", other)], writer, policy).outcome is Outcome.REJECTED
