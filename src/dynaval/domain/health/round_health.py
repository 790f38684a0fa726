"""A round's health, for leads: who writes it, how varied its text is, which patterns repeat, and
whether a rising fooled rate across rounds may be a trick repeated rather than a better writer.

Everything here is computed from a round's candidates, in submission order, and from the pairs of
them the lexical near-duplicate rule (:mod:`dynaval.domain.health.near_duplicates`) confirmed; finding the
pairs is the index's business (:mod:`dynaval.domain.health.minhash`). The figures:

- **Top-writer shares**: the share of the round's candidates written by its 1, 5 and 10 most
  prolific writers (a round with fewer writers than that has a share of 1.0).
- **Distinct-n** (Li et al. 2016), for n = 1, 2, 3: the number of distinct word n-grams over the
  whole round divided by the number of n-grams, on folded text (NFKC, case folding, whitespace
  folding: :func:`~dynaval.domain.releases.release.folded_text`), words split on whitespace, every input field
  counted on its own (no n-gram spans two fields). Undefined (``None``) when the round has no n-gram
  of that length. The **diversity** compared across rounds is distinct-2.
- **Repeated patterns**: the connected components of the near-duplicate graph with two candidates
  or more (:func:`~dynaval.domain.health.near_duplicates.clusters`), largest first (then by their first
  candidate's submission), each with its size, its first candidate's text as the example, its
  writers (pseudonymous, most candidates first), and how many of its candidates fooled the model
  and how many were accepted.
- **Fooled rate** = fooled / collected, as MER. **Fooled rate without repeated patterns**: each
  cluster counts once, as its first candidate (the earliest submitted: the trick as first found);
  candidates in no cluster count as themselves. So a trick repeated a hundred times counts as one
  candidate, fooled if its first instance was.
- **Possible score inflation** (across rounds of one task type, in round order): a round is marked
  when, against the previous round of the same task type, its MER rose (strictly) *and* its
  distinct-2 fell (strictly). A round without a previous one, or with either figure undefined in
  either round, is not marked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dynaval.domain.health.near_duplicates import clusters
from dynaval.domain.images.near_copies import HASH_BITS
from dynaval.domain.releases.release import folded_text

TOP_WRITERS = (1, 5, 10)
NGRAM_SIZES = (1, 2, 3)
DIVERSITY_N = 2
"""The distinct-n compared across rounds (and in the inflation mark)."""
ACCEPTED = "accepted"
"""The status of a candidate in the round's dataset."""
CLUSTER_IDS_SHOWN = 20
"""A cluster lists at most this many of its candidates' ids (the size counts them all)."""


@dataclass(frozen=True)
class HealthCandidate:
    """What the figures need of one candidate."""

    id: str
    inputs: Mapping[str, str]
    writer: str
    """Pseudonymous, as leads see writers elsewhere."""
    fooled: bool
    status: str


@dataclass(frozen=True)
class WriterShares:
    writers: int
    top: dict[int, float | None]
    """k -> the share of candidates from the k most prolific writers (None for an empty round)."""

    def to_dict(self) -> dict[str, Any]:
        return {"writers": self.writers, **{f"top_{k}_share": share for k, share in self.top.items()}}


@dataclass(frozen=True)
class Diversity:
    distinct: dict[int, float | None]
    """n -> distinct n-grams / n-grams, over the round."""
    ngrams: dict[int, int]
    """n -> how many n-grams the round has (the denominator)."""

    @property
    def value(self) -> float | None:
        """The diversity compared across rounds: distinct-2."""
        return self.distinct[DIVERSITY_N]

    def columns(self) -> dict[str, float | None]:
        """The figures by their API names (a round's line across rounds)."""
        return {f"distinct_{n}": value for n, value in self.distinct.items()}

    def figures(self) -> list[tuple[str, str, float | None]]:
        """``(label, key, value)`` of each figure, as the pages show them."""
        return [(f"Distinct-{n}", f"distinct-{n}", value) for n, value in self.distinct.items()]

    def to_dict(self) -> dict[str, Any]:
        return {**self.columns(), "ngrams": {str(n): count for n, count in self.ngrams.items()}}


IMAGE_SAMPLE = 2000
"""An image round's perceptual diversity is measured over its first this many images (every pair:
two million distances at most)."""


