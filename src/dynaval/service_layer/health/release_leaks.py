"""Leaks at release: near-duplicates across a release's splits, and near-duplicates of earlier
releases' test splits.

The build (:mod:`dynaval.service_layer.releases.releases`) feeds every row, and every row of the earlier
releases' test splits, to a :class:`LeakScan`; the scan's clusters go to the split assignment, which
keeps a cluster in one kind of split or withholds the example that would cross
(:mod:`dynaval.domain.releases.splits`). What is left is reported in the manifest's
``near_duplicates`` and on the card. ``dynaval release verify`` recomputes the pairs across splits
from the files (:func:`cross_split_pairs`) and fails on any.

Pairs are found lexically (MinHash, :class:`~dynaval.domain.health.near_duplicates.NearDuplicateRule`) and,
unless the manifest's rule says the check was off, semantically (MiniLM,
:mod:`dynaval.service_layer.health.semantic_leaks`); a pair found both ways is reported once, as lexical.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dynaval.domain.health.minhash import MinHashIndex
from dynaval.domain.health.near_duplicates import NearDuplicateRule, clusters
from dynaval.domain.health.semantic_duplicates import SemanticRule
from dynaval.domain.releases.release import Release, SplitKind, split_kind_of
from dynaval.service_layer.files import ReleaseReader
from dynaval.service_layer.health.ports import Encoder, ReleaseIndex
from dynaval.service_layer.health.semantic_leaks import SemanticRows, StoredVectors

_EARLIER = "earlier\x1f"
MAX_LISTED = 100
"""At most this many pairs are listed in a manifest (all are counted)."""


@dataclass(frozen=True)
class Pair:
    a: str
    split_a: str
    b: str
    split_b: str
    similarity: float
    kind: str = "lexical"

    def line(self) -> str:
        return (
            f"near-duplicates: {self.a} ({self.split_a}) and {self.b} ({self.split_b}) "
            f"have {self.kind} similarity {self.similarity:.4f}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "example_id": self.a,
            "split": self.split_a,
            "other_id": self.b,
            "other_split": self.split_b,
            "similarity": self.similarity,
            "kind": self.kind,
        }


def merged(
    lexical: Iterable[tuple[str, str, float]],
    semantic: Iterable[tuple[str, str, float]],
    *,
    kind: str = "lexical",
) -> list[tuple[str, str, float, str]]:
    """Both kinds of pair ``(a, b, similarity, kind)``, each pair once: the index's (``kind``:
    lexical, or perceptual for images) where both found it."""
    pairs = [(a, b, sim, kind) for a, b, sim in lexical]
    seen = {frozenset((a, b)) for a, b, _sim, _kind in pairs}
    pairs += [(a, b, sim, "semantic") for a, b, sim in semantic if frozenset((a, b)) not in seen]
    return pairs


class FilteringIndex(Protocol):
    """An index of a release's rows whose pairs can be kept to some (those across kinds of split):
    the lexical :class:`~dynaval.domain.health.minhash.MinHashIndex`, or an image task type's
    :class:`~dynaval.domain.images.near_copies.ImagePairIndex`."""

    def add_inputs(
        self, key: str, inputs: Mapping[str, Any], fields: Sequence[str], side: int | None = None
    ) -> None:
        """A row; ``side`` (a kind of split) lets an index skip the pairs of one side, which
        ``keep`` refuses anyway (the image index compares every pair)."""

    def ask(self) -> None: ...

    def pairs(self, keep: Callable[[str, str], bool] = ...) -> Iterable[tuple[str, str, float]]: ...

    def close(self) -> None: ...


class KeptPairs:
    """A :class:`ReleaseIndex` (a lexical index that may work in a process of its own, and gives
    all its pairs) as a :class:`FilteringIndex`: its pairs are kept to some once found. They are
    the in-process index's ``pairs(keep)``, in the same order: keeping a pair there only skips it."""

    def __init__(self, index: ReleaseIndex) -> None:
        self.index = index

    def add_inputs(
        self, key: str, inputs: Mapping[str, Any], fields: Sequence[str], side: int | None = None
    ) -> None:
        self.index.add_inputs(key, inputs, fields, side)

    def ask(self) -> None:
        self.index.ask()

    def pairs(self, keep: Callable[[str, str], bool] = lambda _a, _b: True) -> list[tuple[str, str, float]]:
        return [pair for pair in self.index.pairs() if keep(pair[0], pair[1])]

    def close(self) -> None:
        self.index.close()


