"""A kept record's release line: its release row made when the record is, with holes for what the
release and the round set.

Filled, and with whose votes count settled as a build settles them, it is byte for byte the line a
build made from the record itself, whatever a writer typed, whoever is excluded, whichever writer
also annotates; where its fields are not the task type's, a build can tell.
"""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from dynaval.domain.images.image import image_ref, release_path
from dynaval.domain.releases.rows import (
    PROJECT_ID_HOLE,
    ROUND_INDEX_HOLE,
    ROUND_NAME_HOLE,
    canonical_line,
    holds_fields,
    kept_release_line,
    release_line_fills,
    release_row,
    with_validators,
)

ANNOTATORS = [f"annotator_{n}" for n in range(6)]
LABELS = ["negative", "neutral", "positive"]


def record(rng: random.Random, **inputs: Any) -> dict[str, Any]:
    """A provenance record as the record builder makes one (the keys a release row reads)."""
    votes = [
        {
            "annotator": annotator,
            "label": rng.choice([*LABELS, None]),
            "flagged": rng.random() < 0.2,
            "flag_reason": rng.choice([None, 'a "flag" \x05\x06\x07']),
            "annotation_id": rng.randrange(1, 10_000),
            "created_at": "2026-03-01T09:30:15+00:00",
            "updated_at": "2026-03-01T09:31:15+00:00",
            "lead_time_s": rng.choice([None, 3, 2.5]),
        }
        for annotator in sorted(rng.sample(ANNOTATORS, rng.randrange(0, 5)))
    ]
    label = rng.choice(LABELS)
    return {
        "example_id": f"c-{rng.randrange(10**6)}",
        "round": {"id": 3, "name": "round «3» \x05", "state": "frozen"},
        "task_type": "sentiment",
        "inputs": inputs,
        "writer_label": label,
        "rationale": rng.choice([None, "because \x05 \x06 \x07 round_name"]),
        "writer": rng.choice(["writer_a", "writer_b"]),
        "collected_by": rng.choice([None, "collector"]),
        "submitted_at": "2026-03-01T09:30:15+00:00",
        "model": {
            "name": "m",
            "hash": "sha256:0",
            "prediction": rng.choice(LABELS),
            "probabilities": rng.choice([None, {"negative": 0.25, "positive": 0.75}]),
            "signature": "sig",
            "fooled": True,
        },
        "label_studio": {"project_id": rng.choice([None, 42]), "task_id": 7},
        "votes": votes,
        "agreement": {
            "item_agreement": rng.choice([None, 0.1 + 0.2]),
            "majority_label": label,
            "majority_share": 1.0,
        },
        "decision": {
            "outcome": "accepted",
            "reason": "agreed",
            "rule_version": "2",
            "policy": {"min_votes": 3},
            "decided_at": "2026-03-02T00:00:00+00:00",
            "override": rng.choice(
                [None, {"outcome": "accepted", "reason": "lead", "by": "bench", "at": "x"}]
            ),
        },
    }


def filled(line: bytes, example: dict[str, Any], round_index: int) -> bytes:
    fills = release_line_fills(
        round_index=round_index,
        round_name=example["round"]["name"],
        project_id=example["label_studio"]["project_id"],
    )
    for hole, value in fills.items():
        line = line.replace(hole, value)
    return line


def as_a_build_reads_it(
    example: dict[str, Any], *, fields: tuple[str, ...], image_fields: tuple[str, ...] = (), **counting: Any
) -> bytes:
    """The line a build takes from the kept one (decoded, votes settled, made again if changed)."""
    line = filled(kept_release_line(example), example, round_index=2)
    row = orjson.loads(line)
    assert holds_fields(row, fields, image_fields)
    if with_validators(row, **counting):
        return canonical_line(row)
    return line


