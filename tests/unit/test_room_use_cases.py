"""Use cases this step gave ports, run on fakes of those ports: the agreement of a file of votes
(the vote file's reader), a release's copy and card (the release files), and the domain rules they
moved into (a round's releasability)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from dynaval.domain.errors import Conflict, InvalidInput
from dynaval.domain.releases.release import Release
from dynaval.domain.validation.round import Round, RoundKind, RoundState
from dynaval.service_layer.agreement.vote_files import (
    JSONL,
    LABEL_STUDIO,
    FileAgreementRequest,
    VoteFile,
    VoteFileError,
    agreement_of_file,
)
from dynaval.service_layer.releases.catalog import copy_release, release_card

VOTES = [
    ("t1", "ann-a", "pos"), ("t1", "ann-b", "pos"), ("t1", "ann-c", "neg"),
    ("t2", "ann-a", "neg"), ("t2", "ann-b", "neg"), ("t2", "ann-c", "neg"),
    ("t3", "ann-a", "pos"), ("t3", "ann-b", "pos"), ("t3", "ann-c", "pos"),
]  # fmt: skip


class FakeVoteFiles:
    """The vote file reader port, giving what it was made with and noting what it was asked."""

    def __init__(self, found: VoteFile | Exception) -> None:
        self.found = found
        self.asked: list[dict[str, Any]] = []

    def read(self, path: Path, **how: Any) -> VoteFile:
        self.asked.append({"path": path, **how})
        if isinstance(self.found, Exception):
            raise self.found
        return self.found


def test_the_agreement_of_a_file_is_the_engines_report_with_its_source() -> None:
    reader = FakeVoteFiles(VoteFile(votes=list(VOTES), source=JSONL, duplicates_ignored=1))
    data = agreement_of_file(reader, FileAgreementRequest(Path("votes.jsonl"), bootstrap=0))
    assert reader.asked == [
        {"path": Path("votes.jsonl"), "from_name": None, "taxonomy_depth": None, "ground_truth": "include",
         "duplicates": "error"}
    ]  # fmt: skip
    assert data["level"] == "nominal" and data["items"] == 3 and data["annotators"] == 3
    assert data["source"]["votes_read"] == 9 and data["source"]["duplicates_ignored"] == 1
    assert data["source"]["ground_truth"] is None  # JSONL has none
    assert data["dawid_skene"]["item_count"] == 3


def test_a_label_studio_rating_is_ordinal_and_gold_scores_each_annotator() -> None:
    votes = [(item, who, str(int(label == "pos") + 1)) for item, who, label in VOTES]
    reader = FakeVoteFiles(
        VoteFile(votes=votes, source=LABEL_STUDIO, control="rating", gold={"t1": "2", "t2": "1"})
    )
    data = agreement_of_file(
        reader, FileAgreementRequest(Path("export.json"), bootstrap=0, ground_truth="gold")
    )
    assert data["level"] == "ordinal"
    assert data["gold"]["gold_items"] == 2 and {r["annotator"] for r in data["gold"]["per_annotator"]} == {
        "ann-a", "ann-b", "ann-c"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("request_", "found", "says"),
    [
        (FileAgreementRequest(Path("v"), level="cardinal"), VoteFile(list(VOTES), JSONL), "unknown level"),
        (FileAgreementRequest(Path("v"), bootstrap=-1), VoteFile(list(VOTES), JSONL), "--bootstrap"),
        (
            FileAgreementRequest(Path("v"), ground_truth="gold"),
            VoteFile(list(VOTES), JSONL),
            "no ground truth",
        ),
        (FileAgreementRequest(Path("v"), level="interval"), VoteFile(list(VOTES), JSONL), "numeric labels"),
        (FileAgreementRequest(Path("v")), VoteFileError("line 3: no annotator"), "line 3"),
    ],
)
def test_a_bad_request_or_file_says_what_to_pass(
    request_: FileAgreementRequest, found: VoteFile | Exception, says: str
) -> None:
    with pytest.raises(InvalidInput, match=says):
        agreement_of_file(FakeVoteFiles(found), request_)


class FakeReleaseFiles:
    """The release files port's copy and card, on folders the test names."""

    def __init__(self, cards: Mapping[Path, str], taken: Sequence[Path] = ()) -> None:
        self.cards = dict(cards)
        self.taken = set(taken)
        self.copies: list[tuple[Path, Path]] = []

    def read_card(self, root: Path) -> str | None:
        return self.cards.get(root)

    def check_copy_target(self, out: Path) -> None:
        if out in self.taken:
            raise InvalidInput(f"{out} exists and is not an empty folder; name a new folder", field="out")

    def copy(self, root: Path, out: Path) -> Path:
        self.copies.append((root, out))
        return out

    def iter_rows(self, path: Path) -> Iterator[tuple[bytes, dict[str, Any]]]:
        return iter(())


def a_release(folder: str) -> Release:
    manifest = {
        "name": "dynaval-sentiment", "version": "1.0.0", "pretty_name": "dynaval-sentiment 1.0.0",
        "license": "unknown", "task_type": "sentiment",
    }  # fmt: skip
    return Release(
        name="dynaval-sentiment", version="1.0.0", task_type="sentiment", round_ids=[1], manifest=manifest,
        content_hash="sha256:0", folder=folder, created_by="lead",
    )  # fmt: skip


def test_a_release_is_copied_only_into_a_new_or_empty_folder_and_its_card_is_the_files() -> None:
    files = FakeReleaseFiles({Path("/r/kept"): "# the card\n"}, taken=[Path("/out/taken")])
    kept = a_release("/r/kept")
    assert copy_release(files, kept, Path("/out/new")) == Path("/out/new")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput) as taken:
        copy_release(files, kept, Path("/out/taken"))  # type: ignore[arg-type]
    assert taken.value.field == "out" and files.copies == [(Path("/r/kept"), Path("/out/new"))]
    assert release_card(files, kept) == "# the card\n"  # type: ignore[arg-type]


def a_round(kind: RoundKind, state: RoundState) -> Round:
    return Round(
        id=7, name="r", task_type="sentiment", model_dir="", model_name="", model_hash="",
        labels=["positive", "negative"], policy={}, state=state, kind=kind,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )  # fmt: skip


def test_only_a_frozen_round_of_writers_examples_is_released() -> None:
    a_round(RoundKind.ADVERSARIAL, RoundState.FROZEN).check_releasable()
    with pytest.raises(Conflict, match="only frozen rounds are released") as open_:
        a_round(RoundKind.ADVERSARIAL, RoundState.CLOSED).check_releasable()
    assert open_.value.field == "rounds"
    for kind in (RoundKind.CAPTURE, RoundKind.REVALIDATION):
        with pytest.raises(InvalidInput, match="never released"):
            a_round(kind, RoundState.FROZEN).check_releasable()
