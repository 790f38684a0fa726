"""An image task type's candidates through the API, on SQLite and PostgreSQL, with a real (tiny)
image classifier: a drawn digit sent as a data URL or as a file is scored, kept once by content
hash, and shown through a signed URL; a copy, a shifted copy or a re-encoded one is a near-copy and
ten different drawings of a 7 are not; a bad image gets 413 or 422 naming its field and changes
nothing; a round refuses a model of the other kind."""

from __future__ import annotations

import io
import random
import struct
import zlib
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from flask import Flask
from flask.testing import FlaskClient
from PIL import Image
from sqlalchemy import text

from dynaval.adapters.db.database import Database
from dynaval.domain.images.image import sha_of
from dynaval.domain.validation.policy import DecisionPolicy
from dynaval.domain.validation.round import Round, RoundKind
from dynaval.service_layer.images import stored_images
from dynaval.service_layer.services import Services
from tests.e2e.test_dashboard_pages import sign_in
from tests.fixtures.service import (
    LEAD_TOKEN,
    OTHER_WRITER_TOKEN,
    WRITER_NAME,
    WRITER_TOKEN,
)
from tests.support.drawings import data_url, draw_digit, jpeg_bytes, png_bytes, same_pixels, shifted

DIGITS = [str(d) for d in range(10)]


def digits_round(services: Services, model: Path, **policy: object) -> int:
    """An open digits round on ``model`` (stored directly: Label Studio is not on this path)."""
    predictor = services.models.get(model).predictor
    with services.uow() as uow:
        made = uow.rounds.add(
            Round(
                name="digits", task_type="digits", model_dir=str(model), model_name=predictor.name,
                model_hash=predictor.model_hash, labels=DIGITS,
                policy=DecisionPolicy.from_overrides(dict(policy)).to_dict(),
            )
        )  # fmt: skip
        uow.commit()
    assert made.id is not None
    return made.id


def post(client: FlaskClient, path: str, *, token: str = WRITER_TOKEN, **kwargs: Any) -> Any:
    return client.post(path, headers={"Authorization": f"Bearer {token}"}, **kwargs)


def submit(client: FlaskClient, round_id: int, image: str, label: str = "7", **kwargs: Any) -> Any:
    body = {"inputs": {"image": image}, "writer_label": label}
    return post(client, f"/api/rounds/{round_id}/candidates", json=body, **kwargs)


def stored_files(services: Services) -> list[Path]:
    return sorted(services.settings.resolved_images_dir.rglob("*.png"))


def candidate_count(services: Services) -> int:
    assert isinstance(services.database, Database)
    with services.database.engine.connect() as connection:
        return int(connection.execute(text("SELECT count(*) FROM candidate")).scalar_one())


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def seven(seed: int) -> Image.Image:
    return draw_digit("7", random.Random(seed))


