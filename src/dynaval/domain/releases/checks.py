"""What a release's rows say about themselves, and the checks that ship with the data.

A :class:`ReleaseTally` reads every row of a release once, split by split, and keeps what the
manifest and the card state (rows, label counts and writers per split; each round's counted votes)
and what the checks need (ids, writers and texts by split, the dev/test rule, validators). The same
tally makes a release's figures when it is built and checks them when it is verified, so the two
can never compute them differently.
"""

from __future__ import annotations

import functools
from array import array
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from dynaval.domain.agreement.report import coded_nominal_alpha
from dynaval.domain.releases.release import (
    TEXT_KEY_BYTES,
    SplitKind,
    SplitRule,
    content_hash,
    content_hash_in_order,
    row_digest,
    split_kind_of,
    text_key_digests,
)
from dynaval.domain.releases.rows import agreeing_validators
from dynaval.domain.wording import counted

ALPHA_RESAMPLES = 1000


def c_int_codes(values: array[int]) -> npt.NDArray[np.intc]:
    """A column of codes kept as ``array("i")`` (C ints) as a numpy view: no copy of the millions
    of codes of a million rows' votes."""
    return np.frombuffer(values, dtype=np.intc)


_TEXT_KEY = np.dtype([("high", "<u8"), ("low", "<u4")])
"""A text key's digest (``TEXT_KEY_BYTES``) as numpy compares it."""
assert _TEXT_KEY.itemsize == TEXT_KEY_BYTES


@functools.lru_cache(maxsize=1024)
def _round_of_split(split: str) -> str:
    return split.rsplit("_r", 1)[1]


def texts_in_two_kinds(digests: bytes | bytearray, kinds: bytes | bytearray) -> int:
    """How many distinct text keys (packed digests) come with more than one kind of split
    (``kinds``: a code a key, in the same order)."""
    keys = np.frombuffer(digests, dtype=_TEXT_KEY)
    codes = np.frombuffer(kinds, dtype=np.uint8)
    if len(keys) < 2:
        return 0
    order = np.lexsort((codes, keys["low"], keys["high"]))
    keys, codes = keys[order], codes[order]
    same_key = (keys["high"][1:] == keys["high"][:-1]) & (keys["low"][1:] == keys["low"][:-1])
    group = np.cumsum(np.concatenate(([True], ~same_key)))
    mixed = same_key & (codes[1:] != codes[:-1])
    return int(np.unique(group[1:][mixed]).size)


@dataclass
class _SplitFigures:
    rows: int = 0
    labels: Counter[str] = field(default_factory=Counter)
    writers: set[str] = field(default_factory=set)


@dataclass
class _RoundVotes:
    """A round's counted votes as integer columns (a tuple per vote would cost 64 bytes, for
    millions): items numbered as they first come, labels as their position among the task's, and
    the round's annotators. Alpha from these is alpha from the ``(example, annotator, label)``
    tuples (:func:`coded_nominal_alpha`)."""

    rows: int = 0
    items: array[int] = field(default_factory=lambda: array("i"))
    labels: array[int] = field(default_factory=lambda: array("i"))
    annotators: set[str] = field(default_factory=set)


