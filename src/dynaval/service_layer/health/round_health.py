"""A round's health for leads (``GET /api/rounds/<id>/health`` and the dashboard's Health page):
writer concentration, lexical diversity, repeated patterns, the fooled rate with and without them,
and the rounds of its task type side by side (the figures: :mod:`dynaval.domain.health.round_health`).

The figures read every candidate's text, and the near-duplicate pass the band keys stored at
submission (computing them for candidates not indexed yet; docs/benchmarks.md times both), so a
round's figures are kept in the per-process
:class:`~dynaval.service_layer.dashboard.figures_cache.FiguresCache` under a fingerprint of its candidates
(how many, the latest submission, how many scored and fooled), as the agreement figures are kept under one of
the votes: recomputed in the background when a candidate arrives or is scored.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dynaval.domain.agreement import AgreementReport
from dynaval.domain.health.band_keys import Int64s, keys_from_bytes, keys_to_bytes, shared_keys
from dynaval.domain.health.minhash import MinHashIndex, band_keys, connecting_pairs, keys_serve
from dynaval.domain.health.near_duplicates import NearDuplicateRule, field_shingles
from dynaval.domain.health.round_health import HealthCandidate, RoundHealth, RoundPoint, RoundTrend, trend
from dynaval.domain.health.round_health import round_health as figures_of
from dynaval.domain.images.image import ImageFingerprint, is_image_ref, sha_of
from dynaval.domain.images.near_copies import ImagePairIndex, NearCopyRule
from dynaval.domain.provenance import writer_pseudonym
from dynaval.domain.validation.metrics import RoundCounts, round_counts
from dynaval.domain.validation.round import Round
from dynaval.service_layer.dashboard.figures_cache import Cached, FiguresCache
from dynaval.service_layer.dashboard.views import cached_round_agreement
from dynaval.service_layer.images import stored_images
from dynaval.service_layer.services import Services

CLUSTERS_SHOWN = 50
"""The API and the page list the largest clusters; every cluster is counted."""


@dataclass(frozen=True)
class HealthView:
    round_id: int
    name: str
    task: str
    kind: str
    fields: list[str]
    rule: NearDuplicateRule | NearCopyRule
    """The round's rule of repeated patterns: lexical, or an image round's near-copy rule."""
    health: RoundHealth
    trend: list[RoundTrend]
    as_of: datetime
    """When the oldest of these figures was computed."""
    current: bool
    """False while newer candidates or votes are being counted (see :class:`FiguresCache`)."""

    @property
    def reads_images(self) -> bool:
        return isinstance(self.rule, NearCopyRule)

    def to_dict(self) -> dict[str, Any]:
        return {
            "round_id": self.round_id,
            "name": self.name,
            "task": self.task,
            "kind": self.kind,
            "fields": list(self.fields),
            "input_kind": "image" if self.reads_images else "text",
            "near_duplicate_rule": self.rule.to_dict(),
            **self.health.to_dict(max_clusters=CLUSTERS_SHOWN),
            "across_rounds": [t.to_dict() for t in self.trend],
            "as_of": self.as_of.isoformat(),
            "current": self.current,
        }


def compute_round_health(services: Services, round_id: int) -> RoundHealth:
    """The round's figures, from one read of its candidates (no cache); repeated patterns are
    near-duplicates by the round's own lexical threshold (its policy's ``near_duplicate_lexical``).

    The candidate pairs come from the band keys the submission check stored
    (:mod:`dynaval.adapters.health.near_duplicate_index`), computed here only for the candidates the index
    does not hold yet (stored before it existed, until ``dynaval near-duplicates reindex``); each
    pair is confirmed by the exact rule, as at submission. A rule those keys were not made for
    (see :func:`~dynaval.domain.health.minhash.keys_serve`) is served by an index built here."""
    with services.uow(read_only=True) as uow:
        round_ = uow.rounds.get(round_id)
        written = uow.round_queries.written_candidates(round_id)
        rule = round_.decision_policy.lexical_rule
        task_type = services.catalog.get(round_.task_type)
        serve = keys_serve(rule) or task_type.reads_images
        stored = uow.near_duplicates.round_band_keys(round_id) if serve else None
    fields = list(task_type.data_fields)
    secret = services.settings.pseudonym_secret
    writers: dict[tuple[str, str | None], str] = {}
    found: list[HealthCandidate] = []
    for c in written:
        key = (c.writer_id, c.collected_by)
        writer = writers.get(key)
        if writer is None:
            writer = writers[key] = writer_pseudonym(secret, c.writer_id, c.collected_by)
        found.append(HealthCandidate(c.id, c.inputs, writer, c.fooled, c.status))
    inputs = {c.id: c.inputs for c in written}
    if task_type.reads_images:
        return _image_round_health(services, round_, found, fields, stored or {})
    if stored is None:
        return figures_of(found, fields, _computed_pairs(inputs, fields, rule))
    keyed = shared_keys(
        (c, keys_from_bytes(stored[c]) if c in stored else _computed_keys(its_inputs, fields))
        for c, its_inputs in inputs.items()
    )
    pairs = connecting_pairs(keyed, lambda c: field_shingles(inputs[c], fields, rule.shingle), rule)
    return figures_of(found, fields, pairs)


def _image_round_health(
    services: Services,
    round_: Round,
    found: Sequence[HealthCandidate],
    fields: Sequence[str],
    stored: Mapping[str, bytes | None],
) -> RoundHealth:
    """An image round's figures: repeated patterns are near-copies at the round's
    ``near_duplicate_image_bits``, from the fingerprints stored at submission (computed from the
    image store for a candidate the index does not hold)."""
    prints = {}
    for c in found:
        data = stored.get(c.id)
        if data:
            prints[c.id] = ImageFingerprint.from_bytes(data)
        elif is_image_ref(ref := c.inputs.get(fields[0], "")):
            prints[c.id] = stored_images.fingerprint_of_png(
                services.images, stored_images.png_of(services.images, sha_of(ref))
            )
    index = ImagePairIndex(round_.decision_policy.image_rule, prints.__getitem__)
    for candidate_id in prints:
        index.add_inputs(candidate_id, {"image": candidate_id}, ["image"])
    pairs = [(a, b) for a, b, _similarity in index.pairs()]
    return figures_of(found, fields, pairs, image_hashes={c: p.centre for c, p in prints.items()})


def _computed_keys(inputs: Mapping[str, str], fields: Sequence[str]) -> Int64s:
    """The band keys of a candidate the index does not hold yet, as the check would store them."""
    return keys_from_bytes(keys_to_bytes(band_keys(field_shingles(inputs, fields))))


def _computed_pairs(
    inputs: Mapping[str, Mapping[str, str]], fields: Sequence[str], rule: NearDuplicateRule
) -> Iterator[tuple[str, str]]:
    """The confirmed pairs of an index built here, at the round's rule."""
    index = MinHashIndex(rule)
    for c, its_inputs in inputs.items():
        index.add(c, field_shingles(its_inputs, fields, rule.shingle))
    return ((a, b) for a, b, _sim in index.pairs())


