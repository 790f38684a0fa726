"""Building and verifying a large release: wall time, rows per second and peak memory.

One frozen sentiment round of ``--rows`` accepted candidates (1,000,000 by default) from about
``--writers`` writers (5,000), three votes each (a fifth of them with one vote for the writer's
label, accepted all the same), is seeded in bulk with ``tests.support.release_seed`` into a SQLite
file (core ``executemany``). Then the real commands run in a subprocess each, so that the peak RSS
(``ru_maxrss`` of that child, from ``os.wait4``) is the command's alone:

- ``dynaval release create --rounds <id> --version 1.0.<n> --name bench-<run>-<n> --out DIR``: a
  fresh name per repeat, so that each repeat builds an independent release (a second release of the
  same name and round would extend the first and place nothing new), and from a fresh copy of the
  seeded database, so that each repeat is a first build (a build leaves its writers placed for the
  task type, and its test examples in the regression suite);
- ``dynaval release verify DIR`` on what it wrote.

Before the repeats, ``dynaval dataset rebuild`` writes the seeded round's kept records once (the
seed wrote the tables directly, as a restore would; the service writes each record as its decision
is made), so that a build reads them as the service's own builds do.

Wall seconds count from the command's start (settings, database, the build and the copy to
``--out``) to its end, without the interpreter's start and imports, which are printed beside them.
With ``--phases`` (the default) the create child also times its phases by wrapping the service's
functions: reading the rows from the database and shaping them (``_rows``), placing them
(``plan_splits``), the service's round figures (``_round_figures``: counts and the round's alpha),
the near-duplicate pairs (``LeakScan.clusters``: waiting for the index's answer, and grouping it),
the released rows' alpha (``PlacedFigures.round_figures``), the second pass (``_write_splits``: each
placed line copied to its split's files, and the files finished), storing the release in the
database (``_store``) and the copy to ``--out`` (``copy_release``); the rest is mostly the first
pass's work beyond reading each row (its scratch line, its codes, its placement input, its texts
handed to the near-duplicate index), then the manifest and the card.
Each release (the copy and the one kept in the data folder) is removed after its repeat.

A build of over 20,000 rows hashes its MinHash index in a child process of its own
(``adapters/health/minhash_process.py``). The create command's peak RSS, from ``os.wait4``, is then the
larger of the two processes' peaks, and its CPU seconds count both. So the script also prints the
child's own peak, and that peak plus the build's RSS when the child answered: about the most the
two held at once (the build's memory grows while it reads, and the child's peak comes as it
answers).

The goals, the same for ``create`` and for ``verify`` (at most 30 s and 500 MB at 1,000,000 rows),
are for the lexical near-duplicate check: the builds run with
``DYNAVAL_NEAR_DUPLICATE_SEMANTIC=false`` unless ``--semantic`` is given, since the semantic check
encodes every row with MiniLM on the CPU (docs/near_duplicates.md, "At release").

Run from the repository root:

    PYTHONPATH=$PWD/src:$PWD .venv/bin/python benchmarks/release.py                 # 1,000,000 rows
    PYTHONPATH=$PWD/src:$PWD .venv/bin/python benchmarks/release.py --rows 100000   # a quick run
    ... benchmarks/release.py --data-dir DIR                           # keep the seeded SQLite
    ... benchmarks/release.py --data-dir DIR --reuse                   # and build from it again
    ... benchmarks/release.py --rows 100000 --profile create.prof      # cProfile of one create
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # for tests.support.release_seed
    sys.path.insert(0, str(REPO_ROOT))

# What ``dynaval`` reads (the export benchmark's: the secrets, tokens and the seeded database).
from benchmarks.export import environment  # noqa: E402
from tests.support.release_seed import seed_frozen_round  # noqa: E402

from dynaval.adapters.db.database import Database  # noqa: E402

GOAL_ROWS = 1_000_000
GOAL_SECONDS = 30.0
GOAL_PEAK_RSS_MB = 500
LABELS = ["positive", "negative", "neutral"]
MARKER = "seeded.json"

CHILD = """
import json, os, sys, time
started = time.perf_counter()
from dynaval.entrypoints.cli.main import main
phases = {}
peaks = {}
index_process = {}
if os.environ.get("BENCH_PHASES"):
    import functools
    import resource

    def note(label, begun):
        phases[label] = phases.get(label, 0.0) + time.perf_counter() - begun
        peaks[label] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    from dynaval.domain.releases import build_tally
    from dynaval.service_layer.releases import catalog, releases

    def timed(owner, name, label, generator=False):
        inner = getattr(owner, name)
        if generator:
            @functools.wraps(inner)
            def wrapper(*args, **kwargs):
                iterator = inner(*args, **kwargs)
                while True:
                    begun = time.perf_counter()
                    try:
                        item = next(iterator)
                    except StopIteration:
                        note(label, begun)
                        return
                    phases[label] = phases.get(label, 0.0) + time.perf_counter() - begun
                    yield item
        else:
            @functools.wraps(inner)
            def wrapper(*args, **kwargs):
                begun = time.perf_counter()
                try:
                    return inner(*args, **kwargs)
                finally:
                    note(label, begun)
        setattr(owner, name, wrapper)

    timed(releases, "_rows", "read rows (database, shaping)", generator=True)
    timed(releases, "plan_splits", "place rows (plan_splits)")
    timed(releases, "_round_figures", "round figures (service counts, alpha)")
    timed(build_tally.PlacedFigures, "round_figures", "released rows' alpha")
    timed(releases.LeakScan, "clusters", "near-duplicate pairs (the index's answer)")
    timed(releases, "_write_splits", "second pass (each placed line to its split's files)")
    timed(releases, "_store", "store release (database)")
    timed(catalog, "copy_release", "copy to --out")

    from dynaval.adapters.health import minhash_process

    answered = minhash_process.MinHashProcess.pairs

    def pairs_noted(index):
        found = answered(index)
        if index.peak_rss_mb is not None and "child_mb" not in index_process:
            with open("/proc/self/statm") as statm:
                resident = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
            index_process.update(child_mb=index.peak_rss_mb, build_mb=resident)
        return found

    minhash_process.MinHashProcess.pairs = pairs_noted
