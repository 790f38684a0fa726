"""The agreement of a file of votes (``dynaval agreement``): a JSONL file of votes, or any Label
Studio JSON export, read by the :class:`VoteFileReader` port (its adapter:
:mod:`dynaval.adapters.files.vote_files`), then Krippendorff's alpha at the asked level with its
bootstrap interval and breakdowns, Dawid-Skene beside the majority vote, the MASI alpha of
set-valued answers, and each annotator scored against gold."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

from dynaval.domain.agreement import Level, agreement_report
from dynaval.domain.agreement.against_gold import score_against_gold, score_labels_against_gold
from dynaval.domain.agreement.dawid_skene import dawid_skene_beside_majority
from dynaval.domain.agreement.set_valued import masi_alpha, per_choice_alpha
from dynaval.domain.errors import InvalidInput

JSONL = "jsonl"
LABEL_STUDIO = "label-studio-export"
LEVELS = ("nominal", "ordinal", "interval", "ratio")
DEFAULT_LEVELS = {"rating": "ordinal", "number": "interval"}
"""The level a Label Studio control's numbers get unless the request names one."""


class VoteFileError(ValueError):
    """A file that cannot be read as votes; the message says what to fix."""


@dataclass
class VoteFile:
    votes: list[tuple[str, str, str]]
    """Every vote with a string label (a set-valued answer as its elements joined with " + ")."""
    source: str
    from_name: str | None = None
    control: str | None = None
    """The Label Studio control type the votes come from (choices, taxonomy, rating, number)."""
    set_votes: list[tuple[str, str, frozenset[str]]] | None = None
    """The same votes as sets, when the answers are set-valued (several choices or paths)."""
    gold: dict[str, str] = field(default_factory=dict)
    """Item -> gold label, from ground-truth annotations with ``ground_truth="gold"``."""
    cancelled_ignored: int = 0
    superseded_ignored: int = 0
    without_choice: int = 0
    ground_truth_ignored: int = 0
    duplicates_ignored: int = 0
    tasks_without_annotations: int = 0
    notes: list[str] = field(default_factory=list)


class VoteFileReader(Protocol):
    def read(
        self,
        path: Path,
        *,
        from_name: str | None,
        taxonomy_depth: int | None,
        ground_truth: str,
        duplicates: str,
    ) -> VoteFile:
        """The votes of the file; :class:`VoteFileError` when it holds none to read."""


@dataclass(frozen=True)
class FileAgreementRequest:
    """What ``dynaval agreement`` asks: the file, how to read it, and the agreement's level."""

    path: Path
    level: str | None = None
    labels: str | None = None
    """The labels, comma-separated (in order, for the ordinal level)."""
    bootstrap: int = 1000
    seed: int = 0
    from_name: str | None = None
    taxonomy_depth: int | None = None
    ground_truth: str = "include"
    duplicates: str = "error"


def agreement_of_file(reader: VoteFileReader, request: FileAgreementRequest) -> dict[str, Any]:
    """The agreement report of the file's votes, with ``dawid_skene`` (its ``items`` per item),
    ``source`` (what was read and left out), the MASI figures of set-valued answers and the scores
    against gold when asked. A bad request or file is ``InvalidInput`` saying what to pass."""
    check_request(request)
    votes = _read(reader, request)
    level = cast(Level, request.level or DEFAULT_LEVELS.get(votes.control or "", "nominal"))
    values = _value_domain(level, request.labels, {label for _, _, label in votes.votes})
    try:
        report = agreement_report(
            votes.votes, level=level, values=values, bootstrap=request.bootstrap, seed=request.seed
        )
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
    aggregate = dawid_skene_beside_majority(votes.votes) if votes.votes else None
    data: dict[str, Any] = {**report.to_dict(), "dawid_skene": aggregate, "source": _source(votes, request)}
    if votes.set_votes is not None:
        masi = masi_alpha(votes.set_votes, bootstrap=request.bootstrap, seed=request.seed)
        per_choice = [row.to_dict() for row in per_choice_alpha(votes.set_votes)]
        data.update(
            {**masi.to_dict(), "level": "masi", "exact_set_alpha": report.alpha, "per_choice": per_choice}
        )
    if request.ground_truth == "gold":
        items = cast(list[dict[str, Any]], aggregate["items"]) if aggregate else []
        data["gold"] = score_against_gold(votes.votes, votes.gold)
        data["gold"]["dawid_skene"] = score_labels_against_gold(
            {row["item"]: row["label"] for row in items}, votes.gold
        )
    return data


def _read(reader: VoteFileReader, request: FileAgreementRequest) -> VoteFile:
    """The file's votes, refused where the request and the file do not go together."""
    try:
        votes = reader.read(
            request.path,
            from_name=request.from_name,
            taxonomy_depth=request.taxonomy_depth,
            ground_truth=request.ground_truth,
            duplicates=request.duplicates,
        )
    except VoteFileError as exc:
        raise InvalidInput(str(exc)) from None
    if request.ground_truth != "include" and votes.source == JSONL:
        raise InvalidInput(
            "--ground-truth applies to a Label Studio export; JSONL votes have no ground truth"
        )
    if votes.set_votes is not None and request.level not in (None, "nominal"):
        raise InvalidInput(
            f"the answers of {votes.from_name} are sets (several choices or paths), compared with the "
            "MASI distance; leave out --level"
        )
    return votes


def check_request(request: FileAgreementRequest) -> None:
    """Refuse a level or a bootstrap no agreement can have, before any file is read."""
    if request.level is not None and request.level not in LEVELS:
        raise InvalidInput(f"unknown level {request.level!r}; use one of: {', '.join(LEVELS)}")
    if request.bootstrap < 0:
        raise InvalidInput("--bootstrap must be 0 (no interval) or a positive number of resamples")


def _source(votes: VoteFile, request: FileAgreementRequest) -> dict[str, Any]:
    return {
        "format": votes.source,
        "from_name": votes.from_name,
        "control": votes.control,
        "votes_read": len(votes.votes),
        "cancelled_ignored": votes.cancelled_ignored,
        "superseded_ignored": votes.superseded_ignored,
        "without_answer": votes.without_choice,
        "tasks_without_annotations": votes.tasks_without_annotations,
        "ground_truth": request.ground_truth if votes.source != JSONL else None,
        "ground_truth_ignored": votes.ground_truth_ignored,
        "duplicates_ignored": votes.duplicates_ignored,
    }


def _value_domain(level: str, labels: str | None, observed: set[str]) -> Any:
    """The value domain the engine needs for ``level`` from the given labels or the labels themselves."""
    order = [x.strip() for x in labels.split(",") if x.strip()] if labels else None
    if level == "nominal":
        return order
    numeric = _numbers(order or sorted(observed))
    if level == "ordinal":
        if order:
            return order
        if numeric is None:
            raise InvalidInput("the ordinal level needs the labels in order: pass --labels low,...,high")
        return sorted(observed, key=lambda label: numeric[label])
    if numeric is None:
        raise InvalidInput(f"the {level} level needs numeric labels (or --labels with numbers)")
    return numeric


def _numbers(labels: Sequence[str]) -> dict[str, float] | None:
    try:
        return {label: float(label) for label in labels}
    except ValueError:
        return None
