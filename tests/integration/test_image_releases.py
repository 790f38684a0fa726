"""An image task type's release, on SQLite and PostgreSQL: its rows point to the images it holds
(``images/<sha256>.png``, each once, hashed in the manifest), its Parquet files embed their bytes
as ``datasets.Image()`` features, ``datasets.load_dataset(DIR)`` gives back the submitted pixels,
a drawing and its shifted copy never sit in two kinds of split, and ``dynaval release verify``
names each kind of tampering with the images."""

from __future__ import annotations

import io
import json
import random
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from flask import Flask
from PIL import Image

from dynaval.adapters.files.release_files import iter_jsonl
from dynaval.adapters.predictor import load_model_folder
from dynaval.bootstrap import offline_services
from dynaval.domain.errors import InvalidInput
from dynaval.domain.images.image import ImageInput, ImageUpload, sha_of_release_path
from dynaval.domain.releases.release import split_kind_of
from dynaval.domain.task_type import InputKind
from dynaval.model_training.train import TrainingRequest, train_next_model
from dynaval.service_layer.images import stored_images
from dynaval.service_layer.regression import evaluation, gate, suite
from dynaval.service_layer.releases.releases import ReleaseRequest, create_release
from dynaval.service_layer.releases.verification import verify_release
from dynaval.service_layer.services import Services
from tests.e2e.test_dashboard_pages import sign_in
from tests.fixtures.service import LEAD_TOKEN
from tests.support.drawings import draw_digit, png_bytes, same_pixels, shifted
from tests.support.release_seed import seed_frozen_round
from tests.support.tiny_image_model import build_tiny_image_model

DIGITS = [str(d) for d in range(10)]
ACCEPTED = 60


def keep(services: Services, image: Image.Image) -> tuple[str, bytes]:
    """The image checked and kept as a writer's would be: its reference and canonical PNG."""
    stored = stored_images.checked_image(services.images, ImageUpload(png_bytes(image)), field="image")
    stored_images.keep(services.images, [stored])
    return stored.ref, stored.png


@pytest.fixture
def digits_round(services: Services) -> tuple[int, dict[str, bytes]]:
    """A frozen digits round of 60 accepted drawings (the 7th redrawn as the 1st moved by 2 pixels),
    and each drawing's PNG by reference."""
    assert services.database is not None
    pngs: dict[str, bytes] = {}
    first: list[Image.Image] = []

    def inputs(i: int, label: str) -> dict[str, str]:
        drawing = draw_digit(label, random.Random(1000 + i))
        if i == 0:
            first.append(drawing)
        if i == 10:  # the same digit as the first: a writer drawing the first one again, moved
            drawing = shifted(first[0], 2, 0)
        ref, png = keep(services, drawing)
        pngs[ref] = png
        return {"image": ref}

    seeded = seed_frozen_round(
        services.database, task_type="digits", labels=DIGITS, fields=["image"], accepted=ACCEPTED,
        writers=20, rng=random.Random(7), name="digits one", make_inputs=inputs,
    )  # fmt: skip
    return seeded.round_id, pngs


def build(services: Services, round_id: int) -> Path:
    made = create_release(services, ReleaseRequest(round_ids=[round_id], version="1.0.0", created_by="lead"))
    return Path(made.folder)


