"""A release row: one accepted example, flat, with every input field and its provenance.

Made from the round dataset's provenance record
(:mod:`dynaval.service_layer.dataset_records.round_dataset`). Nested parts become columns a
researcher can filter on (``model_prediction``, ``item_agreement``); the votes stay a list. Two
things are settled here that the round dataset leaves to the reader:

- each vote says whether it ``counted`` in the decision (an annotator excluded for poor gold
  accuracy did not);
- the writer's own vote, when the writer also annotated in Label Studio, is not in the row (it
  never counted); ``writer_annotator`` is the pseudonym of the writer's Label Studio account, so
  anyone can check that the writer is among no example's validators.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import orjson

from dynaval.domain.images.image import release_path

ROW_PROVENANCE = (
    "rationale", "writer", "writer_annotator", "collected_by", "submitted_at",
    "model_name", "model_hash", "model_prediction", "model_probabilities", "model_signature", "model_fooled",
    "label_studio_project_id", "label_studio_task_id", "votes", "validators_agreeing",
    "item_agreement", "majority_label", "majority_share", "decision_outcome", "decision_reason",
    "rule_version", "decided_at", "override",
)  # fmt: skip
"""The provenance columns, after ``example_id``, ``round``, ``round_id``, ``round_name``, the input
fields and ``label``."""


def agreeing_validators(votes: Sequence[Mapping[str, Any]], label: str) -> int:
    """Counted votes for the example's label (a flag is no agreement)."""
    return sum(1 for v in votes if v["counted"] and not v["flagged"] and v["label"] == label)


def release_row(
    record: Mapping[str, Any],
    *,
    round_index: int,
    fields: Sequence[str],
    excluded_annotators: Collection[str],
    writer_annotator: str | None,
    image_fields: Collection[str] = (),
) -> dict[str, Any]:
    """The release row of one provenance record (annotators as the record's pseudonyms;
    ``excluded_annotators`` and ``writer_annotator`` are pseudonyms too). An image field's value
    is where the release keeps the image (``images/<sha256>.png``)."""
    inputs = dict(record["inputs"] or {})
    for name in image_fields:
        if inputs.get(name) is not None:
            inputs[name] = release_path(inputs[name])
    model = record["model"]
    decision = record["decision"]
    agreement = record["agreement"]
    override = decision["override"]
    label = record["writer_label"]
    votes = [
        {
            "annotator": v["annotator"],
            "label": v["label"],
            "flagged": bool(v["flagged"]),
            "flag_reason": v["flag_reason"],
            "annotation_id": int(v["annotation_id"]),
            "created_at": v["created_at"],
            "updated_at": v["updated_at"],
            "lead_time_s": None if v["lead_time_s"] is None else float(v["lead_time_s"]),
            "counted": v["annotator"] not in excluded_annotators,
        }
        for v in record["votes"]
        if writer_annotator is None or v["annotator"] != writer_annotator
    ]
    probabilities = model["probabilities"]
    row: dict[str, Any] = {
        "example_id": record["example_id"],
        "round": round_index,
        "round_id": record["round"]["id"],
        "round_name": record["round"]["name"],
        **{name: inputs.get(name) for name in fields},
        "label": label,
        "rationale": record["rationale"],
        "writer": record["writer"],
        "writer_annotator": writer_annotator,
        "collected_by": record["collected_by"],
        "submitted_at": record["submitted_at"],
        "model_name": model["name"],
        "model_hash": model["hash"],
        "model_prediction": model["prediction"],
        "model_probabilities": None
        if probabilities is None
        else {str(k): float(p) for k, p in probabilities.items()},
        "model_signature": model["signature"],
        "model_fooled": model["fooled"],
        "label_studio_project_id": record["label_studio"]["project_id"],
        "label_studio_task_id": record["label_studio"]["task_id"],
        "votes": votes,
        "validators_agreeing": agreeing_validators(votes, label),
        "item_agreement": agreement["item_agreement"],
        "majority_label": agreement["majority_label"],
        "majority_share": agreement["majority_share"],
        "decision_outcome": decision["outcome"],
        "decision_reason": decision["reason"],
        "rule_version": decision["rule_version"],
        "decided_at": decision["decided_at"],
        "override": override,
    }
    return row


def row_columns(fields: Sequence[str]) -> tuple[str, ...]:
    return ("example_id", "round", "round_id", "round_name", *fields, "label", *ROW_PROVENANCE)


def canonical_line(row: Mapping[str, Any]) -> bytes:
    """One row as its JSONL line, without the newline: sorted keys, UTF-8, compact. The content
    hash is computed over these lines, so they are part of the release format."""
    return orjson.dumps(row, option=orjson.OPT_SORT_KEYS)
