"""``dynaval health contamination``: is a release's text in a training corpus?

The release is small and the corpus may be huge, so the release is held in memory and the corpus is
streamed once: every word n-gram of every release example goes into a lookup (n-gram -> examples),
and every corpus document's n-grams are looked up in it (lm-evaluation-harness's algorithm, see
:mod:`dynaval.domain.health.contamination`). The same pass asks the near-duplicate index
(:mod:`dynaval.domain.health.minhash`) whether the document is a near-copy of an example (for a
corpus of fine-tuning examples, where a copy with a few words changed has no 13 words in a row in
common). A document too long or too short to reach the threshold against any example is not hashed.

Unless turned off (``semantic=False``, ``--no-semantic``), the same pass also encodes every document
with MiniLM (the :class:`~dynaval.service_layer.health.ports.Encoder` port, offline), :data:`DOCUMENT_BATCH`
at a time, and searches the release's example vectors (each example's text, its fields joined, encoded once)
for those whose cosine with it reaches the release's semantic threshold: a paraphrase shares neither
13 words nor many shingles. The model reads at most 256 tokens, so a long document is compared by its
beginning (the n-gram check covers the rest). Encoding the corpus is the cost: about 300 short
documents a second on two free cores, far fewer under load (docs/releases.md, "Cost"), where the
lexical checks read hundreds of thousands.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynaval.domain.health.contamination import NGRAM, Check, Contaminated, example_text, word_ngrams
from dynaval.domain.health.minhash import MinHashIndex
from dynaval.domain.health.near_duplicates import NearDuplicateRule, shingles
from dynaval.domain.health.semantic_duplicates import SemanticRule
from dynaval.domain.health.vector_index import VectorIndex
from dynaval.service_layer.files import FileServices
from dynaval.service_layer.health.ports import Encoder

DOCUMENT_BATCH = 256
"""Corpus documents encoded together by the semantic check."""
SEMANTIC_HITS = 20
"""At most this many examples are reported per document by the semantic check."""


@dataclass
class ContaminationReport:
    release: str
    corpus: str
    ngram: int
    near_duplicates: dict[str, Any]
    examples: int = 0
    documents: int = 0
    contaminated: list[Contaminated] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "release": self.release,
            "corpus": self.corpus,
            "ngram": self.ngram,
            "near_duplicates": self.near_duplicates,
            "examples": self.examples,
            "documents": self.documents,
            "contaminated_examples": len({c.example_id for c in self.contaminated}),
            "contaminated": [c.to_dict() for c in self.contaminated],
        }


def check_contamination(
    files: FileServices,
    release: Path,
    corpus: Path,
    *,
    ngram: int = NGRAM,
    rule: NearDuplicateRule | None = None,
    semantic: bool = True,
) -> ContaminationReport:
    """The release's examples found in ``corpus``, by any check (n-grams, lexical near-duplicates,
    and semantic near-duplicates unless ``semantic`` is false), each (example, check) once.
    Raises ``ReleaseUnreadable`` or ``CorpusUnreadable`` on bad input, before the scan when it can."""
    if ngram < 1:
        raise ValueError(f"--ngram must be at least 1, not {ngram}")
    manifest = files.release_files.read_manifest(release)
    files.corpus.check(corpus)
    section = manifest.get("near_duplicates")
    rule = rule or NearDuplicateRule.from_dict(section.get("rule") if isinstance(section, dict) else None)
    # Unlike verify, the corpus is checked semantically even where the release's own check was off
    # or not recorded (the default rule then); only --no-semantic turns it off.
    semantic_rule = (SemanticRule.from_manifest(manifest) or SemanticRule()) if semantic else None
    off = SemanticRule.off_dict("turned off (--no-semantic)")
    described = {**rule.to_dict(), "semantic": semantic_rule.to_dict() if semantic_rule else off}
    report = ContaminationReport(str(release), str(corpus), ngram, described)
    lookup = _ReleaseLookup.of(files, release, manifest, ngram=ngram, rule=rule, semantic=semantic_rule)
    report.examples = len(lookup.examples)
    waiting: list[tuple[int, str]] = []
    for line_number, document in files.corpus.documents(corpus):
        report.documents += 1
        lookup.match_words(line_number, document)
        if lookup.vectors is not None:
            waiting.append((line_number, document))
            if len(waiting) >= DOCUMENT_BATCH:
                lookup.match_meanings(waiting)
                waiting = []
    if waiting:
        lookup.match_meanings(waiting)
    report.contaminated = sorted(lookup.found.values(), key=lambda c: (c.split, c.example_id, c.check.value))
    return report


@dataclass
class _ReleaseLookup:
    """A release's examples held for the corpus's documents to be looked up in: each one's word
    n-grams, its shingles in a MinHash index, and (a semantic rule given) its vector; and what the
    documents were found to hold, each (example, check) once."""

    encoder: Callable[[], Encoder]
    ngram: int
    rule: NearDuplicateRule
    semantic: SemanticRule | None
    examples: list[tuple[str, str]] = field(default_factory=list)
    ngrams: dict[str, list[int]] = field(default_factory=dict)
    index: MinHashIndex | None = None
    sizes: tuple[float, float] = (0.0, 0.0)
    vectors: VectorIndex | None = None
    found: dict[tuple[int, Check], Contaminated] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        files: FileServices,
        release: Path,
        manifest: dict[str, Any],
        *,
        ngram: int,
        rule: NearDuplicateRule,
        semantic: SemanticRule | None,
    ) -> _ReleaseLookup:
        lookup = cls(files.encoder, ngram, rule, semantic, index=MinHashIndex(rule))
        fields = list(manifest["fields"])
        texts: list[str] = []
        sizes: list[int] = []
        for entry in manifest["files"]:
            if entry["path"].endswith(".jsonl"):
                for _line, row in files.release_files.iter_rows(release / entry["path"]):
                    text = example_text(row, fields)
                    texts.append(text)
                    sizes.append(lookup._add(row["example_id"], entry["split"], text))
        # Jaccard is at most the ratio of the two sets' sizes: outside these bounds, nothing can match.
        own = [size for size in sizes if size]
        lookup.sizes = (min(own, default=0) * rule.threshold, max(own, default=0) / rule.threshold)
        if semantic is not None:
            lookup.vectors = _example_vectors(files.encoder(), texts)
        return lookup

    def _add(self, example_id: str, split: str, text: str) -> int:
        number = len(self.examples)
        self.examples.append((example_id, split))
        for gram in set(word_ngrams(text, self.ngram)):
            self.ngrams.setdefault(gram, []).append(number)
        own = shingles(text, self.rule.shingle)
        assert self.index is not None
        self.index.add(str(number), (own,))
        return len(own)

    def _record(self, number: int, check: Check, line_number: int, **found: Any) -> None:
        if (number, check) not in self.found:
            example_id, split = self.examples[number]
            self.found[(number, check)] = Contaminated(example_id, split, check, line_number, **found)

    def match_words(self, line_number: int, document: str) -> None:
        """Record the examples a document shares an n-gram with, or is a lexical near-duplicate of."""
        for gram in word_ngrams(document, self.ngram):
            for number in self.ngrams.get(gram, ()):
                self._record(number, Check.NGRAM, line_number, ngram=gram)
        own = shingles(document, self.rule.shingle)
        if own and self.index is not None and self.sizes[0] <= len(own) <= self.sizes[1]:
            for match in self.index.matches((own,)):
                self._record(int(match.key), Check.NEAR_DUPLICATE, line_number, similarity=match.similarity)

    def match_meanings(self, documents: list[tuple[int, str]]) -> None:
        """Record the examples whose cosine with one of ``documents`` reaches the semantic rule's
        threshold."""
        if self.vectors is None or self.semantic is None:
            return
        encoded = self.encoder().encode([text for _line, text in documents])
        for (line_number, _text), vector in zip(documents, encoded, strict=True):
            hits = self.vectors.search(vector, threshold=self.semantic.threshold, limit=SEMANTIC_HITS)
            for key, similarity in hits:
                self._record(int(key), Check.SEMANTIC, line_number, similarity=round(similarity, 4))


def _example_vectors(encoder: Encoder, texts: list[str]) -> VectorIndex:
    """The release's examples, each its whole text encoded once, keyed by their number."""
    index = VectorIndex(encoder.dimensions)
    for start in range(0, len(texts), DOCUMENT_BATCH):
        batch = texts[start : start + DOCUMENT_BATCH]
        index.add([str(start + i) for i in range(len(batch))], encoder.encode(batch))
    return index
