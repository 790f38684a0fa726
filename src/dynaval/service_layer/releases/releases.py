"""Releases: frozen rounds of one task type, built once into verifiable files and kept.

``create_release`` checks the request (frozen rounds of one task type, a new version), finds the
parent (the newest release of the task type whose rounds are all among the requested ones: its
splits are kept unchanged), reads each round's accepted examples once (the release lines kept with
the round dataset's records, :func:`_rows`) into a scratch file of release rows (their figures
taken as integer columns, :mod:`dynaval.domain.releases.build_tally`), counts each round's figures
while the near-duplicate index finds its pairs, places every example
(:mod:`dynaval.domain.releases.splits`), copies each placed line into the files
(:mod:`dynaval.adapters.files.release_files`), writes the manifest and the card, and then stores
the release, where it put each example, and the writers it placed for the first time. The files are
built in a scratch folder and renamed into place before the database commit; a failure on the way
removes them, so a release is either whole (files and rows) or absent.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from dynaval import __version__
from dynaval.domain.agreement.report import nominal_alpha_of_codes
from dynaval.domain.clock import utcnow
from dynaval.domain.errors import Conflict, InvalidInput, StorageConflict
from dynaval.domain.health.near_duplicates import NearDuplicateRule
from dynaval.domain.health.semantic_duplicates import SemanticRule
from dynaval.domain.images.near_copies import ImagePairIndex, NearCopyRule
from dynaval.domain.provenance import pseudonym, writer_pseudonym
from dynaval.domain.releases.build_tally import BuildTally, PlacedFigures
from dynaval.domain.releases.card import render_card
from dynaval.domain.releases.checks import ALPHA_RESAMPLES
from dynaval.domain.releases.manifest import ReleaseIdentity, release_manifest
from dynaval.domain.releases.release import (
    Release,
    SplitKind,
    SplitRule,
    check_release_name,
    check_version,
    text_keys,
)
from dynaval.domain.releases.rows import (
    canonical_line,
    holds_fields,
    release_line_fills,
    release_row,
    with_validators,
)
from dynaval.domain.releases.splits import NEAR_DUPLICATE, SplitInput, SplitPlan, plan_splits
from dynaval.domain.task_type import TaskType
from dynaval.domain.validation.metrics import round_counts
from dynaval.domain.validation.policy import RULE_VERSION
from dynaval.domain.validation.round import Round
from dynaval.service_layer.dataset_records.round_dataset import (
    iter_round_dataset_pages,
    kept_release_pages,
    provenance_record,
)
from dynaval.service_layer.files import ReleaseStaging, WrittenFile
from dynaval.service_layer.health.release_leaks import LeakScan
from dynaval.service_layer.images import stored_images
from dynaval.service_layer.progress import Progress, Unwatched
from dynaval.service_layer.services import Services

log = logging.getLogger(__name__)

MAX_ROUNDS = 100
DEFAULT_LICENSE = "unknown"
PROGRESS_EVERY_ROWS = 1000
"""A build reports how many rows it has read or written every this many (a job writes its progress at
most once a second anyway)."""


@dataclass(frozen=True)
class ReleaseRequest:
    round_ids: Sequence[int]
    version: str
    created_by: str
    name: str | None = None
    license: str = DEFAULT_LICENSE
    rule: SplitRule = field(default_factory=SplitRule)
    near_duplicates: NearDuplicateRule = field(default_factory=NearDuplicateRule)
    semantic: SemanticRule | None = field(default_factory=SemanticRule)
    """The semantic near-duplicate rule; ``None``: lexical only (also when the settings turn the
    semantic check off)."""
    images: NearCopyRule = field(default_factory=NearCopyRule)
    """An image task type's near-copy rule (its images are compared by their looks instead)."""


@dataclass(frozen=True)
class _Plan:
    """What the database says before the build."""

    task_type: str
    name: str
    rounds: list[Round]
    indices: dict[int, int]
    parent: Release | None
    fixed: dict[str, Any]
    writer_kinds: dict[str, Any]
    earlier: list[Release]
    """The task type's other releases, whose test splits this release must not train on."""
    trained: set[str]
    """The examples a retraining run trained a model on: their texts stay in train."""


def releases_folder(services: Services) -> Path:
    return services.settings.data_dir / "releases"


def check_request(services: Services, request: ReleaseRequest) -> str:
    """Every check a build makes before it reads a row (the rounds, their state and task type, the
    name, the version): the release's name. A refused request is refused before it is queued."""
    return _check_request(services, request).name