def test_a_drawn_digit_is_scored_kept_once_and_shown_by_a_signed_url(
    services: Services, client: FlaskClient, tiny_image_model_dir: Path
) -> None:
    round_id = digits_round(services, tiny_image_model_dir)
    drawing = png_bytes(seven(1))
    made = submit(client, round_id, data_url(drawing))
    assert made.status_code == 201, made.text
    body = made.json
    assert body["model_prediction"] == "3" and body["fooled"] is True
    assert set(body["model_probabilities"]) == set(DIGITS)
    ref = body["inputs"]["image"]
    (kept,) = stored_files(services)
    assert kept.name == f"{sha_of(ref)}.png"
    # The stored file holds the submitted pixels, without the file's own metadata.
    assert same_pixels(kept.read_bytes(), drawing)

    # Another writer sends the same drawing: one file still, and an identical near-duplicate.
    again = submit(client, round_id, data_url(drawing), token=OTHER_WRITER_TOKEN)
    assert again.status_code == 201 and again.json["inputs"]["image"] == ref
    assert len(stored_files(services)) == 1
    assert again.json["near_duplicates"] == [{"similarity": 1.0, "kind": "identical"}]

    # Its signed URL shows it to anyone holding it, and tells nothing of the writer or the label.
    url = stored_images.image_url(services.settings, ref)
    parts = urlsplit(url)
    assert parts.path == f"/images/{sha_of(ref)}.png"
    assert set(parse_qs(parts.query)) == {"expires", "signature"}
    assert WRITER_NAME not in url
    shown = client.get(f"{parts.path}?{parts.query}")
    assert shown.status_code == 200 and shown.mimetype == "image/png" and shown.data == kept.read_bytes()
    assert shown.headers["Access-Control-Allow-Origin"] == "*"
    query = parse_qs(parts.query)
    forged = int(query["signature"][0][:8], 16) ^ 1
    for tampered in (
        f"{parts.path}?expires={query['expires'][0]}&signature={forged:08x}{query['signature'][0][8:]}",
        f"{parts.path}?expires={int(query['expires'][0]) + 86400}&signature={query['signature'][0]}",
        f"/images/{'0' * 64}.png?{parts.query}",
        f"{parts.path}?expires=1&signature={query['signature'][0]}",
        parts.path,
    ):
        refused = client.get(tampered)
        assert refused.status_code == 404 and refused.json["error"]["field"] == "image", tampered


def test_an_image_file_and_a_jpeg_are_taken_and_the_model_asked_first(
    services: Services, client: FlaskClient, tiny_image_model_dir_mixed: Path
) -> None:
    round_id = digits_round(services, tiny_image_model_dir_mixed)
    drawing = seven(2)
    asked = post(
        client, f"/api/rounds/{round_id}/predict", json={"inputs": {"image": data_url(png_bytes(drawing))}}
    )
    assert asked.status_code == 200, asked.text
    assert set(asked.json["probabilities"]) == set(DIGITS)
    assert stored_files(services) == [] and candidate_count(services) == 0  # asking stores nothing

    as_file = post(
        client,
        f"/api/rounds/{round_id}/candidates",
        data={"image": (io.BytesIO(png_bytes(drawing)), "seven.png", "image/png"), "writer_label": "7"},
        content_type="multipart/form-data",
    )
    assert as_file.status_code == 201, as_file.text
    assert as_file.json["model_prediction"] == asked.json["prediction"]
    jpeg = submit(client, round_id, data_url(jpeg_bytes(seven(3)), "image/jpeg"))
    assert jpeg.status_code == 201, jpeg.text
    assert len(stored_files(services)) == 2


def test_shifted_and_re_encoded_copies_are_near_copies_and_other_sevens_are_not(
    services: Services, client: FlaskClient, tiny_image_model_dir: Path
) -> None:
    round_id = digits_round(services, tiny_image_model_dir, near_duplicates="flag")
    sevens = [seven(100 + i) for i in range(10)]
    for drawing in sevens:
        made = submit(client, round_id, data_url(png_bytes(drawing)))
        assert made.status_code == 201 and made.json["near_duplicates"] == [], made.json["near_duplicates"]
    first = sevens[0]
    for copy in (
        png_bytes(shifted(first, 1, 0)),
        png_bytes(shifted(first, -2, 1)),
        jpeg_bytes(first, quality=90),
        jpeg_bytes(shifted(first, 0, 2), quality=90),
    ):
        made = submit(client, round_id, data_url(copy, "image/png"))
        assert made.status_code == 201, made.text
        (match,) = made.json["near_duplicates"][:1]
        assert match["kind"] == "perceptual" and match["similarity"] > 0.9, made.json["near_duplicates"]
        assert made.json["near_duplicate_flagged"] is True

    strict = digits_round(services, tiny_image_model_dir, near_duplicates="reject")
    before = (candidate_count(services), len(stored_files(services)))
    refused = submit(client, strict, data_url(png_bytes(shifted(first, 2, 2))))
    assert refused.status_code == 409 and refused.json["error"]["field"] == "inputs"
    assert refused.json["error"]["near_duplicates"][0]["kind"] == "perceptual"
    assert (candidate_count(services), len(stored_files(services))) == before


