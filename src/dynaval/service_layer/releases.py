"""Releases: frozen rounds of one task type, built once into verifiable files and kept.

``create_release`` checks the request (frozen rounds of one task type, a new version), finds the
parent (the newest release of the task type whose rounds are all among the requested ones: its
splits are kept unchanged), reads each round's accepted examples once into a scratch file of
release rows, places every example (:mod:`dynaval.domain.release_splits`), writes the files
(:mod:`dynaval.adapters.release_files`), the manifest and the card, and then stores the release,
where it put each example, and the writers it placed for the first time. The files are built in a
scratch folder and renamed into place before the database commit; a failure on the way removes
them, so a release is either whole (files and rows) or absent.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlalchemy.exc import IntegrityError

from dynaval import __version__
from dynaval.adapters.background_writes import LineWriter
from dynaval.adapters.minhash_process import MinHashProcess
from dynaval.adapters.release_files import (
    CARD,
    MANIFEST,
    ReleaseWriter,
    archive_chunks,
    canonical_line,
    features_yaml,
    iter_jsonl,
    manifest_text,
    write_text,
)
from dynaval.domain.agreement_engine.report import round_alpha
from dynaval.domain.clock import utcnow
from dynaval.domain.errors import Conflict, InvalidInput
from dynaval.domain.metrics import round_counts
from dynaval.domain.near_duplicates import NearDuplicateRule
from dynaval.domain.policy import RULE_VERSION
from dynaval.domain.provenance import pseudonym, writer_pseudonym
from dynaval.domain.release import (
    RELEASE_FORMAT,
    Release,
    SplitRule,
    check_release_name,
    check_version,
    text_keys,
)
from dynaval.domain.release_card import render_card
from dynaval.domain.release_checks import ALPHA_RESAMPLES, ReleaseTally
from dynaval.domain.release_rows import release_row
from dynaval.domain.release_splits import NEAR_DUPLICATE, SplitInput, SplitPlan, plan_splits
from dynaval.domain.round import Round, RoundKind, RoundState
from dynaval.domain.semantic_duplicates import SemanticRule
from dynaval.service_layer.dataset import iter_round_dataset_pages
from dynaval.service_layer.regression_suite import take_cases
from dynaval.service_layer.release_leaks import LeakScan
from dynaval.service_layer.services import Services

log = logging.getLogger(__name__)

MAX_ROUNDS = 100
DEFAULT_LICENSE = "unknown"


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


def releases_folder(services: Services) -> Path:
    return services.settings.data_dir / "releases"


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
        # Only writers' rounds are released. A capture round's accepted captures are regression
        # cases (the suite takes them at its freeze) and a revalidation round re-checks cases: in a
        # release's train split they would become training data for the models the suite judges.
        not_written = [r for r in rounds if r.kind is not RoundKind.ADVERSARIAL]
        if not_written:
            raise InvalidInput(
                f"round {not_written[0].id} is a {not_written[0].kind.value} round: its examples are "
                "regression cases, not new data, and are never released (a release holds writers' rounds)",
                field="rounds",
            )
        not_frozen = [r for r in rounds if r.state is not RoundState.FROZEN]
        if not_frozen:
            first = not_frozen[0]
            raise Conflict(
                f"round {first.id} is {first.state.value}: only frozen rounds are released "
                f"(freeze it with `dynaval round freeze --round {first.id}`)",
                field="rounds",
            )
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
    indices: dict[int, int] = {}
    if parent is not None:
        indices = {int(r["id"]): int(r["index"]) for r in parent.manifest["rounds"]}
    for r in rounds:
        assert r.id is not None
        if r.id not in indices:
            indices[r.id] = max(indices.values(), default=0) + 1
    return _Plan(task, name, rounds, indices, parent, fixed, writer_kinds, earlier)


def _round_figures(services: Services, round_: Round, seed: int) -> dict[str, Any]:
    """What the service counted for the round (beyond what the rows can show)."""
    assert round_.id is not None
    with services.uow(read_only=True) as uow:
        counts = round_counts(uow.round_queries.status_counts(round_.id))
        # As integer columns: the tuples of a million candidates' votes would take gigabytes.
        votes = uow.round_queries.counted_vote_codes(round_.id, services.writer_annotators())
    # The round's alpha over the counted votes GET /api/rounds/<id>/agreement reads, without the
    # per-annotator and pairwise breakdowns a release does not carry.
    estimate = round_alpha(
        votes, level="nominal", values=list(round_.labels), bootstrap=ALPHA_RESAMPLES, seed=seed
    )
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


def _rows(services: Services, plan: _Plan) -> Iterator[dict[str, Any]]:
    """Every accepted example of the plan's rounds, as release rows."""
    secret = services.settings.pseudonym_secret
    own_accounts = {
        writer_pseudonym(secret, writer_id, None): pseudonym(secret, "annotator", annotator_id)
        for writer_id, annotator_id in services.writer_annotators().items()
    }
    fields = services.catalog.get(plan.task_type).data_fields
    for round_ in plan.rounds:
        assert round_.id is not None
        with services.uow(read_only=True) as uow:
            excluded = {pseudonym(secret, "annotator", raw) for raw in uow.annotators.excluded(round_.id)}
        for page in iter_round_dataset_pages(services, round_.id):
            for record in page:
                yield release_row(
                    record,
                    round_index=plan.indices[round_.id],
                    fields=fields,
                    excluded_annotators=excluded,
                    writer_annotator=own_accounts.get(record["writer"])
                    if record["collected_by"] is None
                    else None,
                )


