"""The ``dynaval`` command. Every failure is one line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import argparse
import gc
import json
import logging
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from dynaval.domain.errors import DomainError

EXIT_USAGE = 2


class CommandError(Exception):
    """A failure the user can fix; the message says how."""


def _settings(*, uses_secrets: bool = True) -> Any:
    """The settings from the environment. A command that uses no secret does not require them."""
    from dynaval.settings import Settings

    try:
        return Settings() if uses_secrets else Settings(development=True)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise CommandError(f"configuration: {problems}") from None


def _services(*, migrate: bool = True) -> Any:
    from dynaval.bootstrap import bootstrap

    return bootstrap(_settings(), migrate=migrate)


@dataclass
class _StorageServices:
    """The settings and the database, nothing more (see :func:`_storage_services`)."""

    settings: Any
    database: Any

    def close(self) -> None:
        self.database.dispose()


def _storage_services() -> _StorageServices:
    """For a command that only reads the database (an export): the whole service would import the
    Label Studio client, the model registry and the task queue (about 2 s and 100 MB) for nothing."""
    from dynaval.adapters.database import Database

    settings = _settings()
    database = Database(settings.resolved_database_url)
    try:
        database.migrate()
    except BaseException:
        database.dispose()
        raise
    return _StorageServices(settings=settings, database=database)


def _progress(total: int | None, unit: str, description: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, desc=description, file=sys.stderr, dynamic_ncols=True)


def cmd_serve(args: argparse.Namespace) -> int:
    from werkzeug.serving import run_simple

    from dynaval.entrypoints.app import create_app, shutdown

    app = create_app(_services())
    try:
        run_simple(args.host, args.port, app, threaded=True, use_reloader=False)
    finally:
        shutdown(app)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """Run a task-queue consumer in the foreground until Ctrl-C or SIGTERM (then tasks finish)."""
    if args.workers < 1:
        raise CommandError("--workers must be at least 1")
    services = _services()
    try:
        consumer = services.task_queue.create_consumer(
            workers=args.workers, worker_type="thread", periodic=not args.no_periodic
        )
        consumer.run()
    finally:
        services.close()
    return 0


def cmd_migrate(_args: argparse.Namespace) -> int:
    services = _services()
    services.close()
    print("database is at the newest schema")
    return 0


def cmd_build_default_model(args: argparse.Namespace) -> int:
    from dynaval.adapters.label_config import LabelConfigCatalog
    from dynaval.model_builder.default_model import TASKS, build_default_model

    if args.task not in TASKS:
        raise CommandError(
            f"no default model for task {args.task!r}; known tasks: {', '.join(sorted(TASKS))}"
        )
    if args.epochs is not None and args.epochs < 1:
        raise CommandError("--epochs must be at least 1")
    settings = _settings(uses_secrets=False)
    out = Path(args.out) if args.out else settings.default_model_dir_for(args.task)
    if out.exists() and not args.force:
        which = "default model" if args.task == "sentiment" else f"default {args.task} model"
        print(f"the {which} is already built in {out} (use --force to rebuild)")
        return 0
    labels = LabelConfigCatalog(settings.resolved_label_config_dir).get(args.task).labels
    report = build_default_model(out, task=args.task, labels=labels, epochs=args.epochs, seed=args.seed)
    print(report.summary())
    return 0


def cmd_near_duplicates_reindex(args: argparse.Namespace) -> int:
    from dynaval.service_layer.near_duplicates import reindex

    services = _services()
    try:
        added = reindex(services)
        with services.uow(read_only=True) as uow:
            size = uow.near_duplicates.size()
    finally:
        services.close()
    print(f"near-duplicate index: {added} examples added, {size} indexed")
    return 0


def cmd_sync(args: argparse.Namespace) -> int:
    from dynaval.service_layer.rounds import check_round_exists
    from dynaval.service_layer.verification import sync_round

    services = _services()
    try:
        check_round_exists(services, args.round)  # an unknown round fails before the progress bar shows
    except DomainError:
        services.close()
        raise
    bar = _progress(None, "task", f"reconciling round {args.round}")

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


def _operator() -> str:
    """Who runs a command, for the audit log: the system user behind the shell."""
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def cmd_round_freeze(args: argparse.Namespace) -> int:
    from dynaval.entrypoints.schemas import FreezeRequest, request_models
    from dynaval.service_layer.rounds import freeze_round

    if args.reason is not None and not args.force:
        raise CommandError("--reason goes with --force (a plain freeze needs no reason)")
    services = _services()
    try:
        # The same checks as the API's body: a readable reason, required with --force.
        body = request_models(services.settings).validate(
            FreezeRequest, {"force": args.force, "reason": args.reason}
        )
        frozen = freeze_round(services, args.round, by=_operator(), force=body.force, reason=body.reason)
    finally:
        services.close()
    at = frozen.round.frozen_at.isoformat() if frozen.round.frozen_at else "now"
    left = f"; {frozen.unvalidated} waiting candidate(s) left unvalidated" if frozen.unvalidated else ""
    print(f"round {args.round} frozen at {at}{left}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from dynaval.adapters.dataset_files import write_dataset
    from dynaval.service_layer.dataset import count_accepted, iter_round_dataset_pages

    # An export makes millions of short-lived dicts and lists, none in a cycle: reference counting
    # frees them, and the cyclic garbage collector would only walk them over and over (a third of
    # the export's time). It is paused for the export only (main() also runs inside the tests).
    collecting = gc.isenabled()
    gc.disable()
    services = _storage_services()
    try:
        pages = iter_round_dataset_pages(services, args.round)  # an unknown round fails here
        total = count_accepted(services, args.round)
        out = Path(args.out)
        with _progress(total, "example", f"exporting round {args.round}") as bar:
            written = write_dataset(pages, out, args.format, on_page=bar.update)
    finally:
        services.close()
        if collecting:
            gc.enable()
    print(f"wrote {written} accepted examples to {out}")
    return 0


def _read_jsonl(path: Path) -> list[tuple[int, Any]]:
    """Each JSON value of a JSONL file, with its line number (blank lines are skipped)."""
    from dynaval.entrypoints.guards import json_problem, load_json

    items = []
    try:
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    value = load_json(line)
                except ValueError:
                    raise CommandError(
                        f"{path}:{number}: not JSON; each line must be one JSON object"
                    ) from None
                # What the API's guard refuses in a body (a repeated key, text no database stores).
                if (problem := json_problem(value)) is not None:
                    where, says = problem
                    raise CommandError(f"{path}:{number}: {where} {says}")
                items.append((number, value))
    except UnicodeDecodeError:
        raise CommandError(f"{path} is not UTF-8 text") from None
    return items


def cmd_gold_add(args: argparse.Namespace) -> int:
    """Gold items from a JSONL file, checked by the same request model as the API's gold upload
    (``POST /api/rounds/<id>/gold``), then by the same use case; an error names the line."""
    from dynaval.entrypoints.schemas import GoldUpload, request_models
    from dynaval.service_layer.gold import add_gold_items

    path = Path(args.file)
    lines = _read_jsonl(path)
    if not lines:
        raise CommandError(
            f'{args.file} holds no items; write one {{"inputs": {{...}}, "label": ...}} per line '
            '(or {{"text": ..., "label": ...}} for a task whose one field is text)'
        )
    settings = _settings()
    try:
        upload = request_models(settings).validate(GoldUpload, {"items": [value for _, value in lines]})
    except DomainError as exc:
        raise _at_line(exc, path, [number for number, _ in lines]) from None
    services = _services()
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


LEVELS = ("nominal", "ordinal", "interval", "ratio")


def _value_domain(level: str, labels: str | None, observed: set[str]) -> Any:
    """The value domain the engine needs for ``level`` from --labels or the labels themselves."""
    order = [x.strip() for x in labels.split(",") if x.strip()] if labels else None
    if level == "nominal":
        return order
    numeric = _numbers(order or sorted(observed))
    if level == "ordinal":
        if order:
            return order
        if numeric is None:
            raise CommandError("the ordinal level needs the labels in order: pass --labels low,...,high")
        return sorted(observed, key=lambda label: numeric[label])
    if numeric is None:
        raise CommandError(f"the {level} level needs numeric labels (or --labels with numbers)")
    return numeric


def _numbers(labels: Sequence[str]) -> dict[str, float] | None:
    try:
        return {label: float(label) for label in labels}
    except ValueError:
        return None


DEFAULT_LEVELS = {"rating": "ordinal", "number": "interval"}
"""The level a Label Studio control's numbers get unless --level says otherwise."""


