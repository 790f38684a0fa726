"""``dynaval model train``: the next round's model, fine-tuned on real release folders (built from
seeded frozen rounds by the release use case) starting from a tiny BERT, on the CPU.

It learns from train splits only and refuses anything else by name, writes nothing when it refuses,
prints dev accuracy per round before and after, writes a model card naming what it learned from,
gives the same weights for the same seed, and its folder loads as the service loads a model.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dynaval.adapters.files.release_files import file_sha256
from dynaval.adapters.predictor import TransformersPredictor, hash_model_folder
from dynaval.bootstrap import bootstrap, offline_services
from dynaval.domain.releases.release import SplitRule
from dynaval.entrypoints.cli.main import main
from dynaval.model_builder import fine_tuning
from dynaval.model_builder.default_model import load_task_seed
from dynaval.model_builder.fine_tuning import Example, LabelledPair
from dynaval.model_training.train import TrainingRequest, train_next_model
from dynaval.service_layer.releases.releases import ReleaseRequest, create_release
from tests.fixtures.service import make_settings
from tests.support.release_seed import seed_frozen_round
from tests.support.tiny_model import build_tiny_model

SENTIMENT = ("positive", "negative", "neutral")
NLI = ("entailment", "neutral", "contradiction")


@dataclass(frozen=True)
class Releases:
    first: Path
    """dynaval-sentiment 1.0.0: round one."""
    second: Path
    """dynaval-sentiment 1.1.0: rounds one and two (extends 1.0.0)."""
    nli: Path


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> Releases:
    root = tmp_path_factory.mktemp("training-releases")
    services = bootstrap(
        make_settings(
            database_url=f"sqlite:///{root / 'dynaval.sqlite3'}",
            data_dir=root,
            label_studio_url="http://127.0.0.1:9",  # never called: the rounds are seeded
            label_studio_api_key="unused-label-studio-key",
            public_url="http://127.0.0.1:9",
            model_dir=root,
        )
    )
    assert services.database is not None

    def release(rounds: list[int], version: str) -> Path:
        request = ReleaseRequest(round_ids=rounds, version=version, created_by="test lead", rule=SplitRule())
        return Path(create_release(services, request).folder)

    try:
        seed = {"task_type": "sentiment", "labels": SENTIMENT, "fields": ["text"]}
        one = seed_frozen_round(
            services.database, **seed, accepted=60, writers=20, rng=random.Random(1), name="round one"
        )
        first = release([one.round_id], "1.0.0")
        two = seed_frozen_round(
            services.database, **seed, accepted=60, writers=25, rng=random.Random(2), name="round two",
            annotation_base=10**6,
        )  # fmt: skip
        second = release([one.round_id, two.round_id], "1.1.0")
        nli = seed_frozen_round(
            services.database, task_type="nli", labels=NLI, fields=["premise", "hypothesis"], accepted=40,
            writers=15, rng=random.Random(3), name="nli round", annotation_base=2 * 10**6, shared_premises=6,
        )  # fmt: skip
        nli_release = release([nli.round_id], "1.0.0")
    finally:
        services.close()
    return Releases(first, second, nli_release)


@pytest.fixture(scope="module")
def tiny_nli_mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-nli-mixed") / "model", labels=NLI)


def manifest(root: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((root / "manifest.json").read_text())
    return loaded


def train(*args: str) -> int:
    return main(["model", "train", *args])


def test_trains_on_every_train_split_of_two_versions_and_writes_its_card(
    releases: Releases, tiny_model_dir_mixed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "model-b"
    code = train(
        "--release", str(releases.first), "--release", str(releases.second),
        "--base", str(tiny_model_dir_mixed), "--out", str(out), "--epochs", "2", "--seed", "7",
    )  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed

    second = manifest(releases.second)
    splits = second["splits"]
    # 1.1.0 holds 1.0.0's rows unchanged: each is learned from once.
    assert manifest(releases.first)["splits"]["train_r1"] == splits["train_r1"]
    printed_dev = dict(re.findall(r"^  (dev_r\d) \(\d+ rows\): ([0-9.]+ -> [0-9.]+)$", printed, re.M))
    assert set(printed_dev) == {"dev_r1", "dev_r2"}
    assert f"content hash: {hash_model_folder(out)}" in printed

    card = (out / "README.md").read_text()
    for release in (manifest(releases.first), second):
        assert f"| {release['name']} | {release['version']} | `{release['content_hash']}` |" in card
    assert f"| train_r1 | {splits['train_r1']['rows']} |" in card
    assert f"| train_r2 | {splits['train_r2']['rows']} |" in card
    assert "dev_r1 |" not in card.split("## Training")[0] and "test_r" not in card  # learned from train only
    assert f"content hash `{hash_model_folder(tiny_model_dir_mixed)}`" in card
    assert "seed: 7; epochs: 2; learning rate: 8e-05" in card
    assert "Seed set used: no." in card
    assert f"`model.safetensors`: `{file_sha256(out / 'model.safetensors')}`" in card
    for split, figures in printed_dev.items():
        before, after = figures.split(" -> ")
        assert f"| {split} | {splits[split]['rows']} | {before} | {after} |" in card
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model-b"]  # no scratch folder left

    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(str(out), local_files_only=True)
    assert [model.config.id2label[i] for i in range(3)] == list(SENTIMENT)
    predictor = TransformersPredictor(out)
    assert predictor.labels == SENTIMENT and predictor.model_hash == hash_model_folder(out)
    [prediction] = predictor.predict(["the food was not bad at all"])
    assert prediction.label in SENTIMENT and sum(prediction.probabilities.values()) == pytest.approx(1.0)


def test_the_same_seed_gives_the_same_weights_and_predictions(
    releases: Releases, tiny_model_dir_mixed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outs = [tmp_path / "a", tmp_path / "b", tmp_path / "other-seed"]
    for out, seed in zip(outs, ("5", "5", "6"), strict=True):
        args = ["--release", str(releases.first), "--splits", "train_r1", "--base", str(tiny_model_dir_mixed)]
        assert train(*args, "--out", str(out), "--epochs", "1", "--seed", seed) == 0
    capsys.readouterr()
    weights = [file_sha256(out / "model.safetensors") for out in outs]
    assert weights[0] == weights[1] != weights[2]
    assert hash_model_folder(outs[0]) == hash_model_folder(outs[1])
    texts = ["the movie was good", "the staff was not bad at all", "price phone screen"]
    first, again = (TransformersPredictor(out).predict(texts) for out in outs[:2])
    assert first == again


@pytest.mark.parametrize(
    ("splits", "named"),
    [
        ("dev_r1", "dev_r1 is a dev split"),
        ("test_r1", "test_r1 is a test split"),
        ("train_r1,dev_r1", "dev_r1 is a dev split"),
        ("train_r1,test_r2", "test_r2 is a test split"),
        ("train_r2", "train_r2 is not a split of the releases"),
        ("everything", "everything is not a split of the releases"),
    ],
)
def test_refuses_any_split_but_a_present_train_split_and_writes_nothing(
    releases: Releases,
    tiny_model_dir_mixed: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    splits: str,
    named: str,
) -> None:
    out = tmp_path / "models" / "b"
    code = train(
        "--release", str(releases.first), "--splits", splits, "--base", str(tiny_model_dir_mixed),
        "--out", str(out),
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 2
    assert len(captured.err.strip().splitlines()) == 1 and named in captured.err, captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    assert list(tmp_path.iterdir()) == []


def test_refuses_a_base_model_whose_labels_are_not_the_releases(
    releases: Releases, tmp_path: Path, tiny_nli_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reordered = build_tiny_model(tmp_path / "reordered", labels=("negative", "positive", "neutral"))
    for base in (tiny_nli_model_dir, reordered):
        code = train("--release", str(releases.first), "--base", str(base), "--out", str(tmp_path / "out"))
        err = capsys.readouterr().err
        assert code == 2
        assert "['positive', 'negative', 'neutral']" in err  # the release's labels
        labels = NLI if base == tiny_nli_model_dir else ("negative", "positive", "neutral")
        assert str(list(labels)) in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ("{not json", "no readable config.json"),
        ("[1, 2]", "is not a JSON object"),
        ('{"model_type": "bert"}', "has no id2label with ids 0 to n-1"),
        ('{"model_type": "bert", "id2label": {"0": "positive", "2": "neutral"}}', "has no id2label"),
    ],
)
def test_refuses_a_base_whose_config_cannot_say_its_labels(
    releases: Releases, tmp_path: Path, config: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "broken"
    base.mkdir()
    (base / "config.json").write_text(config, encoding="utf-8")
    code = train("--release", str(releases.first), "--base", str(base), "--out", str(tmp_path / "out"))
    err = capsys.readouterr().err
    assert code == 2 and said in err and "base" in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_refuses_an_out_folder_that_holds_files(
    releases: Releases, tiny_model_dir_mixed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "busy"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    code = train("--release", str(releases.first), "--base", str(tiny_model_dir_mixed), "--out", str(out))
    assert code == 2
    assert "not an empty folder" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_refuses_a_release_that_fails_verification(
    releases: Releases, tiny_model_dir_mixed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tampered = shutil.copytree(releases.first, tmp_path / "tampered")
    train_file = tampered / "jsonl" / "train_r1.jsonl"
    lines = train_file.read_text().splitlines(keepends=True)
    train_file.write_text("".join(lines[:-1]))  # one training row dropped
    out = tmp_path / "out"
    code = train("--release", str(tampered), "--base", str(tiny_model_dir_mixed), "--out", str(out))
    err = capsys.readouterr().err
    assert code == 2
    assert f"{tampered} fails verification" in err and "file jsonl/train_r1.jsonl" in err, err
    assert not out.exists()


def test_nli_pairs_train_as_sentence_pairs_with_the_seed_set(
    releases: Releases, tiny_nli_mixed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[set[type]] = []
    real = fine_tuning.tokenize_batch

    def spy(tokenizer: Any, batch: Any, *, max_length: int) -> Any:
        seen.append({type(example) for example in batch})
        return real(tokenizer, batch, max_length=max_length)

    monkeypatch.setattr(fine_tuning, "tokenize_batch", spy)
    lines: list[str] = []
    trained = train_next_model(
        TrainingRequest(
            releases=[releases.nli], base=tiny_nli_mixed, out=tmp_path / "nli-b", epochs=1, with_seed_set=True
        ),
        files=offline_services(),
        log=lines.append,
    )
    seed_set: list[Example] = load_task_seed("nli", "train")
    rows = manifest(releases.nli)["splits"]["train_r1"]["rows"]
    assert seen and all(kinds == {LabelledPair} for kinds in seen)
    assert trained.record.split_rows == {"train_r1": rows}
    assert trained.record.seed_set_rows == len(seed_set) == 666
    assert trained.record.train_rows == rows + 666
    assert [d.split for d in trained.record.dev] == ["dev_r1"]
    card = (trained.folder / "README.md").read_text()
    assert "Seed set used: yes, 666 rows of the task's hand-written seed set." in card
    assert trained.content_hash == hash_model_folder(trained.folder)
    predictor = TransformersPredictor(trained.folder)
    assert predictor.labels == NLI
    [prediction] = predictor.predict([("a man plays the guitar", "a person makes music")])
    assert prediction.label in NLI
