"""The model in the loop through the real loading code: TransformersPredictor and MicroBatcher on
tiny BERT classifiers built in the test session, and the default-model builder on a small budget."""

from __future__ import annotations

import math
import os
import shutil
import threading
from pathlib import Path

import pytest
from pydantic import ValidationError

from dynaval.adapters.label_config import LabelConfigCatalog
from dynaval.adapters.predictor import MicroBatcher, ModelRegistry, Prediction, TransformersPredictor
from dynaval.bootstrap import bootstrap
from dynaval.domain.clock import utcnow
from dynaval.domain.errors import InvalidInput, Unavailable
from dynaval.domain.validation.candidate import CandidateStatus
from dynaval.domain.validation.policy import DecisionPolicy
from dynaval.domain.validation.round import Round
from dynaval.model_builder import SEED_LABELS, build_default_model, load_nli_seed, load_seed
from dynaval.service_layer.predictions import ModelFolder
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation import candidates
from dynaval.service_layer.validation.candidates import GivenInputs
from tests.support.tiny_model import WORDS, build_tiny_model

os.environ["HF_HUB_OFFLINE"] = "1"

REPO_ROOT = Path(__file__).resolve().parents[2]
TEXTS = [
    "the film was good",
    "bad bad hotel",
    "i love this phone !",
    "worst day",
    "the meeting is in the hotel room",
    "great food but the service was poor",
    "not so happy with the battery",
    "the train",
    "my best book , very good",
    "they hate the update",
    "the weather is awful and the flight was late",
    "an excellent movie",
]


def task_labels(task: str) -> tuple[str, ...]:
    for folder in (REPO_ROOT / "label_config", REPO_ROOT / "src" / "dynaval" / "label_config"):
        if (folder / f"{task}.xml").is_file():
            return LabelConfigCatalog(folder).get(task).labels
    pytest.fail(f"label_config/{task}.xml not found")


def sentiment_labels() -> tuple[str, ...]:
    return task_labels("sentiment")


def test_labels_come_from_the_model_config(tmp_path: Path) -> None:
    folder = build_tiny_model(tmp_path / "model", labels=("neutral", "negative", "positive"))
    predictor = TransformersPredictor(folder)
    assert predictor.labels == ("neutral", "negative", "positive")
    assert predictor.name == "model"


def test_fixture_model_has_the_sentiment_labels(tiny_model_dir: Path, tiny_model_dir_mixed: Path) -> None:
    assert TransformersPredictor(tiny_model_dir).labels == sentiment_labels()
    assert TransformersPredictor(tiny_model_dir_mixed).labels == sentiment_labels()


