"""What the lead's dashboard shows: round figures, the decision queue, a candidate, the annotators.

Pages must stay fast on a round of 100,000 candidates: the queue pages through an index with
LIMIT/OFFSET (:class:`dynaval.adapters.db.queries.SqlDashboardQueries`), and the figures that need every
vote come from the per-process :class:`~dynaval.service_layer.dashboard.figures_cache.FiguresCache`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dynaval.domain.agreement.nominal import AgreementReport
from dynaval.domain.validation.candidate import OVERRIDE_OUTCOMES, Candidate, CandidateStatus
from dynaval.domain.validation.metrics import RoundCounts, round_counts
from dynaval.domain.validation.round import Round
from dynaval.domain.validation.votes import AnnotationRecord, current_ballots
from dynaval.service_layer.agreement import reports as agreement
from dynaval.service_layer.dashboard.figures_cache import Cached, FiguresCache
from dynaval.service_layer.dataset_records import round_dataset as dataset
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation import annotators, candidate_views, overrides
from dynaval.service_layer.validation.storage import LateAnnotation

PAGE_SIZE = 50
URGENT = (CandidateStatus.ESCALATED.value, CandidateStatus.FLAGGED.value)
"""Statuses a lead should look at first: the queue lists them before the rest."""
STATUSES = tuple(s.value for s in CandidateStatus)
LATE_SHOWN = 50
"""Late annotations listed on a round's page (the newest); the count covers them all."""
BOOTSTRAP = 1000
SEED = 0
"""The agreement figures shown are the API's defaults (``GET /api/rounds/<id>/agreement``)."""


def cached_round_agreement(services: Services, cache: FiguresCache, round_id: int) -> Cached[AgreementReport]:
    """The round's agreement figures (the API's defaults), from the per-process cache."""
    with services.uow(read_only=True) as uow:
        uow.rounds.get(round_id)
        fingerprint = uow.dashboard.votes_fingerprint(round_id)

    def compute() -> AgreementReport:
        report, _cost = agreement.round_agreement_report(services, round_id, bootstrap=BOOTSTRAP, seed=SEED)
        return report

    return cache.get("agreement", round_id, fingerprint, compute)


# ---------------------------------------------------------------------------------- round figures


@dataclass(frozen=True)
class RoundFigures:
    """One round's line on the rounds page (and the figures atop its queue)."""

    id: int
    name: str
    state: str
    task: str
    model_hash: str
    label_studio_project_id: int | None
    counts: RoundCounts
    alpha: float | None
    alpha_undefined_reason: str | None
    ci_low: float | None
    ci_high: float | None
    agreement_as_of: datetime
    """When alpha and its interval were computed."""
    agreement_current: bool
    """False while newer votes are being counted (see :class:`FiguresCache`)."""
    late_annotations: int = 0
    """Annotations read after the round was frozen: stored, never counted."""
    late: tuple[LateAnnotation, ...] = ()
    """The newest of them (on the round's page only)."""

    @property
    def unvalidated(self) -> int:
        return self.counts.unvalidated

    @property
    def collected(self) -> int:
        return self.counts.collected

    @property
    def fooled(self) -> int:
        return self.counts.fooled

    @property
    def in_validation(self) -> int:
        return self.counts.still_in_validation

    def count(self, status: str) -> int:
        return self.counts.by_status.get(status, 0)

    @property
    def mer(self) -> float | None:
        return self.counts.mer

    @property
    def vmer(self) -> float | None:
        return self.counts.vmer


def _figures(
    round_: Round,
    counts: RoundCounts,
    cached: Cached[AgreementReport],
    late_annotations: int,
    late: Sequence[LateAnnotation] = (),
) -> RoundFigures:
    assert round_.id is not None
    report = cached.value
    ci = report.ci95
    return RoundFigures(
        id=round_.id,
        name=round_.name,
        state=round_.state.value,
        task=round_.task_type,
        model_hash=round_.model_hash,
        label_studio_project_id=round_.label_studio_project_id,
        counts=counts,
        alpha=report.alpha,
        alpha_undefined_reason=report.undefined_reason,
        ci_low=ci[0] if ci else None,
        ci_high=ci[1] if ci else None,
        agreement_as_of=cached.computed_at,
        agreement_current=cached.current,
        late_annotations=late_annotations,
        late=tuple(late),
    )