def test_an_image_release_loads_as_the_submitted_pixels_and_verifies(
    services: Services, digits_round: tuple[int, dict[str, bytes]], tmp_path: Path
) -> None:
    import datasets

    round_id, pngs = digits_round
    root = build(services, round_id)
    assert verify_release(root, offline_services()) == []
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["image_fields"] == ["image"]
    listed = {entry["path"]: entry["sha256"] for entry in manifest["images"]}
    assert sorted(p.name for p in (root / "images").iterdir()) == sorted(Path(p).name for p in listed)
    assert all(Path(path).stem == sha for path, sha in listed.items())
    assert manifest["near_duplicates"]["rule"]["method"] == "centred-phash-hamming"

    rows = {
        path.stem: [row for _line, row in iter_jsonl(path)]
        for path in sorted((root / "jsonl").glob("*.jsonl"))
    }
    loaded = datasets.load_dataset(str(root), cache_dir=str(tmp_path / "datasets-cache"))
    assert set(loaded) == set(rows)
    assert isinstance(loaded[next(iter(loaded))].features["image"], datasets.Image)
    by_ref = {f"images/{ref[7:]}.png": png for ref, png in pngs.items()}
    for split, split_rows in rows.items():
        for row, record in zip(split_rows, loaded[split], strict=True):
            assert record["example_id"] == row["example_id"]
            assert row["image"] in listed
            submitted = Image.open(io.BytesIO(by_ref[row["image"]]))
            assert same_pixels(record["image"], submitted)
            assert record["image"].size == submitted.size
    # The drawing and its shifted copy: one cluster, kept in one kind of split (or one withheld).
    refs = list(pngs)
    pair = {f"images/{refs[0][7:]}.png", f"images/{refs[10][7:]}.png"}
    kinds = {
        split_kind_of(split)
        for split, split_rows in rows.items()
        for row in split_rows
        if row["image"] in pair
    }
    assert len(kinds) == 1
    assert manifest["near_duplicates"]["across_splits"]["pairs"] == 0
    card = (root / "README.md").read_text()
    assert "perceptual hashes (144 bits" in card and "dtype: image" in card


