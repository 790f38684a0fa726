"""Reading votes from files: JSONL of ``{"item", "annotator", "label"}`` or a Label Studio JSON export.

The format is detected from the content. From a Label Studio JSON export (any project, not only
ours; the older form with ``completions`` instead of ``annotations`` too) the votes are the answers
of one control: ``from_name`` when given, else the only usable control the file has. Usable
controls are ``choices`` (one choice, or several with ``choice="multiple"``: a set-valued answer),
``taxonomy`` (a selected path is a label, cut at ``taxonomy_depth``; several paths make a set),
``rating`` and ``number`` (numeric labels). Spans (``labels``) and other controls are refused by
name. Cancelled (skipped) annotations are ignored, a task without annotations counts as a task with
none, and an annotator who annotated a task more than once counts with their latest annotation (by
``updated_at``, then id). ``ground_truth`` annotations are votes (``include``), left out
(``exclude``) or gold labels (``gold``). A JSON-MIN export or an export wrapped in an object is
refused with what to export instead (JSON-MIN has one row per annotation in Label Studio 1.23,
but leaves out the control types and the ground-truth marks).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from dynaval.domain.agreement.set_valued import set_label
from dynaval.service_layer.agreement.vote_files import JSONL, LABEL_STUDIO, VoteFile, VoteFileError

VOTE_FIELDS = ("item", "annotator", "label")
USABLE_CONTROLS = ("choices", "taxonomy", "rating", "number")
SET_CONTROLS = ("choices", "taxonomy")
GROUND_TRUTH = ("include", "exclude", "gold")
DUPLICATES = ("error", "first", "last")
TAXONOMY_SEPARATOR = " / "
JSON_EXPORT = (
    "export the project as JSON (Export > JSON in Label Studio, or "
    "GET /api/projects/<id>/export?exportType=JSON) and pass that file"
)
JSON_MIN_KEYS = frozenset({"annotation_id", "lead_time", "annotator"})


def read_votes(
    path: Path,
    *,
    from_name: str | None = None,
    taxonomy_depth: int | None = None,
    ground_truth: str = "include",
    duplicates: str = "error",
) -> VoteFile:
    if ground_truth not in GROUND_TRUTH:
        raise VoteFileError(f"--ground-truth must be one of: {', '.join(GROUND_TRUTH)}")
    if duplicates not in DUPLICATES:
        raise VoteFileError(f"--duplicates must be one of: {', '.join(DUPLICATES)}")
    if taxonomy_depth is not None and taxonomy_depth < 1:
        raise VoteFileError("--taxonomy-depth must be 1 or more")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise VoteFileError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise VoteFileError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise VoteFileError(f"{path}: cannot be read ({exc.strerror})") from None
    if not text.strip():
        raise VoteFileError(f"{path}: the file is empty")
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, Mapping) and not any(name in whole for name in VOTE_FIELDS):
        raise VoteFileError(_wrapped_message(whole, path))
    if isinstance(whole, list):
        objects = [row for row in whole if isinstance(row, Mapping)]
        if any("annotations" in t or "completions" in t for t in objects) or (
            objects and len(objects) == len(whole) and all("data" in t and "id" in t for t in objects)
        ):
            return _label_studio_export(whole, path, from_name, taxonomy_depth, ground_truth)
        if objects and len(objects) == len(whole) and all(_json_min_row(t) for t in objects):
            raise VoteFileError(
                f"{path}: a Label Studio JSON-MIN export, which leaves out what agreement needs (the "
                f"control types and the ground-truth marks); {JSON_EXPORT}"
            )
        if all(isinstance(v, Mapping) for v in whole):
            rows = enumerate(whole, start=1)
            return _jsonl_votes(_checked_votes(rows, path, "element"), duplicates, path)
        raise VoteFileError(
            f"{path}: a JSON list that is neither a Label Studio export (tasks with annotations) "
            "nor a list of {item, annotator, label} objects"
        )
    return _jsonl_votes(_checked_votes(_jsonl_objects(text, path), path, "line"), duplicates, path)


def _json_min_row(row: Mapping[str, Any]) -> bool:
    return "item" not in row and "label" not in row and len(JSON_MIN_KEYS & row.keys()) >= 2


def _wrapped_message(whole: Mapping[str, Any], path: Path) -> str:
    keys = ", ".join(repr(str(k)) for k in list(whole)[:8]) or "none"
    if "data" in whole and ("annotations" in whole or "completions" in whole):
        return f"{path}: one Label Studio task, not an export (a list of tasks); {JSON_EXPORT}"
    lists = [str(k) for k, v in whole.items() if isinstance(v, list)]
    inside = f" with the tasks under {lists[0]!r}" if len(lists) == 1 else ""
    return (
        f"{path}: a JSON object (keys: {keys}){inside}, not a Label Studio JSON export, which is a "
        f'list of tasks; {JSON_EXPORT}, or write one {{"item", "annotator", "label"}} '
        "object per line"
    )


def _jsonl_votes(rows: Iterator[tuple[str, tuple[str, str, str]]], duplicates: str, path: Path) -> VoteFile:
    result = VoteFile(votes=[], source=JSONL)
    at: dict[tuple[str, str], int] = {}
    for where, (item, annotator, label) in rows:
        key = (item, annotator)
        if key not in at:
            at[key] = len(result.votes)
            result.votes.append((item, annotator, label))
            continue
        if duplicates == "error":
            raise VoteFileError(
                f"{where}: a second vote of annotator {annotator!r} on item {item!r}; keep one with "
                "--duplicates first or --duplicates last"
            )
        result.duplicates_ignored += 1
        if duplicates == "last":
            result.votes[at[key]] = (item, annotator, label)
    return result


def _jsonl_objects(text: str, path: Path) -> Iterator[tuple[int, Any]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError:
            raise VoteFileError(
                f'{path}:{number}: not JSON; write one {{"item", "annotator", "label"}} object per '
                "line, or pass a Label Studio JSON export"
            ) from None


def _checked_votes(
    rows: Iterator[tuple[int, Any]], path: Path, unit: str
) -> Iterator[tuple[str, tuple[str, str, str]]]:
    for number, row in rows:
        where = f"{path}: {unit} {number}"
        if not isinstance(row, Mapping):
            raise VoteFileError(f"{where}: not an object with item, annotator and label")
        missing = [name for name in VOTE_FIELDS if row.get(name) is None]
        if missing:
            raise VoteFileError(f"{where}: missing {', '.join(repr(m) for m in missing)}")
        values = []
        for name in VOTE_FIELDS:
            value = row[name]
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise VoteFileError(f"{where}: {name!r} must be a string or a number")
            values.append(str(value))
        item, annotator, label = values
        yield where, (item, annotator, label)


Answer = frozenset[str] | str


def _label_studio_export(
    tasks: list[Any], path: Path, from_name: str | None, taxonomy_depth: int | None, ground_truth: str
) -> VoteFile:
    kinds: dict[str, set[str]] = {}
    for task in tasks:
        for annotation in _annotations(task):
            for region in annotation.get("result") or []:
                if isinstance(region, Mapping) and region.get("from_name") is not None:
                    kinds.setdefault(str(region["from_name"]), set()).add(str(region.get("type")))
    described = ", ".join(f"{name} ({'/'.join(sorted(types))})" for name, types in sorted(kinds.items()))
    usable = sorted(name for name, types in kinds.items() if types & set(USABLE_CONTROLS))
    where = f"{path}: the export has: {described or 'no annotation results'}"
    unusable = (
        f"usable: {', '.join(usable) or 'none'} (dynaval reads choices, taxonomy, rating and number "
        "controls; spans (labels) and other controls are not supported)"
    )
    if from_name is None:
        if len(usable) > 1:
            raise VoteFileError(f"{where}; {unusable}; pick one with --from-name")
        if not usable:
            raise VoteFileError(f"{where}; {unusable}")
        from_name = usable[0]
    elif from_name not in usable:
        what = f"{from_name!r} cannot be used" if from_name in kinds else f"no control named {from_name!r}"
        raise VoteFileError(f"{where}; {what}; {unusable}")
    control = next(t for t in USABLE_CONTROLS if t in kinds[from_name])
    if taxonomy_depth is not None and control != "taxonomy":
        raise VoteFileError(
            f"{path}: --taxonomy-depth applies to a taxonomy control; {from_name} is a {control} control"
        )
    result = VoteFile(votes=[], source=LABEL_STUDIO, from_name=from_name, control=control)
    answers: list[tuple[str, str, Answer]] = []
    gold: dict[str, Answer] = {}
    for task in tasks:
        if not isinstance(task, Mapping):
            raise VoteFileError(f"{path}: a task that is not an object")
        task_id = task.get("id")
        if task_id is None:
            raise VoteFileError(f"{path}: a task without an id")
        if "annotations" not in task and "completions" not in task:
            result.tasks_without_annotations += 1
        latest: dict[str, tuple[tuple[str, int], Answer | None]] = {}
        latest_gold: tuple[tuple[str, int], Answer | None] | None = None
        for annotation in _annotations(task):
            if annotation.get("was_cancelled"):
                result.cancelled_ignored += 1
                continue
            stamp = (
                str(annotation.get("updated_at") or annotation.get("created_at") or ""),
                int(annotation.get("id") or 0),
            )
            answer = _answer(annotation, from_name, control, taxonomy_depth)
            if annotation.get("ground_truth") and ground_truth != "include":
                if ground_truth == "exclude":
                    result.ground_truth_ignored += 1
                elif latest_gold is None or stamp >= latest_gold[0]:
                    latest_gold = (stamp, answer)
                continue
            annotator = _annotator_of(annotation)
            if annotator is None:
                raise VoteFileError(f"{path}: task {task_id} has an annotation without completed_by")
            if annotator in latest:
                result.superseded_ignored += 1
                if stamp < latest[annotator][0]:
                    continue
            latest[annotator] = (stamp, answer)
        if latest_gold is not None and latest_gold[1] is not None:
            gold[str(task_id)] = latest_gold[1]
        for annotator, (_stamp, answer) in sorted(latest.items()):
            if answer is None:
                result.without_choice += 1
                continue
            answers.append((str(task_id), annotator, answer))
    sets = control in SET_CONTROLS and any(len(a) > 1 for _, _, a in answers if isinstance(a, frozenset))
    if sets:
        result.set_votes = [(i, a, x) for i, a, x in answers if isinstance(x, frozenset)]
    result.votes = [(item, annotator, _label(answer)) for item, annotator, answer in answers]
    result.gold = {item: _label(answer) for item, answer in gold.items()}
    return result


def _annotations(task: Any) -> list[Mapping[str, Any]]:
    if not isinstance(task, Mapping):
        return []
    found = task.get("annotations")
    if found is None:
        found = task.get("completions")
    return [a for a in found or [] if isinstance(a, Mapping)]


def _label(answer: Answer) -> str:
    return set_label(answer) if isinstance(answer, frozenset) else answer


def _annotator_of(annotation: Mapping[str, Any]) -> str | None:
    completed_by = annotation.get("completed_by")
    if isinstance(completed_by, Mapping):
        completed_by = completed_by.get("id", completed_by.get("email"))
    if completed_by is None or isinstance(completed_by, bool):
        return None
    return str(completed_by)


def _answer(annotation: Mapping[str, Any], from_name: str, control: str, depth: int | None) -> Answer | None:
    """The answer of ``from_name`` in one annotation: a set of choices or taxonomy paths, or a number."""
    for region in annotation.get("result") or []:
        if not isinstance(region, Mapping) or region.get("from_name") != from_name:
            continue
        value = region.get("value") or {}
        if not isinstance(value, Mapping):
            return None
        if control == "choices":
            choices = value.get("choices") or []
            return frozenset(str(c) for c in choices) or None
        if control == "taxonomy":
            paths = value.get("taxonomy") or []
            cut = {
                TAXONOMY_SEPARATOR.join(str(step) for step in p[:depth])
                for p in paths
                if isinstance(p, list) and p
            }
            return frozenset(cut) or None
        return _number_label(value.get(control))
    return None


def _number_label(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class VoteFiles:
    """The agreement room's :class:`~dynaval.service_layer.agreement.vote_files.VoteFileReader`."""

    def read(
        self,
        path: Path,
        *,
        from_name: str | None,
        taxonomy_depth: int | None,
        ground_truth: str,
        duplicates: str,
    ) -> VoteFile:
        return read_votes(
            path,
            from_name=from_name,
            taxonomy_depth=taxonomy_depth,
            ground_truth=ground_truth,
            duplicates=duplicates,
        )