def rounds_overview(services: Services, cache: FiguresCache) -> list[RoundFigures]:
    """Every round's figures, oldest first: counts, MER, VMER, and alpha with its 95% interval."""
    with services.uow(read_only=True) as uow:
        rounds = [r for r in uow.rounds.all() if r.id is not None]
        counts = uow.dashboard.status_counts([r.id for r in rounds if r.id is not None])
        late = uow.round_queries.late_counts([r.id for r in rounds if r.id is not None])
    return [
        _figures(r, round_counts(counts[r.id]), cached_round_agreement(services, cache, r.id), late[r.id])
        for r in rounds
        if r.id is not None
    ]


def round_figures(services: Services, cache: FiguresCache, round_id: int) -> RoundFigures:
    with services.uow(read_only=True) as uow:
        round_ = uow.rounds.get(round_id)
        counts = round_counts(uow.dashboard.status_counts([round_id])[round_id])
        late_total, late = uow.round_queries.late_annotations(round_id, LATE_SHOWN)
    return _figures(round_, counts, cached_round_agreement(services, cache, round_id), late_total, late)


@dataclass(frozen=True)
class RoundNav:
    """What the navigation bar shows of a round."""

    id: int
    name: str


def round_nav(services: Services, round_id: int) -> RoundNav:
    with services.uow(read_only=True) as uow:
        return RoundNav(round_id, uow.rounds.get(round_id).name)


# ---------------------------------------------------------------------------------- the queue


@dataclass(frozen=True)
class QueueRow:
    id: str
    text: str
    writer_label: str
    model_prediction: str | None
    votes: list[str]
    """One entry per current vote: its label, ``(flag)`` appended for a flag."""
    item_agreement: float | None
    status: str
    rule_version: str | None
    rule_reason: str | None
    override: dict[str, Any] | None
    label_studio_task_id: int | None


@dataclass(frozen=True)
class QueuePage:
    round_id: int
    rows: list[QueueRow]
    total: int
    page: int
    pages: int
    status: str
    q: str
    statuses: tuple[str, ...] = field(default=STATUSES)

    @property
    def has_previous(self) -> bool:
        return self.page > 1

    @property
    def has_next(self) -> bool:
        return self.page < self.pages


def decision_queue(
    services: Services,
    round_id: int,
    *,
    status: str = "",
    q: str = "",
    page: int = 1,
    by_status: Mapping[str, int] | None = None,
) -> QueuePage:
    """One page of a round's candidates: escalated and flagged first, then the rest, each by
    submission time. ``status`` keeps one status; ``q`` keeps candidates whose text contains it
    (case-insensitive). Unknown statuses and pages past the end give an empty page, never an error.
    ``by_status``, the round's counts by status when the caller has them, saves counting again.
    """
    page = max(page, 1)
    q = q.strip()
    with services.uow(read_only=True) as uow:
        round_ = uow.rounds.get(round_id)
        fields = services.catalog.get(round_.task_type).data_fields
        found, annotations, total = uow.dashboard.queue_page(
            round_id,
            fields=fields,
            status=status,
            q=q,
            urgent=URGENT,
            offset=(page - 1) * PAGE_SIZE,
            limit=PAGE_SIZE,
            by_status=by_status,
        )
    return QueuePage(
        round_id=round_id,
        rows=[_queue_row(c, fields, annotations[c.id]) for c in found],
        total=total,
        page=page,
        pages=max(1, math.ceil(total / PAGE_SIZE)),
        status=status,
        q=q,
    )


