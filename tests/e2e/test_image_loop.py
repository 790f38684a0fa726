"""A digits round through the whole loop against the real Label Studio, on SQLite and PostgreSQL,
tried as a new user would: drawn digits submitted over the API are scored, pushed blind with a
signed URL that loads without a token (and is signed again before it expires), validated by Label
Studio users, decided, frozen, released
and loaded back with ``datasets`` as the same pixels; a shifted copy and a re-encoded copy are
near-copies; a bad image gets 413 or 422 and changes nothing, in the service or in Label Studio.
"""

from __future__ import annotations

import io
import json
import random
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from dynaval.service_layer.validation import task_images
from tests.e2e.test_task_types import Loop
from tests.fixtures.service import OTHER_WRITER_TOKEN, LiveService, running_service
from tests.support.drawings import data_url, draw_digit, jpeg_bytes, png_bytes, same_pixels, shifted
from tests.support.jobs import built_release

pytestmark = pytest.mark.labelstudio


@pytest.fixture
def image_service(
    database_url: str, tmp_path: Path, label_studio_server: Any, tiny_model_dir: Path
) -> Iterator[LiveService]:
    with running_service(database_url, tmp_path / "data", label_studio_server, tiny_model_dir) as live:
        yield live


def project_tasks(loop: Loop, project_id: int) -> int:
    return len(list(loop.ls.tasks.list(project=project_id)))


def collected(service: LiveService, round_id: int) -> int:
    return int(service.call("GET", f"/api/rounds/{round_id}").json()["counts"]["collected"])