def cmd_agreement(args: argparse.Namespace) -> int:
    from dynaval.adapters.vote_files import JSONL, VoteFileError, read_votes
    from dynaval.domain.agreement_engine import Level, agreement_report
    from dynaval.domain.agreement_engine.against_gold import score_against_gold, score_labels_against_gold
    from dynaval.domain.agreement_engine.set_valued import masi_alpha, per_choice_alpha
    from dynaval.domain.dawid_skene import dawid_skene_beside_majority

    if args.level is not None and args.level not in LEVELS:
        raise CommandError(f"unknown level {args.level!r}; use one of: {', '.join(LEVELS)}")
    if args.bootstrap < 0:
        raise CommandError("--bootstrap must be 0 (no interval) or a positive number of resamples")
    items_path = _items_path(args.items)
    try:
        votes_file = read_votes(
            Path(args.file),
            from_name=args.from_name,
            taxonomy_depth=args.taxonomy_depth,
            ground_truth=args.ground_truth,
            duplicates=args.duplicates,
        )
    except VoteFileError as exc:
        raise CommandError(str(exc)) from None
    if args.ground_truth != "include" and votes_file.source == JSONL:
        raise CommandError(
            "--ground-truth applies to a Label Studio export; JSONL votes have no ground truth"
        )
    set_votes = votes_file.set_votes
    if set_votes is not None and args.level not in (None, "nominal"):
        raise CommandError(
            f"the answers of {votes_file.from_name} are sets (several choices or paths), compared with the "
            "MASI distance; leave out --level"
        )
    level = cast(Level, args.level or DEFAULT_LEVELS.get(votes_file.control or "", "nominal"))
    values = _value_domain(level, args.labels, {label for _, _, label in votes_file.votes})
    try:
        report = agreement_report(
            votes_file.votes, level=level, values=values, bootstrap=args.bootstrap, seed=args.seed
        )
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    aggregate = dawid_skene_beside_majority(votes_file.votes) if votes_file.votes else None
    aggregate_items = cast(list[dict[str, Any]], aggregate["items"]) if aggregate else []
    data: dict[str, Any] = {
        **report.to_dict(),
        "dawid_skene": aggregate,
        "source": {
            "format": votes_file.source,
            "from_name": votes_file.from_name,
            "control": votes_file.control,
            "votes_read": len(votes_file.votes),
            "cancelled_ignored": votes_file.cancelled_ignored,
            "superseded_ignored": votes_file.superseded_ignored,
            "without_answer": votes_file.without_choice,
            "tasks_without_annotations": votes_file.tasks_without_annotations,
            "ground_truth": args.ground_truth if votes_file.source != JSONL else None,
            "ground_truth_ignored": votes_file.ground_truth_ignored,
            "duplicates_ignored": votes_file.duplicates_ignored,
        },
    }
    if set_votes is not None:
        masi = masi_alpha(set_votes, bootstrap=args.bootstrap, seed=args.seed)
        data.update(
            {
                **masi.to_dict(),
                "level": "masi",
                "exact_set_alpha": report.alpha,
                "per_choice": [row.to_dict() for row in per_choice_alpha(set_votes)],
            }
        )
    if args.ground_truth == "gold":
        data["gold"] = score_against_gold(votes_file.votes, votes_file.gold)
        data["gold"]["dawid_skene"] = score_labels_against_gold(
            {row["item"]: row["label"] for row in aggregate_items}, votes_file.gold
        )
    if items_path is not None:
        _write_aggregate_items(items_path, aggregate_items)
    print(json.dumps(data, ensure_ascii=False) if args.json else format_agreement(data))
    return 0