def _png_claiming(width: int, height: int) -> bytes:
    """A small PNG whose header claims ``width`` x ``height`` one-bit pixels (a decompression bomb)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    rows = zlib.compress(b"\x00" * (1 + width // 8) * 64)  # a few rows: the decoder never gets this far
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


def test_a_bad_image_is_refused_naming_its_field_and_nothing_is_kept(
    services: Services, client: FlaskClient, tiny_image_model_dir: Path, tiny_model_dir: Path
) -> None:
    round_id = digits_round(services, tiny_image_model_dir)
    limit = services.settings.max_image_bytes
    good = png_bytes(seven(4))
    gif = io.BytesIO()
    seven(4).save(gif, format="GIF")
    cases = [
        (data_url(b"\x89PNG" + b"\x00" * (limit + 10)), 413, "DYNAVAL_MAX_IMAGE_BYTES"),
        (data_url(b"this is not an image at all"), 422, "PNG or JPEG"),
        (data_url(gif.getvalue(), "image/png"), 422, "PNG or JPEG"),
        (data_url(good[: len(good) // 2]), 422, "truncated"),
        (data_url(_png_claiming(20_000, 20_000)), 422, "DYNAVAL_MAX_IMAGE_PIXELS"),
        ("data:image/png;base64,@@@not-base64@@@", 422, "base64"),
        ("data:image/gif;base64,R0lGODlh", 422, "image/png or image/jpeg"),
        ("a seven, honestly", 422, "must be an image"),
    ]
    for image, status, says in cases:
        refused = submit(client, round_id, image)
        assert refused.status_code == status, (says, refused.text)
        assert refused.json["error"]["field"] == "inputs.image", refused.json
        assert says in refused.json["error"]["message"], refused.json
    # An image further over its limit is over the body's too: the answer still names the image limit.
    over_body = submit(client, round_id, data_url(b"\x89PNG" + b"\x00" * services.settings.max_body_bytes))
    assert over_body.status_code == 413 and over_body.json["error"]["field"] == "body"
    assert "DYNAVAL_MAX_IMAGE_BYTES" in over_body.json["error"]["message"]
    no_file = post(
        client,
        f"/api/rounds/{round_id}/candidates",
        data={"image": (io.BytesIO(b"GIF89a..."), "x.gif", "image/gif"), "writer_label": "7"},
        content_type="multipart/form-data",
    )
    assert no_file.status_code == 422 and no_file.json["error"]["field"] == "inputs.image"
    assert candidate_count(services) == 0 and stored_files(services) == []

    # An image where a text task wants text, and a round that pins a model of the other kind.
    with services.uow() as uow:
        text_round = uow.rounds.add(
            Round(
                name="texts", task_type="sentiment", model_dir=str(tiny_model_dir), model_name="m",
                model_hash="h", labels=["positive", "negative", "neutral"], policy=DecisionPolicy().to_dict(),
            )
        )  # fmt: skip
        uow.commit()
    wrong = post(
        client,
        f"/api/rounds/{text_round.id}/candidates",
        json={"inputs": {"text": data_url(good)}, "writer_label": "positive"},
    )
    assert wrong.status_code == 422 and wrong.json["error"]["field"] == "inputs.text"
    assert "reads texts, not images" in wrong.json["error"]["message"]
    assert candidate_count(services) == 0 and stored_files(services) == []


def test_a_round_refuses_a_model_of_the_other_kind(
    services: Services, client: FlaskClient, tiny_image_model_dir: Path, tiny_model_dir: Path
) -> None:
    for task, model in (("digits", tiny_model_dir), ("sentiment", tiny_image_model_dir)):
        refused = post(
            client, "/api/rounds", token=LEAD_TOKEN, json={"name": "r", "task": task, "model": str(model)}
        )
        assert refused.status_code == 422 and refused.json["error"]["field"] == "model", refused.text
        assert "pin a model of the task's kind" in refused.json["error"]["message"]


def test_a_leads_pages_show_an_image_rounds_thumbnails_and_its_perceptual_health(
    services: Services, client: FlaskClient, tiny_image_model_dir: Path
) -> None:
    round_id = digits_round(services, tiny_image_model_dir)
    first = seven(20)
    made = [
        submit(client, round_id, data_url(png_bytes(image))).json
        for image in (first, shifted(first, 1, 1), seven(21))
    ]
    ref = made[0]["inputs"]["image"]
    thumbnail = f"/dashboard/images/{sha_of(ref)}.png"
    assert client.get(thumbnail).headers["Location"] == "/dashboard/login"  # a lead's session first

    sign_in(client, LEAD_TOKEN)
    page = client.get(f"/dashboard/candidates/{made[0]['id']}").get_data(as_text=True)
    assert f'src="{thumbnail}"' in page
    shown = client.get(thumbnail)
    assert shown.status_code == 200 and shown.mimetype == "image/png"
    assert Image.open(io.BytesIO(shown.data)).size == (96, 96)  # the 28x28 drawing, scaled up sharp
    assert client.get(f"/dashboard/images/{'0' * 64}.png").status_code == 404
    assert f'src="{thumbnail}"' in client.get(f"/dashboard/rounds/{round_id}").get_data(as_text=True)

    health = client.get(f"/dashboard/rounds/{round_id}/health").get_data(as_text=True)
    assert "perceptual diversity" in health and "Distinct-2" not in health
    assert 'data-testid="health-perceptual-diversity"' in health
    figures = client.get(
        f"/api/rounds/{round_id}/health", headers={"Authorization": f"Bearer {LEAD_TOKEN}"}
    ).get_json()
    assert figures["input_kind"] == "image" and figures["near_duplicate_rule"]["threshold"] == 8
    assert figures["repeated_patterns"]["clusters"] == 1 and figures["repeated_patterns"]["candidates"] == 2
    assert figures["diversity"]["distinct_images"] == pytest.approx(2 / 3)
    assert 0 < figures["diversity"]["perceptual_diversity"] < 0.6
    assert f'src="{thumbnail}"' in health  # the repeated drawing's example


def test_a_production_failure_and_a_gold_item_may_be_images_too(
    services: Services, client: FlaskClient, tiny_image_model_dir: Path
) -> None:
    with services.uow() as uow:
        capture_round = uow.rounds.add(
            Round(
                name="digit captures", task_type="digits", model_dir="", model_name="", model_hash="",
                labels=DIGITS, kind=RoundKind.CAPTURE, policy=DecisionPolicy().to_dict(),
            )
        )  # fmt: skip
        uow.commit()
    drawing = png_bytes(seven(30))
    body = {
        "inputs": {"image": data_url(drawing)}, "observed_output": "1", "reported_label": "7",
        "source": "monitoring", "model_name": "prod-digits", "model_version": "1",
        "observed_at": "2026-11-30T08:15:00+00:00",
    }  # fmt: skip
    reported = post(client, f"/api/rounds/{capture_round.id}/captures", token=LEAD_TOKEN, json=body)
    assert reported.status_code == 201, reported.text
    refused = post(
        client,
        f"/api/rounds/{capture_round.id}/captures",
        token=LEAD_TOKEN,
        json={**body, "inputs": {"image": data_url(b"not an image")}},
    )
    assert refused.status_code == 422 and refused.json["error"]["field"] == "inputs.image"
    (kept,) = stored_files(services)
    with services.uow(read_only=True) as uow:
        stored = uow.candidates.get(reported.json["id"])
    assert stored is not None and stored.inputs["image"] == f"sha256:{kept.stem}"

    round_id = digits_round(services, tiny_image_model_dir)
    gold = post(
        client,
        f"/api/rounds/{round_id}/gold",
        token=LEAD_TOKEN,
        json={"items": [{"inputs": {"image": data_url(png_bytes(seven(31)))}, "label": "7"}]},
    )
    assert gold.status_code == 201, gold.text
    assert len(stored_files(services)) == 2