imported = time.perf_counter()
if os.environ.get("BENCH_PROFILE"):
    import cProfile
    profiler = cProfile.Profile()
    code = profiler.runcall(main, sys.argv[1:])
    profiler.dump_stats(os.environ["BENCH_PROFILE"])
else:
    code = main(sys.argv[1:])
done = time.perf_counter()
with open(os.environ["BENCH_RESULT"], "w") as handle:
    json.dump({"code": code, "import_s": imported - started, "run_s": done - imported, "phases": phases,
               "peaks": peaks, "index_process": index_process}, handle)
"""


@dataclass
class Run:
    seconds: float
    import_s: float
    cpu_s: float
    peak_rss_mb: float
    phases: dict[str, float]
    peaks: dict[str, float]
    """Phase -> the peak RSS (MB) so far, when the phase ended."""
    index_process: dict[str, float]
    """The MinHash index's child process: its peak RSS (``child_mb``) and the build's RSS when it
    answered (``build_mb``); empty when the index ran in the build's own process."""


def run_command(
    env: dict[str, str], argv: list[str], result: Path, *, phases: bool, profile: str | None
) -> Run:
    extra = {"BENCH_RESULT": str(result)}
    if phases:
        extra["BENCH_PHASES"] = "1"
    if profile:
        extra["BENCH_PROFILE"] = profile
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD, *argv],
        env={**env, **extra},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert process.stdout is not None
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0 or not result.exists():
        sys.stderr.write(output.decode(errors="replace")[-4000:])
        raise SystemExit(f"dynaval {' '.join(argv)} failed ({process.returncode})")
    measured = json.loads(result.read_text())
    result.unlink()
    if measured["code"] != 0:
        sys.stderr.write(output.decode(errors="replace")[-4000:])
        raise SystemExit(f"dynaval {' '.join(argv)} exited {measured['code']}")
    cpu = usage.ru_utime + usage.ru_stime
    return Run(
        measured["run_s"],
        measured["import_s"],
        cpu,
        usage.ru_maxrss / 1024,
        measured["phases"],
        measured["peaks"],
        measured.get("index_process", {}),
    )


def released_rows(out: Path) -> tuple[int, int]:
    """(rows in the release's splits, rows withheld), from its manifest."""
    manifest = json.loads((out / "manifest.json").read_text())
    return sum(s["rows"] for s in manifest["splits"].values()), int(manifest["withheld"]["count"])


