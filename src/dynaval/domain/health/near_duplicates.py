"""When two examples are near-duplicates: the lexical rule every check of leaks shares.

Texts are compared as splits compare them (:func:`~dynaval.domain.releases.release.folded_text`: NFKC, case
folding, whitespace folding), as sets of word shingles (``SHINGLE_WORDS`` consecutive words). Two
examples are near-duplicates when, *for every input field*, the Jaccard similarity of their shingle
sets reaches the threshold; the pair's similarity is the smallest of those per-field figures. So for
NLI the premise and the hypothesis are compared together: the same hypothesis under another premise
is not a duplicate (its premise shares nothing), nor is another hypothesis under the same premise.

The index (:mod:`dynaval.domain.health.minhash`) finds candidate pairs with MinHash LSH over the
union of the fields' shingles, each tagged with its field. That union's Jaccard is a mediant of the
per-field figures, so it is never below their minimum: a pair the rule calls a duplicate is a
candidate of the index (up to LSH's small miss rate, kept small by querying below the threshold,
``LSH_THRESHOLD``). Every candidate is then confirmed with the exact Jaccard of its shingles, so a
reported similarity is exact and two runs over the same rows report the same pairs.

The thresholds, and why (see docs/releases.md):

- ``SHINGLE_WORDS = 2``: word pairs keep some word order ("not bad" is not "bad, not") while one
  substituted word costs only two shingles. With 3-word shingles, a one-word edit of a 12-word
  sentence leaves a Jaccard of 0.56, so a writer's tenth small variation of one trick would pass.
- ``THRESHOLD = 0.6``: one substituted word in a sentence of n words leaves (n - 3) / (n + 1) of the
  bigrams shared: 0.6 from 9 words on (most written examples are longer). Unrelated texts share a
  few function-word bigrams; on the seeded and hand-made texts of the tests they stay below 0.2.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Literal
from unicodedata import normalize

from dynaval.domain.releases.release import folded_text

METHOD = "minhash-jaccard"
SHINGLE_WORDS = 2
THRESHOLD = 0.6
NUM_PERM = 128
"""MinHash permutations: a Jaccard estimate within about 0.09 (one standard error at 0.5)."""
LSH_THRESHOLD_MARGIN = 0.1
"""The index looks for candidates this far below the threshold, so that pairs just above it are
rarely missed; the exact Jaccard then decides."""
MINHASH_SEED = 1

MIN_ROUND_THRESHOLD = 0.5
"""The lowest lexical threshold a round may set: the shared index at submission
(:mod:`dynaval.adapters.health.near_duplicate_index`) is built for candidates from
``MIN_ROUND_THRESHOLD - LSH_THRESHOLD_MARGIN`` up, so a lower threshold would miss pairs."""
MAX_REPORTED = 5
"""At most this many near-duplicates of a new example are reported (and kept), most similar first."""

FieldShingles = tuple[frozenset[str], ...]
"""An example's shingles, one set per input field, in the task's field order."""


@dataclass(frozen=True)
class NearDuplicateRule:
    """The lexical rule a release records in its manifest (``near_duplicates.rule``)."""

    shingle: int = SHINGLE_WORDS
    threshold: float = THRESHOLD

    def __post_init__(self) -> None:
        if not 1 <= self.shingle <= 20:
            raise ValueError(f"shingle size must be 1 to 20 words, not {self.shingle}")
        if not 0 < self.threshold <= 1:
            raise ValueError(f"near-duplicate threshold must be above 0 and at most 1, not {self.threshold}")

    @property
    def lsh_threshold(self) -> float:
        return max(0.05, self.threshold - LSH_THRESHOLD_MARGIN)

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": METHOD,
            "shingle": self.shingle,
            "threshold": self.threshold,
            "num_perm": NUM_PERM,
            "compared": "every input field, after NFKC, case folding and whitespace folding; "
            "a pair's similarity is the smallest of its fields' word-shingle Jaccard similarities",
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> NearDuplicateRule:
        """The rule a manifest records; the default for a release built before the rule existed."""
        if not data:
            return cls()
        return cls(
            shingle=int(data.get("shingle", SHINGLE_WORDS)), threshold=float(data.get("threshold", THRESHOLD))
        )


def shingles(text: str, size: int = SHINGLE_WORDS) -> frozenset[str]:
    """The word shingles of a folded text; a text shorter than ``size`` words is one shingle (so two
    identical short texts still match), an empty text none."""
    words = folded_text(text).split()
    if len(words) <= size:
        return frozenset({" ".join(words)}) if words else frozenset()
    return frozenset(" ".join(words[i : i + size]) for i in range(len(words) - size + 1))


def field_shingles(
    inputs: Mapping[str, Any], fields: Sequence[str], size: int = SHINGLE_WORDS
) -> FieldShingles:
    """An example's shingles, field by field."""
    return tuple(shingles(str(inputs.get(name) or ""), size) for name in fields)


