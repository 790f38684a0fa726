"""Model time per example by the tokens the model reads: what one scoring unit
(``guards.SCORING_UNIT_TOKENS``) is worth, and why a unit counts tokens, not characters.

Two kinds of text at each length in tokens: English (seed sentences, so real words, about four
characters a token) and punctuation (``"!" * n``: one token a character, so its characters
understate its cost fourfold). Each is timed as a lone request sends it (a batch of one) and as
the micro-batcher sends a full batch (``--batch`` texts of that length in one forward pass); the
lengths take turns, ``--repeats`` rounds after a warm-up, and the fastest pass of each is reported
(on a shared machine the fastest is the one least disturbed by other work).

For each, the cost in scoring units counted by tokens (today's rule) and by characters (the rule
before: one unit per started 50 characters) and the model time per unit under each. The spread of
milliseconds per unit over all lengths and both kinds says how well a rule tracks what the model
does: the smaller, the better. The machine's units per second follow from the median.

    .venv/bin/python benchmarks/scoring_cost.py                 # the built default model
    .venv/bin/python benchmarks/scoring_cost.py --model DIR     # any transformers classifier folder
"""

from __future__ import annotations

import argparse
import math
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
from dynaval.entrypoints.guards import SCORING_UNIT_TOKENS, scoring_cost  # noqa: E402
from dynaval.model_builder import load_seed  # noqa: E402

TOKENS = (8, 16, 32, 64, 128, 192, 256)
OLD_UNIT_CHARS = 50  # the rule before: one unit per started 50 characters of each text


def english_of(tokens: int, count: int, words: Sequence[str], predictor: TransformersPredictor) -> list[str]:
    """``count`` different English texts the model reads as exactly ``tokens`` tokens (or the
    nearest below, when the last word is several tokens)."""
    out = []
    for i in range(count):
        picked: list[str] = []
        j = i * 13
        while True:
            candidate = [*picked, words[j % len(words)]]
            if predictor.token_counts([" ".join(candidate)])[0] > tokens:
                break
            picked = candidate
            j += 7
        out.append(" ".join(picked))
    return out


def punctuation_of(tokens: int, count: int) -> list[str]:
    """Texts of ``tokens`` tokens, one a character ([CLS] and [SEP] are the other two)."""
    marks = "!?.,;:"
    return [marks[i % len(marks)] * (tokens - 2) for i in range(count)]


def old_cost(texts: Sequence[str]) -> int:
    return sum(max(1, math.ceil(len(text) / OLD_UNIT_CHARS)) for text in texts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="transformers classifier folder")
    parser.add_argument("--batch", type=int, default=32, help="texts per forward pass of a full batch")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if not (args.model / "config.json").is_file():
        print(f"no model in {args.model}: run `dynaval model build-default` first", file=sys.stderr)
        return 2

    import torch

    predictor = TransformersPredictor(args.model)
    words = " ".join(e.text for e in load_seed("heldout") + load_seed("train")).split()
    print(f"model {args.model.name}, torch threads {torch.get_num_threads()}, {args.repeats} repeats")
    cases: dict[tuple[str, int], list[str]] = {}
    for tokens in TOKENS:
        cases[("english", tokens)] = english_of(tokens, args.batch, words, predictor)
        cases[("punctuation", tokens)] = punctuation_of(tokens, args.batch)
    seconds: dict[tuple[str, int, int], list[float]] = {}
    for texts in cases.values():
        predictor.predict(texts)  # warm-up
    for _ in range(args.repeats):
        for (kind, tokens), texts in cases.items():
            for size in (1, args.batch):
                started = time.perf_counter()
                predictor.predict(texts[:size])
                seconds.setdefault((kind, tokens, size), []).append(time.perf_counter() - started)

    header = (
        f"{'kind':<12} {'tokens':>6} {'chars':>6} {'batch':>5} {'ms/text':>8} {'units':>5} {'ms/unit':>8}"
    )
    print(f"{header} {'old units':>9} {'ms/old unit':>11}")
    per_unit: dict[str, list[float]] = {"tokens": [], "characters": []}
    lone: list[float] = []
    for (kind, tokens), texts in cases.items():
        counted = predictor.token_counts(texts[:1])
        units, units_then = scoring_cost(counted), old_cost(texts[:1])
        for size in (1, args.batch):
            ms = min(seconds[(kind, tokens, size)]) / size * 1000
            per_unit["tokens"].append(ms / units)
            per_unit["characters"].append(ms / units_then)
            if size == 1:
                lone.append(ms / units)
            print(
                f"{kind:<12} {counted[0]:>6} {len(texts[0]):>6} {size:>5} {ms:>8.2f} {units:>5} "
                f"{ms / units:>8.2f} {units_then:>9} {ms / units_then:>11.2f}"
            )
    print()
    for rule, values in per_unit.items():
        spread = max(values) / min(values)
        print(
            f"by {rule:<10}: ms per unit median {statistics.median(values):.2f}, "
            f"min {min(values):.2f}, max {max(values):.2f}, max/min {spread:.1f}"
        )
    median = statistics.median(per_unit["tokens"])
    print(
        f"a unit is {SCORING_UNIT_TOKENS} tokens: about {1000 / median:.0f} units/s on this machine, "
        "all threads busy"
    )
    print(f"lone requests (a batch of one): {statistics.median(lone):.2f} ms a unit, median over lengths")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
