"""The examples a model may learn from, read from verified release folders.

A release folder holds one JSONL file per split (``jsonl/<split>.jsonl``, labels as names; the
Parquet shards hold the same rows, which ``dynaval release verify`` checks). Only ``train_*`` splits
are ever read for training; dev splits are read to measure, test splits never.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynaval.adapters.files.release_files import ReleaseUnreadable, iter_jsonl, read_manifest
from dynaval.domain.errors import InvalidInput
from dynaval.model_builder.fine_tuning import Example, LabelledPair, LabelledText
from dynaval.model_builder.image_fine_tuning import LabelledImage
from dynaval.service_layer.files import FileServices
from dynaval.service_layer.releases.verification import verify_release

TrainingExample = Example | LabelledImage
"""A row to learn from or to measure on: a text, a text pair, or an image."""

_SPLIT = re.compile(r"(train|dev|test)_r([1-9][0-9]*)")  # matched whole


@dataclass(frozen=True)
class ReleaseFolder:
    """A verified release folder and the manifest entries training needs."""

    root: Path
    name: str
    version: str
    content_hash: str
    task_type: str
    fields: tuple[str, ...]
    labels: tuple[str, ...]
    split_kinds: dict[str, str]
    """Split name -> kind (train, dev, test), as the manifest gives them."""
    split_rows: dict[str, int]
    round_ids: dict[int, int]
    """Round index (the ``rN`` of a split's name) -> round id."""
    image_fields: tuple[str, ...] = ()
    """An image task type's fields: each row gives its image's path in the folder."""

    @property
    def reads_images(self) -> bool:
        return bool(self.image_fields)

    def describe(self) -> str:
        return f"{self.name} {self.version} ({self.content_hash})"


def open_verified_release(root: Path, files: FileServices) -> ReleaseFolder:
    """The release in ``root`` once every check of ``dynaval release verify`` passes; else an
    InvalidInput naming the folder and the first failed check."""
    findings = verify_release(root, files)
    if findings:
        raise InvalidInput(
            f"{root} fails verification ({len(findings)} checks failed, the first: {findings[0]}); "
            f"see dynaval release verify {root}",
            field="release",
        )
    try:
        manifest: dict[str, Any] = read_manifest(root)
        return ReleaseFolder(
            root=root,
            name=str(manifest["name"]),
            version=str(manifest["version"]),
            content_hash=str(manifest["content_hash"]),
            task_type=str(manifest["task_type"]),
            fields=tuple(manifest["fields"]),
            labels=tuple(manifest["labels"]),
            split_kinds={name: str(split["kind"]) for name, split in manifest["splits"].items()},
            split_rows={name: int(split["rows"]) for name, split in manifest["splits"].items()},
            round_ids={int(r["index"]): int(r["id"]) for r in manifest["rounds"]},
            image_fields=tuple(manifest.get("image_fields") or ()),
        )
    except (ReleaseUnreadable, KeyError, TypeError, ValueError) as exc:  # verify passed: unlikely
        raise InvalidInput(f"{root}: unreadable manifest ({exc})", field="release") from None


def check_one_lineage(releases: Sequence[ReleaseFolder]) -> None:
    """Several releases are accumulated only when they are versions of one release: the same name,
    task type, fields and labels, and each round index naming the same round."""
    first = releases[0]
    for other in releases[1:]:
        for what, mine, theirs in (
            ("name", first.name, other.name),
            ("task type", first.task_type, other.task_type),
            ("fields", first.fields, other.fields),
            ("labels", first.labels, other.labels),
        ):
            if mine != theirs:
                raise InvalidInput(
                    f"{other.root} has {what} {theirs!r} but {first.root} has {mine!r}: "
                    "train on versions of one release only",
                    field="release",
                )
        for index, round_id in other.round_ids.items():
            if first.round_ids.get(index, round_id) != round_id:
                raise InvalidInput(
                    f"round r{index} is round {round_id} in {other.root} but round "
                    f"{first.round_ids[index]} in {first.root}: not versions of one release",
                    field="release",
                )


def split_index(split: str) -> int:
    match = _SPLIT.fullmatch(split)
    return int(match.group(2)) if match else 0


def train_splits(releases: Sequence[ReleaseFolder], requested: Sequence[str] | None) -> list[str]:
    """The splits to learn from: ``requested``, each of which must be a train split present in a
    release, or by default every train split present. Anything else is refused by name: training on
    a dev or test split would make its figures meaningless."""
    kinds: dict[str, str] = {}
    for release in releases:
        kinds.update(release.split_kinds)
    present = sorted(kinds, key=lambda name: (split_index(name), name))
    if requested is None:
        chosen = [name for name in present if kinds[name] == "train"]
        if not chosen:
            raise InvalidInput("the releases hold no train split", field="splits")
        return chosen
    if not requested:
        raise InvalidInput("--splits names no split; e.g. train_r1,train_r2", field="splits")
    for name in requested:
        match = _SPLIT.fullmatch(name)
        if match and match.group(1) != "train":
            raise InvalidInput(
                f"{name} is a {match.group(1)} split: a model is trained on train splits only", field="splits"
            )
        if name not in kinds:
            raise InvalidInput(
                f"{name} is not a split of the releases (they have {', '.join(present)})", field="splits"
            )
        if kinds[name] != "train" or not match:
            raise InvalidInput(
                f"{name} is a {kinds[name]} split: a model is trained on train splits only", field="splits"
            )
    return list(dict.fromkeys(requested))


def dev_splits(releases: Sequence[ReleaseFolder]) -> list[str]:
    """Every dev split of the releases, in round order."""
    names = {name for r in releases for name, kind in r.split_kinds.items() if kind == "dev"}
    return sorted(names, key=lambda name: (split_index(name), name))


def split_examples(releases: Sequence[ReleaseFolder], split: str) -> list[tuple[str, TrainingExample]]:
    """The rows of ``split`` in every release holding it, once each (by example id, in id order),
    as (example id, example): one sentence, a (premise, hypothesis) pair for a two-field task, or
    an image (its file in the release) for an image task."""
    rows: dict[str, TrainingExample] = {}
    for release in releases:
        if split not in release.split_kinds:
            continue
        for _line, row in iter_jsonl(release.root / "jsonl" / f"{split}.jsonl"):
            rows[str(row["example_id"])] = _example(row, release)
    return sorted(rows.items())


def _example(row: dict[str, Any], release: ReleaseFolder) -> TrainingExample:
    if release.reads_images:
        if len(release.image_fields) != 1:
            raise InvalidInput(
                f"an image task with fields {list(release.fields)} is not trainable here (one image only)",
                field="release",
            )
        return LabelledImage(release.root / str(row[release.image_fields[0]]), str(row["label"]))
    return labelled_text(row, str(row["label"]), release.fields, field="release")


def labelled_text(row: Mapping[str, Any], label: str, fields: Sequence[str], *, field: str) -> Example:
    """One sentence, or a (premise, hypothesis) pair for a two-field task; else 422 naming ``field``."""
    if len(fields) == 2:
        return LabelledPair(str(row[fields[0]]), str(row[fields[1]]), label)
    if len(fields) == 1:
        return LabelledText(str(row[fields[0]]), label)
    raise InvalidInput(f"a task with fields {list(fields)} cannot be trained on here", field=field)
