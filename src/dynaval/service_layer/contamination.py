"""``dynaval health contamination``: is a release's text in a training corpus?

The release is small and the corpus may be huge, so the release is held in memory and the corpus is
streamed once: every word n-gram of every release example goes into a lookup (n-gram -> examples),
and every corpus document's n-grams are looked up in it (lm-evaluation-harness's algorithm, see
:mod:`dynaval.domain.contamination`). The same pass asks the near-duplicate index
(:mod:`dynaval.adapters.minhash_index`) whether the document is a near-copy of an example (for a
corpus of fine-tuning examples, where a copy with a few words changed has no 13 words in a row in
common). A document too long or too short to reach the threshold against any example is not hashed.

Unless turned off (``semantic=False``, ``--no-semantic``), the same pass also encodes every document
with MiniLM (:mod:`dynaval.adapters.sentence_encoder`, offline), :data:`DOCUMENT_BATCH` at a time,
and searches the release's example vectors (each example's text, its fields joined, encoded once)
for those whose cosine with it reaches the release's semantic threshold: a paraphrase shares neither
13 words nor many shingles. The model reads at most 256 tokens, so a long document is compared by its
beginning (the n-gram check covers the rest). Encoding the corpus is the cost: about 300 short
documents a second on two free cores, far fewer under load (docs/releases.md, "Cost"), where the
lexical checks read hundreds of thousands.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynaval.adapters.corpus_files import check_corpus, iter_documents
from dynaval.adapters.minhash_index import MinHashIndex
from dynaval.adapters.release_files import iter_jsonl, read_manifest
from dynaval.adapters.semantic_index import shared_encoder
from dynaval.adapters.vector_index import VectorIndex
from dynaval.domain.contamination import NGRAM, Check, Contaminated, example_text, word_ngrams
from dynaval.domain.near_duplicates import NearDuplicateRule, shingles
from dynaval.domain.semantic_duplicates import SemanticRule

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
    manifest = read_manifest(release)
    check_corpus(corpus)
    section = manifest.get("near_duplicates")
    rule = rule or NearDuplicateRule.from_dict(section.get("rule") if isinstance(section, dict) else None)
    fields = list(manifest["fields"])
    # Unlike verify, the corpus is checked semantically even where the release's own check was off
    # or not recorded (the default rule then); only --no-semantic turns it off.
    semantic_rule = (SemanticRule.from_manifest(manifest) or SemanticRule()) if semantic else None
    described = {
        **rule.to_dict(),
        "semantic": semantic_rule.to_dict()
        if semantic_rule
        else SemanticRule.off_dict("turned off (--no-semantic)"),
    }
    report = ContaminationReport(str(release), str(corpus), ngram, described)
    texts: list[str] = []

    examples: list[tuple[str, str]] = []
    lookup: dict[str, list[int]] = {}
    index = MinHashIndex(rule)
    sizes: list[int] = []
    for entry in manifest["files"]:
        if not entry["path"].endswith(".jsonl"):
            continue
        for _line, row in iter_jsonl(release / entry["path"]):
            number = len(examples)
            examples.append((row["example_id"], entry["split"]))
            text = example_text(row, fields)
            if semantic_rule is not None:
                texts.append(text)
            for gram in set(word_ngrams(text, ngram)):
                lookup.setdefault(gram, []).append(number)
            own = shingles(text, rule.shingle)
            index.add(str(number), (own,))
            if own:
                sizes.append(len(own))
    report.examples = len(examples)
    # Jaccard is at most the ratio of the two sets' sizes: outside these bounds, nothing can match.
    smallest = min(sizes, default=0) * rule.threshold
    largest = max(sizes, default=0) / rule.threshold

    vectors = _example_vectors(texts) if semantic_rule is not None else None
    del texts
    waiting: list[tuple[int, str]] = []

    found: dict[tuple[int, Check], Contaminated] = {}
    for line_number, document in _counted(iter_documents(corpus), report):
        if vectors is not None and semantic_rule is not None:
            waiting.append((line_number, document))
            if len(waiting) >= DOCUMENT_BATCH:
                _semantic_matches(waiting, vectors, semantic_rule, examples, found)
                waiting = []
        for gram in word_ngrams(document, ngram):
            for number in lookup.get(gram, ()):
                key = (number, Check.NGRAM)
                if key not in found:
                    example_id, split = examples[number]
                    found[key] = Contaminated(example_id, split, Check.NGRAM, line_number, ngram=gram)
        own = shingles(document, rule.shingle)
        if own and smallest <= len(own) <= largest:
            for match in index.matches((own,)):
                key = (int(match.key), Check.NEAR_DUPLICATE)
                if key not in found:
                    example_id, split = examples[int(match.key)]
                    found[key] = Contaminated(
                        example_id, split, Check.NEAR_DUPLICATE, line_number, similarity=match.similarity
                    )
    if waiting and vectors is not None and semantic_rule is not None:
        _semantic_matches(waiting, vectors, semantic_rule, examples, found)
    report.contaminated = sorted(found.values(), key=lambda c: (c.split, c.example_id, c.check.value))
    return report


def _counted(documents: Iterator[tuple[int, str]], report: ContaminationReport) -> Iterator[tuple[int, str]]:
    for document in documents:
        report.documents += 1
        yield document


def _example_vectors(texts: list[str]) -> VectorIndex:
    """The release's examples, each its whole text encoded once, keyed by their number."""
    encoder = shared_encoder()
    index = VectorIndex(encoder.dimensions)
    for start in range(0, len(texts), DOCUMENT_BATCH):
        batch = texts[start : start + DOCUMENT_BATCH]
        index.add([str(start + i) for i in range(len(batch))], encoder.encode(batch))
    return index


def _semantic_matches(
    documents: list[tuple[int, str]],
    vectors: VectorIndex,
    rule: SemanticRule,
    examples: list[tuple[str, str]],
    found: dict[tuple[int, Check], Contaminated],
) -> None:
    """Record the examples whose cosine with one of ``documents`` reaches the rule's threshold."""
    encoded = shared_encoder().encode([text for _line, text in documents])
    for (line_number, _text), vector in zip(documents, encoded, strict=True):
        for key, similarity in vectors.search(vector, threshold=rule.threshold, limit=SEMANTIC_HITS):
            number = int(key)
            if (number, Check.SEMANTIC) not in found:
                example_id, split = examples[number]
                found[(number, Check.SEMANTIC)] = Contaminated(
                    example_id, split, Check.SEMANTIC, line_number, similarity=round(similarity, 4)
                )
