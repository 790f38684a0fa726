"""A writer who also annotates: their vote on their own example never counts, and is recorded;
the writer's Label Studio user comes from the settings (an id, or an email Label Studio resolves)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from dynaval.domain.validation.decision import Ballot, Outcome, decide
from dynaval.domain.validation.policy import DecisionPolicy
from dynaval.service_layer.validation.writer_links import LOOKUP_AGAIN_S, WriterAnnotatorLinks
from dynaval.settings import Settings
from tests.unit.fakes import FakeLabelStudio

POLICY = DecisionPolicy()  # two votes, all for the writer's label, accept


def test_the_writers_own_vote_is_not_counted_and_one_more_is_asked_for() -> None:
    votes = [Ballot("17", "entailment"), Ballot("3", "entailment")]
    counted_all = decide(votes, "entailment", POLICY)
    assert counted_all.outcome is Outcome.ACCEPTED and counted_all.to_dict().get("own_vote_ignored") is None
    own = decide(votes, "entailment", POLICY, writer_annotator="17")
    assert own.outcome is Outcome.IN_VALIDATION
    assert own.votes_counted == 1 and own.own_vote_ignored == "17"
    assert own.wanted_votes == POLICY.min_votes + 1  # the writer's annotation fills a Label Studio slot
    assert own.to_dict()["own_vote_ignored"] == "17"
    third = decide([*votes, Ballot("5", "entailment")], "entailment", POLICY, writer_annotator="17")
    assert third.outcome is Outcome.ACCEPTED and third.votes_counted == 2
    # Another writer's annotator counts as anyone.
    assert decide(votes, "entailment", POLICY, writer_annotator="99").outcome is Outcome.ACCEPTED


def test_ids_are_used_as_given_and_emails_resolved_case_insensitively_then_looked_up_again_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    label_studio = FakeLabelStudio(users={"Ana@Example.org": 17})
    now = [1000.0]
    links = WriterAnnotatorLinks(
        {"ana": "ana@example.ORG", "bo": "42", "carmen": "carmen@example.org"},
        label_studio,
        clock=lambda: now[0],
    )  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING):
        assert links.current() == {"bo": "42", "ana": "17"}
    assert "carmen" in caplog.text
    assert links.current() == {"bo": "42", "ana": "17"} and label_studio.user_lookups == 1  # not again yet
    label_studio.users["carmen@example.org"] = 8  # the user is created later
    now[0] += LOOKUP_AGAIN_S
    assert links.current() == {"bo": "42", "ana": "17", "carmen": "8"} and label_studio.user_lookups == 2
    now[0] += LOOKUP_AGAIN_S
    links.current()
    assert label_studio.user_lookups == 2  # everything resolved: Label Studio is not asked again


def test_label_studio_down_leaves_the_known_links_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    label_studio = FakeLabelStudio(down=True)
    links = WriterAnnotatorLinks({"ana": "ana@example.org", "bo": "42"}, label_studio)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING):
        assert links.current() == {"bo": "42"}
    assert "trying again later" in caplog.text


def test_a_link_must_name_a_writer_or_lead_and_a_user(tmp_path: Path) -> None:
    base = {"development": True, "data_dir": tmp_path, "writer_tokens": "ana=t" + "a" * 20}
    assert Settings(**base, writer_label_studio_users="ana=17").writer_label_studio_links == {"ana": "17"}
    with pytest.raises(ValueError, match="no writer's or lead's token name"):
        Settings(**base, writer_label_studio_users="zoe=17")
    with pytest.raises(ValueError, match="name=user"):
        Settings(**base, writer_label_studio_users="ana=")
