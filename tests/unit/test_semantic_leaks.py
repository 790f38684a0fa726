"""Semantic near-duplicates among many rows, with the real MiniLM encoder: a row's cap on its
nearest hits (``HITS_PER_ROW``) hides no pair across kinds of split at verify, and loses no link of
a cluster at create."""

from __future__ import annotations

from dynaval.adapters.files.release_files import ReleaseFolders
from dynaval.adapters.health.semantic_index import shared_encoder
from dynaval.domain.health.near_duplicates import NearDuplicateRule
from dynaval.domain.health.semantic_duplicates import SemanticRule
from dynaval.service_layer.health.release_leaks import LeakScan, cross_split_pairs
from dynaval.service_layer.health.semantic_leaks import HITS_PER_ROW

# A paraphrase the lexical rule misses, a little above the semantic threshold (0.8).
LAPTOP = (
    "the laptop keyboard stopped working after just two weeks",
    "after only two weeks the keys on my laptop quit working",
)
COPIES = HITS_PER_ROW + 1
"""More copies of a text than a row's capped hits: each copy's nearest are its copies (cosine 1)."""


def test_verify_finds_crossing_pairs_behind_more_than_hits_per_row_nearer_rows_of_one_kind() -> None:
    train = [(f"a{i:03d}", "train_r1", {"text": LAPTOP[0]}) for i in range(COPIES)]
    paraphrase = ("b000", "test_r1", {"text": LAPTOP[1]})
    # One test row, less similar to each train row than the train rows are to each other.
    pairs = cross_split_pairs(
        [*train, paraphrase], ["text"], NearDuplicateRule(), SemanticRule(), encoder=shared_encoder
    )
    assert [(p.a, p.b) for p in pairs] == [(a, "b000") for a, _split, _row in train]
    assert {p.kind for p in pairs} == {"semantic"}
    assert all(0.8 <= p.similarity < 0.99 for p in pairs)

    # The paraphrase repeated as often in the test split: every row's nearest are its own copies.
    test = [(f"b{i:03d}", "test_r1", {"text": LAPTOP[1]}) for i in range(COPIES)]
    pairs = cross_split_pairs(
        [*train, *test], ["text"], NearDuplicateRule(), SemanticRule(), encoder=shared_encoder
    )
    assert len(pairs) == COPIES * COPIES
    assert {(p.split_a, p.split_b) for p in pairs} == {("train_r1", "test_r1")}


def test_a_cluster_keeps_its_link_behind_more_than_hits_per_row_nearer_rows() -> None:
    # Two patterns, each repeated more often than a row's capped hits, near each other only in
    # other words: at create they are one cluster, kept in one kind of split.
    scan = LeakScan(fields=["text"], encoder=shared_encoder, reader=ReleaseFolders())
    keys = [f"{side}{i:03d}" for side in "ab" for i in range(COPIES)]
    for key in keys:
        scan.add(key, {"text": LAPTOP[0] if key.startswith("a") else LAPTOP[1]})
    # Each row's capped hits are its own copies (cosine 1): no pair joins the two patterns.
    assert all(a[0] == b[0] for a, b, _sim, _kind in scan.pairs())
    near_keys, placed = scan.clusters()
    assert set(near_keys) == set(keys) and placed == {}
    assert {near_keys[key] for key in keys} == {("near\x1fa000",)}

    # Were they across kinds of split anyway (as a parent release's unchanged splits may hold
    # them), the manifest would count every pair across, as verify does.
    splits = {key: "train_r1" if key.startswith("a") else "test_r1" for key in keys}
    across = scan.report(splits, withheld=0)["across_splits"]
    assert across["pairs"] == COPIES * COPIES
    assert {entry["kind"] for entry in across["listed"]} == {"semantic"}