def tagged(example: FieldShingles) -> list[bytes]:
    """The union of the fields' shingles, each tagged with its field: what MinHash hashes."""
    return [f"{i}\x1f{s}".encode() for i, field in enumerate(example) for s in field]


def tagged_texts(texts: Sequence[str], size: int = SHINGLE_WORDS) -> list[bytes]:
    """``tagged`` of the texts' shingles (``shingles`` of each, at ``size``), made in one step for
    the many rows a release hashes: the text folded and split once, no set of strings kept (about
    a third less time a row than the two steps)."""
    values: list[bytes] = []
    for number, text in enumerate(texts):
        words = normalize("NFKC", text).casefold().split()  # folded_text's words
        count = len(words)
        if count > size:
            prefix = f"{number}\x1f"
            if size == 2:  # the default: word pairs made by one f-string each (a fifth less time)
                values += {f"{prefix}{a} {b}".encode() for a, b in pairwise(words)}
            else:
                values += {(prefix + " ".join(words[i : i + size])).encode() for i in range(count - size + 1)}
        elif words:
            values.append(f"{number}\x1f{' '.join(words)}".encode())
    return values


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Exact Jaccard similarity; two empty sets are the same text (1.0)."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def similarity(a: FieldShingles, b: FieldShingles) -> float:
    """The rule's similarity of two examples: the smallest per-field Jaccard."""
    return min((jaccard(x, y) for x, y in zip(a, b, strict=True)), default=1.0)


def is_near_duplicate(a: FieldShingles, b: FieldShingles, rule: NearDuplicateRule | None = None) -> bool:
    return similarity(a, b) >= (rule or NearDuplicateRule()).threshold


class Components:
    """Connected components grown one link at a time (union-find with path halving), for the passes
    that skip a comparison when its two examples are connected already."""

    def __init__(self) -> None:
        self._parent: dict[str, str] = {}

    def root(self, key: str) -> str:
        parent = self._parent
        parent.setdefault(key, key)
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    def attach(self, key: str, *, to: str) -> None:
        """Join ``key``'s component to ``to``'s; ``to``'s root stays the root."""
        self._parent[self.root(key)] = self.root(to)


