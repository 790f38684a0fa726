"""Benchmark: the semantic near-duplicate check at 1,000,000 earlier examples.

Goal (issue 16): with 1,000,000 earlier examples indexed, the check adds at most 20 ms at p99 to a
submission. The semantic part is encoding the submission (one MiniLM forward pass on the CPU) and
one search of the vector index; this prints both, their sum against the goal, the time to build
the index from 1,000,000 vectors (what a rebuild costs once the vectors are read), its memory, and
the index's recall against an exact brute-force search.

Encoding a million texts is too slow here, so the million vectors are synthetic: random unit
vectors (nearly orthogonal, as unrelated texts are: cosine about 0 +- 0.05 at 384 dimensions), plus
near-duplicates planted around the queries at cosines drawn uniformly from the threshold to 1.
Random vectors have no cluster structure, the hardest case for the index's cells.

Run: ``python benchmarks/semantic_index.py [--count 1000000] [--fields 1] [--queries 1000]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import time
from importlib import resources

import numpy

GOAL_MS = 20.0


def rss_mb(field: str = "VmRSS") -> float:
    """This process's resident memory now (``VmRSS``) or at its peak (``VmHWM``), in MB."""
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def percentiles(samples_ms: list[float]) -> tuple[float, float]:
    values = numpy.asarray(samples_ms)
    return float(numpy.percentile(values, 50)), float(numpy.percentile(values, 99))


def seed_examples(fields: int) -> list[list[str]]:
    """The seed sets' examples as the check encodes them: a sentence alone, or (for two fields) an NLI
    premise and hypothesis, encoded together in one batch."""
    names = ("train.jsonl", "heldout.jsonl") if fields == 1 else ("nli_train.jsonl", "nli_heldout.jsonl")
    examples = []
    for name in names:
        raw = resources.files("dynaval.model_builder").joinpath("seed", name).read_text(encoding="utf-8")
        for line in raw.splitlines():
            if line.strip():
                row = json.loads(line)
                examples.append([row["text"]] if fields == 1 else [row["premise"], row["hypothesis"]])
    return examples


def measure_encoding(
    examples: list[list[str]], threads: int
) -> tuple[tuple[float, float], tuple[float, float]]:
    """p50 and p99 of one example's encoding (its fields in one batch), by the clock and by CPU time
    (this process's)."""
    import torch

    from dynaval.adapters.sentence_encoder import SentenceEncoder

    torch.set_num_threads(threads)
    encoder = SentenceEncoder()
    encoder.encode(["warm up: the model loads on the first call"])
    wall, cpu = [], []
    for fields in examples:
        started, started_cpu = time.perf_counter(), time.process_time()
        encoder.encode(fields)
        wall.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
    return percentiles(wall), percentiles(cpu)