@dataclass(frozen=True)
class ImageDiversity:
    """How varied an image round's images are, in place of a text's distinct-n: the mean Hamming
    distance between their perceptual hashes, as a share of the hash's bits (about 0.5 for
    unrelated pictures, 0 for one picture repeated: the **perceptual diversity**, compared across
    rounds), and the share of images that are no near-copy of an earlier one (**distinct images**)."""

    perceptual: float | None
    distinct_images: float | None
    images: int

    @property
    def value(self) -> float | None:
        return self.perceptual

    def columns(self) -> dict[str, float | None]:
        return {"perceptual_diversity": self.perceptual, "distinct_images": self.distinct_images}

    def figures(self) -> list[tuple[str, str, float | None]]:
        return [
            ("Perceptual diversity", "perceptual-diversity", self.perceptual),
            ("Distinct images", "distinct-images", self.distinct_images),
        ]

    def to_dict(self) -> dict[str, Any]:
        return {**self.columns(), "images": self.images}


def image_diversity(hashes: Sequence[int], *, distinct: int) -> ImageDiversity:
    """The diversity of images with these centre hashes, ``distinct`` of them no near-copy of an
    earlier one (:func:`round_health` counts them: each repeated pattern once).

    >>> d = image_diversity([0, (1 << 144) - 1, 0], distinct=2)
    >>> round(d.perceptual, 4), round(d.distinct_images, 4)
    (0.6667, 0.6667)
    """
    sample = list(hashes[:IMAGE_SAMPLE])
    pairs = len(sample) * (len(sample) - 1) // 2
    total = sum(
        (sample[i] ^ sample[j]).bit_count() for i in range(len(sample)) for j in range(i + 1, len(sample))
    )
    return ImageDiversity(
        perceptual=total / pairs / HASH_BITS if pairs else None,
        distinct_images=distinct / len(hashes) if hashes else None,
        images=len(hashes),
    )


@dataclass(frozen=True)
class PatternCluster:
    """One repeated pattern: a connected component of the near-duplicate graph."""

    size: int
    first_id: str
    example: dict[str, str]
    """The first candidate's inputs."""
    writers: list[tuple[str, int]]
    """(pseudonymous writer, candidates in the cluster), most candidates first."""
    fooled: int
    accepted: int
    """Candidates of the cluster accepted (by the rule or a lead): in the round's dataset."""
    candidate_ids: list[str]
    """In submission order; the first ``CLUSTER_IDS_SHOWN``."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "first_id": self.first_id,
            "example": dict(self.example),
            "writers": [{"writer": w, "candidates": n} for w, n in self.writers],
            "fooled": self.fooled,
            "accepted": self.accepted,
            "candidate_ids": list(self.candidate_ids),
        }


@dataclass(frozen=True)
class RoundHealth:
    collected: int
    fooled: int
    writers: WriterShares
    diversity: Diversity | ImageDiversity
    clusters: list[PatternCluster]
    patterns: int
    """Candidates with each cluster counted once."""
    fooled_patterns: int
    """Fooled among them (a cluster by its first candidate)."""

    @property
    def clustered(self) -> int:
        """Candidates inside a repeated pattern."""
        return sum(c.size for c in self.clusters)

    @property
    def fooled_rate(self) -> float | None:
        return self.fooled / self.collected if self.collected else None

    @property
    def fooled_rate_without_repeats(self) -> float | None:
        return self.fooled_patterns / self.patterns if self.patterns else None

    def to_dict(self, *, max_clusters: int | None = None) -> dict[str, Any]:
        shown = self.clusters if max_clusters is None else self.clusters[:max_clusters]
        return {
            "collected": self.collected,
            "writer_shares": self.writers.to_dict(),
            "diversity": self.diversity.to_dict(),
            "repeated_patterns": {
                "clusters": len(self.clusters),
                "candidates": self.clustered,
                "largest": [c.to_dict() for c in shown],
            },
            "fooled_rate": {
                "with_repeats": self.fooled_rate,
                "without_repeats": self.fooled_rate_without_repeats,
                "fooled": self.fooled,
                "collected": self.collected,
                "fooled_patterns": self.fooled_patterns,
                "patterns": self.patterns,
            },
        }


def writer_shares(writers: Iterable[str], top: Sequence[int] = TOP_WRITERS) -> WriterShares:
    """The share of the candidates (one writer each in ``writers``) from the top k writers."""
    counts = Counter(writers)
    total = sum(counts.values())
    ranked = sorted(counts.values(), reverse=True)
    return WriterShares(
        writers=len(counts), top={k: (sum(ranked[:k]) / total if total else None) for k in top}
    )


def _ngrams(words: Sequence[str], n: int) -> Iterable[tuple[str, ...]]:
    return (tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def diversity(texts: Iterable[str], sizes: Sequence[int] = NGRAM_SIZES) -> Diversity:
    """Distinct-n over ``texts`` (each text one field of one candidate): distinct n-grams / n-grams,
    on folded text, n-grams within a text only."""
    seen: dict[int, set[tuple[str, ...]]] = {n: set() for n in sizes}
    totals = dict.fromkeys(sizes, 0)
    for text in texts:
        words = folded_text(text).split()
        for n in sizes:
            grams = list(_ngrams(words, n))
            totals[n] += len(grams)
            seen[n].update(grams)
    return Diversity(
        distinct={n: (len(seen[n]) / totals[n] if totals[n] else None) for n in sizes}, ngrams=totals
    )


def round_health(
    candidates: Sequence[HealthCandidate],
    fields: Sequence[str],
    pairs: Iterable[tuple[str, str]],
    *,
    image_hashes: Mapping[str, int] | None = None,
) -> RoundHealth:
    """The round's figures from its candidates (in submission order) and the near-duplicate pairs
    among them (ids of ``candidates``). An image round gives each candidate's centre hash
    (``image_hashes``): its diversity is perceptual, not of words."""
    order = {c.id: i for i, c in enumerate(candidates)}
    by_id = {c.id: c for c in candidates}
    members: dict[str, list[str]] = {}
    for key, name in clusters(pairs).items():
        members.setdefault(name, []).append(key)
    found: list[PatternCluster] = []
    for keys in members.values():
        ordered = sorted(keys, key=order.__getitem__)
        first = by_id[ordered[0]]
        writers = Counter(by_id[k].writer for k in ordered)
        found.append(
            PatternCluster(
                size=len(ordered),
                first_id=first.id,
                example={name: str(first.inputs.get(name) or "") for name in fields},
                writers=sorted(writers.items(), key=lambda item: (-item[1], item[0])),
                fooled=sum(by_id[k].fooled for k in ordered),
                accepted=sum(by_id[k].status == ACCEPTED for k in ordered),
                candidate_ids=ordered[:CLUSTER_IDS_SHOWN],
            )
        )
    found.sort(key=lambda c: (-c.size, order[c.first_id]))
    firsts = {c.first_id for c in found}
    repeats = {k for keys in members.values() for k in keys if k not in firsts}
    kept = [c for c in candidates if c.id not in repeats]
    varied: Diversity | ImageDiversity
    if image_hashes is not None:
        hashes = [image_hashes[c.id] for c in candidates if c.id in image_hashes]
        varied = image_diversity(hashes, distinct=sum(1 for c in kept if c.id in image_hashes))
    else:
        varied = diversity(str(c.inputs.get(name) or "") for c in candidates for name in fields)
    return RoundHealth(
        collected=len(candidates),
        fooled=sum(c.fooled for c in candidates),
        writers=writer_shares(c.writer for c in candidates),
        diversity=varied,
        clusters=found,
        patterns=len(kept),
        fooled_patterns=sum(c.fooled for c in kept),
    )


# ------------------------------------------------------------------------------- across rounds


@dataclass(frozen=True)
class RoundPoint:
    """One round's figures beside the others of its task type."""

    round_id: int
    name: str
    state: str
    collected: int
    mer: float | None
    vmer: float | None
    alpha: float | None
    alpha_undefined_reason: str | None
    diversity: Diversity | ImageDiversity