def _check_request(services: Services, request: ReleaseRequest) -> _Plan:
    check_version(request.version)
    ids = list(request.round_ids)
    if not ids or len(ids) > MAX_ROUNDS or len(set(ids)) != len(ids):
        raise InvalidInput(f"rounds must list 1 to {MAX_ROUNDS} distinct round ids", field="rounds")
    with services.uow(read_only=True) as uow:
        rounds = [uow.rounds.get(round_id) for round_id in sorted(ids)]
        tasks = sorted({r.task_type for r in rounds})
        if len(tasks) > 1:
            raise InvalidInput(
                f"a release holds one task type; these rounds are {', '.join(tasks)}", field="rounds"
            )
        for round_ in sorted(rounds, key=lambda r: r.kind.value != "adversarial"):
            round_.check_releasable()  # a round of no writers' examples is named before an unfrozen one
        task = tasks[0]
        name = check_release_name(request.name or f"dynaval-{task}")
        if uow.releases.find(name, request.version) is not None:
            raise Conflict(
                f"release {name} {request.version} exists already; a release is never rebuilt",
                field="version",
            )
        wanted = set(ids)
        parent = None
        earlier = []
        for release in uow.releases.all(task):
            if release.name == name and set(release.round_ids) <= wanted:
                parent = release  # the newest such release (oldest first)
            else:
                earlier.append(release)
        # The parent's ancestors' test splits are in the parent's, unchanged: they need no scan.
        fixed = uow.releases.places(parent.id) if parent is not None and parent.id is not None else {}
        writer_kinds = uow.releases.writer_kinds(task)
        trained = uow.retraining.trained_ids(task)
    indices: dict[int, int] = {}
    if parent is not None:
        indices = {int(r["id"]): int(r["index"]) for r in parent.manifest["rounds"]}
    for r in rounds:
        assert r.id is not None
        if r.id not in indices:
            indices[r.id] = max(indices.values(), default=0) + 1
    return _Plan(task, name, rounds, indices, parent, fixed, writer_kinds, earlier, trained)


def _round_figures(services: Services, round_: Round, seed: int) -> dict[str, Any]:
    """What the service counted for the round (beyond what the rows can show)."""
    assert round_.id is not None
    with services.uow(read_only=True) as uow:
        counts = round_counts(uow.round_queries.status_counts(round_.id))
        # As integer columns: the tuples of a million candidates' votes would take gigabytes.
        votes = uow.round_queries.counted_vote_codes(round_.id, services.writer_annotators())
    # The round's alpha over the counted votes GET /api/rounds/<id>/agreement reads, without the
    # per-annotator and pairwise breakdowns a release does not carry.
    estimate = nominal_alpha_of_codes(votes, list(round_.labels), bootstrap=ALPHA_RESAMPLES, seed=seed)
    del votes
    by_status = counts.by_status
    return {
        "id": round_.id,
        "name": round_.name,
        "model": {"name": round_.model_name, "hash": round_.model_hash},
        "policy": dict(round_.policy),
        "rule_version": RULE_VERSION,
        "frozen_at": round_.frozen_at.isoformat() if round_.frozen_at else None,
        "counts": {
            "collected": counts.collected,
            "fooled": counts.fooled,
            "accepted": by_status.get("accepted", 0),
            "rejected": by_status.get("rejected", 0),
            "flagged": by_status.get("flagged", 0),
            "unvalidated": by_status.get("unvalidated", 0),
            "not_fooled": by_status.get("not_fooled", 0),
        },
        "mer": counts.mer,
        "vmer": counts.vmer,
        "alpha_all_validated": estimate.to_dict(),
    }