_ITEMS_FIELDS = ("item", "majority", "dawid_skene_label", "dawid_skene_posterior", "votes")


def _items_path(value: str | None) -> Path | None:
    """The ``--items`` file, checked before any work: its extension picks JSONL or CSV."""
    if value is None:
        return None
    path = Path(value)
    if path.suffix.lower() not in (".jsonl", ".csv"):
        raise CommandError(
            f"--items {value}: name the file .jsonl (one JSON object per item) or .csv; "
            f"{path.suffix or 'no extension'} is neither"
        )
    if not path.parent.is_dir():
        raise CommandError(f"--items {value}: the folder {path.parent} does not exist; create it first")
    return path


def _write_aggregate_items(path: Path, rows: list[dict[str, Any]]) -> None:
    """Per item: majority label(s), Dawid-Skene label and posterior, votes (JSONL or CSV)."""
    import csv
    import io

    buffer = io.StringIO()
    if path.suffix.lower() == ".csv":
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(_ITEMS_FIELDS)
        for row in rows:
            writer.writerow(
                (row["item"], "|".join(row["majority"]), row["label"], repr(row["posterior"]), row["votes"])
            )
    else:
        for row in rows:
            record = dict(
                zip(
                    _ITEMS_FIELDS,
                    (row["item"], row["majority"], row["label"], row["posterior"], row["votes"]),
                    strict=True,
                )
            )
            buffer.write(json.dumps(record, ensure_ascii=False) + "\n")
    try:
        path.write_text(buffer.getvalue(), encoding="utf-8")
    except OSError as exc:
        raise CommandError(
            f"--items {path}: cannot write it ({exc.strerror}); choose a writable path"
        ) from None


