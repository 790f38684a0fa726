"""Round alpha with a bootstrap interval (ours) against one ``krippendorff.alpha`` point estimate.

Two rounds, as the brief sizes them (agreement around 0.7, 5% of votes missing):

* 3 annotators x 1,000,000 items, 3 labels;
* 5 annotators x 100,000 items, 20 labels.

For each: ``krippendorff.alpha(reliability_data=..., level_of_measurement="nominal")`` once (the
package's input, an annotators x items float matrix with NaN, is built beforehand and not
timed), against ``round_alpha`` with a 1,000-resample bootstrap interval on the same votes as
integer columns (``VoteColumns``, also built beforehand), the full ``agreement_report``
(breakdowns too), and ``round_alpha`` from a list of Python ``(item, annotator, label)`` triples.
Every call runs once (warm-up, reported as "first"), then ``--repeats`` times; the medians of
wall-clock and of process CPU time are printed, with the best wall-clock (CPU time and the best
run are steadier on a shared machine). Peak
memory is measured separately with ``tracemalloc`` (numpy's allocations are traced): the peak
allocated during one call, above what was allocated before it. Both alphas are checked equal.

A label sweep then shows our memory as the label set grows, where the package's coincidence
step needs items x labels x labels floats, three times over (it is run only where that stays
under 2 GiB).

    .venv/bin/python benchmarks/agreement.py                 # the brief's sizes
    .venv/bin/python benchmarks/agreement.py --scale 0.1     # a tenth of the items (quick)
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

import krippendorff
import numpy as np
import numpy.typing as npt

from dynaval.domain.agreement import VoteColumns, agreement_report, round_alpha

MiB = 2**20
GOAL = 2.0
"""Round alpha with a 1,000-resample CI at least this many times faster than one package estimate."""


@dataclass(frozen=True)
class Round:
    name: str
    reliability_data: npt.NDArray[np.float64]
    columns: VoteColumns

    def triples(self) -> list[tuple[int, int, int]]:
        return list(
            zip(
                np.asarray(self.columns.items).tolist(),
                np.asarray(self.columns.annotators).tolist(),
                np.asarray(self.columns.labels).tolist(),
                strict=True,
            )
        )


@dataclass(frozen=True)
class Measure:
    seconds: float
    best_seconds: float
    cpu_seconds: float
    first_seconds: float
    peak_mib: float


def simulated_round(annotators: int, items: int, labels: int, accuracy: float, seed: int) -> Round:
    """Each item has a true label (skewed prior); an annotator gives it with ``accuracy``, else
    a label drawn from the prior; 5% of votes are missing. Votes are listed item by item."""
    rng = np.random.default_rng(seed)
    prior = rng.dirichlet(np.full(labels, 2.0))
    truth = rng.choice(labels, size=items, p=prior)
    codes = np.where(
        rng.random((annotators, items)) < accuracy, truth, rng.choice(labels, (annotators, items), p=prior)
    )
    present = rng.random((annotators, items)) >= 0.05
    data = np.where(present, codes, np.nan)
    item, annotator = np.nonzero(present.T)
    columns = VoteColumns(item, annotator, codes[annotator, item])
    return Round(f"{annotators} annotators x {items:,} items, {labels} labels", data, columns)


def measure(call: Callable[[], object], repeats: int) -> Measure:
    started = time.perf_counter()
    call()
    first = time.perf_counter() - started
    times, cpu = [], []
    for _ in range(repeats):
        started, cpu_started = time.perf_counter(), time.process_time()
        call()
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    call()
    peak = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()
    return Measure(statistics.median(times), min(times), statistics.median(cpu), first, peak / MiB)


def package_alpha(round_: Round) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(
            krippendorff.alpha(reliability_data=round_.reliability_data, level_of_measurement="nominal")
        )


def compare(round_: Round, repeats: int, resamples: int) -> None:
    ours = round_alpha(round_.columns, bootstrap=resamples, seed=0)
    theirs = package_alpha(round_)
    assert ours.alpha is not None and abs(ours.alpha - theirs) < 1e-9, (ours.alpha, theirs)
    print(f"\n{round_.name}: {int(np.isfinite(round_.reliability_data).sum()):,} votes")
    print(f"  alpha {ours.alpha:.6f} (package {theirs:.6f}), 95% CI {ours.ci95[0]:.4f} .. {ours.ci95[1]:.4f}")  # type: ignore[index]
    triples = round_.triples()
    rows = {
        "krippendorff.alpha, point estimate only": measure(lambda: package_alpha(round_), repeats),
        f"ours: round_alpha + {resamples}-resample CI": measure(
            lambda: round_alpha(round_.columns, bootstrap=resamples), repeats
        ),
        f"ours: agreement_report + {resamples} CI": measure(
            lambda: agreement_report(round_.columns, bootstrap=resamples), repeats
        ),
        "ours: round_alpha + CI, from Python triples": measure(
            lambda: round_alpha(triples, bootstrap=resamples), repeats
        ),
    }
    print(f"  {'':46} {'median s':>9} {'best s':>7} {'cpu s':>7} {'first s':>8} {'peak MiB':>9}")
    for name, row in rows.items():
        figures = (
            f"{row.seconds:9.3f} {row.best_seconds:7.3f} {row.cpu_seconds:7.3f} "
            f"{row.first_seconds:8.3f} {row.peak_mib:9.1f}"
        )
        print(f"  {name:46} {figures}")
    package, ours_alpha = list(rows.values())[:2]
    print(
        f"  package / ours (round_alpha + CI): time {package.seconds / ours_alpha.seconds:.1f}x "
        f"(cpu {package.cpu_seconds / ours_alpha.cpu_seconds:.1f}x, best "
        f"{package.best_seconds / ours_alpha.best_seconds:.1f}x, first call "
        f"{package.first_seconds / ours_alpha.first_seconds:.1f}x), "
        f"peak memory {package.peak_mib / ours_alpha.peak_mib:.1f}x"
    )
    ratios = {
        "median time": package.seconds / ours_alpha.seconds,
        "cpu": package.cpu_seconds / ours_alpha.cpu_seconds,
        "best time": package.best_seconds / ours_alpha.best_seconds,
    }
    verdict = ", ".join(
        f"{name} {ratio:.1f}x {'met' if ratio >= GOAL else 'NOT met'}" for name, ratio in ratios.items()
    )
    print(f"  goal: round alpha + CI >= {GOAL:.0f}x faster than one package estimate: {verdict}")


def label_sweep(items: int, repeats: int, resamples: int) -> None:
    print(f"\nLabel sweep, 5 annotators x {items:,} items (package run if 3 x items x L^2 x 8 B < 2 GiB)")
    ours_header = f"{'ours s':>8} {'cpu s':>7} {'ours MiB':>9}"
    print(f"  {'labels':>6} {ours_header} {'package s':>10} {'cpu s':>7} {'package MiB':>12}")
    for labels in (3, 20, 200, 2000):
        round_ = simulated_round(5, items, labels, accuracy=0.75, seed=labels)
        ours = measure(lambda r=round_: round_alpha(r.columns, bootstrap=resamples), repeats)  # type: ignore[misc]
        if 3 * items * labels * labels * 8 < 2 * 2**30:
            theirs = measure(lambda r=round_: package_alpha(r), repeats)  # type: ignore[misc]
            package = f"{theirs.seconds:10.3f} {theirs.cpu_seconds:7.3f} {theirs.peak_mib:12.1f}"
        else:
            package = f"{'-':>10} {'-':>7} {'-':>12}"
        print(f"  {labels:6d} {ours.seconds:8.3f} {ours.cpu_seconds:7.3f} {ours.peak_mib:9.1f} {package}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the numbers of items")
    parser.add_argument("--no-sweep", action="store_true")
    args = parser.parse_args()
    print(f"numpy {np.__version__}, krippendorff {metadata.version('krippendorff')}")
    print(
        f"time: median (and best) wall-clock and median process CPU seconds of {args.repeats} runs after "
        "one warm-up; first: the warm-up call; peak: tracemalloc, during one call"
    )
    compare(
        simulated_round(3, round(1_000_000 * args.scale), 3, accuracy=0.85, seed=1),
        args.repeats,
        args.resamples,
    )
    compare(
        simulated_round(5, round(100_000 * args.scale), 20, accuracy=0.8, seed=2),
        args.repeats,
        args.resamples,
    )
    if not args.no_sweep:
        label_sweep(round(100_000 * args.scale), args.repeats, args.resamples)


if __name__ == "__main__":
    main()