def _rows(services: Services, plan: _Plan) -> Iterator[tuple[dict[str, Any], bytes]]:
    """Every accepted example of the plan's rounds, as release rows with their canonical lines.

    The lines kept with the records are read as they are, their holes filled a page at a time; a
    row is decoded for its figures, and made again only where an annotator's exclusion or the
    writer's own account changes whose votes count (or, rarely, where the kept line's fields are
    not the task type's: then from its record). A round whose records are not all kept with a line
    has its rows made from its records."""
    secret = services.settings.pseudonym_secret
    own_accounts = {
        writer_pseudonym(secret, writer_id, None): pseudonym(secret, "annotator", annotator_id)
        for writer_id, annotator_id in services.writer_annotators().items()
    }
    task_type = services.catalog.get(plan.task_type)
    for round_ in plan.rounds:
        assert round_.id is not None
        with services.uow(read_only=True) as uow:
            excluded = {pseudonym(secret, "annotator", raw) for raw in uow.annotators.excluded(round_.id)}
        rules = _RowRules(
            plan.indices[round_.id], task_type.data_fields, _image_fields(task_type), excluded, own_accounts
        )
        kept = kept_release_pages(services, round_.id)
        if kept is None:
            for page in iter_round_dataset_pages(services, round_.id):
                for record in page:
                    row = rules.from_record(record)
                    yield row, canonical_line(row)
            continue
        header, pages = kept
        fills = release_line_fills(
            round_index=rules.round_index, round_name=header.name, project_id=header.label_studio_project_id
        ).items()
        loads = orjson.loads
        for chunk in pages:
            for hole, value in fills:
                chunk = chunk.replace(hole, value)
            for line in chunk.split(b"\n")[:-1]:
                row = loads(line)
                if not holds_fields(row, rules.fields, rules.image_fields):
                    row = rules.from_record(provenance_record(services, row["example_id"]))
                    line = canonical_line(row)
                elif with_validators(
                    row, excluded_annotators=rules.excluded, writer_annotator=rules.writer_annotator(row)
                ):
                    line = canonical_line(row)
                yield row, line


@dataclass(frozen=True)
class _RowRules:
    """How one round's examples become release rows."""

    round_index: int
    fields: tuple[str, ...]
    image_fields: tuple[str, ...]
    excluded: set[str]
    """The round's excluded annotators' pseudonyms: their votes do not count."""
    own_accounts: dict[str, str]
    """The pseudonyms of the writers with a Label Studio account of their own: that account's."""

    def writer_annotator(self, row: Mapping[str, Any]) -> str | None:
        """The pseudonym of the Label Studio account of the row's (or record's) writer, if any: a
        collector's writer has none."""
        return self.own_accounts.get(row["writer"]) if row["collected_by"] is None else None

    def from_record(self, record: Mapping[str, Any]) -> dict[str, Any]:
        return release_row(
            record,
            round_index=self.round_index,
            fields=self.fields,
            image_fields=self.image_fields,
            excluded_annotators=self.excluded,
            writer_annotator=self.writer_annotator(record),
        )


def create_release(services: Services, request: ReleaseRequest, progress: Progress | None = None) -> Release:
    """Build the release the request asks for into its folder, then store it (see the module)."""
    progress = progress or Unwatched()
    plan = _check_request(services, request)
    staging = services.release_files.stage(releases_folder(services), f"{plan.name}-{request.version}")
    try:
        manifest, placed = _build(services, request, plan, staging, progress)
        folder = staging.publish()
    finally:
        staging.clean_up()
    try:
        return _store(services, plan, request, manifest, folder, placed)
    except BaseException:
        staging.withdraw()
        raise


def _build(
    services: Services,
    request: ReleaseRequest,
    plan: _Plan,
    staging: ReleaseStaging,
    progress: Progress,
) -> tuple[dict[str, Any], SplitPlan]:
    """The release's files, written into ``staging.out``: its manifest as stored, and where each
    example went."""
    task_type = services.catalog.get(plan.task_type)
    service_figures: dict[int | None, dict[str, Any]] = {}

    def count_figures() -> None:
        progress.step("counting each round's figures", len(plan.rounds))
        for done, r in enumerate(plan.rounds, start=1):
            service_figures[r.id] = _round_figures(services, r, request.rule.seed)
            progress.advance(done)

    rows_file = staging.scratch / "rows.jsonl"
    leaks = _leak_scan(services, request, task_type)
    try:
        progress.step("reading the examples")
        placed, near_duplicates, figures = _place(
            services, request, plan, rows_file, leaks, progress, meanwhile=count_figures
        )
    finally:
        leaks.close()  # the index's process ends, the pairs found or not
    progress.step("writing the splits", len(placed.splits))
    files, images = _write_splits(services, task_type, staging.out, rows_file, placed, figures, progress)
    progress.step("writing the manifest and the card")
    identity = ReleaseIdentity(
        name=plan.name,
        version=request.version,
        task_type=plan.task_type,
        fields=task_type.data_fields,
        labels=task_type.labels,
        license=request.license,
        created_at=utcnow().isoformat(),
        dynaval_version=__version__,
        parent=plan.parent,
    )
    manifest = release_manifest(
        identity,
        rounds=[(plan.indices[r.id], service_figures[r.id]) for r in plan.rounds if r.id is not None],
        tally=figures,
        placed=placed,
        writers={**plan.writer_kinds, **placed.new_writers},
        rule=request.rule,
        files=[f.to_dict() for f in files],
        near_duplicates=near_duplicates,
        features=services.release_files.features(
            task_type.data_fields, task_type.labels, _image_fields(task_type)
        ),
        images=[{"path": image.path, "sha256": image.sha256} for image in images],
        image_fields=_image_fields(task_type),
    )
    stored = services.release_files.write_manifest(staging.out, manifest)
    # The card is made from the manifest as stored (keys sorted), as `verify` makes it again.
    services.release_files.write_card(staging.out, render_card(stored))
    return stored, placed


