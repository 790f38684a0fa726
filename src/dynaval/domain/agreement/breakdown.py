"""Where agreement comes from: per label, per item, per annotator, and annotator pairs.

"Majority" means a strict plurality everywhere: the label with more votes than any other label;
when two or more labels share the top count there is no majority.

* Per label (whatever the level, these are nominal): ``agreement`` is the share of label c's
  pairable values paired with c, ``o_cc / n_c`` from the coincidence matrix; ``alpha`` is
  Krippendorff's alpha for c against all other labels merged (the binary "c or not c" reduction,
  ``1 - (n - 1)(n_c - o_cc) / (n_c (n - n_c))``), undefined when c is never or always used.
* Per item: votes, the majority label, the share of votes held by the most voted label (also on a
  tie), and whether the writer's label is the majority.
* Per annotator: votes, and agreement with the others' leave-one-out majority: over the
  annotator's votes on items where the *other* annotators have a majority, the share that
  matches it.
* Pairwise: for every two annotators, the items both voted on and the share of those where they
  gave the same label (observed agreement); the diagonal counts each annotator's own items.

Everything is vectorised over votes and item entries; the pairwise matrix walks the vote pairs of
each item in chunks, so memory is O(votes + annotators^2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from dynaval.domain.agreement.encoding import CodedVotes, Id, IntArray, Label, id_list
from dynaval.domain.agreement.tally import (
    ItemTally,
    own_label_counts,
    pairs_within_groups,
    stable_order,
)

_MAX_PAIRS = 1 << 20
_NO_WRITER = -2
_OUTSIDE = -1


@dataclass(frozen=True)
class LabelAgreement:
    """How consistently one label is used."""

    label: Label
    votes: int
    pairable_values: int
    """Votes for the label on items with two or more votes (n_c)."""
    agreement: float | None
    """``o_cc / n_c``: share of the label's pairable values paired with the same label."""
    alpha: float | None
    """Krippendorff's alpha for this label against all others merged."""

    def to_dict(self) -> dict[str, object]:
        return {
            "label": self.label,
            "votes": self.votes,
            "pairable_values": self.pairable_values,
            "agreement": self.agreement,
            "alpha": self.alpha,
        }


@dataclass(frozen=True)
class ItemAgreement:
    item: Id
    votes: int
    majority_label: Label | None
    """None on a tie."""
    majority_share: float
    """Share of the votes held by the most voted label (also on a tie)."""
    writer_label: Label | None
    writer_is_majority: bool | None
    """None when the writer's label is not known."""

    def to_dict(self) -> dict[str, object]:
        return {
            "item": self.item,
            "votes": self.votes,
            "majority_label": self.majority_label,
            "majority_share": self.majority_share,
            "writer_label": self.writer_label,
            "writer_is_majority": self.writer_is_majority,
        }


@dataclass(frozen=True)
class AnnotatorAgreement:
    annotator: Id
    votes: int
    compared: int
    """Votes on items where the other annotators have a majority."""
    agreement_with_others: float | None
    """Share of the compared votes that match the others' majority (None if none compared)."""

    def to_dict(self) -> dict[str, object]:
        return {
            "annotator": self.annotator,
            "votes": self.votes,
            "compared": self.compared,
            "agreement_with_others": self.agreement_with_others,
        }


@dataclass(frozen=True)
class PairwiseAgreement:
    """Annotator x annotator observed agreement on shared items."""

    annotators: tuple[Id, ...]
    shared_items: IntArray
    agreeing_items: IntArray

    def agreement(self) -> list[list[float | None]]:
        """``agreeing / shared`` per cell, None where two annotators share no item."""
        shared = self.shared_items.tolist()
        agreeing = self.agreeing_items.tolist()
        return [
            [a / s if s else None for a, s in zip(agree_row, shared_row, strict=True)]
            for agree_row, shared_row in zip(agreeing, shared, strict=True)
        ]

    def to_dict(self) -> dict[str, object]:
        return {
            "annotators": list(self.annotators),
            "agreement": self.agreement(),
            "shared_items": self.shared_items.tolist(),
        }


@dataclass(frozen=True)
class ItemModes:
    """Per item: the top count, how many labels reach it, the best count below it, the majority."""

    top: IntArray
    ties: IntArray
    runner_up: IntArray
    majority: IntArray
    """Label code of the strict plurality, -1 on a tie."""


def item_modes(tally: ItemTally) -> ItemModes:
    starts = tally.item_start[:-1]
    n_items = starts.size
    if n_items == 0:
        empty = np.zeros(0, dtype=np.intp)
        return ItemModes(empty, empty, empty, empty)
    count = tally.entry_count
    top = np.maximum.reduceat(count, starts)
    at_top = count == top[tally.entry_item]
    ties = np.bincount(tally.entry_item[at_top], minlength=n_items)
    runner_up = np.maximum.reduceat(np.where(at_top, 0, count), starts)
    majority = np.full(n_items, -1, dtype=np.intp)
    sole = at_top & (ties[tally.entry_item] == 1)
    majority[tally.entry_item[sole]] = tally.entry_label[sole]
    return ItemModes(
        top.astype(np.intp, copy=False),
        ties.astype(np.intp, copy=False),
        runner_up.astype(np.intp, copy=False),
        majority,
    )


