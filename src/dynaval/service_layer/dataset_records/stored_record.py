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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from dynaval.domain.images.image import is_image_ref

POLICY_HOLE = b"\x01"
PROJECT_HOLE = b"\x02"
ROUND_HOLE = b"\x03"
IMAGE_URLS_HOLE = b"\x04"
_SORTED = orjson.OPT_SORT_KEYS

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
