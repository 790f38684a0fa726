"""Model time per text by text length: what one scoring unit (``guards.SCORING_UNIT_CHARS``) is worth.

For each length, a batch of ``--batch`` texts of that length (seed sentences joined and cut, so
real words) goes through one forward pass, as the micro-batcher sends them; the lengths take turns,
``--repeats`` rounds after a warm-up, and the fastest pass of each is reported (on a shared machine
the fastest is the one least disturbed by other work) as milliseconds of model time per text,
beside the text's cost in scoring units and the model time per unit. The figures say whether a unit
per started 50 characters tracks what a text really costs, and how many units per second the
machine does.

    .venv/bin/python benchmarks/scoring_cost.py                 # the built default model
    .venv/bin/python benchmarks/scoring_cost.py --model DIR     # any transformers classifier folder
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO_ROOT / ".dynaval" / "models" / "sentiment-default"

from dynaval.adapters.predictor import TransformersPredictor  # noqa: E402
from dynaval.entrypoints.guards import scoring_cost  # noqa: E402
from dynaval.model_builder import load_seed  # noqa: E402

LENGTHS = (40, 125, 250, 500, 750, 1000, 1250, 1500, 2000)


def texts_of_length(length: int, count: int, sentences: Sequence[str]) -> list[str]:
    """``count`` different texts of exactly ``length`` characters, made of seed sentences."""
    out = []
    for i in range(count):
        parts: list[str] = []
        j = i
        while sum(len(p) + 1 for p in parts) < length:
            parts.append(sentences[j % len(sentences)])
            j += 7
        out.append(" ".join(parts)[:length])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="transformers classifier folder")
    parser.add_argument("--batch", type=int, default=32, help="texts per forward pass")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if not (args.model / "config.json").is_file():
        print(f"no model in {args.model}: run `dynaval model build-default` first", file=sys.stderr)
        return 2

    import torch

    predictor = TransformersPredictor(args.model)
    sentences = [example.text for example in load_seed("heldout") + load_seed("train")]
    print(f"model {args.model.name}, batches of {args.batch}, torch threads {torch.get_num_threads()}")
    print(f"{'chars':>6} {'units':>6} {'ms/text':>8} {'x shortest':>10} {'ms/unit':>8}")
    batches = {length: texts_of_length(length, args.batch, sentences) for length in LENGTHS}
    seconds: dict[int, list[float]] = {length: [] for length in LENGTHS}
    for batch in batches.values():
        predictor.predict(batch)  # warm-up
    for _ in range(args.repeats):
        for length, batch in batches.items():
            started = time.perf_counter()
            predictor.predict(batch)
            seconds[length].append(time.perf_counter() - started)
    shortest: float | None = None
    per_unit: list[float] = []
    for length, batch in batches.items():
        ms_per_text = min(seconds[length]) / len(batch) * 1000
        shortest = shortest or ms_per_text
        units = scoring_cost([batch[0]])
        per_unit.append(ms_per_text / units)
        ratio = ms_per_text / shortest
        print(f"{length:>6} {units:>6} {ms_per_text:>8.2f} {ratio:>10.1f} {ms_per_text / units:>8.2f}")
    print(f"model time per unit: median {statistics.median(per_unit):.2f} ms, max {max(per_unit):.2f} ms")
    print(f"so about {1000 / statistics.median(per_unit):.0f} units/s on this machine, all threads busy")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