def folder_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def verdict(rows: int, seconds: float, rss: float) -> str:
    if rows != GOAL_ROWS:  # a smaller build within the figures says nothing of a million rows
        return f"(the goals are for {GOAL_ROWS:,} rows)"
    return "met" if seconds <= GOAL_SECONDS and rss <= GOAL_PEAK_RSS_MB else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000, help="accepted candidates (default 1,000,000)")
    parser.add_argument("--writers", type=int, default=5_000, help="writers of the round (default 5,000)")
    parser.add_argument(
        "--repeats", type=int, default=None, help="default: 1 at 500,000 rows or more, else 3"
    )
    parser.add_argument("--data-dir", default=None, help="default: a temporary folder, removed at the end")
    parser.add_argument(
        "--reuse", action="store_true", help="build from the round seeded before in --data-dir"
    )
    parser.add_argument("--seed-only", action="store_true", help="seed (into --data-dir) and stop")
    parser.add_argument(
        "--semantic", action="store_true", help="also run the semantic near-duplicate check (MiniLM)"
    )
    parser.add_argument("--no-phases", action="store_true", help="do not time the phases of create")
    parser.add_argument("--profile", default=None, help="write a cProfile of the first create to this file")
    args = parser.parse_args()
    repeats = args.repeats or (1 if args.rows >= 500_000 else 3)

    folder = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="dynaval-release-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        url = f"sqlite:///{folder / 'dynaval.sqlite3'}"
        marker = folder / MARKER
        if args.reuse and marker.exists() and json.loads(marker.read_text())["rows"] == args.rows:
            seeded = json.loads(marker.read_text())
            print(f"reusing round {seeded['round_id']} ({seeded['rows']:,} accepted) in SQLite")
        else:
            database = Database(url)
            database.migrate()
            started = time.perf_counter()
            round_id = seed_frozen_round(
                database, task_type="sentiment", labels=LABELS, fields=["text"], accepted=args.rows,
                writers=args.writers, rng=random.Random(2026), votes=3, name="benchmark round",
            ).round_id  # fmt: skip
            database.dispose()
            seeded = {"round_id": round_id, "rows": args.rows}
            marker.write_text(json.dumps(seeded))
            print(
                f"seeded {args.rows:,} accepted candidates, 3 votes each, "
                f"in {time.perf_counter() - started:.0f} s"
            )
        if args.seed_only:
            return
        round_id, rows = seeded["round_id"], seeded["rows"]
        # Each repeat builds from a copy of the seeded database, so each is a first build: a build
        # leaves its writers placed (sticky, per task type) and its test examples in the regression
        # suite, and a later build from the same database would place no writer and take no case.
        seeded_file = folder / "dynaval.sqlite3"
        build_file = folder / "build.sqlite3"
        # The seed wrote the round straight into the tables, as a restore would: its kept records
        # are written once by the rebuild (the service writes each as its decision is made).
        rebuilt = run_command(
            environment(f"sqlite:///{seeded_file}", folder),
            ["dataset", "rebuild", "--round", str(round_id)],
            folder / "rebuild.result.json",
            phases=False,
            profile=None,
        )
        print(
            f"  dynaval dataset rebuild: {rebuilt.seconds:.1f} s, peak RSS {rebuilt.peak_rss_mb:.0f} MB",
            flush=True,
        )
        env = environment(f"sqlite:///{build_file}", folder)
        env["DYNAVAL_NEAR_DUPLICATE_SEMANTIC"] = "true" if args.semantic else "false"
        run_tag = uuid.uuid4().hex[:8]
        print(
            f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} before the runs",
            flush=True,
        )

        creates: list[Run] = []
        verifies: list[Run] = []
        released = withheld = 0
        size = 0.0
        for n in range(1, repeats + 1):
            out = folder / f"out-{run_tag}-{n}"
            name = f"bench-{run_tag}-{n}"
            shutil.copyfile(seeded_file, build_file)  # not timed
            create = run_command(
                env,
                ["release", "create", "--rounds", str(round_id), "--version", f"1.0.{n}", "--name", name,
                 "--out", str(out)],
                folder / "create.result.json",
                phases=not args.no_phases,
                profile=args.profile if n == 1 else None,
            )  # fmt: skip
            released, withheld = released_rows(out)
            assert released + withheld == rows, (released, withheld, rows)
            size = folder_mb(out)
            verify = run_command(
                env,
                ["release", "verify", str(out)],
                folder / "verify.result.json",
                phases=False,
                profile=None,
            )
            creates.append(create)
            verifies.append(verify)
            print(
                f"  #{n} create: {create.seconds:.1f} s ({rows / create.seconds:,.0f} rows/s), "
                f"{create.cpu_s:.1f} CPU s, peak RSS {create.peak_rss_mb:.0f} MB; "
                f"verify: {verify.seconds:.1f} s ({rows / verify.seconds:,.0f} rows/s), "
                f"{verify.cpu_s:.1f} CPU s, peak RSS {verify.peak_rss_mb:.0f} MB",
                flush=True,
            )
            if create.phases:
                measured = sum(create.phases.values())
                parts = [
                    f"{label} {s:.1f} s (peak {create.peaks[label]:.0f} MB)"
                    for label, s in create.phases.items()
                ]
                parts.append(f"the rest of the first pass, and the rest {create.seconds - measured:.1f} s")
                print("     phases: " + "; ".join(parts), flush=True)
            shutil.rmtree(out)
            shutil.rmtree(folder / "releases" / f"{name}-1.0.{n}", ignore_errors=True)
            build_file.unlink()

        print(f"\nSQLite, one frozen sentiment round of {rows:,} accepted rows ({args.writers:,} writers, "
              f"3 votes each), median of {repeats} run(s)")  # fmt: skip
        print(
            f"released {released:,} rows in splits, {withheld:,} withheld; the release is {size:.0f} MB "
            f"(Parquet and JSONL)"
        )
        print(f"load average after the runs: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
        print(
            f"{'command':16} {'wall s':>7} {'+start':>7} {'CPU s':>7} {'rows/s':>9} {'goal':>8} {'ratio':>6} "
            f"{'peak RSS':>9} {'goal':>8} {'ratio':>6}  verdict"
        )
        for label, runs in (("release create", creates), ("release verify", verifies)):
            seconds = statistics.median(r.seconds for r in runs)
            start = statistics.median(r.import_s for r in runs)
            cpu = statistics.median(r.cpu_s for r in runs)
            rss = max(r.peak_rss_mb for r in runs)
            goals = (
                f"<= {GOAL_SECONDS:.0f} s",
                f"{seconds / GOAL_SECONDS:.2f}x",
                f"<= {GOAL_PEAK_RSS_MB} MB",
                f"{rss / GOAL_PEAK_RSS_MB:.2f}x",
                verdict(rows, seconds, rss),
            )
            print(
                f"{label:16} {seconds:7.1f} {start:7.1f} {cpu:7.1f} {rows / seconds:9,.0f} {goals[0]:>8} "
                f"{goals[1]:>6} {rss:6.0f} MB {goals[2]:>8} {goals[3]:>6}  {goals[4]}"
            )
        if creates[0].phases:
            print("create's phases, in the order they end (median s; the peak RSS so far when each ends):")
            for label in creates[0].phases:
                seconds = statistics.median(r.phases.get(label, 0.0) for r in creates)
                print(
                    f"  {label:40} {seconds:7.1f} s {max(r.peaks.get(label, 0.0) for r in creates):6.0f} MB"
                )
            rest = statistics.median(r.seconds - sum(r.phases.values()) for r in creates)
            print(f"  {'the rest of the first pass, and the rest':40} {rest:7.1f} s")
            beside = [r.index_process for r in creates if r.index_process]
            if beside:
                child = max(b["child_mb"] for b in beside)
                both = max(b["child_mb"] + b["build_mb"] for b in beside)
                print(
                    f"the MinHash index's own process: peak RSS {child:.0f} MB; with the build's RSS when "
                    f"it answered, about {both:.0f} MB at once (create's peak RSS is the larger of the two "
                    "processes' peaks; its CPU s counts both)"
                )
        print("ratio: the figure over the goal (at most 1.00 meets it); wall s from the command's start,")
        print("+start: the interpreter's imports before it; peak RSS: the child's ru_maxrss (the worst run)")
    finally:
        if not args.data_dir:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