@dataclass
class ReleaseTally:
    """Figures and check findings over a release's rows."""

    fields: Sequence[str]
    labels: Sequence[str]
    rule: SplitRule
    checks: bool = True
    """Whether it also keeps what :meth:`findings` needs (ids seen, writers' and texts' kinds of
    split, validators, the dev/test rule). A build's rows are unique and placed by the rules those
    checks test, and it states figures only: without them it spends no text key and no set entry
    per row (its peak fell by about 100 MB at a million rows)."""
    splits: dict[str, _SplitFigures] = field(default_factory=lambda: defaultdict(_SplitFigures))
    ids: list[str] = field(default_factory=list)
    """Every row's id, in the order added; ``row_digests`` holds their SHA-256 digests, 32 bytes each."""
    row_digests: bytearray = field(default_factory=bytearray)
    duplicate_ids: list[str] = field(default_factory=list)
    writer_kinds: dict[str, set[SplitKind]] = field(default_factory=lambda: defaultdict(set))
    text_digests: bytearray = field(default_factory=bytearray)
    """Every row's text keys (:func:`text_key_digests`, packed), and ``text_kinds`` the kind of
    split of each, as a code: 13 bytes a key, where a dict of keys cost about 120 at a million rows."""
    text_kinds: bytearray = field(default_factory=bytearray)
    own_validations: list[str] = field(default_factory=list)
    weak_dev_test: list[str] = field(default_factory=list)
    wrong_round: list[str] = field(default_factory=list)
    votes_by_round: dict[int, _RoundVotes] = field(default_factory=lambda: defaultdict(_RoundVotes))
    """Each round's distinct rows and their counted votes (a repeated id's row counts once: its
    repetition is a finding of its own)."""
    foreign_vote_labels: list[str] = field(default_factory=list)
    """Rows with a counted vote whose label is not one of the task's."""
    _ids: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._label_positions = {label: position for position, label in enumerate(self.labels)}

    def add(self, split: str, line: bytes, row: Mapping[str, Any], *, repeated: bool | None = None) -> None:
        """Tally a row (``line``, parsed as ``row``) of ``split``. ``repeated`` says whether its id
        came before, where the caller keeps the ids seen already (``release verify``'s scan does):
        then the tally keeps no set of its own (32 MB at a million rows). None: the tally keeps one."""
        example_id = row["example_id"]
        self.ids.append(example_id)
        self.row_digests += row_digest(line)
        figures = self.splits[split]
        figures.rows += 1
        figures.labels[row["label"]] += 1
        figures.writers.add(row["writer"])
        votes = row["votes"]
        if not self.checks:
            self._add_votes(example_id, self.votes_by_round[int(row["round"])], votes)
            return
        if repeated is None:
            repeated = example_id in self._ids
            self._ids.add(example_id)
        if repeated:
            self.duplicate_ids.append(example_id)
        kind = split_kind_of(split)
        self.writer_kinds[row["writer"]].add(kind)
        for digest in text_key_digests(row, self.fields):
            self.text_digests += digest
            self.text_kinds.append(kind.code)
        own = row.get("writer_annotator")
        if own is not None and any(v["annotator"] == own for v in votes):
            self.own_validations.append(example_id)
        if (
            kind is not SplitKind.TRAIN
            and agreeing_validators(votes, row["label"]) < self.rule.min_agreeing_validators
        ):
            self.weak_dev_test.append(example_id)
        if _round_of_split(split) != str(row["round"]):
            self.wrong_round.append(example_id)
        if not repeated:
            self._add_votes(example_id, self.votes_by_round[int(row["round"])], votes)

    def _add_votes(
        self, example_id: str, counted_votes: _RoundVotes, votes: Sequence[Mapping[str, Any]]
    ) -> None:
        item = -1
        positions, annotators = self._label_positions, counted_votes.annotators
        for v in votes:
            if v["counted"] and v["label"] is not None:
                position = positions.get(v["label"])
                if position is None:
                    # Not a vote alpha can count (a tampered file's): named, and left out of alpha.
                    if not self.foreign_vote_labels or self.foreign_vote_labels[-1] != example_id:
                        self.foreign_vote_labels.append(example_id)
                    continue
                if item < 0:  # numbered among the round's rows with a counted vote, in order
                    item = len(counted_votes.items) and counted_votes.items[-1] + 1
                counted_votes.items.append(item)
                counted_votes.labels.append(position)
                annotators.add(v["annotator"])
        counted_votes.rows += 1

    # ------------------------------------------------------------------ figures

    def content_hash(self) -> str:
        ids, digests = self.ids, memoryview(self.row_digests)
        if self.duplicate_ids:  # a repeated id: its rows ordered by digest too, as content_hash has it
            return content_hash((ids[i], bytes(digests[32 * i : 32 * i + 32])) for i in range(len(ids)))
        order = sorted(range(len(ids)), key=ids.__getitem__)
        return content_hash_in_order(digests[32 * i : 32 * i + 32] for i in order)

    def split_figures(self) -> dict[str, dict[str, Any]]:
        return {
            split: {
                "kind": split_kind_of(split).value,
                "round": int(split.rsplit("_r", 1)[1]),
                "rows": f.rows,
                "label_counts": {label: f.labels.get(label, 0) for label in self.labels},
                "writers": len(f.writers),
            }
            for split, f in sorted(self.splits.items())
        }

    def released_writers(self) -> set[str]:
        """The writers of the rows in any split."""
        return set().union(*(f.writers for f in self.splits.values()))

    def round_figures(self, seed: int) -> dict[int, dict[str, Any]]:
        """Per round index: the released rows and the alpha of their counted votes, with its 95% CI."""
        figures: dict[int, dict[str, Any]] = {}
        for round_index, counted_votes in sorted(self.votes_by_round.items()):
            items = c_int_codes(counted_votes.items)  # no wider copy: the keys are made in 64 bits
            estimate = coded_nominal_alpha(
                items,
                c_int_codes(counted_votes.labels),
                items=int(items[-1]) + 1 if items.size else 0,
                annotators=len(counted_votes.annotators),
                labels=self.labels,
                bootstrap=ALPHA_RESAMPLES,
                seed=seed,
            )
            figures[round_index] = {
                "rows": counted_votes.rows,
                "votes": len(counted_votes.items),
                "alpha": estimate.to_dict(),
            }
        return figures

    # ------------------------------------------------------------------- checks

    def findings(self) -> list[str]:
        """One line per failed check over the rows."""
        if not self.checks:
            raise RuntimeError("this tally was made for figures only: it kept nothing to check")
        found: list[str] = []
        if self.duplicate_ids:
            ids = counted(len(self.duplicate_ids), "example id appears", "example ids appear")
            found.append(f"ids: {ids} twice (first: {self.duplicate_ids[0]})")
        crossing = sorted(w for w, kinds in self.writer_kinds.items() if len(kinds) > 1)
        if crossing:
            kinds = ", ".join(sorted(k.value for k in self.writer_kinds[crossing[0]]))
            writers = counted(len(crossing), "writer is", "writers are")
            found.append(f"writers: {writers} in two split kinds (first: {crossing[0]} in {kinds})")
        texts = texts_in_two_kinds(self.text_digests, self.text_kinds)
        if texts:
            shared = counted(
                texts, "normalised text (or first field) is", "normalised texts (or first fields) are"
            )
            found.append(f"texts: {shared} in two split kinds")
        if self.own_validations:
            examples = counted(len(self.own_validations), "example lists its", "examples list their")
            found.append(
                f"validators: {examples} writer among the validators (first: {self.own_validations[0]})"
            )
        if self.weak_dev_test:
            rows = counted(len(self.weak_dev_test), "dev/test row has", "dev/test rows have")
            found.append(
                f"rule: {rows} fewer than {self.rule.min_agreeing_validators} counted validators "
                f"agreeing (first: {self.weak_dev_test[0]})"
            )
        if self.foreign_vote_labels:
            rows = counted(len(self.foreign_vote_labels), "row has", "rows have")
            found.append(
                f"votes: {rows} a counted vote whose label is not one of the task's labels "
                f"(first: {self.foreign_vote_labels[0]})"
            )
        if self.wrong_round:
            rows = counted(len(self.wrong_round), "row sits", "rows sit")
            found.append(f"rounds: {rows} in another round's split (first: {self.wrong_round[0]})")
        return found
