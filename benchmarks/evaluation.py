"""Evaluation throughput: ``dynaval evaluate`` against the predictor's own micro-batched throughput.

A frozen round of ``--examples`` accepted examples is seeded into a fresh database and released;
its dev and test examples become the regression suite. Then, ``--repeats`` times, interleaved:

* the predictor alone: the suite's inputs through ``MicroBatcher.predict_many`` (the service's
  micro-batcher, ``DYNAVAL_BATCH_MAX_SIZE`` texts per forward pass), nothing stored;
* the evaluation: ``evaluation.evaluate`` end to end (register the model, sync the suite, read the
  cases, predict in chunks, store every case's result, the suspect pass).

Medians of cases/s and of the ratio of each evaluation run to the predictor run just before it,
by wall time and by this process's CPU time (steadier on a shared machine; SQLite runs in the
process, a PostgreSQL server's work is not counted), are printed next to the goal: evaluation at
>= 90% of the predictor's throughput.

    .venv/bin/python benchmarks/evaluation.py                 # the built default model, else a tiny one
    .venv/bin/python benchmarks/evaluation.py --model DIR     # any transformers sentiment classifier
    .venv/bin/python benchmarks/evaluation.py --tiny --database-url postgresql://postgres@127.0.0.1:5432
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO_ROOT / ".dynaval" / "models" / "sentiment-default"
if str(REPO_ROOT) not in sys.path:  # for tests.support and benchmarks.harness
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.harness import add_database_argument, backend_name, service_database  # noqa: E402

SENTIMENT = ["positive", "negative", "neutral"]
GOAL = 0.90


def build_services(database_url: str, scratch: Path, max_batch: int) -> object:
    from dynaval.bootstrap import bootstrap
    from dynaval.settings import Settings

    settings = Settings(
        development=True,
        database_url=database_url,
        data_dir=scratch / "data",
        default_model_dir=scratch,
        batch_max_size=max_batch,
        label_studio_url="http://127.0.0.1:9",  # never called
        label_studio_api_key="unused-label-studio-key",
    )
    return bootstrap(settings)


def _runs(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.1f}" for v in values)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=None, help=f"model folder (default: {DEFAULT_MODEL})")
    parser.add_argument("--tiny", action="store_true", help="use the tiny test model")
    parser.add_argument("--examples", type=int, default=10_000, help="accepted examples to release")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-batch", type=int, default=32, help="DYNAVAL_BATCH_MAX_SIZE")
    add_database_argument(parser)
    args = parser.parse_args(argv)

    from tests.support.release_seed import seed_frozen_round

    from dynaval.adapters.predictor import MicroBatcher
    from dynaval.domain.releases.release import SplitRule
    from dynaval.service_layer.regression import evaluation
    from dynaval.service_layer.regression.suite import list_cases
    from dynaval.service_layer.releases.releases import ReleaseRequest, create_release
    from dynaval.service_layer.validation.candidates import model_input

    with (
        tempfile.TemporaryDirectory(prefix="dynaval-bench-") as tmp,
        service_database(args.database_url, Path(tmp)) as database_url,
    ):
        scratch = Path(tmp)
        if args.tiny or (args.model is None and not DEFAULT_MODEL.is_dir()):
            from tests.support.tiny_model import build_tiny_model

            if not args.tiny:
                print(f"no default model at {DEFAULT_MODEL} (build it with `dynaval model build-default`);")
            print("using a tiny test model (2 layers, hidden 32), built in a temporary folder")
            folder = build_tiny_model(scratch / "tiny-model")
        else:
            folder = (args.model or DEFAULT_MODEL).resolve()
        services = build_services(database_url, scratch, args.max_batch)
        try:
            started = time.perf_counter()
            round_id = seed_frozen_round(
                services.database, task_type="sentiment", labels=SENTIMENT, fields=["text"],  # type: ignore[attr-defined]
                accepted=args.examples, writers=max(10, args.examples // 20), rng=random.Random(0),
                weak_share=0.0,
            ).round_id  # fmt: skip
            create_release(
                services,  # type: ignore[arg-type]
                ReleaseRequest(
                    round_ids=[round_id], version="1.0.0", created_by="benchmark", rule=SplitRule()
                ),
            )
            cases = list_cases(services)  # type: ignore[arg-type]
            print(
                f"suite: {len(cases)} dev and test cases of a release of {args.examples} examples "
                f"({time.perf_counter() - started:.1f} s to seed and release); {backend_name(database_url)}"
            )
            task_type = services.catalog.get("sentiment")  # type: ignore[attr-defined]
            inputs = [model_input(task_type, c.inputs) for c in cases]
            # Loaded once, for both: the figures compare running over the cases, not loading.
            predictor = services.models.factory(folder)  # type: ignore[attr-defined]
            import torch

            print(
                f"model {folder.name}, max batch {args.max_batch}, {args.repeats} repeats, "
                f"torch threads {torch.get_num_threads()}, {os.cpu_count()} CPUs"
            )
            predictor.predict(inputs[:8])  # warm-up

            alone: list[float] = []
            evaluated: list[float] = []
            alone_cpu: list[float] = []
            evaluated_cpu: list[float] = []
            for _ in range(args.repeats):  # interleaved, so drift in machine load hits both alike
                batcher = MicroBatcher(predictor, max_batch=args.max_batch, max_wait_s=0.005)
                try:
                    clock, cpu = time.perf_counter(), time.process_time()
                    batcher.predict_many(inputs, timeout_s=3600)
                    alone.append(len(inputs) / (time.perf_counter() - clock))
                    alone_cpu.append(len(inputs) / (time.process_time() - cpu))
                finally:
                    batcher.close()
                clock, cpu = time.perf_counter(), time.process_time()
                done = evaluation.evaluate(services, folder, predictor=predictor)  # type: ignore[arg-type]
                evaluated.append(len(done.results) / (time.perf_counter() - clock))
                evaluated_cpu.append(len(done.results) / (time.process_time() - cpu))
        finally:
            services.close()  # type: ignore[attr-defined]

    for what, predictor_runs, evaluation_runs in (
        ("wall", alone, evaluated),
        ("CPU (this process)", alone_cpu, evaluated_cpu),
    ):
        predictor_rate, evaluation_rate = (
            statistics.median(predictor_runs),
            statistics.median(evaluation_runs),
        )
        # Each evaluation run against the predictor run just before it: load drift hits both alike.
        ratio = statistics.median(e / p for e, p in zip(evaluation_runs, predictor_runs, strict=True))
        print(f"{what}:")
        print(f"  predictor micro-batched: {predictor_rate:9.1f} cases/s   runs: " + _runs(predictor_runs))
        print(f"  evaluation (stored):     {evaluation_rate:9.1f} cases/s   runs: " + _runs(evaluation_runs))
        verdict = "met" if ratio >= GOAL else "NOT met"
        print(f"  evaluation / predictor, median of paired runs: {ratio:.0%} (goal >= {GOAL:.0%}: {verdict})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