def _place(
    services: Services,
    request: ReleaseRequest,
    plan: _Plan,
    rows_file: Path,
    leaks: LeakScan,
    progress: Progress,
    *,
    meanwhile: Callable[[], None],
) -> tuple[SplitPlan, dict[str, Any], PlacedFigures]:
    """Read every row once into ``rows_file``, the leak scan and the rows' figures, then place every
    example: the plan, the manifest's ``near_duplicates``, and the figures of the placed rows.
    ``meanwhile`` runs between the two, while the near-duplicate index's process (a large build's)
    finds its pairs on the other core: the build's thread would otherwise only wait for them."""
    task_type = services.catalog.get(plan.task_type)
    fields = task_type.data_fields
    inputs: list[SplitInput] = []
    tally = BuildTally(task_type.labels)
    scratch_rows = services.release_files.scratch_rows(rows_file)  # written on a thread beside the reading
    try:
        for read, (row, line) in enumerate(_rows(services, plan), start=1):
            scratch_rows.add(line)
            tally.add(row)
            inputs.append(_split_input(row, fields))
            leaks.add(row["example_id"], row)
            if read % PROGRESS_EVERY_ROWS == 0:
                progress.advance(read)
        scratch_rows.close()
    except BaseException:
        scratch_rows.abort()
        raise
    leaks.add_earlier(plan.earlier)
    leaks.ask()
    meanwhile()
    progress.step("placing the examples")
    near_keys, placed_near = leaks.clusters()
    placed_near = {**_trained_in_train(inputs, near_keys, plan.trained), **placed_near}
    if near_keys:
        inputs = [
            replace(e, near_keys=near_keys[e.example_id]) if e.example_id in near_keys else e for e in inputs
        ]
    placed = plan_splits(
        inputs, writer_kinds=plan.writer_kinds, fixed=plan.fixed, rule=request.rule, placed_near=placed_near
    )
    del inputs
    figures = tally.placed([placed.splits.get(example_id) for example_id in tally.ids])
    withheld = sum(1 for reason in placed.withheld.values() if reason == NEAR_DUPLICATE)
    near_duplicates = leaks.report(placed.splits, withheld=withheld)
    if not placed.splits:
        raise Conflict(
            "these rounds hold no accepted example that can go into a split: nothing to release",
            field="rounds",
        )
    return placed, near_duplicates, figures


def _write_splits(
    services: Services,
    task_type: TaskType,
    out: Path,
    rows_file: Path,
    placed: SplitPlan,
    figures: PlacedFigures,
    progress: Progress,
) -> tuple[list[WrittenFile], list[WrittenFile]]:
    """The placed rows into the release's split files, in the order they were read: the files
    written, and the images (an image task type's). Each line is copied as it is: its row's split
    is known by its place in the file, and its figures were taken as it was read."""
    fields, labels = task_type.data_fields, task_type.labels
    image_fields = _image_fields(task_type)
    writer = services.release_files.split_files(
        out,
        fields=fields,
        labels=labels,
        split_rows=Counter(placed.splits.values()),
        image_fields=image_fields,
        image_bytes=(lambda sha: stored_images.png_of(services.images, sha)) if image_fields else None,
    )
    try:
        written = 0
        lines = services.release_files.iter_lines(rows_file)
        for line, split in zip(lines, figures.split_order(), strict=True):
            if split is not None:
                writer.add(split, line)
                figures.add_line(line)
                written += 1
                if written % PROGRESS_EVERY_ROWS == 0:
                    progress.advance(written)
        files = writer.close()
    except BaseException:
        writer.abort()
        raise
    services.release_files.remove(rows_file)  # its disk space back before the Parquet files
    return files, writer.image_files()


