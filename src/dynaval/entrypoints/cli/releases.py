"""``dynaval export``, ``dynaval release create`` and ``dynaval release verify``: a round dataset, and
releases of frozen rounds."""

from __future__ import annotations

import argparse
import gc
import getpass
import sys
from pathlib import Path
from typing import Any

from dynaval.domain.wording import counted
from dynaval.entrypoints.cli.common import CommandError, StepBars, open_services, open_storage, progress_bar

SHARES_HELP = "target shares of new writers, train,dev,test (default 0.8,0.1,0.1)"


class _Usage(Exception):
    """A bad argument; the message says what to pass instead."""


def _round_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise _Usage(f"--rounds takes round ids separated by commas, such as 1,2 (not {text!r})") from None
    if not ids:
        raise _Usage("--rounds takes round ids separated by commas, such as 1,2")
    return ids


def _shares(text: str) -> tuple[float, float, float]:
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise _Usage(f"--shares takes three numbers such as 0.8,0.1,0.1 (not {text!r})") from None
    if len(values) != 3:
        raise _Usage(f"--shares takes three numbers such as 0.8,0.1,0.1 (not {text!r})")
    return values[0], values[1], values[2]


def cmd_release_create(args: argparse.Namespace) -> int:
    from dynaval.domain.releases.release import SplitRule
    from dynaval.service_layer.releases.catalog import copy_release
    from dynaval.service_layer.releases.releases import ReleaseRequest, create_release

    try:
        rule = SplitRule(
            shares=_shares(args.shares),
            min_agreeing_validators=args.min_agreeing_validators,
            balance_dev_test=args.balance_dev_test,
            seed=args.seed,
        )
        round_ids = _round_ids(args.rounds)
    except _Usage as exc:
        raise CommandError(str(exc)) from None
    out = Path(args.out)
    services = open_services()
    bars = StepBars()
    try:
        services.release_files.check_copy_target(out)  # before the build, not after it
        release = create_release(
            services,
            ReleaseRequest(
                round_ids=round_ids,
                version=args.version,
                created_by=f"command line ({getpass.getuser()})",
                name=args.name,
                license=args.license,
                rule=rule,
            ),
            progress=bars,
        )
        copy_release(services.release_files, release, out)
    finally:
        bars.close()
        services.close()
    manifest: dict[str, Any] = release.manifest
    print(f"release {release.name} {release.version} (id {release.id}), content {release.content_hash}")
    for name, split in sorted(manifest["splits"].items()):
        print(f"  {name}: {counted(split['rows'], 'row')}, {counted(split['writers'], 'writer')}")
    reached = manifest["shares_reached"]
    print(
        "  shares reached: "
        + ", ".join(
            f"{kind} {reached[kind]['writer_share']:.2f} of writers" for kind in ("train", "dev", "test")
        )
    )
    if manifest["withheld"]["count"]:
        print(f"  withheld: {counted(manifest['withheld']['count'], 'example')} (reasons in manifest.json)")
    print(f"release: {out}")
    return 0


def cmd_release_verify(args: argparse.Namespace) -> int:
    from dynaval.bootstrap import offline_services
    from dynaval.service_layer.releases.verification import verify_release

    root = Path(args.directory)
    findings = verify_release(root, offline_services())
    if findings:
        for finding in findings:
            print(finding)
        print(f"release {root}: {counted(len(findings), 'check')} failed", file=sys.stderr)
        return 1
    print(f"release {root}: every check passed")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from dynaval.adapters.files.dataset_files import write_dataset
    from dynaval.service_layer.dataset_records.round_dataset import count_accepted, iter_round_dataset_pieces

    # An export makes millions of short-lived objects, none in a cycle (a page's rows; a stale
    # round's records built again): reference counting frees them, and the cyclic garbage collector
    # would only walk them over and over. It is paused for the export only (main() also runs inside
    # the tests).
    collecting = gc.isenabled()
    gc.disable()
    services = open_storage()
    try:
        pages = iter_round_dataset_pieces(services, args.round, args.format)  # an unknown round fails here
        total = count_accepted(services, args.round)
        out = Path(args.out)
        with progress_bar(total, "example", f"exporting round {args.round}") as bar:
            written = write_dataset(pages, out, args.format, on_page=bar.update)
    finally:
        services.close()
        if collecting:
            gc.enable()
    print(f"wrote {written} accepted examples to {out}")
    return 0


def add_release_commands(commands: Any) -> None:
    export = commands.add_parser("export", help="write a round dataset (accepted examples with provenance)")
    export.add_argument("--round", type=int, required=True, help="round id")
    export.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl")
    export.add_argument("--out", required=True, help="file to write")
    export.set_defaults(run=cmd_export)

    release = commands.add_parser("release", help="releases: frozen rounds as verifiable dataset files")
    release_commands = release.add_subparsers(
        dest="release_command", required=True, metavar="RELEASE_COMMAND"
    )
    create = release_commands.add_parser(
        "create",
        help="build a release of frozen rounds of one task type",
        description="Build a release (Hugging Face dataset layout, manifest, card) of frozen rounds of one "
        "task type, keep it in the service's data folder, and copy it to --out. A release extends the "
        "newest earlier release of the same name whose rounds are all among --rounds.",
    )
    create.add_argument("--rounds", required=True, help="round ids, comma-separated (e.g. 1,2)")
    create.add_argument("--version", required=True, help="semantic version, e.g. 1.0.0; never reused")
    create.add_argument("--out", required=True, help="new folder to copy the release into")
    create.add_argument("--name", help="release name (default: dynaval-<task>)")
    create.add_argument("--license", default="unknown", help="license id for the card (default: unknown)")
    create.add_argument(
        "--seed", type=int, default=0, help="seed of the writers' split assignment (default 0)"
    )
    create.add_argument("--shares", default="0.8,0.1,0.1", help=SHARES_HELP)
    create.add_argument(
        "--min-agreeing-validators",
        type=int,
        default=2,
        help="dev and test hold examples at least this many counted validators agreed on (default 2)",
    )
    create.add_argument(
        "--balance-dev-test",
        action="store_true",
        help="balance dev and test by label x model prediction (DynaSent); the excess is withheld",
    )
    create.set_defaults(run=cmd_release_create)
    verify = release_commands.add_parser(
        "verify",
        help="check a release directory offline: hashes, counts, splits, rule, card (exit 1 on a failure)",
    )
    verify.add_argument("directory", help="the release directory (with manifest.json)")
    verify.set_defaults(run=cmd_release_verify)
