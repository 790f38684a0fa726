"""The shared near-duplicate index on SQLite and PostgreSQL: written with the candidates, found by
one indexed query from another process's services, kept across a restart, rebuilt from the stored
candidates when missing, and what a check found read back with its flag."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from dynaval.bootstrap import bootstrap
from dynaval.domain.errors import NearDuplicateRefused
from dynaval.domain.validation.capture import CaptureSource
from dynaval.domain.validation.policy import DecisionPolicy
from dynaval.domain.validation.round import Round, RoundKind
from dynaval.entrypoints.cli import main as cli
from dynaval.service_layer.health import near_duplicates
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation import captures
from dynaval.service_layer.validation.candidates import GivenInputs
from tests.fixtures.service import cli_environment

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TRICK = "the plot was predictable but honestly the ending made me smile like a child again"
VARIANTS = [
    TRICK,
    TRICK.replace("smile", "grin"),
    TRICK.replace("honestly", "frankly"),
    TRICK.replace("child", "kid"),
]
UNRELATED = "customer support never answered my emails about the broken blender for three weeks"


def capture_round(services: Services, **policy: object) -> int:
    with services.uow() as uow:
        made = uow.rounds.add(
            Round(
                name="captures", task_type="sentiment", model_dir="", model_name="", model_hash="",
                labels=["positive", "negative", "neutral"], kind=RoundKind.CAPTURE,
                policy=DecisionPolicy.from_overrides(dict(policy)).to_dict(),
            )
        )  # fmt: skip
        uow.commit()
    assert made.id is not None
    return made.id


def report(services: Services, round_id: int, texts: list[str], reporter: str = "canary-bot") -> list[str]:
    made = captures.report_captures(
        services, round_id=round_id, reporter=reporter, batch=len(texts) > 1,
        captures=[
            captures.NewCapture(
                inputs=GivenInputs({"text": t}), observed_output="positive", reported_label="negative",
                source=CaptureSource("canary"), model_name="m", model_version="1", observed_at=T0,
            )
            for t in texts
        ],
    )  # fmt: skip
    return [c.id for c in made]


@pytest.fixture
def second(services: Services) -> Iterator[Services]:
    """Another process's services on the same database."""
    other = bootstrap(services.settings)
    try:
        yield other
    finally:
        other.close()


def test_the_index_is_written_with_the_candidates_and_seen_by_another_process(
    services: Services, second: Services
) -> None:
    flag_round = capture_round(services, near_duplicates="flag")
    first, unrelated = report(services, flag_round, [VARIANTS[0], UNRELATED])
    (edit,) = report(second, flag_round, [VARIANTS[1]], reporter="desk")
    with second.uow(read_only=True) as uow:
        assert uow.near_duplicates.size() == 3
        check = uow.near_duplicates.checks_of([edit])[edit]
        assert uow.near_duplicates.flagged(flag_round) == [edit]
        assert uow.near_duplicates.checks_of([first, unrelated]) == {}
    assert check.flagged and [(m.id, m.kind, m.submitted_by) for m in check.matches] == [
        (first, "lexical", "canary-bot")
    ]
    # A lead sees the id; the other reporter only that a near-duplicate exists.
    assert near_duplicates.findings(services, [edit], None)[0][0]["id"] == first
    assert near_duplicates.findings(services, [edit], "desk") == [[{"similarity": 0.75, "kind": "lexical"}]]


