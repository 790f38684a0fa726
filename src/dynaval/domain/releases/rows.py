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

Both depend on the round as it is when a release is built, so the line kept with each record
(:func:`kept_release_line`) counts every vote, and a build settles them with :func:`with_validators`,
the rule :func:`release_row` itself applies.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import orjson

from dynaval.domain.images.image import RELEASE_FOLDER, is_image_ref, is_release_path, release_path

RELEASE_PREFIX = RELEASE_FOLDER + "/"

ROW_PROVENANCE = (
    "rationale", "writer", "writer_annotator", "collected_by", "submitted_at",
    "model_name", "model_hash", "model_prediction", "model_probabilities", "model_signature", "model_fooled",
    "label_studio_project_id", "label_studio_task_id", "votes", "validators_agreeing",
    "item_agreement", "majority_label", "majority_share", "decision_outcome", "decision_reason",
    "rule_version", "decided_at", "override",
)  # fmt: skip
"""The provenance columns, after ``example_id``, ``round``, ``round_id``, ``round_name``, the input
fields and ``label``."""
_OTHER_COLUMNS = 5 + len(ROW_PROVENANCE)
"""A row's columns besides its input fields."""


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
    row = _counting_every_vote(record, round_index=round_index, fields=fields, image_fields=image_fields)
    with_validators(row, excluded_annotators=excluded_annotators, writer_annotator=writer_annotator)
    return row


def _counting_every_vote(
    record: Mapping[str, Any], *, round_index: object, fields: Sequence[str], image_fields: Collection[str]
) -> dict[str, Any]:
    """The release row as if no annotator were excluded and the writer had no Label Studio account:
    every vote counted, none left out (:func:`with_validators` then settles both)."""
    inputs = dict(record["inputs"] or {})
    for name in image_fields:
        if inputs.get(name) is not None:
            inputs[name] = release_path(inputs[name])
    model = record["model"]
    decision = record["decision"]
    agreement = record["agreement"]
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
            "counted": True,
        }
        for v in record["votes"]
    ]
    probabilities = model["probabilities"]
    return {
        "example_id": record["example_id"],
        "round": round_index,
        "round_id": record["round"]["id"],
        "round_name": record["round"]["name"],
        **{name: inputs.get(name) for name in fields},
        "label": label,
        "rationale": record["rationale"],
        "writer": record["writer"],
        "writer_annotator": None,
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
        "override": decision["override"],
    }


def with_validators(
    row: dict[str, Any], *, excluded_annotators: Collection[str], writer_annotator: str | None
) -> bool:
    """Settle, in a row whose every vote counts (as :func:`kept_release_line` keeps it), whose votes
    count now: an excluded annotator's vote stays but does not count, and the writer's own vote
    (``writer_annotator``: the pseudonym of the writer's Label Studio account) leaves the row.
    Whether the row changed (then its line must be made again)."""
    votes = row["votes"]
    if writer_annotator is None and not any(v["annotator"] in excluded_annotators for v in votes):
        return False
    row["votes"] = [
        {**v, "counted": v["annotator"] not in excluded_annotators}
        for v in votes
        if v["annotator"] != writer_annotator
    ]
    row["writer_annotator"] = writer_annotator
    row["validators_agreeing"] = agreeing_validators(row["votes"], row["label"])
    return True


# The holes of a kept release line: what a release or the round sets when the release is built.
ROUND_INDEX_HOLE = b"\x05"
ROUND_NAME_HOLE = b"\x06"
PROJECT_ID_HOLE = b"\x07"
_HOLES = {
    "round": orjson.Fragment(ROUND_INDEX_HOLE),
    "round_name": orjson.Fragment(ROUND_NAME_HOLE),
    "label_studio_project_id": orjson.Fragment(PROJECT_ID_HOLE),
}


def kept_release_line(record: Mapping[str, Any]) -> bytes:
    """The record's release row as a line kept beside it, made when the record is: every vote
    counted (:func:`with_validators` settles that when a build reads it), the record's own inputs as
    the fields (an image's reference as its path in a release), and holes where the release's round
    index, the round's name and its Label Studio project go (:func:`release_line_fills`). JSON text
    never holds these bytes: a string escapes every control character.

    Filled, it is :func:`canonical_line` of :func:`release_row` for a task type whose fields are the
    inputs' own, when every vote counts and the writer has no Label Studio account
    (:func:`holds_fields` tells a build whether the fields are its task type's)."""
    inputs = record["inputs"] or {}
    row = _counting_every_vote(
        record,
        round_index=None,
        fields=sorted(inputs),
        image_fields=[name for name, value in inputs.items() if is_image_ref(value)],
    )
    row.update(_HOLES)
    return orjson.dumps(row, option=orjson.OPT_SORT_KEYS)


def release_line_fills(*, round_index: int, round_name: str, project_id: int | None) -> dict[bytes, bytes]:
    """What each hole of a kept release line becomes in a release (one byte replace each)."""
    return {
        ROUND_INDEX_HOLE: orjson.dumps(round_index),
        ROUND_NAME_HOLE: orjson.dumps(round_name),
        PROJECT_ID_HOLE: orjson.dumps(project_id),
    }


def holds_fields(row: Mapping[str, Any], fields: Sequence[str], image_fields: Collection[str]) -> bool:
    """Whether a kept release line's row (decoded, filled) has exactly the task type's input
    ``fields``, an image field's value as a path in a release and no other field's value looking
    like one: then it is the row :func:`release_row` makes. Otherwise (a task type's fields changed
    since, a text that reads as an image's path) the row must be made from its record."""
    if len(row) != len(fields) + _OTHER_COLUMNS or not all(name in row for name in fields):
        return False
    for name in fields:
        value = row[name]
        if name in image_fields:
            if value is not None and not is_release_path(value):
                return False
        elif isinstance(value, str) and value.startswith(RELEASE_PREFIX) and is_release_path(value):
            return False
    return True


def row_columns(fields: Sequence[str]) -> tuple[str, ...]:
    return ("example_id", "round", "round_id", "round_name", *fields, "label", *ROW_PROVENANCE)


def canonical_line(row: Mapping[str, Any]) -> bytes:
    """One row as its JSONL line, without the newline: sorted keys, UTF-8, compact. The content
    hash is computed over these lines, so they are part of the release format."""
    return orjson.dumps(row, option=orjson.OPT_SORT_KEYS)