def _number(value: object, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def format_agreement(data: dict[str, Any]) -> str:
    """The agreement report as a readable table."""
    lines = []
    level = "MASI, set-valued answers" if data["level"] == "masi" else data["level"]
    if data["alpha"] is None:
        lines.append(f"Krippendorff's alpha ({level}): undefined: {data['undefined_reason']}")
    else:
        ci = data["ci95"]
        interval = f"   95% CI [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
        lines.append(f"Krippendorff's alpha ({level}): {data['alpha']:.3f}{interval}")
    source = data["source"]
    lines.append(
        f"{data['items']} items with 2+ votes, {data['annotators']} annotators, "
        f"{data['pairable_values']} pairable values "
        f"({source['votes_read']} votes read from a {source['format']}"
        + (f", {source['cancelled_ignored']} cancelled ignored" if source["cancelled_ignored"] else "")
        + ")"
    )
    lines += ["", f"{'label':<20} {'pairable':>9} {'agreement':>10}"]
    for row in data["per_label"]:
        lines.append(f"{row['label']!s:<20} {row['pairable_values']:>9} {_number(row['agreement']):>10}")
    lines += ["", f"{'annotator':<20} {'votes':>7} {'agreement with others':>22}"]
    for row in data["per_annotator"]:
        lines.append(
            f"{row['annotator']!s:<20} {row['votes']:>7} {_number(row['agreement_with_others']):>22}"
        )
    pairwise = data["pairwise"]
    names = [str(a) for a in pairwise["annotators"]]
    if names:
        lines += ["", "pairwise agreement (shared items)", " " * 20 + "".join(f"{n[:14]:>16}" for n in names)]
        for name, agreements, shared in zip(
            names, pairwise["agreement"], pairwise["shared_items"], strict=True
        ):
            cells = "".join(
                f"{_number(a, 2) + f' ({n})':>16}" for a, n in zip(agreements, shared, strict=True)
            )
            lines.append(f"{name[:20]:<20}{cells}")
    aggregate = data.get("dawid_skene")
    if aggregate:
        lines += [
            "",
            f"Dawid-Skene: {aggregate['items_differing_from_majority']} of {aggregate['item_count']} items "
            f"labelled differently from the majority vote, {aggregate['items_tied_in_majority']} tied in the "
            f"majority vote (no tie-break: counted apart) ({aggregate['iterations']} iterations)",
        ]
        if not aggregate["converged"]:
            lines.append(
                f"Dawid-Skene did not converge: {aggregate['max_iterations']} iterations reached with the "
                f"parameters still moving by {aggregate['parameter_change']:.2g} "
                f"(tolerance {aggregate['tolerance']:.0e}); treat its labels with care"
            )
    lines += _format_sets_and_gold(data)
    return "\n".join(lines)


def _format_sets_and_gold(data: dict[str, Any]) -> list[str]:
    """The per-choice breakdown of set-valued answers and the scores against gold, when present."""
    lines: list[str] = []
    source = data["source"]
    left_out = [
        f"{source.get(key) or 0} {what}"
        for key, what in (
            ("superseded_ignored", "earlier annotations of an annotator who annotated a task again"),
            ("ground_truth_ignored", "ground-truth annotations"),
            ("duplicates_ignored", "repeated votes"),
            ("without_answer", "annotations without an answer in this control"),
            ("tasks_without_annotations", "tasks without an annotations key"),
        )
        if source.get(key)
    ]
    if left_out:
        lines += ["", "also left out: " + ", ".join(left_out)]
    if data.get("per_choice") is not None:
        lines += [
            "",
            "set-valued answers: MASI alpha above; exact-set (nominal) alpha "
            + _number(data["exact_set_alpha"]),
            f"{'choice':<30} {'chosen':>7} {'alpha (chosen / not)':>21}",
        ]
        for row in data["per_choice"]:
            lines.append(f"{row['choice']!s:<30} {row['chosen']:>7} {_number(row['alpha']):>21}")
    gold = data.get("gold")
    if gold is not None:
        majority = gold["majority"]
        lines += [
            "",
            f"against gold ({gold['gold_items']} items with a ground-truth annotation)",
            f"{'annotator':<20} {'items':>7} {'correct':>8} {'accuracy':>9}",
        ]
        for row in gold["per_annotator"]:
            lines.append(
                f"{row['annotator']!s:<20} {row['items']:>7} {row['correct']:>8} "
                f"{_number(row['accuracy']):>9}"
            )
        lines.append(
            f"{'majority vote':<20} {majority['items']:>7} {majority['correct']:>8} "
            f"{_number(majority['accuracy']):>9}  ({majority['ties']} tied, counted as wrong)"
        )
        aggregate = gold.get("dawid_skene")
        if aggregate is not None:
            lines.append(
                f"{'Dawid-Skene':<20} {aggregate['items']:>7} {aggregate['correct']:>8} "
                f"{_number(aggregate['accuracy']):>9}"
            )
    return lines


def build_parser() -> argparse.ArgumentParser:
    from dynaval.model_builder.default_model import TASKS  # standard library only: no torch here

    parser = argparse.ArgumentParser(
        prog="dynaval",
        description="Validate adversarial examples with several annotators (see README.md and docs/cli.md).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser(
        "serve", help="run the HTTP service (development server; use gunicorn in production)"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.set_defaults(run=cmd_serve)

    worker = commands.add_parser(
        "worker",
        help="run a task-queue consumer (pushes, escalations, sweep, reconcile) apart from the service",
    )
    worker.add_argument("--workers", type=int, default=2, help="threads running tasks (default 2)")
    worker.add_argument(
        "--no-periodic", action="store_true", help="leave the minute's sweep to other consumers"
    )
    worker.set_defaults(run=cmd_worker)

    migrate = commands.add_parser("migrate", help="bring the database to the newest schema")
    migrate.set_defaults(run=cmd_migrate)

    model = commands.add_parser("model", help="model commands")
    model_commands = model.add_subparsers(dest="model_command", required=True, metavar="MODEL_COMMAND")
    build = model_commands.add_parser(
        "build-default",
        help="fine-tune the shipped MiniLM on a task's seed set into its default model",
        description="Fine-tune the shipped MiniLM on a task's hand-written seed set (offline) and print "
        "its held-out accuracy. Tasks: sentiment (single sentences), nli (premise/hypothesis pairs).",
    )
    build.add_argument(
        "--task",
        default="sentiment",
        help=f"one of {', '.join(sorted(TASKS))} (default: sentiment); "
        "its labels, in order, come from label_config/<task>.xml",
    )
    build.add_argument(
        "--out",
        help="folder to write (default: <data dir>/models/sentiment-default, or DYNAVAL_DEFAULT_MODEL_DIR; "
        "for another task its sibling <task>-default, e.g. <data dir>/models/nli-default)",
    )
    recipes = ", ".join(f"{task.epochs} for {name}" for name, task in sorted(TASKS.items()))
    build.add_argument(
        "--epochs", type=int, default=None, help=f"passes over the seed set (default: {recipes})"
    )
    build.add_argument("--seed", type=int, default=13)
    build.add_argument("--force", action="store_true", help="rebuild even if the folder exists")
    build.set_defaults(run=cmd_build_default_model)

    from dynaval.entrypoints.model_commands import add_model_train

    add_model_train(model_commands)

    sync = commands.add_parser("sync", help="push, reconcile every annotation from Label Studio, escalate")
    sync.add_argument("--round", type=int, required=True, help="round id")
    sync.set_defaults(run=cmd_sync)

    near = commands.add_parser("near-duplicates", help="the near-duplicate index checked at submission")
    near_commands = near.add_subparsers(dest="near_command", required=True, metavar="NEAR_DUPLICATES_COMMAND")
    reindex = near_commands.add_parser(
        "reindex",
        help="add every stored candidate and capture missing from the index (after an upgrade or a restore)",
        description="Add every stored candidate and capture missing from the near-duplicate index (those "
        "stored before it existed, or restored without it), in batches; a second run adds none.",
    )
    reindex.set_defaults(run=cmd_near_duplicates_reindex)

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

    agreement = commands.add_parser(
        "agreement",
        help="inter-annotator agreement of a file of votes (JSONL or any Label Studio JSON export)",
    )
    agreement.add_argument(
        "file", help='JSONL of {"item", "annotator", "label"}, or a Label Studio JSON export'
    )
    agreement.add_argument(
        "--level",
        help="nominal, ordinal, interval or ratio (default: nominal; ordinal for a Label Studio rating, "
        "interval for a number)",
    )
    agreement.add_argument("--labels", help="the labels, comma-separated (in order, for the ordinal level)")
    agreement.add_argument("--bootstrap", type=int, default=1000, help="resamples for the 95%% CI (0: none)")
    agreement.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    agreement.add_argument(
        "--from-name",
        help="the control of a Label Studio export to read (choices, taxonomy, rating or number); "
        "each annotator's latest annotation of a task counts",
    )
    agreement.add_argument(
        "--taxonomy-depth", type=int, help="compare taxonomy paths cut at this depth (default: whole paths)"
    )
    agreement.add_argument(
        "--ground-truth",
        choices=("include", "exclude", "gold"),
        default="include",
        help="Label Studio ground-truth annotations: counted as votes (include, default), left out "
        "(exclude), or used as gold to score each annotator and the majority vote (gold)",
    )
    agreement.add_argument(
        "--duplicates",
        choices=("error", "first", "last"),
        default="error",
        help="JSONL: a second vote of one annotator on one item stops the run (error, default), or "
        "the first or last one counts (a Label Studio export always uses each annotator's latest)",
    )
    agreement.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    agreement.add_argument(
        "--items",
        metavar="FILE",
        help="also write per item the majority label(s), the Dawid-Skene label and posterior and the "
        "number of votes: FILE.jsonl or FILE.csv",
    )
    agreement.set_defaults(run=cmd_agreement)

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

    export = commands.add_parser("export", help="write a round dataset (accepted examples with provenance)")
    export.add_argument("--round", type=int, required=True, help="round id")
    export.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl")
    export.add_argument("--out", required=True, help="file to write")
    export.set_defaults(run=cmd_export)

    from dynaval.entrypoints.release_commands import add_release_commands

    add_release_commands(commands)

    from dynaval.entrypoints.regression_commands import add_regression_commands

    add_regression_commands(commands)

    from dynaval.entrypoints.health_commands import add_health_commands

    add_health_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except CommandError as exc:
        print(f"dynaval: {exc}", file=sys.stderr)
    except DomainError as exc:
        where = f"{exc.field}: " if exc.field else ""
        print(f"dynaval: {where}{exc.message}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        print(f"dynaval: {exc.strerror or exc} ({exc.filename or ''})", file=sys.stderr)
    except SQLAlchemyError as exc:
        print(
            f"dynaval: the database could not be used ({type(exc).__name__}); "
            "check DYNAVAL_DATABASE_URL and that the server answers",
            file=sys.stderr,
        )
    except Exception as exc:  # no traceback reaches a user; the class name helps a bug report
        print(f"dynaval: unexpected error ({type(exc).__name__}); please report it", file=sys.stderr)
        return 1
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