def test_a_process_reads_the_stored_band_keys_a_page_at_a_time(
    services: Services, second: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first check of a process reads every stored example's keys in pages; none is missed at a
    page's edge, the first page's included."""
    monkeypatch.setattr(near_duplicates, "TOP_UP_PAGE", 2)
    round_id = capture_round(services, near_duplicates="flag")
    texts = [f"{UNRELATED} number {n}" for n in ("one", "two", "three", "four")]
    ids = report(services, round_id, [VARIANTS[0], *texts])
    (edit,) = report(second, round_id, [VARIANTS[1]])
    (late,) = report(second, round_id, [f"{texts[3]} again"])
    assert second.band_keys.size("sentiment") == 6
    with second.uow(read_only=True) as uow:
        checks = uow.near_duplicates.checks_of([edit, late])
    assert [m.id for m in checks[edit].matches] == [ids[0]]
    assert ids[4] in [m.id for m in checks[late].matches]


def test_the_dashboard_reads_the_first_flagged_candidates_and_counts_them_all(services: Services) -> None:
    """The panel's list is cut in the database (the earliest first) and its total counted there."""
    flag_round = capture_round(services, near_duplicates="flag")
    ids = report(services, flag_round, VARIANTS)
    every = near_duplicates.flagged_candidates(services, flag_round)
    in_order = [c["id"] for c in every["candidates"]]  # one batch: one time, then by id
    assert every["total"] == 3 and sorted(in_order) == sorted(ids[1:])
    shown = near_duplicates.flagged_candidates(services, flag_round, limit=2)
    assert shown["total"] == 3 and [c["id"] for c in shown["candidates"]] == in_order[:2]
    with services.uow(read_only=True) as uow:
        assert uow.near_duplicates.flagged(flag_round, limit=1) == in_order[:1]
        assert uow.near_duplicates.flagged_count(flag_round) == 3


def test_reject_stores_nothing_and_a_batch_is_refused_whole(services: Services) -> None:
    reject_round = capture_round(services, near_duplicates="reject")
    (first,) = report(services, reject_round, [VARIANTS[0]])
    with pytest.raises(NearDuplicateRefused) as refused:
        report(services, reject_round, [UNRELATED, VARIANTS[2]])
    assert refused.value.field == "captures[1].inputs"
    assert refused.value.near_duplicates[0]["id"] == first
    with services.uow(read_only=True) as uow:
        assert uow.near_duplicates.size() == 1
        assert len(uow.near_duplicates.unindexed(10)) == 0


def test_the_index_survives_a_restart_and_is_rebuilt_when_missing(
    services: Services, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    round_id = capture_round(services, near_duplicates="allow")
    ids = report(services, round_id, [VARIANTS[0], VARIANTS[1], UNRELATED])
    services.close()
    restarted = bootstrap(services.settings)
    try:
        with restarted.uow(read_only=True) as uow:
            assert uow.near_duplicates.size() == 3
        # The index lost (as after restoring an older backup): rebuilt from the stored candidates.
        assert restarted.database is not None
        with restarted.database.engine.begin() as connection:
            connection.execute(text("DELETE FROM near_duplicate_example"))
        assert near_duplicates.reindex(restarted, batch=2) == 3
        cli_environment(restarted, monkeypatch)  # the command, as an operator runs it after a restore
        assert cli.main(["near-duplicates", "reindex"]) == 0
        assert "0 examples added, 3 indexed" in capsys.readouterr().out
        (new,) = report(restarted, round_id, [VARIANTS[3]])
        with restarted.uow(read_only=True) as uow:
            check = uow.near_duplicates.checks_of([new])[new]
        # One word from the first (lexical); two from the second (a Jaccard of 0.55, under the
        # threshold), which still says the same thing (semantic); the unrelated one is neither.
        assert not check.flagged
        assert [(m.id, m.kind) for m in check.matches] == [(ids[0], "lexical"), (ids[1], "semantic")]
    finally:
        restarted.close()


def test_a_paraphrase_is_a_semantic_near_duplicate_and_vectors_reach_another_process(
    services: Services, second: Services
) -> None:
    round_id = capture_round(services, near_duplicates="flag")
    (first,) = report(services, round_id, ["The delivery was three weeks late and nobody told me why."])
    # Another process (its vectors loaded from the database on its first check) gets a rewording
    # (cosine 0.82, word-bigram Jaccard 0.1).
    (reworded,) = report(second, round_id, ["The package showed up three weeks late and no one said why."])
    (unrelated,) = report(second, round_id, [UNRELATED])
    with second.uow(read_only=True) as uow:
        checks = uow.near_duplicates.checks_of([reworded, unrelated])
    assert [(m.id, m.kind) for m in checks[reworded].matches] == [(first, "semantic")]
    assert 0.8 <= checks[reworded].matches[0].similarity < 1 and checks[reworded].flagged
    assert unrelated not in checks
    # The first process tops its vectors up with what the other stored before its next check.
    assert services.vectors is not None and services.vectors.size("sentiment", 1) == 0  # checked when empty
    report(services, round_id, ["Refunds take forever here."])
    assert services.vectors.size("sentiment", 1) == 3
    assert services.band_keys.size("sentiment") == 3  # and its band keys, the same way


def test_an_example_given_its_vector_later_keeps_its_band_keys(services: Services) -> None:
    """Indexed while the semantic check was off, then given a vector by ``reindex``: its row is
    written again under a new ``seq``, with its band keys, so a process started afterwards still
    finds it lexically, and one that held it already does not hold it twice."""
    lexical_only = bootstrap(services.settings.model_copy(update={"near_duplicate_semantic": False}))
    started_after: Services | None = None
    try:
        round_id = capture_round(services, near_duplicates="flag")
        (first,) = report(lexical_only, round_id, [VARIANTS[0]])
        (unrelated,) = report(lexical_only, round_id, [UNRELATED])  # its check read `first` in
        assert lexical_only.band_keys.size("sentiment") == 1
        with services.uow(read_only=True) as uow:
            assert [c for c, _t, _i in uow.near_duplicates.without_vectors(10)] == [first, unrelated]
        assert near_duplicates.reindex(services) == 2
        started_after = bootstrap(services.settings)
        (edit,) = report(started_after, round_id, [VARIANTS[1]])
        with services.uow(read_only=True) as uow:
            assert uow.near_duplicates.without_vectors(10) == []
            check = uow.near_duplicates.checks_of([edit])[edit]
        assert (check.matches[0].id, check.matches[0].kind) == (first, "lexical")
        report(lexical_only, round_id, ["Refunds take forever here."])
        assert lexical_only.band_keys.size("sentiment") == 3  # first once, unrelated, edit
    finally:
        lexical_only.close()
        if started_after is not None:
            started_after.close()


def test_a_process_that_read_examples_before_their_vectors_gets_the_vectors(services: Services) -> None:
    """The newest examples were indexed without vectors (by a process with the semantic check off),
    and a running process read them so. ``reindex`` writes their rows again with vectors: under
    new numbers, never the old ones, or the running process, which tops up only after the last
    number it read, would never see the vectors and would miss paraphrases until restarted."""
    lexical_only = bootstrap(services.settings.model_copy(update={"near_duplicate_semantic": False}))
    try:
        round_id = capture_round(services, near_duplicates="reject")
        (first,) = report(
            lexical_only, round_id, ["The delivery was three weeks late and nobody told me why."]
        )
        report(lexical_only, round_id, [UNRELATED])
        # The running process reads both rows, without vectors, in a check that stores nothing.
        with pytest.raises(NearDuplicateRefused):
            report(services, round_id, [UNRELATED])
        assert services.vectors is not None and services.vectors.size("sentiment", 1) == 0
        assert near_duplicates.reindex(services) == 2
        with pytest.raises(NearDuplicateRefused) as refused:
            report(services, round_id, ["The package showed up three weeks late and no one said why."])
        assert [(m["id"], m["kind"]) for m in refused.value.near_duplicates] == [(first, "semantic")]
        assert services.vectors.size("sentiment", 1) == 2
    finally:
        lexical_only.close()


def test_under_reject_the_first_repeat_in_a_batch_is_named_whichever_half_finds_it(
    services: Services,
) -> None:
    # The refusal names the first repeating item in the batch, here one only the semantic half finds
    # (a later one repeats an earlier example word for word but one).
    round_id = capture_round(services, near_duplicates="reject")
    (first,) = report(services, round_id, ["The delivery was three weeks late and nobody told me why."])
    (variant,) = report(services, round_id, [VARIANTS[0]])
    assert services.vectors is not None
    with pytest.raises(NearDuplicateRefused) as refused:
        report(
            services,
            round_id,
            [UNRELATED, "The package showed up three weeks late and no one said why.", VARIANTS[1]],
        )
    assert refused.value.field == "captures[1].inputs"
    assert [(m["id"], m["kind"]) for m in refused.value.near_duplicates] == [(first, "semantic")]
    with pytest.raises(NearDuplicateRefused) as lexical:
        report(services, round_id, [UNRELATED, VARIANTS[1]])
    assert lexical.value.field == "captures[1].inputs"
    assert lexical.value.near_duplicates[0]["id"] == variant
    with services.uow(read_only=True) as uow:
        assert uow.near_duplicates.size() == 2


def test_two_submissions_of_one_trick_at_the_same_moment_are_checked_one_after_the_other(
    services: Services, second: Services
) -> None:
    """Both wait while another write of the task type's checks is open; then one is stored and the
    other, checked after it, refused. On PostgreSQL the test first sees both waiting on the lock."""
    reject_round = capture_round(services, near_duplicates="reject")
    outcomes: dict[str, object] = {}

    def submit(name: str, where: Services, text: str) -> None:
        try:
            outcomes[name] = report(where, reject_round, [text])[0]
        except NearDuplicateRefused as refused:
            outcomes[name] = refused

    writers = [
        threading.Thread(target=submit, args=("first", services, VARIANTS[0])),
        threading.Thread(target=submit, args=("second", second, VARIANTS[1])),
    ]
    with services.uow() as holding:
        holding.near_duplicates.serialize_checks("sentiment")
        for writer in writers:
            writer.start()
        if services.settings.database_url.startswith("postgresql"):
            waiting = 0
            deadline = time.monotonic() + 30
            while waiting < 2 and time.monotonic() < deadline:
                with second.uow(read_only=True) as uow:
                    waiting = uow.session.execute(
                        text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
                    ).scalar_one()
                time.sleep(0.05)
            assert waiting == 2, "both submissions should wait for the check lock"
        else:
            time.sleep(0.5)  # both are queued on the file lock, or about to be
    # The holding unit of work ended (rolled back): the two go, one after the other.
    for writer in writers:
        writer.join(timeout=60)
    stored = [o for o in outcomes.values() if isinstance(o, str)]
    refused = [o for o in outcomes.values() if isinstance(o, NearDuplicateRefused)]
    assert len(stored) == 1 and len(refused) == 1, outcomes
    assert refused[0].near_duplicates[0]["id"] == stored[0]
    with services.uow(read_only=True) as uow:
        assert uow.near_duplicates.size() == 1