def test_model_hash_is_stable_and_follows_the_files(tiny_model_dir: Path, tmp_path: Path) -> None:
    first = TransformersPredictor(tiny_model_dir).model_hash
    assert first.startswith("sha256:")
    assert TransformersPredictor(tiny_model_dir).model_hash == first

    copy = shutil.copytree(tiny_model_dir, tmp_path / "copy")
    assert TransformersPredictor(copy).model_hash == first  # content, not location
    (copy / ".lock").write_text("hidden files do not count")
    assert TransformersPredictor(copy).model_hash == first

    config = copy / "config.json"
    config.write_text(config.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    changed = TransformersPredictor(copy).model_hash
    assert changed != first
    assert TransformersPredictor(copy).model_hash == changed


@pytest.mark.parametrize("label", ["positive", "negative", "neutral"])
def test_an_always_model_predicts_its_label(tmp_path: Path, label: str) -> None:
    predictor = TransformersPredictor(build_tiny_model(tmp_path / "model", always=label))
    predictions = predictor.predict(TEXTS)
    assert len(predictions) == len(TEXTS)
    for prediction in predictions:
        assert prediction.label == label
        assert set(prediction.probabilities) == {"positive", "negative", "neutral"}
        assert math.isclose(sum(prediction.probabilities.values()), 1.0, abs_tol=1e-5)
        assert prediction.probabilities[label] == max(prediction.probabilities.values())


def test_the_neutral_fixture_always_answers_neutral(tiny_model_dir: Path) -> None:
    assert {p.label for p in TransformersPredictor(tiny_model_dir).predict(TEXTS)} == {"neutral"}


def test_a_model_made_for_fewer_tokens_reads_its_own_number(tiny_model_dir_mixed: Path) -> None:
    """The tiny model has 128 position embeddings, fewer than the 256 tokens the predictor reads at
    most: a longer text, or pair, is read as its first 128 tokens instead of failing the forward pass
    (a candidate is stored before it is scored, so it would have stayed in ``scoring``)."""
    predictor = TransformersPredictor(tiny_model_dir_mixed)
    assert predictor.max_tokens == 128
    words = [WORDS[i % len(WORDS)] for i in range(400)]
    cut = " ".join(words[:126])  # with [CLS] and [SEP]: 128 tokens, each word one token
    assert len(predictor._tokenizer(cut)["input_ids"]) == 128
    long, first = predictor.predict([" ".join(words), cut])
    assert long.label == first.label
    for label, p in long.probabilities.items():  # rows of one batch: equal to float rounding
        assert math.isclose(p, first.probabilities[label], rel_tol=1e-5)
    premise, hypothesis = " ".join(words[:300]), " ".join(words[300:])
    (pair,) = predictor.predict([(premise, hypothesis)])
    assert math.isclose(sum(pair.probabilities.values()), 1.0, rel_tol=1e-6)
    # A limit above the model's own is cut to it; one below it is kept.
    assert TransformersPredictor(tiny_model_dir_mixed, max_length=64).max_tokens == 64


def test_token_counts_are_the_uncut_encodings(tiny_model_dir_mixed: Path) -> None:
    predictor = TransformersPredictor(tiny_model_dir_mixed)
    words = [WORDS[i % len(WORDS)] for i in range(300)]
    short, long = " ".join(words[:5]), " ".join(words)
    assert predictor.token_counts([short, long]) == [7, 302]  # [CLS] ... [SEP]
    assert predictor.token_counts([(short, long)]) == [308]  # [CLS] a [SEP] b [SEP]
    assert predictor.token_counts([long, (short, short)]) == [302, 13]  # kinds mixed, order kept
    assert predictor.token_counts([]) == []


def test_predict_of_nothing_is_nothing(tiny_model_dir: Path) -> None:
    assert TransformersPredictor(tiny_model_dir).predict([]) == []


def test_micro_batcher_matches_batch_one_and_batches(tiny_model_dir_mixed: Path) -> None:
    predictor = TransformersPredictor(tiny_model_dir_mixed)
    texts = [" ".join(WORDS[(i * 7 + j * 13) % len(WORDS)] for j in range(1 + i % 11)) for i in range(128)]
    expected = [predictor.predict([text])[0] for text in texts]
    assert len({p.label for p in expected}) > 1, "the mixed model should not answer one label only"

    batcher = MicroBatcher(predictor, max_batch=32, max_wait_s=0.005)
    threads_n = 32
    results: dict[int, Prediction] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads_n)

    def writer(worker: int) -> None:
        try:
            barrier.wait()
            for index in range(worker, len(texts), threads_n):
                results[index] = batcher.predict_one(texts[index])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(threads_n)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        batcher.close()
    assert not errors
    assert sorted(results) == list(range(len(texts)))
    for index, prediction in results.items():
        assert prediction.label == expected[index].label, texts[index]
        for label, probability in prediction.probabilities.items():
            assert math.isclose(probability, expected[index].probabilities[label], abs_tol=1e-4)
    assert 0 < batcher.batches_run < len(texts)


def test_a_folder_without_config_is_invalid_input(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidInput) as info:
        TransformersPredictor(tmp_path / "empty")
    assert info.value.field == "model"


def test_a_look_at_a_folder_says_whether_it_is_one_and_holds_a_model(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    registry = ModelRegistry(factory=TransformersPredictor)
    (tmp_path / "empty").mkdir()
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "link").symlink_to(tiny_model_dir)
    assert registry.look_at(tiny_model_dir) == ModelFolder(tiny_model_dir.resolve(), True, True)
    assert registry.look_at(tmp_path / "link") == ModelFolder(tiny_model_dir.resolve(), True, True)
    assert registry.look_at(tmp_path / "empty") == ModelFolder((tmp_path / "empty").resolve(), True, False)
    assert registry.look_at(tmp_path / "a-file").is_dir is False
    assert registry.look_at(tmp_path / "gone") == ModelFolder((tmp_path / "gone").resolve(), False, False)
    # A name the file system refuses is no folder, not an error.
    refused = tmp_path / "nul\x00byte"
    for name in (refused, tmp_path / ("x" * 5000)):
        found = registry.look_at(name)
        assert (found.is_dir, found.has_model) == (False, False)