def test_verify_names_tampering_with_the_images(
    services: Services, digits_round: tuple[int, dict[str, bytes]], tmp_path: Path
) -> None:
    round_id, _pngs = digits_round
    root = build(services, round_id)
    manifest = json.loads((root / "manifest.json").read_text())
    victim = manifest["images"][0]["path"]

    def copy(name: str) -> Path:
        return Path(shutil.copytree(root, tmp_path / name))

    swapped = copy("swapped")  # an image's pixels changed under its name
    (swapped / victim).write_bytes(png_bytes(draw_digit("1", random.Random(5))))
    assert any(
        f"image {victim}: SHA-256 differs" in line for line in verify_release(swapped, offline_services())
    )

    missing = copy("missing")
    (missing / victim).unlink()
    assert f"image {victim}: missing" in verify_release(missing, offline_services())

    extra = copy("extra")
    stray = f"images/{'0' * 64}.png"
    (extra / stray).write_bytes(b"x")
    assert f"image {stray}: not in the manifest" in verify_release(extra, offline_services())

    # The Parquet bytes of one row replaced by another image's: the JSONL and Parquet disagree.
    embedded = copy("embedded")
    shard = next((embedded / "data").glob("train_r1-*.parquet"))
    table = pq.read_table(shard)
    cells = table.column("image").to_pylist()
    cells[0], cells[1] = cells[1], cells[0]
    replaced = table.set_column(
        table.schema.get_field_index("image"),
        table.schema.field("image"),
        pa.array(cells, table.schema.field("image").type),
    )
    pq.write_table(replaced, shard)
    found = verify_release(embedded, offline_services())
    assert any("images: the Parquet files of train_r1 do not hold the images" in line for line in found), (
        found
    )

    # A near-copy across splits, planted by moving a row's image to another split's drawing.
    planted = copy("planted")
    test_rows = next((planted / "jsonl").glob("test_r1.jsonl"))
    train_rows = next((planted / "jsonl").glob("train_r1.jsonl"))
    train_image = next(iter_jsonl(train_rows))[1]["image"]
    lines = test_rows.read_bytes().splitlines()
    first = json.loads(lines[0])
    first["image"] = train_image
    lines[0] = json.dumps(first, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    test_rows.write_bytes(b"\n".join(lines) + b"\n")
    found = verify_release(planted, offline_services())
    assert any(
        "perceptual similarity 1.0000" in line and "perceptual threshold 8" in line for line in found
    ), found
    assert sha_of_release_path(train_image)


def test_the_suite_evaluates_and_gates_image_models_and_text_models_pass_them_by(
    services: Services,
    digits_round: tuple[int, dict[str, bytes]],
    tiny_image_model_dir: Path,
    tmp_path: Path,
    tiny_model_dir: Path,
    app: Flask,
) -> None:
    round_id, _pngs = digits_round
    build(services, round_id)  # its dev and test examples join the suite
    cases = [c for c in suite.list_cases(services) if c.task_type == "digits"]
    assert cases and all(c.inputs["image"].startswith("sha256:") for c in cases)

    threes = evaluation.evaluate(services, tiny_image_model_dir)  # answers "3" whatever it sees
    assert {c.id for c in threes.cases} == {c.id for c in cases}
    assert all(r.prediction == "3" for r in threes.results.values())
    assert {r.case_id for r in threes.results.values() if r.correct} == {
        c.id for c in cases if c.label == "3"
    }

    # A model that answers "7" instead gets the threes wrong that the first got right: negative flips.
    sevens = build_tiny_image_model(tmp_path / "sevens", always="7")
    outcome = gate.run_gate(services, sevens, baseline=threes.model.hash, by="lead")
    flipped = {c.id for c in cases if c.label == "3"}
    assert not outcome.result.passed and {f.case.id for f in outcome.result.negative_flips} == flipped

    # A text model has no digits case to answer: the image task type is passed by.
    with pytest.raises(InvalidInput, match="task types of the cases: digits"):
        evaluation.evaluate(services, tiny_model_dir)

    # The Models page shows the image cases as thumbnails.
    client = app.test_client()
    sign_in(client, LEAD_TOKEN)
    page = client.get("/dashboard/models?split=dev_r1").get_data(as_text=True)
    shown = [c for c in cases if c.split == "dev_r1"]
    assert shown and all(f'src="/dashboard/images/{c.inputs["image"][7:]}.png"' in page for c in shown)


def test_an_image_model_is_trained_on_the_release_train_split_and_loads_as_the_service_loads_it(
    services: Services, digits_round: tuple[int, dict[str, bytes]], tmp_path: Path, tiny_model_dir: Path
) -> None:
    """The MNIST example's retraining: a digits release's train split (its drawings, read from the
    release's own image files) fine-tunes an image classifier, measured on the dev split before and
    after, and the folder serves as a round's model does."""
    round_id, _pngs = digits_round
    release = build(services, round_id)
    base = build_tiny_image_model(tmp_path / "base", DIGITS, seed=3)
    lines: list[str] = []
    steps: list[tuple[int, int]] = []

    class Progress:
        def step(self, name: str, total: int | None = None) -> None:
            lines.append(f"step {name}")

        def advance(self, done: int, total: int | None = None) -> None:
            steps.append((done, total or 0))

    out = tmp_path / "trained"
    trained = train_next_model(
        TrainingRequest(releases=[release], base=base, out=out, epochs=3, batch_size=8, seed=5),
        files=offline_services(),
        log=lines.append,
        progress=Progress(),
    )
    record = trained.record
    train_rows = sum(1 for _ in iter_jsonl(release / "jsonl" / "train_r1.jsonl"))
    assert record.split_rows == {"train_r1": train_rows} and train_rows > 0
    assert record.learning_rate == 1e-3  # the image default
    assert [dev.split for dev in record.dev] == ["dev_r1"] and record.dev[0].after is not None
    assert "step training" in lines and any(line.startswith("epoch 3/3") for line in lines)
    assert steps[-1] == (3 * -(-train_rows // 8), 3 * -(-train_rows // 8))
    assert (out / "README.md").is_file() and (out / "preprocessor_config.json").is_file()
    assert (out / "model.safetensors").read_bytes() != (base / "model.safetensors").read_bytes()
    # The folder serves as an image round's model: it reads a drawing and answers a digit.
    served = load_model_folder(out)
    assert served.input_kind is InputKind.IMAGE and served.labels == tuple(DIGITS)
    drawing = png_bytes(draw_digit("4", random.Random(9)))
    stored = stored_images.checked_image(services.images, ImageUpload(drawing), field="image")
    [prediction] = served.predict([ImageInput(sha256=stored.sha256, png=stored.png)])
    assert prediction.label in DIGITS and abs(sum(prediction.probabilities.values()) - 1) < 1e-4

    # A text classifier cannot learn drawings: refused by name, nothing written.
    with pytest.raises(InvalidInput, match="holds a text classifier") as refused:
        train_next_model(
            TrainingRequest(releases=[release], base=tiny_model_dir, out=tmp_path / "wrong"),
            files=offline_services(),
            log=lines.append,
        )
    assert refused.value.field == "base" and not (tmp_path / "wrong").exists()
