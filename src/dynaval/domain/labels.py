"""Matching a model's labels to a task type's: names compared case-insensitively.

A round may pin any local sequence classifier whose ``id2label`` covers the task's labels
(``ENTAILMENT`` for ``entailment``, ``Positive`` for ``positive``). The model may know more labels
than the task; its answer is then read over the task's labels only: their probabilities,
renormalised to sum to one, and the likeliest of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dynaval.domain.errors import InvalidInput


def _key(label: str) -> str:
    return label.strip().casefold()


@dataclass(frozen=True)
class LabelMapping:
    """The model's label for each of the task's labels, in the task's order."""

    task_labels: tuple[str, ...]
    model_labels: tuple[str, ...]
    """``model_labels[i]`` is the model's name of ``task_labels[i]``."""
    exact: bool
    """True when the model's labels are the task's, same names and no more."""

    @classmethod
    def between(cls, model_labels: Sequence[str], task_labels: Sequence[str], *, task: str) -> LabelMapping:
        """The mapping, or :class:`InvalidInput` naming ``model`` with the task's labels the model
        lacks (or the ones it names twice, differing only in case)."""
        by_key: dict[str, list[str]] = {}
        for label in model_labels:
            by_key.setdefault(_key(label), []).append(label)
        missing = [label for label in task_labels if _key(label) not in by_key]
        if missing:
            raise InvalidInput(
                f"the model's labels ({', '.join(model_labels)}) do not cover task {task}'s labels: "
                f"missing {', '.join(missing)} (names are compared case-insensitively)",
                field="model",
            )
        twice = [label for label in task_labels if len(by_key[_key(label)]) > 1]
        if twice:
            raise InvalidInput(
                f"the model names these labels more than once (differing in case only): {', '.join(twice)}",
                field="model",
            )
        matched = tuple(by_key[_key(label)][0] for label in task_labels)
        exact = matched == tuple(task_labels) and len(model_labels) == len(task_labels)
        return cls(task_labels=tuple(task_labels), model_labels=matched, exact=exact)

    def read(self, probabilities: Mapping[str, float]) -> tuple[str, dict[str, float]]:
        """The task's label the model chose and the probabilities by task label, from the model's
        probabilities by its own labels."""
        if self.exact:
            chosen = dict(probabilities)
        else:
            kept = [float(probabilities[name]) for name in self.model_labels]
            total = sum(kept)
            share = [p / total for p in kept] if total > 0 else [1.0 / len(kept)] * len(kept)
            chosen = dict(zip(self.task_labels, share, strict=True))
        best = max(self.task_labels, key=lambda label: chosen[label])
        return best, chosen