def test_a_folder_with_a_broken_model_is_invalid_input(tiny_model_dir: Path, tmp_path: Path) -> None:
    broken = shutil.copytree(tiny_model_dir, tmp_path / "broken")
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(InvalidInput) as info:
        TransformersPredictor(broken)
    assert info.value.field == "model"


def test_seed_data_is_balanced_and_held_out_is_separate() -> None:
    train, heldout = load_seed("train"), load_seed("heldout")
    assert len(train) >= 420 and len(heldout) >= 90
    for rows, minimum in ((train, 140), (heldout, 30)):
        counts = {label: sum(1 for r in rows if r.label == label) for label in SEED_LABELS}
        assert set(counts) == {r.label for r in rows}
        assert min(counts.values()) >= minimum
    train_texts = {r.text.casefold() for r in train}
    assert len(train_texts) == len(train)
    assert not train_texts & {r.text.casefold() for r in heldout}
    assert set(SEED_LABELS) == set(sentiment_labels())
    with pytest.raises(ValueError):
        load_seed("../secrets")


def test_build_default_model_rejects_other_labels(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="labels"):
        build_default_model(tmp_path / "model", labels=("yes", "no"), log=lambda _: None)
    assert not (tmp_path / "model").exists()


def test_build_default_model_on_a_small_budget(tmp_path: Path) -> None:
    labels = sentiment_labels()
    out_dir = tmp_path / "models" / "sentiment-default"
    out_dir.mkdir(parents=True)
    (out_dir / "stale.txt").write_text("an older model is replaced whole")
    lines: list[str] = []

    report = build_default_model(out_dir, labels=labels, epochs=1, limit=48, max_seconds=45, log=lines.append)

    assert report.out_dir == out_dir
    assert report.labels == labels
    assert report.train_examples == 48
    assert report.heldout_examples == len(load_seed("heldout"))
    assert 0.0 <= report.heldout_accuracy <= 1.0
    assert set(report.per_label_accuracy) == set(labels)
    assert report.seconds > 0 and lines
    assert not (out_dir / "stale.txt").exists()
    assert sorted(p.name for p in out_dir.parent.iterdir()) == ["sentiment-default"]  # no temp leftovers

    predictor = TransformersPredictor(out_dir)
    assert predictor.labels == labels
    (prediction,) = predictor.predict(["The staff were wonderful and the room was spotless."])
    assert prediction.label in labels
    assert math.isclose(sum(prediction.probabilities.values()), 1.0, abs_tol=1e-5)


def test_a_pair_is_encoded_as_a_pair_and_mixed_batches_answer_as_alone(tiny_model_dir_mixed: Path) -> None:
    predictor = TransformersPredictor(tiny_model_dir_mixed)
    pair = ("the film was good", "the book was bad")
    (as_pair,) = predictor.predict([pair])
    (as_one_text,) = predictor.predict(["the film was good the book was bad"])
    # The second text gets the pair's segment embedding, so the pair is not the joined text.
    assert as_pair.probabilities != as_one_text.probabilities
    given: list[str | tuple[str, str]] = [TEXTS[0], pair, TEXTS[1], ("worst day", "an excellent movie")]
    mixed = predictor.predict(given)
    alone = [predictor.predict([item])[0] for item in given]
    assert [p.label for p in mixed] == [p.label for p in alone]
    for got, expected in zip(mixed, alone, strict=True):
        for label, probability in expected.probabilities.items():
            assert math.isclose(got.probabilities[label], probability, abs_tol=1e-5)


def test_build_default_nli_model_on_a_small_budget(tmp_path: Path) -> None:
    labels = task_labels("nli")
    out_dir = tmp_path / "models" / "nli-default"
    lines: list[str] = []

    report = build_default_model(
        out_dir, task="nli", labels=labels, epochs=1, limit=48, max_seconds=45, log=lines.append
    )

    assert (report.out_dir, report.labels, report.unit) == (out_dir, labels, "pairs")
    assert report.train_examples == 48
    assert report.heldout_examples == len(load_nli_seed("heldout"))
    assert 0.0 <= report.heldout_accuracy <= 1.0
    assert set(report.per_label_accuracy) == set(labels)
    assert sorted(p.name for p in out_dir.parent.iterdir()) == ["nli-default"]  # no temp leftovers

    predictor = TransformersPredictor(out_dir)  # an ordinary sequence classifier folder
    assert predictor.labels == labels