def unit_rows(rows: numpy.ndarray) -> numpy.ndarray:
    rows /= numpy.linalg.norm(rows, axis=1, keepdims=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000, help="vectors in the index")
    parser.add_argument("--fields", type=int, default=1, help="input fields (NLI: 2)")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--texts", type=int, default=300, help="seed examples to encode one by one")
    parser.add_argument("--encode-threads", default="1,2", help="torch thread counts to encode with")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from dynaval.domain.health.semantic_duplicates import SEMANTIC_THRESHOLD, example_vector, field_cosines
    from dynaval.domain.health.vector_index import VectorIndex

    cores = os.cpu_count() or 1
    load = os.getloadavg()[0]
    print(f"{cores} CPU cores, load average {load:.1f} at the start")

    texts = seed_examples(args.fields)[: args.texts]
    encode = {}
    for threads in sorted({max(1, int(t)) for t in args.encode_threads.split(",") if t.strip()}):
        encode[threads] = measure_encoding(texts, threads)
        (p50, p99), (cpu50, cpu99) = encode[threads]
        print(
            f"encode one example ({len(texts)} seed examples of {args.fields} field(s), torch threads "
            f"{threads}): p50 {p50:.1f} ms  "
            f"p99 {p99:.1f} ms by the clock; CPU p50 {cpu50:.1f} ms  p99 {cpu99:.1f} ms"
        )

    dims = 384 * args.fields
    rng = numpy.random.default_rng(7)
    started = time.perf_counter()
    vectors = numpy.empty((args.count, dims), dtype=numpy.float32)
    for start in range(0, args.count, 100_000):
        stop = min(start + 100_000, args.count)
        block = rng.standard_normal((stop - start, dims), dtype=numpy.float32)
        if args.fields > 1:
            vectors[start:stop] = numpy.stack(
                [example_vector(row.reshape(args.fields, 384)) for row in block]
            )
        else:
            vectors[start:stop] = unit_rows(block)
    queries = unit_rows(rng.standard_normal((args.queries, dims), dtype=numpy.float32))
    if args.fields > 1:
        queries = numpy.stack([example_vector(q.reshape(args.fields, 384)) for q in queries])
    # Plant 1 to 3 near-duplicates per query: cosine c with it, drawn from [threshold, 1].
    planted = 0
    slots = rng.permutation(args.count)
    for query in queries:
        for _ in range(int(rng.integers(1, 4))):
            cosine = float(rng.uniform(SEMANTIC_THRESHOLD, 1.0))
            noise = rng.standard_normal(dims).astype(numpy.float32)
            noise -= (noise @ query) * query
            noise /= numpy.linalg.norm(noise)
            vectors[slots[planted]] = cosine * query + numpy.sqrt(1 - cosine * cosine) * noise
            planted += 1
    print(
        f"{args.count:,} synthetic vectors of {dims} dimensions ({planted:,} planted near-duplicates) "
        f"made in {time.perf_counter() - started:.0f} s"
    )

    # A rebuild from the database reads every vector and adds them at once; later candidates are
    # added one at a time as they arrive (their latency is measured below).
    gc.collect()
    with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
        handle.write("5")  # resets the peak (VmHWM) to the current RSS
    before = rss_mb()
    keys = [f"ex-{i}" for i in range(args.count)]
    started = time.perf_counter()
    index = VectorIndex(dims)
    index.add(keys, vectors)
    build_s = time.perf_counter() - started
    gc.collect()
    index_mb = rss_mb() - before
    peak_mb = rss_mb("VmHWM") - before
    print(
        f"build: {build_s:.1f} s for {len(index):,} vectors in one add (a rebuild; exact={index.exact}); "
        f"memory (RSS delta, keys included) {index_mb:,.0f} MB, {peak_mb:,.0f} MB at the peak of the build; "
        f"the vectors alone {vectors.nbytes / 2**20:,.0f} MB"
    )
    extra = unit_rows(rng.standard_normal((200, dims), dtype=numpy.float32))
    if args.fields > 1:
        extra = numpy.stack([example_vector(row.reshape(args.fields, 384)) for row in extra])
    add_ms = []
    for i, row in enumerate(extra):
        started = time.perf_counter()
        index.add([f"new-{i}"], row.reshape(1, -1))
        add_ms.append((time.perf_counter() - started) * 1000)
    add_p50, add_p99 = percentiles(add_ms)
    print(f"adding one more vector (200 of them): p50 {add_p50:.2f} ms  p99 {add_p99:.2f} ms")

    samples, cpu_samples = [], []
    found: list[set[str]] = []
    for query in queries:
        started, started_cpu = time.perf_counter(), time.process_time()
        hits = index.search(query, threshold=SEMANTIC_THRESHOLD, limit=10)
        samples.append((time.perf_counter() - started) * 1000)
        cpu_samples.append((time.process_time() - started_cpu) * 1000)
        found.append({key for key, _ in hits})
    search_p50, search_p99 = percentiles(samples)
    search_cpu50, search_cpu99 = percentiles(cpu_samples)
    print(
        f"search ({args.queries} queries, threshold {SEMANTIC_THRESHOLD}): p50 {search_p50:.2f} ms  "
        f"p99 {search_p99:.2f} ms by the clock; CPU p50 {search_cpu50:.2f} ms  p99 {search_cpu99:.2f} ms"
    )

    started = time.perf_counter()
    truth: list[set[str]] = [set() for _ in queries]
    for start in range(0, args.count, 100_000):
        scores = vectors[start : start + 100_000] @ queries.T
        for row, q in zip(*numpy.nonzero(scores >= SEMANTIC_THRESHOLD), strict=True):
            truth[int(q)].add(keys[start + int(row)])
    exact = sum(len(t) for t in truth)
    recalled = sum(len(t & f) for t, f in zip(truth, found, strict=True))
    recall = recalled / max(1, exact)
    brute_ms = (time.perf_counter() - started) * 1000 / args.queries
    print(
        f"recall vs exact brute force: {recalled:,} of {exact:,} = {recall:.4f} "
        f"(brute force: {brute_ms:.0f} ms per query, batched)"
    )
    sample = next(iter(found[0]), None)
    if sample is not None:
        confirmed = field_cosines(queries[0], index.vector(sample), args.fields)
        print(f"confirmation (field_cosines of the first hit): {confirmed:.4f}")

    threads = min(encode, key=lambda t: encode[t][0][1])
    (_p50, encode_p99), (_cpu50, encode_cpu99) = encode[threads]
    print(f"\ngoal: encode + search at p99 <= {GOAL_MS:.0f} ms at {args.count:,} examples")
    for label, enc, found_ms in (
        ("by the clock", encode_p99, search_p99),
        ("by CPU time", encode_cpu99, search_cpu99),
    ):
        total = enc + found_ms
        verdict = "meets" if total <= GOAL_MS else "MISSES"
        print(
            f"  {label}: encode p99 {enc:.1f} ms (torch threads {threads}) + search p99 {found_ms:.1f} ms "
            f"= {total:.1f} ms: {verdict} the goal"
        )
    print(
        f"  memory of the index {index_mb:,.0f} MB ({peak_mb:,.0f} MB at the peak of the build); "
        f"build {build_s:.0f} s; one more vector p99 {add_p99:.2f} ms; recall {recall:.4f}"
    )
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