def create_release(services: Services, request: ReleaseRequest) -> Release:
    plan = _check_request(services, request)
    task_type = services.catalog.get(plan.task_type)
    fields, labels = task_type.data_fields, task_type.labels
    store = releases_folder(services)
    store.mkdir(parents=True, exist_ok=True)
    final = store / f"{plan.name}-{request.version}"
    scratch = store / f".building-{uuid.uuid4().hex}"
    scratch.mkdir()
    leaks: LeakScan | None = None
    try:
        # The service's figures first: their read of every vote is done and freed before the rows'.
        service_figures = {r.id: _round_figures(services, r, request.rule.seed) for r in plan.rounds}
        rows_file = scratch / "rows.jsonl"
        inputs: list[SplitInput] = []
        leaks = _leak_scan(services, request, fields)
        scratch_rows = LineWriter(rows_file)  # written on a thread beside the reading
        try:
            for row in _rows(services, plan):
                scratch_rows.add(canonical_line(row))
                inputs.append(_split_input(row, fields))
                leaks.add(row["example_id"], row)
            scratch_rows.close()
        except BaseException:
            scratch_rows.abort()
            raise
        leaks.add_earlier(plan.earlier)
        near_keys, placed_near = leaks.clusters()
        if near_keys:
            inputs = [
                replace(e, near_keys=near_keys[e.example_id]) if e.example_id in near_keys else e
                for e in inputs
            ]
        placed = plan_splits(
            inputs,
            writer_kinds=plan.writer_kinds,
            fixed=plan.fixed,
            rule=request.rule,
            placed_near=placed_near,
        )
        del inputs
        near_duplicates = leaks.report(
            placed.splits, withheld=sum(1 for r in placed.withheld.values() if r == NEAR_DUPLICATE)
        )
        leaks.close()
        leaks = None
        if not placed.splits:
            raise Conflict(
                "these rounds hold no accepted example that can go into a split: nothing to release",
                field="rounds",
            )
        split_rows = Counter(placed.splits.values())
        out = scratch / "release"
        # Figures only: the rows were just placed by the rules `verify` checks on the files.
        tally = ReleaseTally(fields=fields, labels=labels, rule=request.rule, checks=False)
        writer = ReleaseWriter(out, fields=fields, labels=labels, split_rows=split_rows)
        try:
            for line, row in iter_jsonl(rows_file):
                split = placed.splits.get(row["example_id"])
                if split is not None:
                    writer.add(split, line)
                    tally.add(split, line, row)
            files = writer.close()
        except BaseException:
            writer.abort()
            raise
        rows_file.unlink()
        writers = {**plan.writer_kinds, **placed.new_writers}
        released_writers = {
            w: k for w, k in writers.items() if any(w in f.writers for f in tally.splits.values())
        }
        round_figures = tally.round_figures(request.rule.seed)
        manifest: dict[str, Any] = {
            "format": RELEASE_FORMAT,
            "name": plan.name,
            "pretty_name": f"{plan.name} {request.version}",
            "version": request.version,
            "created_at": utcnow().isoformat(),
            "dynaval_version": __version__,
            "task_type": plan.task_type,
            "fields": list(fields),
            "labels": list(labels),
            "license": request.license,
            "parent": None
            if plan.parent is None
            else {"version": plan.parent.version, "content_hash": plan.parent.content_hash},
            "rounds": [
                {
                    "index": plan.indices[r.id],
                    **service_figures[r.id],
                    "released": round_figures.get(plan.indices[r.id], {"rows": 0, "votes": 0, "alpha": None}),
                }
                for r in plan.rounds
                if r.id is not None
            ],
            "splits": tally.split_figures(),
            "files": [f.to_dict() for f in files],
            "split_rule": {**request.rule.to_dict(), "alpha_resamples": ALPHA_RESAMPLES},
            "shares_reached": placed.shares_reached(released_writers),
            "withheld": {
                "count": len(placed.withheld),
                "by_reason": dict(Counter(placed.withheld.values())),
                "examples": [{"example_id": e, "reason": r} for e, r in sorted(placed.withheld.items())],
            },
            "near_duplicates": near_duplicates,
            "features": features_yaml(fields, labels),
            "content_hash": tally.content_hash(),
            "content_hash_rule": (
                "sha256 over the concatenated SHA-256 digests of every row's JSONL line (without its "
                "newline), in example_id order"
            ),
        }
        text = manifest_text(manifest)
        write_text(out, MANIFEST, text)
        # The card is made from the manifest as stored (keys sorted), as `verify` makes it again.
        manifest = json.loads(text)
        write_text(out, CARD, render_card(manifest))
        if final.exists():
            raise Conflict(f"{final.name} exists already in the releases folder", field="version")
        out.rename(final)
    finally:
        if leaks is not None:  # the build failed while it held the scan: its index's process ends
            leaks.close()
        shutil.rmtree(scratch, ignore_errors=True)
    try:
        return _store(services, plan, request, manifest, final, placed)
    except BaseException:
        shutil.rmtree(final, ignore_errors=True)
        raise


