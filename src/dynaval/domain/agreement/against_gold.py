"""Votes scored against gold labels (Label Studio's ground-truth annotations). Pure, no I/O.

Each annotator's accuracy is the share of their votes on gold items that equal the gold label.
The aggregate is the majority label of each gold item's votes: an item whose top count is shared
by several labels is a tie, counted apart and never as correct; accuracy is correct / items with
votes (ties included in the denominator).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence


def score_against_gold(votes: Sequence[tuple[str, str, str]], gold: Mapping[str, str]) -> dict[str, object]:
    """Per-annotator accuracy against ``gold`` (item -> label) and the majority's, JSON-ready."""
    per_annotator: dict[str, list[int]] = {}
    by_item: dict[str, Counter[str]] = {}
    for item, annotator, label in votes:
        if item not in gold:
            continue
        right = per_annotator.setdefault(annotator, [0, 0])
        right[0] += label == gold[item]
        right[1] += 1
        by_item.setdefault(item, Counter())[label] += 1
    correct = ties = 0
    for item, counts in by_item.items():
        (top, top_count), *rest = counts.most_common()
        if rest and rest[0][1] == top_count:
            ties += 1
        elif top == gold[item]:
            correct += 1
    return {
        "gold_items": len(gold),
        "per_annotator": [
            {"annotator": annotator, "items": total, "correct": right, "accuracy": right / total}
            for annotator, (right, total) in sorted(per_annotator.items(), key=lambda kv: kv[0])
        ],
        "majority": {
            "items": len(by_item),
            "correct": correct,
            "ties": ties,
            "accuracy": correct / len(by_item) if by_item else None,
        },
    }


def score_labels_against_gold(labels: Mapping[str, str], gold: Mapping[str, str]) -> dict[str, object]:
    """One label per item (an aggregate such as Dawid-Skene's) scored on the gold items it labels."""
    scored = [item for item in labels if item in gold]
    correct = sum(labels[item] == gold[item] for item in scored)
    return {
        "items": len(scored),
        "correct": correct,
        "accuracy": correct / len(scored) if scored else None,
    }
