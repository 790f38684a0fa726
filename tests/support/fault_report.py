"""The fault report: what each fault-injection test saw, one JSON file per scenario.

A test calls :func:`record_scenario` once it has its figures, before it asserts on them, so a failed
run still leaves its numbers behind::

    from tests.support.fault_report import record_scenario

    record_scenario("webhooks dropped 30% (sqlite)", webhooks_sent=71, webhooks_dropped=20,
                    decisions_differing=0)

Files go to ``$DYNAVAL_FAULT_REPORT_DIR``, by default ``test-artifacts/fault-report/`` at the
repository root (git-ignored), named after the scenario; recording a scenario again replaces its
file. ``scripts/fault_report`` runs the fault tests and prints every file as one table
(``python -m tests.support.fault_report [DIR]`` prints it alone).

Figures the tests share, so that the table lines them up: ``webhooks_sent``, ``webhooks_dropped``,
``duplicates_sent``, ``votes_expected`` (annotations Label Studio holds, cancelled ones included),
``votes_stored`` (stored annotations equal to one of those), ``tasks_expected``, ``tasks_found``
(in Label Studio) and ``decisions_differing`` (from the clean run; must be 0).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPORT_DIR_ENV = "DYNAVAL_FAULT_REPORT_DIR"
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_REPORT_DIR = REPO_ROOT / "test-artifacts" / "fault-report"

Figure = int | float | str
# The figures the scenarios share, first in the table, in this order.
SHARED_FIGURES = (
    "webhooks_sent",
    "webhooks_dropped",
    "duplicates_sent",
    "votes_expected",
    "votes_stored",
    "tasks_expected",
    "tasks_found",
    "decisions_differing",
)


def report_dir() -> Path:
    """``$DYNAVAL_FAULT_REPORT_DIR``, else ``<repo>/test-artifacts/fault-report``."""
    configured = os.environ.get(REPORT_DIR_ENV, "").strip()
    return Path(configured).expanduser() if configured else DEFAULT_REPORT_DIR


def scenario_file_name(name: str) -> str:
    """The scenario's file name: its name in lower case, runs of other characters as one dash."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not slug:
        raise ValueError(f"scenario name {name!r} has no letter or digit")
    return f"{slug}.json"


def record_scenario(name: str, **figures: Figure) -> Path:
    """Write one scenario's figures (ints, floats or strings, in the order given); return the file."""
    if not name.strip():
        raise ValueError("scenario name must not be empty")
    for key, value in figures.items():
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise TypeError(f"figure {key} must be an int, a float or a str, not {type(value).__name__}")
    current_test = os.environ.get("PYTEST_CURRENT_TEST", "")
    document = {
        "scenario": name,
        "test": current_test.rsplit(" (", 1)[0],
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "figures": figures,
    }
    directory = report_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / scenario_file_name(name)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(partial, path)  # a reader never sees half a file
    return path


def read_scenarios(directory: Path | None = None) -> list[dict[str, Any]]:
    """Every recorded scenario in ``directory`` (default :func:`report_dir`), by scenario name."""
    folder = directory or report_dir()
    scenarios = []
    for path in sorted(folder.glob("*.json")):
        document = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(document, dict) and isinstance(document.get("figures"), dict):
            scenarios.append(document)
    return sorted(scenarios, key=lambda d: str(d.get("scenario", "")))


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def render_table(scenarios: Sequence[dict[str, Any]]) -> str:
    """One table: a column per scenario (numbered, named in a legend above), a row per figure.

    The shared figures come first (:data:`SHARED_FIGURES`), then the others in the order the
    scenarios recorded them; a scenario without a figure shows ``-``.
    """
    if not scenarios:
        return "no fault scenarios recorded"
    legend = [
        f"#{i}  {s.get('scenario')}  ({s.get('test') or 'no test id'})" for i, s in enumerate(scenarios, 1)
    ]
    recorded = {k for s in scenarios for k in s["figures"]}
    names = [k for k in SHARED_FIGURES if k in recorded]
    for scenario in scenarios:
        names.extend(k for k in scenario["figures"] if k not in names)
    header = ["figure", *(f"#{i}" for i in range(1, len(scenarios) + 1))]
    rows = [[name, *(_cell(s["figures"].get(name, "-")) for s in scenarios)] for name in names]
    widths = [max(len(row[c]) for row in (header, *rows)) for c in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        return "  ".join([first, *(cell.rjust(widths[c]) for c, cell in enumerate(cells) if c)]).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([*legend, "", line(header), rule, *(line(row) for row in rows)])


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table of the scenarios recorded in a folder (default :func:`report_dir`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) > 1:
        print("usage: python -m tests.support.fault_report [DIR]", file=sys.stderr)
        return 2
    folder = Path(args[0]) if args else report_dir()
    if not folder.is_dir():
        print(f"no fault report at {folder}", file=sys.stderr)
        return 1
    print(f"Fault report ({folder})")
    print(render_table(read_scenarios(folder)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