def clusters(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Connected components of the near-duplicate graph: each example in a pair -> its cluster's
    name (the smallest key in it). Near-duplication is not transitive, but a chain of small edits
    is one pattern, and splits must keep the whole chain together."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    edges = list(pairs)
    keys = sorted({key for pair in edges for key in pair})
    if not keys:
        return {}
    position = {key: i for i, key in enumerate(keys)}
    rows = [position[a] for a, _b in edges]
    cols = [position[b] for _a, b in edges]
    graph = coo_matrix(([1] * len(edges), (rows, cols)), shape=(len(keys), len(keys)))
    _count, labels = connected_components(graph, directed=False)
    names: dict[int, str] = {}
    for key, label in zip(keys, labels, strict=True):
        names.setdefault(int(label), key)  # keys are sorted: the first seen is the smallest
    return {key: names[int(label)] for key, label in zip(keys, labels, strict=True)}


# ------------------------------------------------------------------------- at submission

NearDuplicateKind = Literal["identical", "lexical", "perceptual", "semantic"]
"""How an example repeats another: a text by its words (``lexical``) or its meaning (``semantic``);
an image by its pixels (``identical``: the same SHA-256) or its look (``perceptual``: a near-copy)."""
KIND_ORDER: dict[str, int] = {"identical": 0, "lexical": 1, "perceptual": 2, "semantic": 3}
NearDuplicatePolicyName = Literal["allow", "flag", "reject"]
NEAR_DUPLICATE_POLICIES: tuple[NearDuplicatePolicyName, ...] = ("allow", "flag", "reject")


@dataclass(frozen=True)
class EarlierExample:
    """An example already stored (a candidate or capture of any round, release rows among them)
    that a new one is compared with."""

    id: str
    round_id: int
    inputs: Mapping[str, str]
    submitted_by: str | None


@dataclass(frozen=True)
class NearDuplicateMatch:
    """A near-duplicate of a new example: the earlier example, how similar, and by which rule.
    ``submitted_by`` (the earlier example's submitting token) decides who may see its id."""

    id: str
    round_id: int
    similarity: float
    kind: NearDuplicateKind
    submitted_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "round_id": self.round_id,
            "similarity": self.similarity,
            "kind": self.kind,
            "submitted_by": self.submitted_by,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NearDuplicateMatch:
        given = data.get("kind")
        kind: NearDuplicateKind = given if given in KIND_ORDER else "lexical"
        return cls(
            id=str(data["id"]),
            round_id=int(data["round_id"]),
            similarity=float(data["similarity"]),
            kind=kind,
            submitted_by=data.get("submitted_by"),
        )

    def shown_to(self, viewer: str | None) -> dict[str, Any]:
        """What ``viewer`` (a token's name; ``None``: a lead, who sees everything) is told: the id
        and round of their own earlier example, only the kind and similarity of anyone else's."""
        if viewer is None or (self.submitted_by is not None and self.submitted_by == viewer):
            return {
                "id": self.id,
                "round_id": self.round_id,
                "similarity": self.similarity,
                "kind": self.kind,
            }
        return {"similarity": self.similarity, "kind": self.kind}


def lexical_matches(
    new: FieldShingles,
    earlier: Iterable[tuple[EarlierExample, FieldShingles]],
    rule: NearDuplicateRule,
) -> list[NearDuplicateMatch]:
    """The earlier examples that ``new`` is a lexical near-duplicate of under ``rule``, confirmed by
    the exact similarity, most similar first, at most ``MAX_REPORTED``."""
    found = []
    for example, its_shingles in earlier:
        value = similarity(new, its_shingles)
        if value >= rule.threshold:
            found.append(
                NearDuplicateMatch(
                    example.id, example.round_id, round(value, 4), "lexical", example.submitted_by
                )
            )
    return best(found)


def best(matches: Iterable[NearDuplicateMatch]) -> list[NearDuplicateMatch]:
    """One per earlier example (its lexical match when it has both: a near-copy says more than a
    paraphrase), lexical matches first (for images: identical ones, then perceptual), each kind most
    similar first (ties by id), at most ``MAX_REPORTED``. The similarities of two kinds are on
    different scales (a Jaccard, a cosine), so they are not ranked against each other."""
    ranked = sorted(matches, key=lambda m: (KIND_ORDER[m.kind], -m.similarity, m.id))
    seen: dict[str, NearDuplicateMatch] = {}
    for match in ranked:
        seen.setdefault(match.id, match)
    return list(seen.values())[:MAX_REPORTED]


@dataclass(frozen=True)
class NearDuplicateCheck:
    """What the check found for a new example, and whether its round's policy flagged it."""

    candidate_id: str
    round_id: int
    matches: tuple[NearDuplicateMatch, ...]
    flagged: bool

    def shown_to(self, viewer: str | None) -> list[dict[str, Any]]:
        return [m.shown_to(viewer) for m in self.matches]