class CrossSplitScan:
    """The rows of a release's splits, for their near-duplicate pairs across kinds of split (train
    and dev or test, dev and test). The lexical pairs are found once and kept, so that where the
    encoder cannot load (``release verify`` without it) they stand alone without a second pass."""

    def __init__(
        self,
        fields: Sequence[str],
        rule: NearDuplicateRule,
        semantic: SemanticRule | None,
        *,
        encoder: Callable[[], Encoder],
        index: FilteringIndex | None = None,
        index_kind: str = "lexical",
    ) -> None:
        self.rule = rule
        self.semantic = semantic
        self.index_kind = index_kind
        self._index: FilteringIndex = index if index is not None else MinHashIndex(rule)
        self._vectors = SemanticRows(fields, semantic, encoder) if semantic is not None else None
        self._fields = list(fields)
        self._splits: dict[str, str] = {}
        self._lexical: list[tuple[str, str, float]] | None = None

    def add(self, example_id: str, split: str, row: Mapping[str, Any]) -> bool:
        """Add a row; whether its id is new (a repeated one is not added again: the id check's
        finding, which may take this answer instead of keeping the ids itself)."""
        if example_id in self._splits:
            return False
        self._splits[example_id] = split
        # Each kind of split a side: the index skips the pairs within one kind, which are not kept.
        side = split_kind_of(split).code
        self._index.add_inputs(example_id, row, self._fields, side)  # texts kept, not shingle sets
        if self._vectors is not None:
            self._vectors.add(example_id, row)
        return True

    def ask(self) -> None:
        """Every row is added: the lexical index may start finding its pairs beside the caller."""
        self._index.ask()

    def close(self) -> None:
        """End the index (its process, if it has one)."""
        self._index.close()

    def split_of(self, example_id: str) -> str | None:
        """The split an added row is in (None: no such row)."""
        return self._splits.get(example_id)

    def _crossing(self, a: str, b: str) -> bool:
        return split_kind_of(self._splits[a]) is not split_kind_of(self._splits[b])

    def lexical(self) -> list[tuple[str, str, float]]:
        """The lexical pairs across kinds of split ``(a, b, similarity)``, in id order (found once)."""
        if self._lexical is None:
            self._lexical = list(self._index.pairs(self._crossing))
        return self._lexical

    def pairs(self, *, semantic: bool = True) -> list[Pair]:
        """Every pair across kinds of split, each once: the lexical ones in id order, then the
        semantic ones (a semantic rule given, ``semantic`` true) not found lexically. Raises
        ``InvalidInput`` or ``ImportError`` when the encoder cannot load; the lexical pairs are
        kept, for ``pairs(semantic=False)``."""
        lexical = self.lexical()
        found = []
        if semantic and self._vectors is not None:
            # Searched kind against kind without a cap: a row with many near rows of its own kind
            # hides none across.
            found = self._vectors.crossing_pairs(lambda key: split_kind_of(self._splits[key]))
        splits = self._splits
        return [
            Pair(a, splits[a], b, splits[b], sim, kind)
            for a, b, sim, kind in merged(lexical, found, kind=self.index_kind)
        ]


def cross_split_pairs(
    rows: Iterable[tuple[str, str, Mapping[str, Any]]],
    fields: Sequence[str],
    rule: NearDuplicateRule,
    semantic: SemanticRule | None,
    *,
    encoder: Callable[[], Encoder],
) -> list[Pair]:
    """Near-duplicate pairs of ``(example_id, split, row)`` whose splits are of different kinds,
    each once (:meth:`CrossSplitScan.pairs`)."""
    scan = CrossSplitScan(fields, rule, semantic, encoder=encoder)
    for example_id, split, row in rows:
        scan.add(example_id, split, row)
    return scan.pairs()