def per_label(coded: CodedVotes, tally: ItemTally) -> list[LabelAgreement]:
    n_labels = len(coded.domain.labels)
    votes = np.bincount(coded.label, minlength=n_labels)
    size = tally.item_votes[tally.entry_item]
    pairable = size >= 2
    count = tally.entry_count[pairable].astype(np.float64)
    label = tally.entry_label[pairable]
    marginal = np.bincount(label, weights=count, minlength=n_labels)
    same = np.bincount(label, weights=count * (count - 1) / (size[pairable] - 1), minlength=n_labels)
    total = float(marginal.sum())
    result = []
    for code, value in enumerate(coded.domain.labels):
        n_c, o_cc = float(marginal[code]), float(same[code])
        agreement = o_cc / n_c if n_c else None
        alpha = 1 - (total - 1) * (n_c - o_cc) / (n_c * (total - n_c)) if 0 < n_c < total else None
        result.append(LabelAgreement(value, int(votes[code]), int(n_c), agreement, alpha))
    return result


def per_annotator(coded: CodedVotes, tally: ItemTally, modes: ItemModes) -> list[AnnotatorAgreement]:
    n_annotators = len(coded.annotator_ids)
    item = coded.item
    own = own_label_counts(tally, item, coded.label)
    top, ties, runner_up = modes.top[item], modes.ties[item], modes.runner_up[item]
    own_top = own == top
    agrees = own_top & (ties == 1) & (top - 1 > runner_up)
    disagrees = (own_top & (ties == 2)) | (~own_top & (ties == 1))
    votes = np.bincount(coded.annotator, minlength=n_annotators)
    compared = np.bincount(coded.annotator[agrees | disagrees], minlength=n_annotators)
    agreed = np.bincount(coded.annotator[agrees], minlength=n_annotators)
    return [
        AnnotatorAgreement(
            annotator=ident,
            votes=int(votes[a]),
            compared=int(compared[a]),
            agreement_with_others=float(agreed[a] / compared[a]) if compared[a] else None,
        )
        for a, ident in enumerate(id_list(coded.annotator_ids))
    ]


def pairwise(coded: CodedVotes, tally: ItemTally) -> PairwiseAgreement:
    n_annotators = len(coded.annotator_ids)
    cells = n_annotators * n_annotators
    shared = np.zeros(cells, dtype=np.int64)
    agreeing = np.zeros(cells, dtype=np.int64)
    order = stable_order(coded.item, len(coded.item_ids))
    annotator = coded.annotator[order]
    label = coded.label[order]
    starts = np.zeros(tally.item_votes.size + 1, dtype=np.intp)
    np.cumsum(tally.item_votes, out=starts[1:])
    for first, second in pairs_within_groups(starts, _MAX_PAIRS):
        key = annotator[first] * n_annotators + annotator[second]
        same = label[first] == label[second]
        shared += np.bincount(key, minlength=cells)
        agreeing += np.bincount(key[same], minlength=cells)
    return PairwiseAgreement(
        annotators=tuple(id_list(coded.annotator_ids)),
        shared_items=shared.reshape(n_annotators, n_annotators),
        agreeing_items=agreeing.reshape(n_annotators, n_annotators),
    )


def per_item(
    coded: CodedVotes,
    tally: ItemTally,
    modes: ItemModes,
    writer_labels: Mapping[Id, Label | None] | None,
    writer: IntArray,
) -> list[ItemAgreement]:
    """One row per item that got votes; ``writer`` comes from :func:`writer_codes`."""
    labels = coded.domain.labels
    share = (modes.top / np.maximum(tally.item_votes, 1)).tolist()
    majority = modes.majority.tolist()
    known = writer_labels or {}
    return [
        ItemAgreement(
            item=ident,
            votes=int(tally.item_votes[i]),
            majority_label=labels[majority[i]] if majority[i] >= 0 else None,
            majority_share=share[i],
            writer_label=known.get(ident),
            writer_is_majority=None if writer[i] == _NO_WRITER else bool(0 <= majority[i] == writer[i]),
        )
        for i, ident in enumerate(id_list(coded.item_ids))
    ]


def writer_is_majority(modes: ItemModes, writer: IntArray) -> tuple[int, int]:
    """Items with a known writer label, and those among them whose majority is the writer's label."""
    known = writer != _NO_WRITER
    return int(known.sum()), int((known & (modes.majority >= 0) & (writer == modes.majority)).sum())


def writer_codes(coded: CodedVotes, writer_labels: Mapping[Id, Label | None] | None) -> IntArray:
    """Per item, the code of its writer label (-1: not a domain label, -2: no writer label)."""
    codes = np.full(len(coded.item_ids), _NO_WRITER, dtype=np.intp)
    if writer_labels is None:
        return codes
    position = {label: i for i, label in enumerate(coded.domain.labels)}
    for i, ident in enumerate(id_list(coded.item_ids)):
        label = writer_labels.get(ident)
        if label is not None:
            codes[i] = position.get(label, _OUTSIDE)
    return codes
