"""Reading votes from files: JSONL of ``{"item", "annotator", "label"}`` or a Label Studio JSON export.

The format is detected from the content. From a Label Studio export (any project, not only ours)
the votes are the choices of one control tag: ``from_name`` when given, else the only choices tag
the file uses. Cancelled (skipped) annotations are ignored, and an annotator who annotated a task
more than once counts with their latest annotation (by ``updated_at``, then id).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JSONL = "jsonl"
LABEL_STUDIO = "label-studio-export"
VOTE_FIELDS = ("item", "annotator", "label")


class VoteFileError(ValueError):
    """A file that cannot be read as votes; the message says what to fix."""


@dataclass
class VoteFile:
    votes: list[tuple[str, str, str]]
    source: str
    from_name: str | None = None
    cancelled_ignored: int = 0
    superseded_ignored: int = 0
    without_choice: int = 0
    notes: list[str] = field(default_factory=list)


def read_votes(path: Path, *, from_name: str | None = None) -> VoteFile:
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
    if isinstance(whole, list):
        if whole and all(isinstance(t, Mapping) and "annotations" in t for t in whole):
            return _label_studio_export(whole, from_name, path)
        if all(isinstance(v, Mapping) and "annotations" not in v for v in whole):
            return VoteFile(
                votes=list(_checked_votes(enumerate(whole, start=1), path, "element")), source=JSONL
            )
        raise VoteFileError(
            f"{path}: a JSON list that is neither a Label Studio export (tasks with annotations) "
            "nor a list of {item, annotator, label} objects"
        )
    return VoteFile(votes=list(_checked_votes(_jsonl_objects(text, path), path, "line")), source=JSONL)


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


def _checked_votes(rows: Iterator[tuple[int, Any]], path: Path, unit: str) -> Iterator[tuple[str, str, str]]:
    seen: set[tuple[str, str]] = set()
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
        if (item, annotator) in seen:
            raise VoteFileError(f"{where}: a second vote of annotator {annotator!r} on item {item!r}")
        seen.add((item, annotator))
        yield item, annotator, label


def _label_studio_export(tasks: list[Any], from_name: str | None, path: Path) -> VoteFile:
    controls = sorted(
        {
            str(region.get("from_name"))
            for task in tasks
            for annotation in task.get("annotations") or []
            if isinstance(annotation, Mapping)
            for region in annotation.get("result") or []
            if isinstance(region, Mapping) and region.get("type") == "choices"
        }
    )
    if from_name is None:
        if len(controls) > 1:
            raise VoteFileError(
                f"{path}: the export has several choices controls ({', '.join(controls)}); "
                "pick one with --from-name"
            )
        if not controls:
            raise VoteFileError(f"{path}: the export holds no choices annotations")
        from_name = controls[0]
    elif from_name not in controls:
        raise VoteFileError(
            f"{path}: no choices control named {from_name!r}; the export has: {', '.join(controls) or 'none'}"
        )
    result = VoteFile(votes=[], source=LABEL_STUDIO, from_name=from_name)
    for task in tasks:
        task_id = task.get("id")
        if task_id is None:
            raise VoteFileError(f"{path}: a task without an id")
        latest: dict[str, tuple[tuple[str, int], str | None]] = {}
        for annotation in task.get("annotations") or []:
            if not isinstance(annotation, Mapping):
                continue
            if annotation.get("was_cancelled"):
                result.cancelled_ignored += 1
                continue
            annotator = _annotator_of(annotation)
            if annotator is None:
                raise VoteFileError(f"{path}: task {task_id} has an annotation without completed_by")
            stamp = (
                str(annotation.get("updated_at") or annotation.get("created_at") or ""),
                int(annotation.get("id") or 0),
            )
            label = _choice(annotation, from_name)
            if annotator in latest:
                result.superseded_ignored += 1
                if stamp < latest[annotator][0]:
                    continue
            latest[annotator] = (stamp, label)
        for annotator, (_stamp, label) in sorted(latest.items()):
            if label is None:
                result.without_choice += 1
                continue
            result.votes.append((str(task_id), annotator, label))
    return result


def _annotator_of(annotation: Mapping[str, Any]) -> str | None:
    completed_by = annotation.get("completed_by")
    if isinstance(completed_by, Mapping):
        completed_by = completed_by.get("id", completed_by.get("email"))
    if completed_by is None or isinstance(completed_by, bool):
        return None
    return str(completed_by)


def _choice(annotation: Mapping[str, Any], from_name: str) -> str | None:
    """The chosen value of ``from_name``; several choices (a multi-choice tag) join with "+"."""
    for region in annotation.get("result") or []:
        if isinstance(region, Mapping) and region.get("from_name") == from_name:
            choices = (region.get("value") or {}).get("choices") or []
            if choices:
                return "+".join(sorted(str(c) for c in choices))
    return None
