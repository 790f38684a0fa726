"""Throughput of the model in the loop: micro-batched serving against batch-1 serving.

32 writer threads (by default) send the same N requests in both modes:

* batch-1: each request runs its own forward pass (``predictor.predict([text])``); the predictor's
  lock serialises them. This is the honest "no batching" anchor: the same threads, the same model,
  one text per forward pass.
* micro-batched: each request goes through ``MicroBatcher.predict_one``, which collects waiting
  requests into one forward pass of up to ``--max-batch`` texts.

Each mode runs ``--repeats`` times; the medians of requests/s and of the per-request p50/p99
latencies are reported, with the ratio of throughputs.

    .venv/bin/python benchmarks/batching.py                 # the built default model, else a tiny one
    .venv/bin/python benchmarks/batching.py --model DIR     # any transformers classifier folder
    .venv/bin/python benchmarks/batching.py --tiny          # the tiny test model
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO_ROOT / ".dynaval" / "models" / "sentiment-default"
if str(REPO_ROOT) not in sys.path:  # for tests.support (the tiny model)
    sys.path.insert(0, str(REPO_ROOT))

from dynaval.adapters.predictor import MicroBatcher, Prediction, TransformersPredictor  # noqa: E402
from dynaval.model_builder import load_seed  # noqa: E402


@dataclass(frozen=True)
class Run:
    seconds: float
    latencies: list[float]
    forward_passes: int

    @property
    def requests_per_s(self) -> float:
        return len(self.latencies) / self.seconds


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def run_clients(
    texts: Sequence[str], threads_n: int, call: Callable[[str], Prediction]
) -> tuple[float, list[float]]:
    """``threads_n`` threads share ``texts`` round-robin; returns wall seconds and per-request latencies."""
    latencies: list[float] = [0.0] * len(texts)
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads_n + 1)

    def client(worker: int) -> None:
        try:
            barrier.wait()
            for index in range(worker, len(texts), threads_n):
                started = time.perf_counter()
                call(texts[index])
                latencies[index] = time.perf_counter() - started
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(w,), daemon=True) for w in range(threads_n)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    if errors:
        raise errors[0]
    return seconds, latencies


def run_batch_one(predictor: TransformersPredictor, texts: Sequence[str], threads_n: int) -> Run:
    seconds, latencies = run_clients(texts, threads_n, lambda text: predictor.predict([text])[0])
    return Run(seconds, latencies, len(texts))


def run_micro_batched(
    predictor: TransformersPredictor, texts: Sequence[str], threads_n: int, max_batch: int, max_wait_s: float
) -> Run:
    batcher = MicroBatcher(predictor, max_batch=max_batch, max_wait_s=max_wait_s)
    try:
        seconds, latencies = run_clients(texts, threads_n, batcher.predict_one)
    finally:
        batcher.close()
    return Run(seconds, latencies, batcher.batches_run)


def describe(name: str, runs: list[Run]) -> tuple[float, str]:
    rps = statistics.median(r.requests_per_s for r in runs)
    p50 = statistics.median(percentile(r.latencies, 50) for r in runs) * 1000
    p99 = statistics.median(percentile(r.latencies, 99) for r in runs) * 1000
    passes = statistics.median(r.forward_passes for r in runs)
    per_pass = len(runs[0].latencies) / passes
    each = ", ".join(f"{r.requests_per_s:.1f}" for r in runs)
    line = (
        f"{name:<14} {rps:9.1f} req/s   p50 {p50:8.1f} ms   p99 {p99:8.1f} ms   "
        f"{passes:6.0f} forward passes ({per_pass:.1f} texts each)   runs: {each}"
    )
    return rps, line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=None, help=f"model folder (default: {DEFAULT_MODEL})")
    parser.add_argument("--tiny", action="store_true", help="use the tiny test model")
    parser.add_argument("--requests", type=int, default=640)
    parser.add_argument("--threads", type=int, default=32, help="concurrent writer threads")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="dynaval-bench-") as scratch:
        if args.tiny or (args.model is None and not DEFAULT_MODEL.is_dir()):
            from tests.support.tiny_model import build_tiny_model

            if not args.tiny:
                print(f"no default model at {DEFAULT_MODEL} (build it with the model builder);")
            print("using a tiny test model (2 layers, hidden 32), built in a temporary folder")
            folder = build_tiny_model(Path(scratch) / "tiny-model")
        else:
            folder = args.model or DEFAULT_MODEL
        predictor = TransformersPredictor(folder)

        import torch

        seed_texts = [example.text for example in load_seed("heldout") + load_seed("train")]
        texts = [seed_texts[i % len(seed_texts)] for i in range(args.requests)]
        print(
            f"model {folder.name} ({len(predictor.labels)} labels), {args.requests} requests from "
            f"{args.threads} threads, {args.repeats} repeats, max batch {args.max_batch}, "
            f"max wait {args.max_wait_ms:g} ms, torch threads {torch.get_num_threads()}, "
            f"{os.cpu_count()} CPUs"
        )
        predictor.predict(texts[:8])  # warm-up
        for text in texts[:8]:
            predictor.predict([text])

        batch_one: list[Run] = []
        micro: list[Run] = []
        for _ in range(args.repeats):  # interleaved, so drift in machine load hits both modes alike
            batch_one.append(run_batch_one(predictor, texts, args.threads))
            micro.append(
                run_micro_batched(predictor, texts, args.threads, args.max_batch, args.max_wait_ms / 1000)
            )

        rps_one, line_one = describe("batch-1", batch_one)
        rps_micro, line_micro = describe("micro-batched", micro)
        print(line_one)
        print(line_micro)
        print(f"throughput ratio micro-batched / batch-1: {rps_micro / rps_one:.2f}x (goal >= 3x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