def earlier_test_rows(
    releases: Sequence[Release], reader: ReleaseReader
) -> Iterator[tuple[Release, str, dict[str, Any]]]:
    """The rows of the earlier releases' test splits, from the files the service keeps:
    ``(release, split, row)``. A release whose files are gone is skipped (see :class:`LeakScan`)."""
    for release in releases:
        folder = Path(release.folder)
        if not reader.holds_release(folder):
            continue
        for entry in reader.read_manifest(folder)["files"]:
            if entry["path"].endswith(".jsonl") and split_kind_of(entry["split"]) is SplitKind.TEST:
                for _line, row in reader.iter_rows(folder / entry["path"]):
                    yield release, entry["split"], row


@dataclass
class LeakScan:
    """The rows of a release being built, and of the earlier releases' test splits."""

    fields: Sequence[str]
    encoder: Callable[[], Encoder]
    """The encoder, when the rows are first encoded."""
    reader: ReleaseReader
    """The earlier releases' files."""
    rule: NearDuplicateRule = field(default_factory=NearDuplicateRule)
    semantic: SemanticRule | None = field(default_factory=SemanticRule)
    """The semantic rule; ``None``: the lexical check alone."""
    semantic_off: str = "turned off"
    """Why the semantic check did not run, for the manifest (``semantic`` is ``None``)."""
    make_index: Callable[[NearDuplicateRule], ReleaseIndex] = MinHashIndex
    """The lexical index, made for the rule (the build's runs in a process of its own); for an
    image task type, the perceptual one (``index_kind`` then says so, and ``index_rule`` is its
    rule for the manifest)."""
    index_kind: str = "lexical"
    index_rule: dict[str, Any] | None = None
    stored_vectors: StoredVectors | None = None
    """The vectors stored at submission for rows' examples, which stand in for encoding them where
    no pair can hang on their rounding (:class:`SemanticRows`); ``None``: every row is encoded."""
    index: ReleaseIndex = field(init=False)
    vectors: SemanticRows | None = field(init=False)
    earlier: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Key of an earlier test row -> its release and split."""
    checked: list[dict[str, Any]] = field(default_factory=list)
    _pairs: list[tuple[str, str, float, str]] | None = None

    def __post_init__(self) -> None:
        self.index = self.make_index(self.rule)
        self.vectors = (
            SemanticRows(self.fields, self.semantic, self.encoder, self.stored_vectors)
            if self.semantic is not None
            else None
        )

    def add(self, example_id: str, row: Mapping[str, Any]) -> None:
        """One row of the release (refused once the pairs are found: the index is closed)."""
        self.index.add_inputs(example_id, row, self.fields)
        if self.vectors is not None:
            self.vectors.add(example_id, row)

    def ask(self) -> None:
        """Every row (the earlier releases' too) is added: the lexical index may start finding its
        pairs beside the caller (:meth:`ReleaseIndex.ask`), to be read by :meth:`clusters`."""
        self.index.ask()

    def add_earlier(self, releases: Sequence[Release]) -> None:
        counts: dict[int | None, int] = {}
        for release, split, row in earlier_test_rows(releases, self.reader):
            key = f"{_EARLIER}{release.name}\x1f{release.version}\x1f{row['example_id']}"
            self.index.add_inputs(key, row, self.fields)
            self.earlier[key] = {
                "release": f"{release.name} {release.version}",
                "split": split,
                "example_id": row["example_id"],
            }
            if self.vectors is not None:
                self.vectors.add(key, row)
            counts[release.id] = counts.get(release.id, 0) + 1
        for release in releases:
            self.checked.append(
                {
                    "name": release.name,
                    "version": release.version,
                    "content_hash": release.content_hash,
                    "test_rows": counts.get(release.id, 0),
                    "files_found": self.reader.holds_release(Path(release.folder)),
                }
            )

    def pairs(self) -> list[tuple[str, str, float, str]]:
        """Every near-duplicate pair ``(a, b, similarity, kind)``, each once (see :func:`merged`)."""
        if self._pairs is None:
            semantic = self.vectors.pairs() if self.vectors is not None else []
            self._pairs = merged(self.index.pairs(), semantic, kind=self.index_kind)
            # The pairs are all the rest needs of the MinHash index: its digests and texts (hundreds
            # of megabytes for a million rows) go before the rows are placed.
            self.index.close()
        return self._pairs

    def close(self) -> None:
        """Let go of the index (and end its process), pairs found or not: for a build that fails."""
        self.index.close()

    def rule_dict(self) -> dict[str, Any]:
        """The manifest's ``near_duplicates.rule``: the lexical rule, with the semantic one inside."""
        semantic = (
            self.semantic.to_dict() if self.semantic is not None else SemanticRule.off_dict(self.semantic_off)
        )
        if self.index_rule is not None:
            return {**self.index_rule, "semantic": semantic}
        return {**self.rule.to_dict(), "semantic": semantic}

    def _components(self) -> dict[str, str]:
        """Each key in a pair -> its cluster's name, with the semantic links beyond a row's capped
        pairs: a cluster loses no link to the cap."""
        links = self.vectors.links() if self.vectors is not None else []
        return clusters([*((a, b) for a, b, _sim, _kind in self.pairs()), *links])

    def _across(self, splits: Mapping[str, str]) -> list[Pair]:
        """The pairs of this release's rows in splits of different kinds, every one (as ``verify``
        finds them). None unless a cluster spans two kinds of split; then the semantic ones are
        searched again, kind against kind, since a row's capped pairs may leave some out."""
        kinds: dict[str, set[SplitKind]] = {}
        for key, name in self._components().items():
            if key in splits:
                kinds.setdefault(name, set()).add(split_kind_of(splits[key]))
        if all(len(found) < 2 for found in kinds.values()):
            return []

        def crossing(a: str, b: str) -> bool:
            return a in splits and b in splits and split_kind_of(splits[a]) is not split_kind_of(splits[b])

        lexical = [
            (a, b, sim) for a, b, sim, kind in self.pairs() if kind == self.index_kind and crossing(a, b)
        ]
        semantic = (
            self.vectors.crossing_pairs(lambda key: split_kind_of(splits[key]) if key in splits else None)
            if self.vectors is not None
            else []
        )
        return [
            Pair(a, splits[a], b, splits[b], sim, kind)
            for a, b, sim, kind in merged(lexical, semantic, kind=self.index_kind)
        ]

    def clusters(self) -> tuple[dict[str, tuple[str, ...]], dict[str, SplitKind]]:
        """Example id -> its cluster key (for :class:`~dynaval.domain.releases.splits.SplitInput`),
        and the cluster keys an earlier release's test split already holds."""
        members = self._components()
        near_keys: dict[str, tuple[str, ...]] = {}
        placed: dict[str, SplitKind] = {}
        for key, name in members.items():
            cluster_key = f"near\x1f{name}"
            if key in self.earlier:
                placed[cluster_key] = SplitKind.TEST
            else:
                near_keys[key] = (cluster_key,)
        return near_keys, placed

    def report(self, splits: Mapping[str, str], withheld: int) -> dict[str, Any]:
        """The manifest's ``near_duplicates``: the rule, the pairs left across this release's splits,
        and the train examples near an earlier release's test example (both possible only through
        a parent release's unchanged splits), with how many examples were withheld for them."""
        across = self._across(splits)
        earlier: list[dict[str, Any]] = []
        for a, b, sim, kind in self.pairs():
            if a in splits and b in splits:
                continue
            ours, theirs = (a, b) if a in splits else (b, a)
            if ours in splits and theirs in self.earlier and splits[ours].startswith("train_"):
                earlier.append(
                    {
                        "example_id": ours,
                        "split": splits[ours],
                        **_prefixed(self.earlier[theirs]),
                        "similarity": sim,
                        "kind": kind,
                    }
                )
        return {
            "rule": self.rule_dict(),
            "across_splits": {"pairs": len(across), "listed": [p.to_dict() for p in across[:MAX_LISTED]]},
            "earlier_tests": {
                "releases": self.checked,
                "pairs": len(earlier),
                "listed": earlier[:MAX_LISTED],
            },
            "withheld": withheld,
        }


def _prefixed(earlier: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "earlier_release": earlier["release"],
        "earlier_split": earlier["split"],
        "earlier_id": earlier["example_id"],
    }