def _leak_scan(services: Services, request: ReleaseRequest, fields: Sequence[str]) -> LeakScan:
    # The MinHash index hashes in a process of its own, beside the reading of the rows.
    if not services.settings.near_duplicate_semantic:
        return LeakScan(
            fields=fields,
            rule=request.near_duplicates,
            semantic=None,
            semantic_off="turned off by the settings (near_duplicate_semantic)",
            make_index=MinHashProcess,
        )
    return LeakScan(
        fields=fields,
        rule=request.near_duplicates,
        semantic=request.semantic,
        semantic_off="turned off by the release request",
        make_index=MinHashProcess,
    )


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
            release_id = release.id
            take_cases(uow, at=now, sources=(lambda u: u.regression.released_examples(release_id),))
            uow.commit()
    except IntegrityError:
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


def list_releases(services: Services) -> list[Release]:
    with services.uow(read_only=True) as uow:
        return uow.releases.all()


def get_release(services: Services, release_id: int) -> Release:
    with services.uow(read_only=True) as uow:
        return uow.releases.get(release_id)


def release_summary(release: Release) -> dict[str, Any]:
    """A release as lists show it: without the manifest's per-example lists."""
    manifest = release.manifest
    return {
        **{k: v for k, v in release.to_dict().items() if k != "manifest"},
        "splits": {name: s["rows"] for name, s in manifest["splits"].items()},
        "withheld": manifest["withheld"]["count"],
        "license": manifest["license"],
    }


def release_archive(services: Services, release_id: int) -> tuple[str, Iterator[bytes]]:
    """The release's files as one tar: its file name and its bytes, a piece at a time."""
    release = get_release(services, release_id)
    folder = Path(release.folder)
    if not (folder / MANIFEST).is_file():
        raise Conflict(
            f"the files of release {release.version} are missing from {folder}", field="release_id"
        )
    prefix = f"{release.name}-{release.version}"
    return f"{prefix}.tar", archive_chunks(folder, prefix)


def check_copy_target(out: Path) -> None:
    """``out`` may receive a copy of a release: it does not exist, or it is an empty folder."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InvalidInput(f"{out} exists and is not an empty folder; name a new folder", field="out")


def copy_release(release: Release, out: Path) -> Path:
    """Copy a release's files to ``out`` (see :func:`check_copy_target`)."""
    check_copy_target(out)
    if out.exists():
        out.rmdir()
    shutil.copytree(release.folder, out)
    return out


def release_card(release: Release) -> str:
    """The card the release's folder holds (made from the manifest again if the file is gone)."""
    path = Path(release.folder) / CARD
    if path.is_file():
        return path.read_text(encoding="utf-8")
    return render_card(release.manifest)