def _image_fields(task_type: TaskType) -> tuple[str, ...]:
    return task_type.data_fields if task_type.reads_images else ()


def _leak_scan(services: Services, request: ReleaseRequest, task_type: TaskType) -> LeakScan:
    fields = task_type.data_fields
    if task_type.reads_images:
        # Near-copies by their perceptual fingerprints, from the image store; nothing to embed.
        rule = request.images
        fingerprints = stored_images.release_fingerprints(services.images)
        return LeakScan(
            fields=fields,
            rule=request.near_duplicates,
            semantic=None,
            semantic_off="an image task type: its examples are compared by their images",
            make_index=lambda _rule: ImagePairIndex(rule, fingerprints),
            index_kind="perceptual",
            index_rule=rule.to_dict(),
            encoder=services.encoder,
            reader=services.release_files,
        )
    # The MinHash index hashes in a process of its own, beside the reading of the rows.
    if not services.settings.near_duplicate_semantic:
        return LeakScan(
            fields=fields,
            rule=request.near_duplicates,
            semantic=None,
            semantic_off="turned off by the settings (near_duplicate_semantic)",
            make_index=services.release_index,
            encoder=services.encoder,
            reader=services.release_files,
        )
    return LeakScan(
        fields=fields,
        rule=request.near_duplicates,
        semantic=request.semantic,
        semantic_off="turned off by the release request",
        make_index=services.release_index,
        encoder=services.encoder,
        reader=services.release_files,
        stored_vectors=lambda ids: _stored_vectors(services, ids),
    )


def _stored_vectors(services: Services, example_ids: Sequence[str]) -> dict[str, bytes]:
    """The vectors the submission check stored for these examples (the semantic check's, float16)."""
    with services.uow(read_only=True) as uow:
        return uow.near_duplicates.vectors_of(example_ids)


def _trained_in_train(
    inputs: Sequence[SplitInput], near_keys: dict[str, tuple[str, ...]], trained: set[str]
) -> dict[str, SplitKind]:
    """The texts (and near-duplicate clusters) of the examples a model was trained on, in train:
    an example that shares one is withheld from dev and test, whatever order the build reads them
    in (a run placed and trained on the first accepted; the build orders by round and id). An
    earlier release's test split still wins: nothing trained is near one (the run's leak rule)."""
    if not trained:
        return {}
    return {
        key: SplitKind.TRAIN
        for e in inputs
        if e.example_id in trained
        for key in (*e.text_keys, *near_keys.get(e.example_id, ()))
    }


def _split_input(row: dict[str, Any], fields: Sequence[str]) -> SplitInput:
    return SplitInput(
        example_id=row["example_id"],
        round_index=row["round"],
        # One string object per writer and label, not one per row: a million rows are held here.
        writer=sys.intern(row["writer"]),
        label=sys.intern(row["label"]),
        prediction=_interned(row["model_prediction"]),
        agreeing_validators=row["validators_agreeing"],
        text_keys=text_keys(row, fields),
    )


def _interned(value: str | None) -> str | None:
    return None if value is None else sys.intern(value)


def _store(
    services: Services,
    plan: _Plan,
    request: ReleaseRequest,
    manifest: dict[str, Any],
    folder: Path,
    placed: SplitPlan,
) -> Release:
    now = utcnow()
    try:
        with services.uow() as uow:
            release = uow.releases.add(
                Release(
                    name=plan.name,
                    version=request.version,
                    task_type=plan.task_type,
                    round_ids=[r.id for r in plan.rounds if r.id is not None],
                    manifest=manifest,
                    content_hash=manifest["content_hash"],
                    folder=str(folder),
                    created_by=request.created_by,
                    parent_id=plan.parent.id if plan.parent is not None else None,
                ),
                at=now,
            )
            assert release.id is not None
            uow.releases.add_places(release.id, placed.splits, placed.withheld)
            uow.releases.assign_writers(plan.task_type, placed.new_writers, release_id=release.id, at=now)
            # The release's dev and test examples join the regression suite with it.
            uow.flush()
            uow.regression.add_released_cases(release.id, at=now)
            uow.commit()
    except StorageConflict:
        raise Conflict(
            f"release {plan.name} {request.version}, or a release placing the same writers, "
            "was made meanwhile; try again",
            field="version",
        ) from None
    log.info(
        "release %s %s made by %s: rounds %s, content %s",
        plan.name,
        request.version,
        request.created_by,
        release.round_ids,
        release.content_hash,
    )
    return release
