"""A build's figures, gathered as its rows are read and folded once each row is placed.

A build reads every row once, before it knows where any goes (placement needs them all). What the
manifest states of the rows as written (each split's rows, label counts and writers; each round's
released rows and the alpha of their counted votes; the content hash) is a function of each row's
few codes and its split. So :class:`BuildTally` keeps those codes as integer columns while the rows
are read, and :meth:`BuildTally.placed` folds them with numpy once the splits are known. The second
pass over the rows then only copies each line into its split's files, without reading it again, and
hands each placed line to :meth:`PlacedFigures.add_line` for the content hash (a row's digest is
taken there, so that the first pass, which also holds every row's placement input, does not hold
32 bytes a row more).

The figures are those a :class:`~dynaval.domain.releases.checks.ReleaseTally` gives when it is
handed the placed rows in the order they were read, which is how ``verify`` makes them from the
files (``tests/unit/test_build_tally.py`` holds the two equal).
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from dynaval.domain.agreement.report import coded_nominal_alpha
from dynaval.domain.releases.checks import ALPHA_RESAMPLES, c_int_codes
from dynaval.domain.releases.release import content_hash_in_order, row_digest, split_kind_of

NOT_PLACED = -1
"""The split code of a row that went into no split (withheld)."""

Codes = npt.NDArray[np.int64]


class BuildTally:
    """Each row's codes, in the order the rows are read: its round, label and writer, and its
    counted votes (a vote's row, annotator and label)."""

    def __init__(self, labels: Sequence[str]) -> None:
        self.labels = tuple(labels)
        self._label_names = frozenset(self.labels)
        self.ids: list[str] = []
        self._rounds = array("i")
        self._row_labels = array("i")
        self._writers = array("i")
        self._vote_rows = array("i")
        self._vote_annotators = array("i")
        self._vote_labels = array("i")
        self._row_label_codes: dict[str, int] = {}
        self._writer_codes: dict[str, int] = {}
        self._annotator_codes: dict[str, int] = {}
        self._vote_label_codes: dict[str, int] = {}

    def add(self, row: Mapping[str, Any]) -> None:
        """One release row, as read."""
        ordinal = len(self.ids)
        self.ids.append(row["example_id"])
        self._rounds.append(int(row["round"]))
        codes = self._row_label_codes
        self._row_labels.append(codes.setdefault(row["label"], len(codes)))
        codes = self._writer_codes
        self._writers.append(codes.setdefault(row["writer"], len(codes)))
        annotator_codes, label_codes, names = self._annotator_codes, self._vote_label_codes, self._label_names
        for vote in row["votes"]:
            label = vote["label"]
            # A counted vote alpha can count (a build's labels are the task's: no other is kept).
            if vote["counted"] and label in names:
                self._vote_rows.append(ordinal)
                self._vote_annotators.append(
                    annotator_codes.setdefault(vote["annotator"], len(annotator_codes))
                )
                self._vote_labels.append(label_codes.setdefault(label, len(label_codes)))

    def placed(self, splits: Sequence[str | None]) -> PlacedFigures:
        """The figures of the rows placed in ``splits`` (each row's split in the order read, ``None``
        for a row in none)."""
        if len(splits) != len(self.ids):
            raise ValueError(f"{len(splits)} splits for {len(self.ids)} rows")
        names = sorted({s for s in splits if s is not None})
        code_of = {name: code for code, name in enumerate(names)}
        split_codes = np.fromiter(
            (NOT_PLACED if s is None else code_of[s] for s in splits), dtype=np.int64, count=len(splits)
        )
        return PlacedFigures(self, names, split_codes)


class PlacedFigures:
    """What a :class:`BuildTally`'s rows say once placed: the figures a
    :class:`~dynaval.domain.releases.checks.ReleaseTally` states, computed from the codes."""

    def __init__(self, tally: BuildTally, names: Sequence[str], split_codes: Codes) -> None:
        self._tally = tally
        self._names = list(names)
        self._splits = split_codes
        self._placed = split_codes != NOT_PLACED
        self._digests = bytearray()

    def split_order(self) -> list[str | None]:
        """Each row's split in the order read (``None``: in no split)."""
        names: list[str | None] = [*self._names, None]  # NOT_PLACED (-1) picks the last
        return [names[code] for code in self._splits.tolist()]

    def split_figures(self) -> dict[str, dict[str, Any]]:
        tally, placed = self._tally, self._placed
        splits = self._splits[placed]
        row_labels = c_int_codes(tally._row_labels)[placed]
        writers = c_int_codes(tally._writers)[placed]
        label_names = list(tally._row_label_codes)
        n_splits, n_labels, n_writers = (
            len(self._names),
            max(len(label_names), 1),
            max(len(tally._writer_codes), 1),
        )
        rows = np.bincount(splits, minlength=n_splits)
        labels = np.bincount(splits * n_labels + row_labels, minlength=n_splits * n_labels).reshape(
            n_splits, n_labels
        )
        writers_of = np.bincount(np.unique(splits * n_writers + writers) // n_writers, minlength=n_splits)
        figures = {}
        for code, name in enumerate(self._names):
            counts = {label_names[i]: int(labels[code, i]) for i in range(len(label_names))}
            figures[name] = {
                "kind": split_kind_of(name).value,
                "round": int(name.rsplit("_r", 1)[1]),
                "rows": int(rows[code]),
                "label_counts": {label: counts.get(label, 0) for label in tally.labels},
                "writers": int(writers_of[code]),
            }
        return figures

    def released_writers(self) -> set[str]:
        tally = self._tally
        names = np.array(list(tally._writer_codes), dtype=object)
        present = np.unique(c_int_codes(tally._writers)[self._placed])
        return set(names[present].tolist()) if len(names) else set()

    def add_line(self, line: bytes) -> None:
        """The next placed row's canonical line (without its newline), in the order read: its
        digest, for :meth:`content_hash`."""
        self._digests += row_digest(line)

    def content_hash(self) -> str:
        """Once every placed row's line is added."""
        ids, digests = self._tally.ids, self._digests
        placed = int(np.count_nonzero(self._placed))
        if len(digests) != 32 * placed:
            raise RuntimeError(f"{len(digests) // 32} lines added for {placed} placed rows")
        # A build's ids are unique (one row an example): sorted once, without a tuple a row.
        placed_ids = [ids[i] for i in np.flatnonzero(self._placed).tolist()]
        order = sorted(range(len(placed_ids)), key=placed_ids.__getitem__)
        view = memoryview(digests)
        return content_hash_in_order(view[32 * k : 32 * k + 32] for k in order)

    def round_figures(self, seed: int) -> dict[int, dict[str, Any]]:
        """Per round index: the released rows and the alpha of their counted votes, with its 95% CI;
        the votes' items numbered among the round's released rows in the order read, as
        ``ReleaseTally`` numbers them."""
        tally = self._tally
        rounds = c_int_codes(tally._rounds)
        vote_rows = c_int_codes(tally._vote_rows)
        annotators = c_int_codes(tally._vote_annotators)
        vote_labels = c_int_codes(tally._vote_labels)
        # Each label code's position among the task's labels (only the task's labels are kept).
        position = np.array([tally.labels.index(name) for name in tally._vote_label_codes], dtype=np.intp)
        figures: dict[int, dict[str, Any]] = {}
        for round_index in np.unique(rounds[self._placed]).tolist():
            in_round = self._placed & (rounds == round_index)
            counted = in_round[vote_rows]
            items = _numbered(vote_rows[counted])
            estimate = coded_nominal_alpha(
                items,
                position[vote_labels[counted]],
                items=int(items[-1]) + 1 if items.size else 0,
                annotators=int(np.count_nonzero(np.bincount(annotators[counted]))),
                labels=tally.labels,
                bootstrap=ALPHA_RESAMPLES,
                seed=seed,
            )
            figures[int(round_index)] = {
                "rows": int(np.count_nonzero(in_round)),
                "votes": int(np.count_nonzero(counted)),
                "alpha": estimate.to_dict(),
            }
        return figures


def _numbered(rows: npt.NDArray[np.intc]) -> npt.NDArray[np.intp]:
    """Rows (in read order, so ascending) numbered 0, 1, 2... as they first come."""
    if rows.size == 0:
        return np.zeros(0, dtype=np.intp)
    first = np.empty(rows.size, dtype=np.bool_)
    first[0] = True
    np.not_equal(rows[1:], rows[:-1], out=first[1:])
    return np.cumsum(first, dtype=np.intp) - 1
