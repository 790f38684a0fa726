"""A kept record's stored form: its JSON line with holes for the round's values and image URLs.

Filled, it is byte for byte the line ``dynaval export`` wrote when it built each record as it went,
whatever a writer typed: text holding the hole bytes themselves, or input fields and labels named
like the record's own keys.
"""

from __future__ import annotations

from typing import Any

import orjson

from dynaval.domain.images.image import image_ref
from dynaval.service_layer.dataset_records.stored_record import (
    IMAGE_URLS_HOLE,
    RoundValues,
    image_inputs,
    stored_form,
    with_image_urls,
)

SORTED = orjson.OPT_SORT_KEYS


def record(**inputs: str) -> dict[str, Any]:
    return {
        "example_id": "c-1",
        "round": {"id": 3, "name": "round «3»", "state": "frozen"},
        "task_type": "sentiment",
        "inputs": inputs,
        "writer_label": "round",
        "rationale": 'a "policy" of \x01\x02\x03\x04',
        "writer": "writer_ab",
        "collected_by": None,
        "submitted_at": "2026-03-01T09:30:15+00:00",
        "model": {"name": "m", "hash": "sha256:0", "prediction": "positive", "probabilities": {"round": 0.5}},
        "label_studio": {"project_id": 42, "task_id": 7},
        "votes": [{"annotator": "annotator_1", "label": "round", "flagged": False}],
        "agreement": {"label_counts": {"round": 2, "policy": 1}, "item_agreement": 0.1 + 0.2},
        "decision": {"outcome": "accepted", "policy": {"min_votes": 3}, "override": None, "decided_at": None},
    }


def filled(stored: bytes, example: dict[str, Any], urls: dict[str, str] | None = None) -> bytes:
    values = RoundValues.of(
        round_info=example["round"],
        policy=example["decision"]["policy"],
        project_id=example["label_studio"]["project_id"],
    )
    line = stored
    for hole, value in values.fills().items():
        line = line.replace(hole, value)
    return with_image_urls(line, urls)


def test_a_filled_record_is_the_line_the_export_wrote_whatever_the_writer_typed() -> None:
    example = record(text="\x01 \x02 \x03 \x04 round policy project_id ✓", round="\x03", policy="\x01")
    stored = stored_form(example)
    assert stored.count(b"\x01") == stored.count(b"\x02") == stored.count(b"\x03") == 1
    assert b"\x04" not in stored and b"frozen" not in stored and b"min_votes" not in stored
    assert filled(stored, example) == orjson.dumps(example, option=SORTED)
    assert image_inputs(example) is None


def test_an_image_records_urls_are_filled_in_their_own_hole() -> None:
    ref = image_ref("ab" * 32)
    example = {**record(image=ref), "image_urls": {"image": "https://dynaval.example/i/ab?sig=1"}}
    stored = stored_form(example)
    assert stored.count(IMAGE_URLS_HOLE) == 1 and b"sig=1" not in stored
    assert image_inputs(example) == {"image": ref}
    assert filled(stored, example, example["image_urls"]) == orjson.dumps(example, option=SORTED)
