"""The NLI default model's builder: the packaged seed pairs, their sentence-pair encoding, and a
whole build on a tiny BERT (built in a second from a config) in place of the shipped MiniLM."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from dynaval.adapters.label_config import LabelConfigCatalog
from dynaval.entrypoints.cli.main import main
from dynaval.model_builder import fine_tuning
from dynaval.model_builder.default_model import (
    NLI_SEED_LABELS,
    TASKS,
    Example,
    LabelledPair,
    LabelledText,
    build_default_model,
    load_nli_seed,
    load_task_seed,
    tokenize_batch,
)
from tests.support.tiny_model import build_tiny_model

REPO_ROOT = Path(__file__).resolve().parents[2]


def nli_labels() -> tuple[str, ...]:
    return LabelConfigCatalog(REPO_ROOT / "label_config").get("nli").labels


def normalised(text: str) -> str:
    return " ".join(text.casefold().split())


# ------------------------------------------------------------------------------ the seed pairs


def test_the_nli_seed_files_hold_exactly_premise_hypothesis_and_label() -> None:
    seed = resources.files("dynaval.model_builder").joinpath("seed")
    for name in ("nli_train.jsonl", "nli_heldout.jsonl"):
        for line in seed.joinpath(name).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            assert set(row) == {"premise", "hypothesis", "label"}, (name, row)
            assert all(isinstance(value, str) and value.strip() for value in row.values()), (name, row)


def test_the_nli_seed_is_large_balanced_and_in_the_labelling_configs_labels() -> None:
    train, heldout = load_nli_seed("train"), load_nli_seed("heldout")
    assert (len(train), len(heldout)) == (666, 174)
    assert Counter(r.label for r in train) == dict.fromkeys(NLI_SEED_LABELS, 222)
    assert Counter(r.label for r in heldout) == dict.fromkeys(NLI_SEED_LABELS, 58)
    assert all(isinstance(r, LabelledPair) and r.premise.strip() and r.hypothesis.strip() for r in train)
    assert NLI_SEED_LABELS == nli_labels() == TASKS["nli"].labels


def test_the_nli_held_out_pairs_share_no_premise_or_hypothesis_with_training() -> None:
    train, heldout = load_nli_seed("train"), load_nli_seed("heldout")
    for rows in (train, heldout):
        assert len({(normalised(r.premise), normalised(r.hypothesis)) for r in rows}) == len(rows)
    assert not {normalised(r.premise) for r in train} & {normalised(r.premise) for r in heldout}
    assert not {normalised(r.hypothesis) for r in train} & {normalised(r.hypothesis) for r in heldout}


def test_seed_sets_by_task() -> None:
    assert all(isinstance(r, LabelledPair) for r in load_task_seed("nli", "heldout"))
    assert all(isinstance(r, LabelledText) for r in load_task_seed("sentiment", "heldout"))
    with pytest.raises(ValueError, match="known tasks: nli, sentiment"):  # digits has no seed set
        load_task_seed("ner", "train")
    with pytest.raises(ValueError, match="unknown seed file"):
        load_nli_seed("../train")


# ------------------------------------------------------------------------------ the encoding


@pytest.fixture(scope="module")
def tiny_nli_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-nli") / "model", labels=NLI_SEED_LABELS)


def test_pairs_are_encoded_as_a_sentence_pair(tiny_nli_model: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_nli_model), local_files_only=True)
    pairs = [
        LabelledPair("the film was good", "the film was bad", "contradiction"),
        LabelledPair("i love this phone", "i like the phone very very much", "entailment"),
    ]
    encoded = tokenize_batch(tokenizer, pairs, max_length=128)

    cls, sep, pad = (tokenizer.convert_tokens_to_ids(t) for t in ("[CLS]", "[SEP]", "[PAD]"))
    for row, pair in enumerate(pairs):
        ids = [i for i in encoded["input_ids"][row].tolist() if i != pad]
        premise = tokenizer(pair.premise, add_special_tokens=False)["input_ids"]
        hypothesis = tokenizer(pair.hypothesis, add_special_tokens=False)["input_ids"]
        assert ids == [cls, *premise, sep, *hypothesis, sep]
        types = encoded["token_type_ids"][row].tolist()[: len(ids)]
        assert types == [0] * (len(premise) + 2) + [1] * (len(hypothesis) + 1)
    assert encoded["input_ids"].shape[0] == 2  # padded to the longest pair, as a tensor

    truncated = tokenize_batch(tokenizer, pairs, max_length=8)
    assert truncated["input_ids"].shape[1] == 8
    assert truncated["token_type_ids"][1].tolist().count(1) >= 2  # both texts kept, each cut


def test_sentences_are_still_encoded_alone(tiny_nli_model: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_nli_model), local_files_only=True)
    encoded = tokenize_batch(tokenizer, [LabelledText("the film was good", "positive")], max_length=64)
    assert set(encoded["token_type_ids"][0].tolist()) == {0}
    with pytest.raises(TypeError, match="mixes"):
        tokenize_batch(
            tokenizer, [LabelledText("a", "positive"), LabelledPair("a", "b", "neutral")], max_length=64
        )


def test_an_nli_build_trains_and_evaluates_on_pairs(
    tiny_nli_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    seen: list[set[type]] = []
    real = fine_tuning.tokenize_batch

    def spy(tokenizer: Any, batch: Sequence[Example], *, max_length: int) -> Any:
        seen.append({type(example) for example in batch})
        return real(tokenizer, batch, max_length=max_length)

    monkeypatch.setattr(fine_tuning, "tokenize_batch", spy)  # the shared training loop encodes
    labels = tuple(reversed(nli_labels()))  # id2label follows the labels passed, not the seed's order
    out_dir = tmp_path / "models" / "nli-default"
    lines: list[str] = []

    report = build_default_model(
        out_dir, task="nli", labels=labels, epochs=1, limit=32, base_model=tiny_nli_model, log=lines.append
    )

    assert seen and all(kinds == {LabelledPair} for kinds in seen)
    assert len(seen) == 2 + 6  # 32 training pairs in batches of 16, 174 held-out pairs in batches of 32
    assert (report.task, report.labels, report.unit) == ("nli", labels, "pairs")
    assert (report.train_examples, report.heldout_examples) == (32, 174)
    assert set(report.per_label_accuracy) == set(labels)
    assert 0.0 <= report.heldout_accuracy <= 1.0
    assert "on 174 pairs; trained on 32 pairs" in lines[-1]
    assert sorted(p.name for p in out_dir.parent.iterdir()) == ["nli-default"]  # no temp leftovers

    model = AutoModelForSequenceClassification.from_pretrained(str(out_dir), local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(str(out_dir), local_files_only=True)
    assert [model.config.id2label[i] for i in range(3)] == list(labels)
    logits = model(**tokenizer(["the film was good"], ["the film was bad"], return_tensors="pt")).logits
    assert tuple(logits.shape) == (1, 3)


def test_an_nli_build_refuses_the_sentiment_labels(tiny_nli_model: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="labels"):
        build_default_model(
            tmp_path / "model",
            task="nli",
            labels=("positive", "negative", "neutral"),
            base_model=tiny_nli_model,
            log=lambda _: None,
        )
    assert not (tmp_path / "model").exists()


# ------------------------------------------------------------------------------ the command


@pytest.mark.parametrize("task", ["nope", "NLI", "../nli", ""])
def test_build_default_names_the_known_tasks_for_an_unknown_one(
    task: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DYNAVAL_DATA_DIR", str(tmp_path / "data"))
    code = main(["model", "build-default", "--task", task])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err == f"dynaval: no default model for task {task!r}; known tasks: digits, nli, sentiment\n"
    assert not (tmp_path / "data").exists()


def test_build_default_for_nli_writes_beside_the_sentiment_model_by_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DYNAVAL_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "data" / "models" / "nli-default").mkdir(parents=True)
    assert main(["model", "build-default", "--task", "nli"]) == 0
    out, _ = capsys.readouterr()
    expected = tmp_path / "data" / "models" / "nli-default"
    assert out == f"the default nli model is already built in {expected} (use --force to rebuild)\n"

    monkeypatch.setenv("DYNAVAL_DEFAULT_MODEL_DIR", str(tmp_path / "elsewhere" / "sentiment"))
    (tmp_path / "elsewhere" / "nli-default").mkdir(parents=True)
    assert main(["model", "build-default", "--task", "nli"]) == 0
    assert str(tmp_path / "elsewhere" / "nli-default") in capsys.readouterr().out
