"""Contamination of a release by a training corpus: the rule, as lm-evaluation-harness states it.

lm-evaluation-harness (``lm_eval/decontamination``: ``janitor.py`` and ``decontaminate.py``) calls a
benchmark document contaminated when *any* of its word 13-grams occurs in the training set; a
document is normalised first by lower-casing it and deleting ASCII punctuation, then split on
whitespace. An example shorter than n words has no n-gram, so it is never contaminated by this
check (the near-duplicate checks still see it). Here an example's text is its input fields joined
by one space, in the task's order (an NLI pair reads premise, then hypothesis, as a prompt would),
and is NFKC-normalised and case-folded before lm-evaluation-harness's normalisation, so that a
full-width or accented copy is the same text.
"""

from __future__ import annotations

import string
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dynaval.domain.releases.release import folded_text

NGRAM = 13
"""lm-evaluation-harness's n (its ``Janitor(ngram_n=13)`` and the Pile's 13-gram files)."""

_DELETE_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalised_words(text: str) -> list[str]:
    """A text's words as the n-gram check compares them."""
    return folded_text(text).translate(_DELETE_PUNCTUATION).split()


def word_ngrams(text: str, n: int = NGRAM) -> Iterator[str]:
    """The text's word n-grams, in order (none when it has fewer than n words)."""
    words = normalised_words(text)
    for i in range(len(words) - n + 1):
        yield " ".join(words[i : i + n])


def example_text(row: Mapping[str, Any], fields: Sequence[str]) -> str:
    """The text of an example as a corpus would hold it: its fields, joined by one space."""
    return " ".join(str(row.get(name) or "") for name in fields).strip()


class Check(StrEnum):
    NGRAM = "ngram"
    NEAR_DUPLICATE = "near-duplicate"
    """Lexical: MinHash over word shingles."""
    SEMANTIC = "semantic"
    """MiniLM cosine of the example's text and the document's."""


@dataclass(frozen=True)
class Contaminated:
    """One contaminated example, by one check, with the first evidence found."""

    example_id: str
    split: str
    check: Check
    document: int
    """The corpus document (1-based line number) where it was found."""
    ngram: str | None = None
    similarity: float | None = None

    def line(self) -> str:
        if self.ngram is not None:
            evidence = f'{len(self.ngram.split())}-gram "{self.ngram}"'
        else:
            evidence = f"similarity {self.similarity:.4f}"
        return (
            f"{self.example_id} ({self.split}): {self.check.value}, corpus line {self.document}, {evidence}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "example_id": self.example_id,
            "split": self.split,
            "check": self.check.value,
            "corpus_line": self.document,
            "ngram": self.ngram,
            "similarity": self.similarity,
        }
