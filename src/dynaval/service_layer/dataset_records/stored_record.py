"""The stored form of a provenance record: its JSON line with holes for what is read "as it is now".

``dynaval export`` writes each record as one JSON line (keys sorted at every level, compact, UTF-8;
see :mod:`dynaval.adapters.files.dataset_files`). A kept record is that line, written when the
record changes, except for the values that belong to the round or to the moment of reading:

- ``round`` (its id, name and state: a freeze changes the state of every record at once),
- ``decision.policy`` (the round's decision policy),
- ``label_studio.project_id`` (the round's project),
- ``image_urls`` (signed URLs that expire; only records whose inputs name stored images have it).

Each of them is left out of the stored bytes and a hole byte, ``0x01``, stands in its place. JSON
text never holds that byte (a JSON string escapes every control character, and orjson writes it as
``\\u0001``), so splitting on it finds the holes and nothing else, whatever a writer typed. An
export fills the holes once per round and once per image, and otherwise hands the bytes on as
stored: no record is decoded or encoded again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from dynaval.domain.images.image import is_image_ref

HOLE = b"\x01"
_SORTED = orjson.OPT_SORT_KEYS

_HOLE_FRAGMENT = orjson.Fragment(HOLE)  # written into the JSON as it is: the byte alone


def stored_form(record: Mapping[str, Any]) -> bytes:
    """The record's JSON line (without its newline) with holes where the round's values go.

    Filled by :func:`record_line`, it is byte for byte ``orjson.dumps(record, option=OPT_SORT_KEYS)``.
    """
    holed = dict(record)
    holed["round"] = _HOLE_FRAGMENT
    holed["decision"] = {**record["decision"], "policy": _HOLE_FRAGMENT}
    holed["label_studio"] = {**record["label_studio"], "project_id": _HOLE_FRAGMENT}
    if "image_urls" in record:
        holed["image_urls"] = _HOLE_FRAGMENT
    return orjson.dumps(holed, option=_SORTED)


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


def record_line(stored: bytes, values: RoundValues, image_urls: Mapping[str, str] | None = None) -> bytes:
    """The record's JSON line, with its newline: the stored bytes with the round's values (and the
    record's signed image URLs, where it has a hole for them) in their holes."""
    parts = stored.split(HOLE)
    if len(parts) == 4:  # the holes in key order: decision.policy, label_studio.project_id, round
        return b"".join(
            (parts[0], values.policy, parts[1], values.project_id, parts[2], values.round, parts[3], b"\n")
        )
    if len(parts) == 5:  # and image_urls, between decision and label_studio
        urls = orjson.dumps(dict(image_urls or {}), option=_SORTED)
        return b"".join(
            (
                parts[0], values.policy, parts[1], urls, parts[2], values.project_id, parts[3], values.round,
                parts[4], b"\n",
            )
        )  # fmt: skip
    raise ValueError(f"a stored record has {len(parts) - 1} holes; it must have 3, or 4 with images")