def _queue_row(candidate: Candidate, fields: Sequence[str], annotations: list[AnnotationRecord]) -> QueueRow:
    ballots = current_ballots(annotations)
    decision = candidate.decision or {}
    return QueueRow(
        id=candidate.id,
        text=" / ".join(candidate.inputs.get(name, "") for name in fields),
        writer_label=candidate.writer_label,
        model_prediction=candidate.model_prediction,
        votes=[(b.label or "no label") + (" (flag)" if b.flagged else "") for b in ballots],
        item_agreement=decision.get("item_agreement"),
        status=candidate.status.value,
        rule_version=decision.get("rule_version"),
        rule_reason=decision.get("reason"),
        override=candidate.override.to_dict() if candidate.override else None,
        label_studio_task_id=candidate.label_studio_task_id,
    )


# ------------------------------------------------------------------------------- one candidate


@dataclass(frozen=True)
class CandidateView:
    candidate: dict[str, Any]
    """As ``GET /api/candidates/<id>`` shows it."""
    record: dict[str, Any]
    """The provenance record, as the round dataset would hold it."""
    audit: list[dict[str, Any]]
    label_studio_project_id: int | None
    outcomes: tuple[str, ...] = tuple(o.value for o in OVERRIDE_OUTCOMES)


def candidate_view(services: Services, candidate_id: str) -> CandidateView:
    public = candidate_views.get_candidate(services, candidate_id)
    record = dataset.provenance_record(services, candidate_id)
    return CandidateView(
        candidate=public,
        record=record,
        audit=overrides.candidate_audit_log(services, candidate_id),
        label_studio_project_id=record["label_studio"]["project_id"],
    )


# ------------------------------------------------------------------------------ the annotators


@dataclass(frozen=True)
class PairCell:
    agreement: float | None
    shared: int


@dataclass(frozen=True)
class AnnotatorsView:
    round_id: int
    annotators: list[dict[str, Any]]
    """As ``GET /api/rounds/<id>/annotators`` shows them."""
    pair_names: list[str]
    pairs: list[list[PairCell]]
    labels: list[str]
    confusion: dict[str, dict[str, int]]
    """writer label -> validators' majority label -> candidates."""
    as_of: datetime
    """When the oldest of these figures was computed."""
    current: bool
    """False while newer votes are being counted (see :class:`FiguresCache`)."""


def annotators_view(services: Services, cache: FiguresCache, round_id: int) -> AnnotatorsView:
    """The annotators' report, their pairwise agreement and the writer x validators confusion."""
    with services.uow(read_only=True) as uow:
        labels = list(uow.rounds.get(round_id).labels)
        fingerprint = uow.dashboard.annotators_fingerprint(round_id)
    confusion = cache.get("confusion", round_id, fingerprint, lambda: _confusion(services, round_id, labels))
    report = cache.get(
        "annotators", round_id, fingerprint, lambda: annotators.annotators_report(services, round_id)
    )
    agreement_figures = cached_round_agreement(services, cache, round_id)
    pairwise = agreement_figures.value.pairwise
    names = [str(a) for a in pairwise.annotators]
    shared = pairwise.shared_items.tolist()
    agreements = pairwise.agreement()
    pairs = [
        [PairCell(agreements[i][j], int(shared[i][j])) for j in range(len(names))] for i in range(len(names))
    ]
    parts = (confusion, report, agreement_figures)
    return AnnotatorsView(
        round_id,
        report.value,
        names,
        pairs,
        labels,
        confusion.value,
        as_of=min(p.computed_at for p in parts),
        current=all(p.current for p in parts),
    )


def _confusion(services: Services, round_id: int, labels: list[str]) -> dict[str, dict[str, int]]:
    """Candidates by writer label and validators' majority label (from each candidate's latest rule
    decision, over its counted votes; candidates without a majority are left out)."""
    with services.uow(read_only=True) as uow:
        rows = uow.dashboard.writer_by_validators(round_id)
    table = {w: dict.fromkeys(labels, 0) for w in labels}
    for writer, validators, n in rows:
        table.setdefault(writer, dict.fromkeys(labels, 0))[validators] = n
    return table
