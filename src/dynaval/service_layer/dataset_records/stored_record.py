"""The stored form of a provenance record: its JSON line with holes for what is read "as it is now".

``dynaval export`` writes each record as one JSON line (keys sorted at every level, compact, UTF-8;
see :mod:`dynaval.adapters.files.dataset_files`). A kept record is that line, written when the
record changes, except for the values that belong to the round or to the moment of reading:

- ``round`` (its id, name and state: a freeze changes the state of every record at once),
- ``decision.policy`` (the round's decision policy),
- ``label_studio.project_id`` (the round's project),
- ``image_urls`` (signed URLs that expire; only records whose inputs name stored images have it).

Each of them is left out of the stored bytes and a hole byte of its own stands in its place (``0x01``
to ``0x04``). JSON text never holds such a byte (a JSON string escapes every control character,
and orjson writes it as ``\\u0001``), so replacing it finds the hole and nothing else, whatever a
writer typed. An export fills the round's holes with three byte replaces over a whole page of
lines, and an image's URLs in the few records that have them: no record is decoded or encoded
again.

Beside the line, a kept record has its Parquet values (:func:`kept_columns`): the flat values of
the Parquet file's row, with the same holes where they fall inside them (the policy in
``decision``, the project in ``label_studio``; ``round`` is the same for every row and is not kept),
packed in one value (:func:`pack_columns`) that a page of rows turns into Arrow columns without a
loop over its rows (:mod:`dynaval.adapters.db.dataset_arrow`).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from dynaval.domain.images.image import is_image_ref

POLICY_HOLE = b"\x01"
PROJECT_HOLE = b"\x02"
ROUND_HOLE = b"\x03"
IMAGE_URLS_HOLE = b"\x04"
_SORTED = orjson.OPT_SORT_KEYS

SCALAR_COLUMNS = (
    "example_id", "task_type", "text", "writer_label", "rationale", "writer", "collected_by", "submitted_at",
)  # fmt: skip
"""The Parquet row's text values, each the record's own (``text``: the input text, if any); NULL where
the record has none."""
JSON_COLUMNS = ("inputs", "model", "label_studio", "votes", "agreement", "decision")
"""The Parquet row's nested parts, each as JSON text (keys sorted), so that every row group has one
flat schema."""
PARQUET_COLUMNS = (*SCALAR_COLUMNS, "round", *JSON_COLUMNS)
"""The columns of a round dataset's Parquet file, in order; all of them strings."""

# Written into the JSON as they are: the byte alone.
_POLICY, _PROJECT, _ROUND, _IMAGE_URLS = map(
    orjson.Fragment, (POLICY_HOLE, PROJECT_HOLE, ROUND_HOLE, IMAGE_URLS_HOLE)
)


def stored_form(record: Mapping[str, Any]) -> bytes:
    """The record's JSON line (without its newline) with holes where the round's values go.

    With its holes filled (:meth:`RoundValues.fills`, :func:`with_image_urls`), it is byte for byte
    ``orjson.dumps(record, option=OPT_SORT_KEYS)``.
    """
    holed = dict(record)
    holed["round"] = _ROUND
    holed["decision"] = {**record["decision"], "policy": _POLICY}
    holed["label_studio"] = {**record["label_studio"], "project_id": _PROJECT}
    if "image_urls" in record:
        holed["image_urls"] = _IMAGE_URLS
    return orjson.dumps(holed, option=_SORTED)


def kept_columns(record: Mapping[str, Any]) -> tuple[str | None, ...]:
    """The record's Parquet values (:data:`SCALAR_COLUMNS`, then :data:`JSON_COLUMNS`), with the
    holes of :func:`stored_form` in ``label_studio`` and ``decision``; filled, each is the Parquet
    file's value."""
    holed = {
        **record,
        "decision": {**record["decision"], "policy": _POLICY},
        "label_studio": {**record["label_studio"], "project_id": _PROJECT},
    }
    scalars = [
        (record["inputs"] or {}).get("text") if name == "text" else record[name] for name in SCALAR_COLUMNS
    ]
    nested = [orjson.dumps(holed[name], option=_SORTED).decode() for name in JSON_COLUMNS]
    return (*scalars, *nested)


PACKED_HEADER = struct.Struct(f"<{len(SCALAR_COLUMNS) + len(JSON_COLUMNS)}i")
"""The packed values' header: each value's length in bytes (little-endian int32; -1 for NULL)."""


def pack_columns(values: Sequence[str | None]) -> bytes:
    """The values of :func:`kept_columns` as one value: :data:`PACKED_HEADER`, then each value's
    UTF-8 bytes, one after another (nothing for a NULL)."""
    encoded = [None if v is None else v.encode() for v in values]
    lengths = [-1 if v is None else len(v) for v in encoded]
    return PACKED_HEADER.pack(*lengths) + b"".join(v for v in encoded if v is not None)


def unpack_columns(packed: bytes) -> tuple[str | None, ...]:
    """The values :func:`pack_columns` packed (the row-by-row reference of the columnar reading)."""
    values: list[str | None] = []
    at = PACKED_HEADER.size
    for length in PACKED_HEADER.unpack_from(packed):
        if length < 0:
            values.append(None)
            continue
        values.append(packed[at : at + length].decode())
        at += length
    return tuple(values)


def image_inputs(record: Mapping[str, Any]) -> dict[str, str] | None:
    """The record's inputs that name stored images (their URLs are signed when read), or None."""
    images = {name: v for name, v in (record.get("inputs") or {}).items() if is_image_ref(v)}
    return images or None


@dataclass(frozen=True)
class RoundValues:
    """The round's values of its records, as JSON, read once per export."""

    policy: bytes
    project_id: bytes
    round: bytes

    @classmethod
    def of(cls, *, round_info: Mapping[str, Any], policy: Any, project_id: int | None) -> RoundValues:
        return cls(
            policy=orjson.dumps(policy, option=_SORTED),
            project_id=orjson.dumps(project_id),
            round=orjson.dumps(round_info, option=_SORTED),
        )

    def fills(self) -> dict[bytes, bytes]:
        """Each round hole's value."""
        return {POLICY_HOLE: self.policy, PROJECT_HOLE: self.project_id, ROUND_HOLE: self.round}


def with_image_urls(line: bytes, image_urls: Mapping[str, str] | None) -> bytes:
    """A line with its image URLs in their hole (a line without that hole is returned as it is)."""
    if image_urls is None:
        return line
    return line.replace(IMAGE_URLS_HOLE, orjson.dumps(dict(image_urls), option=_SORTED))
