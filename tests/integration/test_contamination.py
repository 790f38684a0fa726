"""``dynaval health contamination`` against small corpora: planted overlaps are found and listed,
a clean corpus exits 0, bad input exits 2 with one line."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from dynaval.adapters.files.release_files import iter_jsonl
from dynaval.entrypoints.cli import main as cli
from dynaval.service_layer.releases.releases import ReleaseRequest, create_release
from dynaval.service_layer.services import Services
from tests.support.release_seed import seed_frozen_round, set_inputs

SENTIMENT = ["positive", "negative", "neutral"]
LONG = "honestly the plot was not bad at all even if the ending felt rushed and the music far too loud"
OTHER = "the waiter forgot our order twice but the soup that finally came was warm and very tasty"

HOTEL = "the hotel room was filthy and the staff were rude to us"
HOTEL_PARAPHRASE = "our hotel room was dirty and the employees treated us rudely"
"""The same complaint in other words: no 13-gram, few shared shingles; MiniLM cosine 0.89."""

PADDING = "Other reviews on this page talk about the cinema seats, the parking and the popcorn prices."


@pytest.fixture
def release_dir(services: Services) -> Path:
    assert services.database is not None
    seeded = seed_frozen_round(
        services.database, task_type="sentiment", labels=SENTIMENT, fields=["text"], accepted=60,
        writers=20, rng=random.Random(3), name="round one",
    )  # fmt: skip
    set_inputs(services.database, seeded.candidate_ids[0], {"text": LONG})
    set_inputs(services.database, seeded.candidate_ids[1], {"text": OTHER})
    set_inputs(services.database, seeded.candidate_ids[2], {"text": HOTEL})
    made = create_release(
        services, ReleaseRequest(round_ids=[seeded.round_id], version="1.0.0", created_by="test lead")
    )
    return Path(made.folder)


def split_of(root: Path, example_text: str) -> tuple[str, str]:
    for path in (root / "jsonl").glob("*.jsonl"):
        for _line, row in iter_jsonl(path):
            if row["text"] == example_text:
                return row["example_id"], path.stem
    raise AssertionError(f"{example_text!r} is not released")


def run(release: Path, corpus: Path, *extra: str) -> int:
    return cli.main(["health", "contamination", "--release", str(release), "--corpus", str(corpus), *extra])


def test_planted_overlaps_are_listed_and_a_clean_corpus_passes(
    release_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long_id, long_split = split_of(release_dir, LONG)
    other_id, other_split = split_of(release_dir, OTHER)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "\n".join(
            json.dumps({"text": t})
            for t in [
                "An unrelated web page about gardening, tomatoes and the right time to water them.",
                # The example inside a longer page, punctuated and capitalised otherwise: 13-grams.
                f"Review dump. {LONG.upper().replace('rushed', 'rushed,')} -- posted 2026. {PADDING}",
                "",
                # A one-word edit of the other example, in its middle: no 13 words in a row, but a
                # near-duplicate.
                OTHER.replace("soup", "stew"),
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    assert run(release_dir, corpus, "--json") == 1
    report = json.loads(capsys.readouterr().out)
    found = {(c["example_id"], c["check"]): c for c in report["contaminated"]}
    # The one-word edit is also near semantically; each check that found an example is listed.
    assert set(found) == {(long_id, "ngram"), (other_id, "near-duplicate"), (other_id, "semantic")}
    assert found[(other_id, "semantic")]["corpus_line"] == 4
    assert report["near_duplicates"]["semantic"]["threshold"] == 0.8
    ngram = found[(long_id, "ngram")]
    assert ngram["split"] == long_split and ngram["corpus_line"] == 2
    assert len(ngram["ngram"].split()) == 13 and ngram["ngram"] in LONG.replace(",", "")
    near = found[(other_id, "near-duplicate")]
    assert near["split"] == other_split and near["corpus_line"] == 4 and 0.6 <= near["similarity"] < 1
    assert report["documents"] == 4 and report["examples"] > 0  # an empty text is a document

    assert run(release_dir, corpus) == 1
    printed = capsys.readouterr()
    assert f"{long_id} ({long_split}): ngram, corpus line 2, 13-gram " in printed.out
    assert f"{other_id} ({other_split}): near-duplicate, corpus line 4, similarity " in printed.out

    clean = tmp_path / "clean.txt"
    clean.write_text("nothing from the benchmark here\nnor here, in a second document\n", encoding="utf-8")
    assert run(release_dir, clean) == 0
    printed = capsys.readouterr()
    assert printed.out == "" and "0 of" in printed.err


def test_a_planted_paraphrase_is_found_by_the_semantic_check(
    release_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hotel_id, hotel_split = split_of(release_dir, HOTEL)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        f"An unrelated web page about gardening and tomatoes.\n{HOTEL_PARAPHRASE}\n",
        encoding="utf-8",
    )
    assert run(release_dir, corpus, "--json") == 1
    report = json.loads(capsys.readouterr().out)
    assert [(c["example_id"], c["check"]) for c in report["contaminated"]] == [(hotel_id, "semantic")]
    found = report["contaminated"][0]
    assert found["split"] == hotel_split and found["corpus_line"] == 2 and 0.8 <= found["similarity"] < 1

    assert run(release_dir, corpus) == 1
    printed = capsys.readouterr()
    assert f"{hotel_id} ({hotel_split}): semantic, corpus line 2, similarity 0.8" in printed.out
    assert "lexical or semantic" in printed.err

    # The lexical checks alone miss it.
    assert run(release_dir, corpus, "--no-semantic", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["contaminated"] == []
    assert report["near_duplicates"]["semantic"] == {"checked": False, "why": "turned off (--no-semantic)"}


def test_bad_input_exits_2_with_one_line(
    release_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = tmp_path / "corpus.csv"
    csv.write_text("text\nhello\n")
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"text": "fine"}\n{"body": "no text field"}\n')
    good = tmp_path / "good.txt"
    good.write_text("a document\n")
    cases = [
        (release_dir, csv, (), "a corpus is a .txt file"),
        (release_dir, tmp_path / "missing.txt", (), "no such file"),
        (release_dir, bad_json, (), 'line 2: no string "text" field'),
        (tmp_path, good, (), "--release: "),
        (release_dir, good, ("--ngram", "0"), "--ngram must be at least 1"),
    ]
    for release, corpus, extra, reason in cases:
        assert run(release, corpus, *extra) == 2, reason
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and reason in err and "Traceback" not in err, err