@pytest.mark.parametrize("seed", range(40))
def test_a_kept_line_is_the_line_a_build_made_from_the_record(seed: int) -> None:
    rng = random.Random(seed)
    example = record(rng, text=rng.choice(["fine \x05 \x06 \x07 round", "images/x.png", "sha256:1", ""]))
    excluded = set(rng.sample(ANNOTATORS, rng.randrange(0, 3)))
    writer_annotator = rng.choice([None, None, *ANNOTATORS])
    expected = canonical_line(
        release_row(
            example,
            round_index=2,
            fields=("text",),
            excluded_annotators=excluded,
            writer_annotator=writer_annotator,
        )
    )
    got = as_a_build_reads_it(
        example, fields=("text",), excluded_annotators=excluded, writer_annotator=writer_annotator
    )
    assert got == expected


def test_the_holes_are_the_only_hole_bytes_in_a_kept_line() -> None:
    example = record(random.Random(1), text="\x05\x06\x07")
    line = kept_release_line(example)
    for hole in (ROUND_INDEX_HOLE, ROUND_NAME_HOLE, PROJECT_ID_HOLE):
        assert line.count(hole) == 1
    assert "round «3»".encode() not in line
    assert b'"label_studio_project_id":\x07' in line and b'"round":\x05' in line


def test_nothing_is_made_again_when_every_vote_counts() -> None:
    example = record(random.Random(2), text="hello")
    row = orjson.loads(filled(kept_release_line(example), example, 1))
    before = dict(row)
    assert not with_validators(row, excluded_annotators=set(), writer_annotator=None)
    assert not with_validators(row, excluded_annotators={"nobody"}, writer_annotator=None)
    assert row == before


def test_an_image_is_kept_as_its_path_in_a_release() -> None:
    ref = image_ref("ab" * 32)
    example = record(random.Random(3), image=ref)
    row = orjson.loads(filled(kept_release_line(example), example, 1))
    assert row["image"] == release_path(ref)
    assert holds_fields(row, ("image",), ("image",))
    expected = release_row(
        example,
        round_index=1,
        fields=("image",),
        image_fields=("image",),
        excluded_annotators=(),
        writer_annotator=None,
    )
    assert canonical_line(row) == canonical_line(expected)


def test_a_build_tells_a_kept_line_whose_fields_are_not_its_task_types() -> None:
    rng = random.Random(4)
    one_field = orjson.loads(filled(kept_release_line(record(rng, text="a")), record(rng, text="a"), 1))
    assert holds_fields(one_field, ("text",), ())
    assert not holds_fields(one_field, ("premise", "hypothesis"), ())  # fields changed since
    assert not holds_fields(one_field, ("premise",), ())
    two_fields = orjson.loads(
        filled(kept_release_line(record(rng, premise="p", hypothesis="h")), record(rng), 1)
    )
    assert holds_fields(two_fields, ("hypothesis", "premise"), ())
    assert not holds_fields(two_fields, ("premise",), ())
    # A writer's text that reads as an image's path, in a text task type: made from the record.
    looks_like_a_path = release_path(image_ref("cd" * 32))
    typed = orjson.loads(filled(kept_release_line(record(rng, text=looks_like_a_path)), record(rng), 1))
    assert not holds_fields(typed, ("text",), ())
    # A writer's text that is an image reference is kept as a path: a text task type made it text.
    referenced = orjson.loads(
        filled(kept_release_line(record(rng, text=image_ref("ef" * 32))), record(rng), 1)
    )
    assert not holds_fields(referenced, ("text",), ())
    # An image task type's field that holds no image's path.
    assert not holds_fields({**referenced, "text": "plain"}, ("text",), ("text",))
    assert holds_fields({**referenced, "text": None}, ("text",), ("text",))
    # An input named as a column of the row: the row has fewer columns than it should.
    clash = orjson.loads(filled(kept_release_line(record(rng, label="x")), record(rng), 1))
    assert not holds_fields(clash, ("label",), ())


def test_a_record_no_release_row_can_be_made_of_keeps_a_line_naming_only_its_example() -> None:
    """Keeping never fails a commit over a release line: a build makes that row from its record."""
    from dynaval.service_layer.dataset_records.keeping import _release_line

    broken = {**record(random.Random(5), text="a"), "model": None}
    line = _release_line(broken)
    assert orjson.loads(line) == {"example_id": broken["example_id"]}
    assert not holds_fields(orjson.loads(line), ("text",), ())