def test_a_digits_round_goes_from_a_drawing_to_a_released_image(
    image_service: LiveService,
    label_studio_server: Any,
    label_studio_annotators: list[Any],
    tiny_image_model_dir: Path,
    tmp_path: Path,
) -> None:
    import datasets

    loop = Loop(image_service, label_studio_server, label_studio_annotators, "digits")
    created = loop.create(tiny_image_model_dir, "digits round")  # the model answers "3" to everything
    assert created["input_kind"] == "image" and created["labels"] == [str(d) for d in range(10)]

    seven = draw_digit("7", random.Random(70))
    drawings = {
        "accept": (png_bytes(seven), "7"),
        "reject": (png_bytes(draw_digit("1", random.Random(10))), "1"),
        "not_fooled": (png_bytes(draw_digit("3", random.Random(30))), "3"),
    }
    ids = {}
    for kind, (image, label) in drawings.items():
        body = loop.submit({"image": data_url(image)}, label)
        ids[kind] = body["id"]
        assert body["model_prediction"] == "3" and body["fooled"] is (label != "3")
        assert body["inputs"]["image"].startswith("sha256:") and body["near_duplicates"] == []

    # Copies of the seven: moved by two pixels, re-encoded as a JPEG. Both near-copies, flagged.
    for copy, media in ((png_bytes(shifted(seven, 2, 1)), "image/png"), (jpeg_bytes(seven), "image/jpeg")):
        response = image_service.call(
            "POST",
            f"/api/rounds/{loop.round_id}/candidates",
            token=OTHER_WRITER_TOKEN,
            json={"inputs": {"image": data_url(copy, media)}, "writer_label": "7"},
        )
        assert response.status_code == 201, response.text
        assert response.json()["near_duplicates"][0]["kind"] == "perceptual"
        assert response.json()["near_duplicate_flagged"] is True

    # Blind in Label Studio: the task holds the image's signed URL and nothing of the writer.
    task_ids = {kind: loop.task_id(ids[kind]) for kind in ("accept", "reject")}
    project = created["label_studio_project_id"]
    for kind, task_id in task_ids.items():
        data = loop.ls.tasks.get(id=task_id).data
        assert set(data) == {"candidate_id", "image"} and data["candidate_id"] == ids[kind]
        shown = requests.get(data["image"], timeout=10)  # no token: the signature is the credential
        assert shown.status_code == 200 and shown.headers["Content-Type"] == "image/png"
        assert same_pixels(shown.content, drawings[kind][0])
    parts = urlsplit(loop.ls.tasks.get(id=task_ids["accept"]).data["image"])
    assert requests.get(f"{image_service.url}{parts.path}", timeout=10).status_code == 404  # unsigned

    # Bad images change nothing: no candidate, no task in Label Studio.
    before = (collected(image_service, loop.round_id), project_tasks(loop, project))
    limit = image_service.services.settings.max_image_bytes
    for image, status in (
        (data_url(b"\x89PNG" + b"\x00" * (limit + 1)), 413),
        (data_url(b"GIF89a not a png"), 422),
        (data_url(png_bytes(seven)[:40]), 422),
    ):
        refused = image_service.call(
            "POST",
            f"/api/rounds/{loop.round_id}/candidates",
            token=OTHER_WRITER_TOKEN,
            json={"inputs": {"image": image}, "writer_label": "7"},
        )
        assert refused.status_code == status and refused.json()["error"]["field"] == "inputs.image"

    # Eleven months on, the reconcile pass signs the tasks' URLs again before they expire.
    services = image_service.services
    task_type = services.catalog.get("digits")
    exported = list(services.label_studio.export_tasks(project_id=project, task_type=task_type))
    before_urls = {t.task_id: t.data["image"] for t in exported}
    later = time.time() + 340 * 86_400
    assert task_images.renew_image_urls(services, task_type, exported) == 0  # nothing due yet
    assert task_images.renew_image_urls(services, task_type, exported, now=later) == len(exported)
    for task_id, old in before_urls.items():
        new = loop.ls.tasks.get(id=task_id).data["image"]
        assert new != old and urlsplit(new).path == urlsplit(old).path  # the same image, a new expiry
        assert requests.get(new, timeout=10).status_code == 200

    loop.vote(task_ids["accept"], "A", "7")
    loop.vote(task_ids["accept"], "B", "7")
    loop.vote(task_ids["reject"], "A", "4")
    loop.vote(task_ids["reject"], "B", "4")
    assert loop.candidate(ids["accept"])["status"] == "accepted"
    assert loop.candidate(ids["reject"])["status"] == "rejected"
    assert loop.candidate(ids["not_fooled"])["status"] == "not_fooled"
    assert (collected(image_service, loop.round_id), project_tasks(loop, project)) == before

    # The round dataset names the accepted drawing by its hash, with a signed URL that fetches it.
    (record,) = [json.loads(line) for line in loop.dataset("jsonl").decode().splitlines()]
    assert record["example_id"] == ids["accept"] and record["inputs"]["image"].startswith("sha256:")
    assert same_pixels(requests.get(record["image_urls"]["image"], timeout=10).content, drawings["accept"][0])

    # Frozen and released: the accepted drawing comes back from the files as the same pixels.
    assert image_service.call("POST", f"/api/rounds/{loop.round_id}/close").status_code == 200
    frozen = image_service.call(
        "POST", f"/api/rounds/{loop.round_id}/freeze", json={"force": True, "reason": "done"}
    )
    assert frozen.status_code == 200, frozen.text
    made = built_release(
        image_service,
        image_service.call("POST", "/api/releases", json={"rounds": [loop.round_id], "version": "1.0.0"}),
    )
    # As a researcher gets it: the release's tar, unpacked, loaded with no other argument.
    download = image_service.call("GET", f"/api/releases/{made['id']}/download")
    assert download.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(download.content)) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    (folder,) = (tmp_path / "unpacked").iterdir()
    assert (folder / "images").is_dir()
    # A cache of its own: datasets' shared one keys a folder by its name and its files' stat.
    loaded = datasets.load_dataset(str(folder), cache_dir=str(tmp_path / "datasets-cache"))
    records = [record for split in loaded.values() for record in split]
    by_id = {record["example_id"]: record for record in records}
    assert set(by_id) == {ids["accept"]}
    released = by_id[ids["accept"]]["image"]
    assert same_pixels(released, drawings["accept"][0])
