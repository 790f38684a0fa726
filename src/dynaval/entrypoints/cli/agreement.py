"""``dynaval agreement``: the inter-annotator agreement of a file of votes (JSONL, or any Label
Studio JSON export), as tables or JSON (see docs/agreement.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, cast

from dynaval.entrypoints.cli.common import CommandError


def cmd_agreement(args: argparse.Namespace) -> int:
    from dynaval.adapters.files.vote_files import VoteFiles
    from dynaval.service_layer.agreement.vote_files import (
        FileAgreementRequest,
        agreement_of_file,
        check_request,
    )

    request = FileAgreementRequest(
        path=Path(args.file),
        level=args.level,
        labels=args.labels,
        bootstrap=args.bootstrap,
        seed=args.seed,
        from_name=args.from_name,
        taxonomy_depth=args.taxonomy_depth,
        ground_truth=args.ground_truth,
        duplicates=args.duplicates,
    )
    check_request(request)
    items_path = _items_path(args.items)  # checked before the file is read
    data = agreement_of_file(VoteFiles(), request)
    if items_path is not None:
        aggregate = data["dawid_skene"]
        _write_aggregate_items(
            items_path, cast(list[dict[str, Any]], aggregate["items"]) if aggregate else []
        )
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


def add_agreement_command(commands: Any) -> None:
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
