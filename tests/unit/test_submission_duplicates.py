"""Near-duplicates at submission on fakes of our own ports: the decision on hand-made pairs (through
the shared index's band keys and the exact rule), the round's policy (allow, flag, reject), what a
writer is shown of others' examples, batches, captures and the index's rebuild. The same use cases
run on SQLite and PostgreSQL in tests/integration/test_submission_duplicates.py and against a real
Label Studio in tests/e2e/test_near_duplicates.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dynaval.domain.errors import InvalidInput, NearDuplicateRefused
from dynaval.domain.validation.candidate import Candidate
from dynaval.domain.validation.capture import CaptureSource
from dynaval.domain.validation.policy import DecisionPolicy
from dynaval.domain.validation.round import Round, RoundKind
from dynaval.service_layer.health import near_duplicates
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation import captures
from dynaval.service_layer.validation.candidates import GivenInputs
from tests.unit.fakes import FakeStore, fake_services

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TRICK = "the plot was predictable but honestly the ending made me smile like a child again"
ONE_WORD_EDIT = "the plot was predictable but honestly the ending made me grin like a child again"
UNRELATED = "customer support never answered my emails about the broken blender for three weeks"
PREMISE = "A man in a red jacket is riding a bicycle down a crowded city street at noon."
OTHER_PREMISE = "Two children are building a sandcastle on an empty beach while the tide comes in."
HYPOTHESIS = "A person is outdoors on a bike in the middle of the day."


def a_round(store: FakeStore, round_id: int, *, task: str = "sentiment", **policy: object) -> Round:
    labels = ["positive", "negative", "neutral"]
    if task == "nli":
        labels = ["entailment", "neutral", "contradiction"]
    round_ = Round(
        name=f"r{round_id}", task_type=task, model_dir="", model_name="", model_hash="", labels=labels,
        policy=DecisionPolicy.from_overrides(dict(policy)).to_dict(), id=round_id,
    )  # fmt: skip
    store.rounds[round_id] = round_
    return round_


def candidate(
    cid: str, round_id: int, inputs: dict[str, str], *, by: str = "ana", minute: int = 0
) -> Candidate:
    return Candidate(
        id=cid, round_id=round_id, inputs=inputs, writer_label="positive", writer_id=by, submitted_by=by,
        submitted_at=T0 + timedelta(minutes=minute),
    )  # fmt: skip


def submit(services: Services, round_id: int, new: list[Candidate]) -> list[near_duplicates.Checked]:
    """What ``_submit`` does around the check: check, store, index, commit."""
    with services.uow() as uow:
        round_ = uow.rounds.get(round_id)
        task_type = services.catalog.get(round_.task_type)
        where = [f"candidates[{i}]" if len(new) > 1 else "" for i in range(len(new))]
        checked = near_duplicates.check_new(
            services, uow, round_, task_type, list(zip(new, where, strict=True))
        )
        for c in new:
            uow.candidates.add(c)
        near_duplicates.index_new(uow, round_, checked)
        uow.commit()
    return checked


def found(services: Services, round_id: int, inputs: dict[str, str], *, by: str = "ana") -> list[str]:
    """The ids of the earlier examples a new example repeats, stored nowhere."""
    with services.uow(read_only=True) as uow:
        round_ = uow.rounds.get(round_id)
        task_type = services.catalog.get(round_.task_type)
        (checked,) = near_duplicates.check_new(
            services, uow, round_, task_type, [(candidate("new", round_id, inputs, by=by), "")]
        )
    return [m.id for m in checked.matches]


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


def test_a_one_word_edit_of_an_earlier_example_in_another_round_is_found(store: FakeStore) -> None:
    services = fake_services(store)
    a_round(store, 1)
    a_round(store, 2)
    submit(services, 1, [candidate("c1", 1, {"text": TRICK})])
    assert found(services, 2, {"text": ONE_WORD_EDIT}) == ["c1"]
    assert found(services, 2, {"text": UNRELATED}) == []


def test_non_ascii_text_is_found_after_nfkc_and_case_folding(store: FakeStore) -> None:
    services = fake_services(store)
    a_round(store, 1)
    submit(
        services,
        1,
        [
            candidate(
                "c1", 1, {"text": "Das Café war überraschend GUT, aber der Kuchen war leider trocken und alt"}
            )
        ],
    )
    assert found(
        services, 1, {"text": "das café war überraschend gut, aber der kuchen war leider trocken und alt"}
    ) == ["c1"]
    assert found(
        services, 1, {"text": "Das Ｃａｆé war überraschend gut, aber der Kuchen war leider trocken und alt"}
    ) == ["c1"]
    assert (
        found(services, 1, {"text": "東京の新しいレストランはとても高かったが、料理は素晴らしかった"}) == []
    )


def test_the_same_hypothesis_under_another_premise_is_not_a_duplicate(store: FakeStore) -> None:
    services = fake_services(store)
    a_round(store, 1, task="nli")
    submit(services, 1, [candidate("c1", 1, {"premise": PREMISE, "hypothesis": HYPOTHESIS})])
    assert found(services, 1, {"premise": OTHER_PREMISE, "hypothesis": HYPOTHESIS}) == []
    assert found(services, 1, {"premise": PREMISE, "hypothesis": HYPOTHESIS.replace("bike", "bicycle")}) == [
        "c1"
    ]


def test_examples_of_another_task_type_are_not_compared(store: FakeStore) -> None:
    services = fake_services(store)
    a_round(store, 1)
    a_round(store, 2, task="nli")
    submit(services, 1, [candidate("c1", 1, {"text": HYPOTHESIS})])
    assert found(services, 2, {"premise": HYPOTHESIS, "hypothesis": HYPOTHESIS}) == []


def test_flag_stores_and_marks_allow_only_records(store: FakeStore) -> None:
    services = fake_services(store)
    a_round(store, 1, near_duplicates="flag")
    a_round(store, 2, near_duplicates="allow")
    submit(services, 1, [candidate("c1", 1, {"text": TRICK})])
    submit(services, 1, [candidate("c2", 1, {"text": ONE_WORD_EDIT}, minute=1)])
    submit(services, 2, [candidate("c3", 2, {"text": ONE_WORD_EDIT}, minute=2)])
    assert set(store.candidates) == {"c1", "c2", "c3"}
    checks = store.near_duplicate_checks
    assert "c1" not in checks
    assert checks["c2"].flagged and [m.id for m in checks["c2"].matches] == ["c1"]
    assert not checks["c3"].flagged and [m.id for m in checks["c3"].matches] == ["c2", "c1"]
    with services.uow(read_only=True) as uow:
        assert uow.near_duplicates.flagged(1) == ["c2"] and uow.near_duplicates.flagged(2) == []


def test_reject_refuses_naming_inputs_and_stores_nothing(store: FakeStore) -> None:
    services = fake_services(store)
    a_round(store, 1, near_duplicates="reject")
    submit(services, 1, [candidate("c1", 1, {"text": TRICK})])
    with pytest.raises(NearDuplicateRefused, match="near-duplicate of your example c1") as refused:
        submit(services, 1, [candidate("c2", 1, {"text": ONE_WORD_EDIT})])
    assert refused.value.field == "inputs" and refused.value.code == "near_duplicate"
    (shown,) = refused.value.near_duplicates
    assert shown["id"] == "c1" and shown["round_id"] == 1 and shown["kind"] == "lexical"
    assert 0.6 <= float(str(shown["similarity"])) < 1
    assert set(store.candidates) == {"c1"} and set(store.near_duplicate_examples) == {"c1"}


def test_a_writer_sees_only_that_someone_elses_near_duplicate_exists(store: FakeStore) -> None:
    services = fake_services(store)
    a_round(store, 1, near_duplicates="reject")
    submit(services, 1, [candidate("c1", 1, {"text": TRICK}, by="ana")])
    with pytest.raises(NearDuplicateRefused, match="near-duplicate of an earlier example") as refused:
        submit(services, 1, [candidate("c2", 1, {"text": ONE_WORD_EDIT}, by="bo")])
    assert refused.value.near_duplicates == [{"similarity": 0.75, "kind": "lexical"}]
    assert "c1" not in refused.value.message


def test_within_a_batch_an_earlier_item_counts_and_reject_refuses_the_whole_batch(store: FakeStore) -> None:
    services = fake_services(store)
    a_round(store, 1, near_duplicates="flag")
    checked = submit(
        services, 1, [candidate("c1", 1, {"text": TRICK}), candidate("c2", 1, {"text": ONE_WORD_EDIT})]
    )
    assert [m.id for m in checked[1].matches] == ["c1"] and store.near_duplicate_checks["c2"].flagged
    a_round(store, 2, near_duplicates="reject")
    batch = [candidate("d1", 2, {"text": UNRELATED}), candidate("d2", 2, {"text": UNRELATED + " again"})]
    with pytest.raises(NearDuplicateRefused) as refused:
        submit(services, 2, batch)
    assert refused.value.field == "candidates[1].inputs"
    assert not {"d1", "d2"} & set(store.candidates)


def test_at_most_five_are_reported_most_similar_first(store: FakeStore) -> None:
    services = fake_services(store)
    a_round(store, 1, near_duplicates="allow")
    variants = [TRICK + " " + " ".join(["really"] * i) for i in range(8)]
    submit(services, 1, [candidate(f"c{i}", 1, {"text": v}, minute=i) for i, v in enumerate(variants)])
    with services.uow(read_only=True) as uow:
        round_ = uow.rounds.get(1)
        (checked,) = near_duplicates.check_new(
            services,
            uow,
            round_,
            services.catalog.get("sentiment"),
            [(candidate("new", 1, {"text": TRICK}), "")],
        )
    assert [m.id for m in checked.matches] == ["c0", "c1", "c2", "c3", "c4"]
    assert [m.similarity for m in checked.matches] == sorted(
        (m.similarity for m in checked.matches), reverse=True
    )


def test_a_reported_capture_is_checked_and_refused_under_reject(store: FakeStore) -> None:
    services = fake_services(store)
    a_round(store, 1)
    capture_round = a_round(store, 2, near_duplicates="reject")
    capture_round.kind = RoundKind.CAPTURE
    submit(services, 1, [candidate("c1", 1, {"text": TRICK})])

    def report(text: str) -> None:
        captures.report_captures(
            services, round_id=2, reporter="canary-bot", batch=False,
            captures=[captures.NewCapture(
                inputs=GivenInputs({"text": text}), observed_output="positive", reported_label="negative",
                source=CaptureSource("canary"), model_name="m", model_version="1", observed_at=T0,
            )],
        )  # fmt: skip

    with pytest.raises(NearDuplicateRefused) as refused:
        report(ONE_WORD_EDIT)
    assert refused.value.field == "inputs" and "id" not in refused.value.near_duplicates[0]
    assert set(store.candidates) == {"c1"} and not store.captures
    report(UNRELATED)
    assert len(store.captures) == 1 and len(store.near_duplicate_examples) == 2


def test_reindex_adds_what_is_missing_once(store: FakeStore) -> None:
    services = fake_services(store)
    a_round(store, 1)
    for i, text in enumerate([TRICK, UNRELATED, HYPOTHESIS]):
        store.candidates[f"old{i}"] = candidate(f"old{i}", 1, {"text": text}, minute=i)
    assert found(services, 1, {"text": ONE_WORD_EDIT}) == []  # stored before the index existed
    assert near_duplicates.reindex(services, batch=2) == 3
    assert near_duplicates.reindex(services) == 0
    assert found(services, 1, {"text": ONE_WORD_EDIT}) == ["old0"]


@pytest.mark.parametrize(
    ("given", "field"),
    [({"near_duplicates": "block"}, "policy.near_duplicates"),
     ({"near_duplicate_lexical": 0.3}, "policy.near_duplicate_lexical"),
     ({"near_duplicate_lexical": 1.5}, "policy.near_duplicate_lexical"),
     ({"near_duplicate_semantic": 0.0}, "policy.near_duplicate_semantic")],
)  # fmt: skip
def test_the_policy_refuses_bad_near_duplicate_settings_naming_the_field(
    given: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        DecisionPolicy.from_overrides(given)
    assert refused.value.field == field


def test_the_defaults_flag_at_the_release_rules_threshold() -> None:
    policy = DecisionPolicy()
    assert policy.near_duplicates == "flag" and policy.lexical_rule.threshold == 0.6
    assert policy.near_duplicate_semantic is None
