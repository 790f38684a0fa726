"""``dynaval sync``, ``dynaval gold add`` and ``dynaval round freeze``: a round's validation from
the command line (see docs/validation.md)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from dynaval.domain.errors import DomainError
from dynaval.entrypoints.cli.common import (
    CommandError,
    load_settings,
    open_services,
    operator_name,
    progress_bar,
    read_jsonl,
)


def cmd_sync(args: argparse.Namespace) -> int:
    from dynaval.service_layer.validation.rounds import check_round_exists
    from dynaval.service_layer.validation.vote_reading import sync_round

    services = open_services()
    try:
        check_round_exists(services, args.round)  # an unknown round fails before the progress bar shows
    except DomainError:
        services.close()
        raise
    bar = progress_bar(None, "task", f"reconciling round {args.round}")

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    try:
        result = sync_round(services, args.round, progress=progress)
    finally:
        bar.close()
        services.close()
    print(json.dumps(result, indent=2))
    return 0


def cmd_round_freeze(args: argparse.Namespace) -> int:
    from dynaval.entrypoints.api.limited_models import request_models
    from dynaval.entrypoints.api.schemas import FreezeRequest
    from dynaval.service_layer.validation.rounds import freeze_round

    if args.reason is not None and not args.force:
        raise CommandError("--reason goes with --force (a plain freeze needs no reason)")
    services = open_services()
    try:
        # The same checks as the API's body: a readable reason, required with --force.
        body = request_models(services.settings).validate(
            FreezeRequest, {"force": args.force, "reason": args.reason}
        )
        frozen = freeze_round(services, args.round, by=operator_name(), force=body.force, reason=body.reason)
    finally:
        services.close()
    at = frozen.round.frozen_at.isoformat() if frozen.round.frozen_at else "now"
    left = f"; {frozen.unvalidated} waiting candidate(s) left unvalidated" if frozen.unvalidated else ""
    print(f"round {args.round} frozen at {at}{left}")
    return 0


def cmd_gold_add(args: argparse.Namespace) -> int:
    """Gold items from a JSONL file, checked by the same request model as the API's gold upload
    (``POST /api/rounds/<id>/gold``), then by the same use case; an error names the line."""
    from dynaval.entrypoints.api.limited_models import request_models
    from dynaval.entrypoints.api.schemas import GoldUpload
    from dynaval.service_layer.validation.gold import add_gold_items

    path = Path(args.file)
    lines = read_jsonl(path)
    if not lines:
        raise CommandError(
            f'{args.file} holds no items; write one {{"inputs": {{...}}, "label": ...}} per line '
            '(or {{"text": ..., "label": ...}} for a task whose one field is text)'
        )
    settings = load_settings()
    try:
        upload = request_models(settings).validate(GoldUpload, {"items": [value for _, value in lines]})
    except DomainError as exc:
        raise _at_line(exc, path, [number for number, _ in lines]) from None
    services = open_services()
    try:
        ids = add_gold_items(services, round_id=args.round, items=[i.new_gold_item() for i in upload.items])
    except DomainError as exc:
        raise _at_line(exc, path, [number for number, _ in lines]) from None
    finally:
        services.close()
    print(f"added {len(ids)} gold items to round {args.round}")
    return 0


def _at_line(error: DomainError, path: Path, line_numbers: list[int]) -> Exception:
    """``error`` about ``items[i]...`` as the line of the file that holds item ``i``."""
    match = re.fullmatch(r"items\[(\d+)\](?:\.(.*))?", error.field or "")
    if match is None:
        return error
    index, field = int(match.group(1)), match.group(2)
    # The message names the field itself, except when it is one the item should not have.
    where = f"{field}: " if field and not error.message.startswith(field) else ""
    return CommandError(f"{path}:{line_numbers[index]}: {where}{error.message}")


def add_validation_commands(commands: Any) -> None:
    sync = commands.add_parser("sync", help="push, reconcile every annotation from Label Studio, escalate")
    sync.add_argument("--round", type=int, required=True, help="round id")
    sync.set_defaults(run=cmd_sync)

    gold = commands.add_parser("gold", help="gold items (known labels) that check annotators")
    gold_commands = gold.add_subparsers(dest="gold_command", required=True, metavar="GOLD_COMMAND")
    gold_add = gold_commands.add_parser("add", help="upload gold items from a JSONL file of {inputs, label}")
    gold_add.add_argument("--round", type=int, required=True, help="round id")
    gold_add.add_argument(
        "file",
        help='JSONL file, one {"inputs": {...}, "label": ...} object per line ({"text": ..., "label": ...} '
        "for a task whose one field is text)",
    )
    gold_add.set_defaults(run=cmd_gold_add)

    round_ = commands.add_parser("round", help="round lifecycle commands")
    round_commands = round_.add_subparsers(dest="round_command", required=True, metavar="ROUND_COMMAND")
    freeze = round_commands.add_parser(
        "freeze",
        help="freeze a closed round: its decisions become final",
        description="Freeze a closed round: no override, vote, escalation or gold rule changes its "
        "decisions any more. Refused while candidates still wait for votes, unless --force with "
        "--reason: those candidates are then left unvalidated (and the freeze is in the audit log).",
    )
    freeze.add_argument("--round", type=int, required=True, help="round id")
    freeze.add_argument(
        "--force", action="store_true", help="freeze even though candidates still wait for votes"
    )
    freeze.add_argument("--reason", help="why (required with --force); recorded in the audit log")
    freeze.set_defaults(run=cmd_round_freeze)
