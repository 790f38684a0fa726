"""``dynaval health contamination``: is a release's text in a training corpus?

The release is small and the corpus may be huge, so the release is held in memory and the corpus is
streamed once: every word n-gram of every release example goes into a lookup (n-gram -> examples),
and every corpus document's n-grams are looked up in it (lm-evaluation-harness's algorithm, see
:mod:`dynaval.domain.contamination`). The same pass asks the near-duplicate index
(:mod:`dynaval.adapters.minhash_index`) whether the document is a near-copy of an example (for a
corpus of fine-tuning examples, where a copy with a few words changed has no 13 words in a row in
common). A document too long or too short to reach the threshold against any example is not hashed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynaval.adapters.corpus_files import check_corpus, iter_documents
from dynaval.adapters.minhash_index import MinHashIndex
from dynaval.adapters.release_files import iter_jsonl, read_manifest
from dynaval.domain.contamination import NGRAM, Check, Contaminated, example_text, word_ngrams
from dynaval.domain.near_duplicates import NearDuplicateRule, shingles


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
    release: Path, corpus: Path, *, ngram: int = NGRAM, rule: NearDuplicateRule | None = None
) -> ContaminationReport:
    """The release's examples found in ``corpus``, by either check, each (example, check) once.
    Raises ``ReleaseUnreadable`` or ``CorpusUnreadable`` on bad input, before the scan when it can."""
    if ngram < 1:
        raise ValueError(f"--ngram must be at least 1, not {ngram}")
    manifest = read_manifest(release)
    check_corpus(corpus)
    section = manifest.get("near_duplicates")
    rule = rule or NearDuplicateRule.from_dict(section.get("rule") if isinstance(section, dict) else None)
    fields = list(manifest["fields"])
    report = ContaminationReport(str(release), str(corpus), ngram, rule.to_dict())

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

    found: dict[tuple[int, Check], Contaminated] = {}
    for line_number, document in iter_documents(corpus):
        report.documents += 1
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
    report.contaminated = sorted(found.values(), key=lambda c: (c.split, c.example_id, c.check.value))
    return report
