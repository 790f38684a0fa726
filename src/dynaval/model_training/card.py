"""The trained model's card (``README.md`` in its folder), made from the training record alone.

The card names what the model learned from and how, so a reader can tell which rounds' dev and test
figures are fair to report for it. It cannot carry the content hash of its own folder (the hash
covers the card); it carries the SHA-256 of the weights file instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import yaml


@dataclass(frozen=True)
class ReleaseUsed:
    name: str
    version: str
    content_hash: str


@dataclass(frozen=True)
class DevAccuracy:
    split: str
    rows: int
    before: float | None
    """The base model's accuracy; None for a split with no rows."""
    after: float | None


@dataclass(frozen=True)
class TrainingRecord:
    """Everything the card states."""

    task_type: str
    labels: tuple[str, ...]
    releases: tuple[ReleaseUsed, ...]
    split_rows: Mapping[str, int]
    """Train split -> rows learned from it (after removing rows repeated across releases)."""
    seed_set_rows: int | None
    """Rows of the task's hand-written seed set added to training; None when it was not used."""
    base_name: str
    base_hash: str
    seed: int
    epochs: int
    learning_rate: float
    batch_size: int
    max_length: int
    dev: Sequence[DevAccuracy]
    weights_file: str
    weights_sha256: str
    final_loss: float | None

    @property
    def train_rows(self) -> int:
        return sum(self.split_rows.values()) + (self.seed_set_rows or 0)


def _accuracy(value: float | None) -> str:
    return "n/a (no rows)" if value is None else f"{value:.3f}"


def render_model_card(record: TrainingRecord) -> str:
    """The card's Markdown, with a YAML header in the Hugging Face model card form."""
    header = {
        "library_name": "transformers",
        "pipeline_tag": "text-classification",
        "tags": ["dynaval", record.task_type],
        "datasets": [f"{r.name}=={r.version}" for r in record.releases],
    }
    seed_set = (
        f"yes, {record.seed_set_rows} rows of the task's hand-written seed set"
        if record.seed_set_rows is not None
        else "no"
    )
    lines = [
        "---",
        yaml.safe_dump(header, sort_keys=False).rstrip(),
        "---",
        "",
        f"# {record.task_type} classifier trained by dynaval",
        "",
        f"A sequence classifier for the `{record.task_type}` task, labels in order: "
        + ", ".join(f"`{label}`" for label in record.labels)
        + ". It was fine-tuned on the train splits listed below and on nothing else: never on a dev "
        "or test split, so their figures are fair for it.",
        "",
        "## Learned from",
        "",
        "| release | version | content hash |",
        "|---|---|---|",
        *(f"| {r.name} | {r.version} | `{r.content_hash}` |" for r in record.releases),
        "",
        "| split | rows |",
        "|---|---|",
        *(f"| {split} | {rows} |" for split, rows in record.split_rows.items()),
        "",
        f"Seed set used: {seed_set}. Rows in all: {record.train_rows}.",
        "",
        "## Training",
        "",
        f"- base model: the folder `{record.base_name}`, content hash `{record.base_hash}`",
        f"- seed: {record.seed}; epochs: {record.epochs}; learning rate: {record.learning_rate:g}; "
        f"batch size: {record.batch_size}; longest encoding: {record.max_length} tokens",
        f"- last training loss: {'n/a' if record.final_loss is None else f'{record.final_loss:.4f}'}",
        "",
        "## Dev accuracy per round",
        "",
        "| split | rows | base model | this model |",
        "|---|---|---|---|",
        *(f"| {d.split} | {d.rows} | {_accuracy(d.before)} | {_accuracy(d.after)} |" for d in record.dev),
        "",
        "## Identity",
        "",
        f"SHA-256 of `{record.weights_file}`: `{record.weights_sha256}`.",
        "",
        "The folder's content hash (which the service records for a round's model) covers this card, so "
        "the card cannot state it: `dynaval model train` prints it, and the weights file's SHA-256 "
        "above ties the card to the weights.",
        "",
    ]
    return "\n".join(lines)