def cached_round_health(services: Services, cache: FiguresCache, round_id: int) -> Cached[RoundHealth]:
    with services.uow(read_only=True) as uow:
        uow.rounds.get(round_id)
        fingerprint = uow.round_queries.candidates_fingerprint(round_id)
    return cache.get("health", round_id, fingerprint, lambda: compute_round_health(services, round_id))


def _comparable(round_: Round, other: Round) -> bool:
    """Rounds compared side by side: the same task type and the same kind (a capture round has no
    model whose error rate could rise)."""
    return other.task_type == round_.task_type and other.kind is round_.kind


def round_health(services: Services, cache: FiguresCache, round_id: int) -> HealthView:
    """The round's health and the rounds of its task type (and kind) side by side, in round order.
    An unknown round is NotFound."""
    with services.uow(read_only=True) as uow:
        round_ = uow.rounds.get(round_id)
        task_type = services.catalog.get(round_.task_type)
        peers = [r for r in uow.rounds.all() if r.id is not None and _comparable(round_, r)]
        counts = uow.dashboard.status_counts([r.id for r in peers if r.id is not None])
    parts: list[Cached[Any]] = []
    points: list[RoundPoint] = []
    own: Cached[RoundHealth] | None = None
    for peer in sorted(peers, key=lambda r: r.id or 0):
        assert peer.id is not None
        health = cached_round_health(services, cache, peer.id)
        agreement = cached_round_agreement(services, cache, peer.id)
        parts += [health, agreement]
        if peer.id == round_id:
            own = health
        points.append(_point(peer, round_counts(counts[peer.id]), health.value, agreement.value))
    assert own is not None  # the round is its own peer
    return HealthView(
        round_id=round_id,
        name=round_.name,
        task=round_.task_type,
        kind=round_.kind.value,
        fields=list(task_type.data_fields),
        rule=round_.decision_policy.image_rule
        if task_type.reads_images
        else round_.decision_policy.lexical_rule,
        health=own.value,
        trend=trend(points),
        as_of=min(p.computed_at for p in parts),
        current=all(p.current for p in parts),
    )


def _point(
    round_: Round, figures: RoundCounts, health: RoundHealth, agreement: AgreementReport
) -> RoundPoint:
    assert round_.id is not None
    return RoundPoint(
        round_id=round_.id,
        name=round_.name,
        state=round_.state.value,
        collected=figures.collected,
        mer=figures.mer,
        vmer=figures.vmer,
        alpha=agreement.alpha,
        alpha_undefined_reason=agreement.undefined_reason,
        diversity=health.diversity,
    )
