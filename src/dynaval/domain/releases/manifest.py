"""A release's manifest: everything ``verify`` checks the files against, and what the card is made
from. Built here from the build's parts, so that its shape is one function the format owns."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dynaval.domain.releases.checks import ALPHA_RESAMPLES
from dynaval.domain.releases.release import RELEASE_FORMAT, Release, SplitKind, SplitRule
from dynaval.domain.releases.splits import SplitPlan

CONTENT_HASH_RULE = (
    "sha256 over the concatenated SHA-256 digests of every row's JSONL line (without its newline), in "
    "example_id order"
)


class RowFigures(Protocol):
    """What the rows as written say of themselves (a build's
    :class:`~dynaval.domain.releases.build_tally.PlacedFigures`, or a
    :class:`~dynaval.domain.releases.checks.ReleaseTally` of the files)."""

    def round_figures(self, seed: int) -> dict[int, dict[str, Any]]: ...

    def split_figures(self) -> dict[str, dict[str, Any]]: ...

    def released_writers(self) -> set[str]: ...

    def content_hash(self) -> str: ...


@dataclass(frozen=True)
class ReleaseIdentity:
    """Which release a manifest describes, and what made it."""

    name: str
    version: str
    task_type: str
    fields: Sequence[str]
    labels: Sequence[str]
    license: str
    created_at: str
    dynaval_version: str
    parent: Release | None


def release_manifest(
    identity: ReleaseIdentity,
    *,
    rounds: Sequence[tuple[int, Mapping[str, Any]]],
    tally: RowFigures,
    placed: SplitPlan,
    writers: Mapping[str, SplitKind],
    rule: SplitRule,
    files: Sequence[Mapping[str, Any]],
    near_duplicates: Mapping[str, Any],
    features: Sequence[Mapping[str, Any]],
    images: Sequence[Mapping[str, Any]] = (),
    image_fields: Sequence[str] = (),
) -> dict[str, Any]:
    """The manifest of a built release. ``rounds``: each round's index in the release and the
    service's figures for it; ``tally``: the figures of the rows as written; ``placed``: where each
    example went (or why it was withheld); ``writers``: every writer's kind of split (the release
    reports the shares of those it holds). An image task type's release lists its ``images``
    (``images/<sha256>.png`` and the file's SHA-256) and which fields are images; a text release's
    manifest has neither key, as before images existed."""
    released_figures = tally.round_figures(rule.seed)
    in_splits = tally.released_writers()
    released_writers = {w: k for w, k in writers.items() if w in in_splits}
    parent = identity.parent
    return {
        "format": RELEASE_FORMAT,
        "name": identity.name,
        "pretty_name": f"{identity.name} {identity.version}",
        "version": identity.version,
        "created_at": identity.created_at,
        "dynaval_version": identity.dynaval_version,
        "task_type": identity.task_type,
        "fields": list(identity.fields),
        "labels": list(identity.labels),
        "license": identity.license,
        "parent": None
        if parent is None
        else {"version": parent.version, "content_hash": parent.content_hash},
        "rounds": [
            {
                "index": index,
                **figures,
                "released": released_figures.get(index, {"rows": 0, "votes": 0, "alpha": None}),
            }
            for index, figures in rounds
        ],
        "splits": tally.split_figures(),
        "files": [dict(f) for f in files],
        "split_rule": {**rule.to_dict(), "alpha_resamples": ALPHA_RESAMPLES},
        "shares_reached": placed.shares_reached(released_writers),
        "withheld": {
            "count": len(placed.withheld),
            "by_reason": dict(Counter(placed.withheld.values())),
            "examples": [{"example_id": e, "reason": r} for e, r in sorted(placed.withheld.items())],
        },
        "near_duplicates": dict(near_duplicates),
        "features": [dict(f) for f in features],
        "content_hash": tally.content_hash(),
        "content_hash_rule": CONTENT_HASH_RULE,
        **({"image_fields": list(image_fields), "images": [dict(i) for i in images]} if image_fields else {}),
    }