def open_sentiment_round(services: Services, model: Path) -> int:
    """An open sentiment round of the model in ``model``, stored straight into the database."""
    with services.uow() as uow:
        made = uow.rounds.add(
            Round(
                name="tokens", task_type="sentiment", model_dir=str(model), model_name=model.name,
                model_hash="", labels=list(sentiment_labels()), policy=DecisionPolicy().to_dict(),
            )
        )  # fmt: skip
        uow.commit()
    assert made.id is not None
    return made.id


def test_the_service_reads_as_many_tokens_as_its_setting(
    services: Services, tiny_model_dir_mixed: Path
) -> None:
    """``DYNAVAL_MODEL_MAX_TOKENS`` is what the service's models read: below the model's own limit it
    is kept, and a longer example is refused naming it; left alone, the model's own 128 applies."""
    round_id = open_sentiment_round(services, tiny_model_dir_mixed)
    words = [WORDS[i % len(WORDS)] for i in range(40)]
    narrow = bootstrap(services.settings.model_copy(update={"model_max_tokens": 32}))
    try:
        assert narrow.models.get_path(tiny_model_dir_mixed).predictor.max_tokens == 32
        fits = candidates.predict(
            narrow, round_id=round_id, given=GivenInputs({"text": " ".join(words[:30])})
        )
        assert fits.label in sentiment_labels()
        with pytest.raises(InvalidInput) as refused:
            candidates.predict(narrow, round_id=round_id, given=GivenInputs({"text": " ".join(words)}))
        assert refused.value.field == "inputs.text"
        assert (
            "this example is 42 tokens long and the round's model reads at most 32" in refused.value.message
        )
    finally:
        narrow.close()
    assert services.models.get_path(tiny_model_dir_mixed).predictor.max_tokens == 128
    answer = candidates.predict(services, round_id=round_id, given=GivenInputs({"text": " ".join(words)}))
    assert answer.label in sentiment_labels()
    with pytest.raises(ValidationError, match="model_max_tokens"):
        services.settings.model_validate({**services.settings.model_dump(), "model_max_tokens": 8})


def test_a_round_whose_model_folder_is_gone_is_unavailable_and_loses_nothing(
    services: Services, tiny_model_dir_mixed: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The folder was checked when the round was made; if it goes later, a writer gets 503 saying
    so, not a 422 naming their input with the server's path in it; the submitted candidate waits in
    ``scoring``, and the sweep scores it once the folder is back (before, the sweep stopped at it)."""
    folder = tmp_path / "round-model"
    shutil.copytree(tiny_model_dir_mixed, folder)
    round_id = open_sentiment_round(services, folder)
    shutil.rmtree(folder)
    given = GivenInputs({"text": "the film was good"})
    with caplog.at_level("WARNING", logger="dynaval.service_layer.validation.candidates"):
        for ask in (
            lambda: candidates.predict(services, round_id=round_id, given=given),
            lambda: candidates.model_reading(services, round_id=round_id),
            lambda: candidates.submit_candidate(
                services,
                round_id=round_id,
                candidate=candidates.NewCandidate(given, "positive"),
                submitter=candidates.Submitter("writer-ana"),
            ),
        ):
            with pytest.raises(Unavailable) as refused:
                ask()
            assert (
                refused.value.message
                == f"round {round_id}'s model cannot be loaded now; a lead must restore its folder"
            )
            assert str(tmp_path) not in refused.value.message
        assert str(folder) in caplog.text  # the reason, for whoever runs the service
        with pytest.raises(Unavailable):
            candidates.submit_candidate(
                services, round_id=round_id, candidate=candidates.NewCandidate(given, "negative"),
                submitter=candidates.Submitter("writer-bo"),
            )  # fmt: skip
        with services.uow(read_only=True) as uow:
            waiting = uow.candidates.left_scoring(utcnow(), 10)
        assert len(waiting) == 2
        caplog.clear()
        # Not raised: the next sweep tries again; and one try of the round's model per sweep.
        assert candidates.score_pending(services, older_than_s=0) == 0
        assert caplog.text.count("its model cannot be loaded") == 1
    shutil.copytree(tiny_model_dir_mixed, folder)
    assert candidates.score_pending(services, older_than_s=0) == 2
    with services.uow(read_only=True) as uow:
        assert all(uow.candidates.get(c.id).status is not CandidateStatus.SCORING for c in waiting)
