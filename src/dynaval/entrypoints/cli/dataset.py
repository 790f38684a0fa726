"""``dynaval dataset rebuild``: write the kept round-dataset records again from the stored
candidates and votes, and report what differed (after a change of ``DYNAVAL_PSEUDONYM_SECRET``, a
restore, or a new record format)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from dynaval.entrypoints.cli.common import open_storage


def cmd_dataset_rebuild(args: argparse.Namespace) -> int:
    from dynaval.service_layer.dataset_records.keeping import rebuild_records

    services = open_storage()
    try:
        report = rebuild_records(services.dataset_reads, services.settings, args.round)
    finally:
        services.close()
    changes = report.changes
    if args.json:
        print(
            json.dumps(
                {
                    "rounds": report.rounds,
                    "checked": report.checked,
                    "added": len(changes.added),
                    "changed": len(changes.changed),
                    "removed": len(changes.removed),
                    "unchanged": changes.unchanged,
                    "differed": changes.added[:20] + changes.changed[:20] + changes.removed[:20],
                },
                indent=2,
            )
        )
        return 0
    where = f"round {args.round}" if args.round is not None else f"{len(report.rounds)} rounds"
    print(
        f"rebuilt the records of {where}: {report.checked} examples checked, {changes.unchanged} unchanged, "
        f"{len(changes.added)} added, {len(changes.changed)} changed, {len(changes.removed)} removed"
    )
    for label, ids in (("added", changes.added), ("changed", changes.changed), ("removed", changes.removed)):
        if ids:
            shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
            print(f"  {label}: {shown}")
    return 0


def add_dataset_commands(commands: Any) -> None:
    dataset = commands.add_parser("dataset", help="the kept round-dataset records")
    dataset_commands = dataset.add_subparsers(
        dest="dataset_command", required=True, metavar="DATASET_COMMAND"
    )
    rebuild = dataset_commands.add_parser(
        "rebuild",
        help="write the kept records again from the stored candidates and votes, and report what differed",
        description="Write every kept record of a round (of every round without --round) again from the "
        "stored candidates, votes and decisions, and report what differed from the kept ones. Run it after "
        "changing DYNAVAL_PSEUDONYM_SECRET, after restoring the database from a backup, or after an upgrade "
        "that changes the record's format. The service may keep running: each chunk of records is written "
        "in a transaction of its own.",
    )
    rebuild.add_argument("--round", type=int, help="round id (default: every round)")
    rebuild.add_argument("--json", action="store_true", help="print the report as JSON")
    rebuild.set_defaults(run=cmd_dataset_rebuild)