@dataclass(frozen=True)
class RoundTrend:
    point: RoundPoint
    previous_id: int | None
    """The previous round of the task type, the one compared with."""
    possible_score_inflation: bool

    def to_dict(self) -> dict[str, Any]:
        p = self.point
        return {
            "round_id": p.round_id,
            "name": p.name,
            "state": p.state,
            "collected": p.collected,
            "mer": p.mer,
            "vmer": p.vmer,
            "alpha": p.alpha,
            "alpha_undefined_reason": p.alpha_undefined_reason,
            **p.diversity.columns(),
            "diversity": p.diversity.value,
            "compared_with": self.previous_id,
            "possible_score_inflation": self.possible_score_inflation,
        }


def inflated(point: RoundPoint, previous: RoundPoint | None) -> bool:
    """MER rose and diversity (distinct-2; an image round's perceptual diversity) fell, both
    strictly, against the previous round."""
    if previous is None:
        return False
    mer, before_mer = point.mer, previous.mer
    div, before_div = point.diversity.value, previous.diversity.value
    if mer is None or before_mer is None or div is None or before_div is None:
        return False
    return mer > before_mer and div < before_div


def trend(points: Sequence[RoundPoint]) -> list[RoundTrend]:
    """The rounds of one task type in round order (by id), each marked against the one before."""
    ordered = sorted(points, key=lambda p: p.round_id)
    return [
        RoundTrend(p, ordered[i - 1].round_id if i else None, inflated(p, ordered[i - 1] if i else None))
        for i, p in enumerate(ordered)
    ]
