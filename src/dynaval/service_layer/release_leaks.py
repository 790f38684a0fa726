"""Leaks at release: near-duplicates across a release's splits, and near-duplicates of earlier
releases' test splits.

The build (:mod:`dynaval.service_layer.releases`) feeds every row, and every row of the earlier
releases' test splits, to a :class:`LeakScan`; the scan's clusters go to the split assignment, which
keeps a cluster in one kind of split or withholds the example that would cross
(:mod:`dynaval.domain.release_splits`). What is left is reported in the manifest's
``near_duplicates`` and on the card. ``dynaval release verify`` recomputes the pairs across splits
from the files (:func:`cross_split_pairs`) and fails on any.

Pairs are found lexically (MinHash, :class:`~dynaval.domain.near_duplicates.NearDuplicateRule`) and,
unless the manifest's rule says the check was off, semantically (MiniLM,
:mod:`dynaval.service_layer.semantic_leaks`); a pair found both ways is reported once, as lexical.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynaval.adapters.minhash_index import MinHashIndex
from dynaval.adapters.release_files import MANIFEST, iter_jsonl, read_manifest
from dynaval.domain.near_duplicates import NearDuplicateRule, clusters, field_shingles
from dynaval.domain.release import Release, SplitKind, split_kind_of
from dynaval.domain.semantic_duplicates import SemanticRule
from dynaval.service_layer.semantic_leaks import SemanticRows

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
    lexical: Iterable[tuple[str, str, float]], semantic: Iterable[tuple[str, str, float]]
) -> list[tuple[str, str, float, str]]:
    """Both kinds of pair ``(a, b, similarity, kind)``, each pair once: lexical where both found it."""
    pairs = [(a, b, sim, "lexical") for a, b, sim in lexical]
    seen = {frozenset((a, b)) for a, b, _sim, _kind in pairs}
    pairs += [(a, b, sim, "semantic") for a, b, sim in semantic if frozenset((a, b)) not in seen]
    return pairs


def cross_split_pairs(
    rows: Iterable[tuple[str, str, Mapping[str, Any]]],
    fields: Sequence[str],
    rule: NearDuplicateRule,
    semantic: SemanticRule | None = None,
) -> list[Pair]:
    """Near-duplicate pairs of ``(example_id, split, row)`` whose splits are of different kinds
    (train and dev or test, dev and test), each once: the lexical ones in id order, then the
    semantic ones (``semantic`` set) not found lexically."""
    index = MinHashIndex(rule)
    vectors = SemanticRows(fields, semantic) if semantic is not None else None
    splits: dict[str, str] = {}
    for example_id, split, row in rows:
        if example_id in splits:
            continue  # a repeated id is the id check's finding
        splits[example_id] = split
        index.add(example_id, field_shingles(row, fields, rule.shingle))
        if vectors is not None:
            vectors.add(example_id, row)

    def crossing(a: str, b: str) -> bool:
        return split_kind_of(splits[a]) is not split_kind_of(splits[b])

    lexical = index.pairs(crossing)
    semantic_found = [p for p in vectors.pairs() if crossing(p[0], p[1])] if vectors is not None else []
    return [
        Pair(a, splits[a], b, splits[b], sim, kind) for a, b, sim, kind in merged(lexical, semantic_found)
    ]


def earlier_test_rows(releases: Sequence[Release]) -> Iterator[tuple[Release, str, dict[str, Any]]]:
    """The rows of the earlier releases' test splits, from the files the service keeps:
    ``(release, split, row)``. A release whose files are gone is skipped (see :class:`LeakScan`)."""
    for release in releases:
        folder = Path(release.folder)
        if not (folder / MANIFEST).is_file():
            continue
        for entry in read_manifest(folder)["files"]:
            if entry["path"].endswith(".jsonl") and split_kind_of(entry["split"]) is SplitKind.TEST:
                for _line, row in iter_jsonl(folder / entry["path"]):
                    yield release, entry["split"], row


@dataclass
class LeakScan:
    """The rows of a release being built, and of the earlier releases' test splits."""

    fields: Sequence[str]
    rule: NearDuplicateRule = field(default_factory=NearDuplicateRule)
    semantic: SemanticRule | None = field(default_factory=SemanticRule)
    """The semantic rule; ``None``: the lexical check alone."""
    semantic_off: str = "turned off"
    """Why the semantic check did not run, for the manifest (``semantic`` is ``None``)."""
    index: MinHashIndex = field(init=False)
    vectors: SemanticRows | None = field(init=False)
    earlier: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Key of an earlier test row -> its release and split."""
    checked: list[dict[str, Any]] = field(default_factory=list)
    _pairs: list[tuple[str, str, float, str]] | None = None

    def __post_init__(self) -> None:
        self.index = MinHashIndex(self.rule)
        self.vectors = SemanticRows(self.fields, self.semantic) if self.semantic is not None else None

    def add(self, example_id: str, row: Mapping[str, Any]) -> None:
        self.index.add_inputs(example_id, row, self.fields)
        if self.vectors is not None:
            self.vectors.add(example_id, row)

    def add_earlier(self, releases: Sequence[Release]) -> None:
        counts: dict[int | None, int] = {}
        for release, split, row in earlier_test_rows(releases):
            key = f"{_EARLIER}{release.name}\x1f{release.version}\x1f{row['example_id']}"
            self.earlier[key] = {
                "release": f"{release.name} {release.version}",
                "split": split,
                "example_id": row["example_id"],
            }
            self.index.add_inputs(key, row, self.fields)
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
                    "files_found": (Path(release.folder) / MANIFEST).is_file(),
                }
            )

    def pairs(self) -> list[tuple[str, str, float, str]]:
        """Every near-duplicate pair ``(a, b, similarity, kind)``, each once (see :func:`merged`)."""
        if self._pairs is None:
            semantic = self.vectors.pairs() if self.vectors is not None else []
            self._pairs = merged(self.index.pairs(), semantic)
        return self._pairs

    def rule_dict(self) -> dict[str, Any]:
        """The manifest's ``near_duplicates.rule``: the lexical rule, with the semantic one inside."""
        semantic = (
            self.semantic.to_dict() if self.semantic is not None else SemanticRule.off_dict(self.semantic_off)
        )
        return {**self.rule.to_dict(), "semantic": semantic}

    def clusters(self) -> tuple[dict[str, tuple[str, ...]], dict[str, SplitKind]]:
        """Example id -> its cluster key (for :class:`~dynaval.domain.release_splits.SplitInput`),
        and the cluster keys an earlier release's test split already holds."""
        members = clusters((a, b) for a, b, _sim, _kind in self.pairs())
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
        across: list[Pair] = []
        earlier: list[dict[str, Any]] = []
        for a, b, sim, kind in self.pairs():
            if a in splits and b in splits:
                if split_kind_of(splits[a]) is not split_kind_of(splits[b]):
                    across.append(Pair(a, splits[a], b, splits[b], sim, kind))
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
