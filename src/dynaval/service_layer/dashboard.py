"""What the lead's dashboard shows: round figures, the decision queue, a candidate, the annotators.

Pages must stay fast on a round of 100,000 candidates: the queue pages through an index with
LIMIT/OFFSET, and the round's agreement figures (alpha with its bootstrap interval, the pairwise
matrix, the annotators' report), which need every vote, are cached in the process under a
fingerprint of the round's votes, so a page view recomputes them only when a vote or an exclusion
changed.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar, cast

from sqlalchemy import func, or_
from sqlmodel import Session, col, select

from dynaval.adapters.orm import (
    AnnotationRow,
    CandidateRow,
    ExclusionEventRow,
    GoldAnswerRow,
    RoundRow,
    utcnow,
)
from dynaval.domain.agreement import AgreementReport
from dynaval.domain.decision import Outcome
from dynaval.domain.errors import Unavailable
from dynaval.domain.metrics import RoundCounts, round_counts
from dynaval.domain.votes import current_ballots
from dynaval.service_layer import agreement, annotators, candidates, dataset, overrides
from dynaval.service_layer.decisions import annotation_records_of, override_record
from dynaval.service_layer.rounds import get_round
from dynaval.service_layer.services import Services

PAGE_SIZE = 50
URGENT = (Outcome.ESCALATED.value, Outcome.FLAGGED.value)
"""Statuses a lead should look at first: the queue lists them before the rest."""
STATUSES = (
    "scoring",
    "queued",
    "not_fooled",
    *(o.value for o in Outcome),
)
BOOTSTRAP = 1000
SEED = 0
"""The agreement figures shown are the API's defaults (``GET /api/rounds/<id>/agreement``)."""

T = TypeVar("T")
FIRST_COMPUTATION_WAIT_S = 120.0
"""A first view waits this long for its figures at most, then answers 503 (the computation goes on)."""
logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------ the figure cache


@dataclass(frozen=True)
class Cached(Generic[T]):
    """Figures as a page shows them, with when they were computed and whether they are current."""

    value: T
    computed_at: datetime
    current: bool
    """Computed under the round's present fingerprint; False while newer votes are being counted."""


@dataclass
class _Entry:
    fingerprint: Hashable
    value: Any
    computed_at: datetime


@dataclass
class _Run:
    fingerprint: Hashable
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class FiguresCache:
    """Per-process cache of computed round figures, one entry per (kind, round).

    An entry is current while the round's fingerprint (see :func:`votes_fingerprint`) is the one it
    was computed under. When the fingerprint moved on, the figures are recomputed in a background
    thread, and the view waits up to ``wait_s`` for them: small rounds are recomputed well within
    that and always show current figures; on a large round the view shows the previous figures,
    marked with the time they were computed, instead of keeping the lead waiting for seconds. Only
    the very first view of a round's figures waits for the whole computation.

    At most one computation per (kind, round) runs at a time; a view that finds one running for an
    older fingerprint queues one for its own, which starts when the running one ends, so a steady
    stream of votes costs one computation after another, never a pile of them. Thread-safe.
    """

    def __init__(self, *, wait_s: float = 0.5) -> None:
        self.wait_s = wait_s
        self._entries: dict[tuple[str, int], _Entry] = {}
        self._runs: dict[tuple[str, int], _Run] = {}
        self._queued: dict[tuple[str, int], tuple[Hashable, Callable[[], Any]]] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, kind: str, round_id: int, fingerprint: Hashable, compute: Callable[[], T]) -> Cached[T]:
        key = (kind, round_id)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.fingerprint == fingerprint:
                self.hits += 1
                return Cached(cast(T, entry.value), entry.computed_at, current=True)
            run = self._runs.get(key)
            if run is None:
                run = self._start(key, fingerprint, compute)
            elif run.fingerprint != fingerprint:
                self._queued[key] = (fingerprint, compute)
        finished = run.done.wait(self.wait_s if entry is not None else FIRST_COMPUTATION_WAIT_S)
        with self._lock:
            latest = self._entries.get(key)
        if latest is None:
            if not finished:
                raise Unavailable(
                    f"the {kind} figures of round {round_id} are still being computed; try again shortly"
                )
            if run.error is not None:
                raise run.error
            # The run we waited for was an older fingerprint's and failed; ours is queued.
            raise RuntimeError(f"the {kind} figures of round {round_id} could not be computed")
        return Cached(cast(T, latest.value), latest.computed_at, current=latest.fingerprint == fingerprint)

    def _start(self, key: tuple[str, int], fingerprint: Hashable, compute: Callable[[], Any]) -> _Run:
        """Start computing ``key`` under ``fingerprint``; the caller holds the lock."""
        run = _Run(fingerprint)
        self._runs[key] = run
        thread = threading.Thread(
            target=self._compute, args=(key, run, compute), name=f"figures-{key[0]}-{key[1]}", daemon=True
        )
        thread.start()
        return run

    def _compute(self, key: tuple[str, int], run: _Run, compute: Callable[[], Any]) -> None:
        try:
            value = compute()
        except BaseException as exc:  # handed to the views that wait for it; logged here
            run.error = exc
            logger.warning("computing the %s figures of round %s failed: %r", key[0], key[1], exc)
            value = None
        with self._lock:
            if run.error is None:
                self.misses += 1
                self._entries[key] = _Entry(run.fingerprint, value, utcnow())
            del self._runs[key]
            queued = self._queued.pop(key, None)
            if queued is not None and queued[0] != run.fingerprint:
                self._start(key, *queued)
        run.done.set()

    def settle(self, timeout_s: float = 60.0) -> None:
        """Wait until no computation is running (for tests and benchmarks)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                runs = list(self._runs.values())
            if not runs:
                return
            for run in runs:
                run.done.wait(max(0.0, deadline - time.monotonic()))
        raise TimeoutError("figures were still being computed")


def votes_fingerprint(session: Session, round_id: int) -> tuple[Any, ...]:
    """What the round's counted votes depend on: its annotations (how many, and the latest time one
    was stored or changed) and its exclusion log (every exclusion or reinstatement adds an event).
    Cheap indexed queries (a count and a max are faster apart than together)."""
    where = AnnotationRow.round_id == round_id
    annotations = session.exec(select(func.count()).select_from(AnnotationRow).where(where)).one()
    latest = session.exec(select(func.max(AnnotationRow.received_at)).where(where)).one()
    exclusions = session.exec(
        select(func.count(), func.max(ExclusionEventRow.id)).where(ExclusionEventRow.round_id == round_id)
    ).one()
    return (round_id, int(annotations), latest, int(exclusions[0]), exclusions[1])


def annotators_fingerprint(session: Session, round_id: int) -> tuple[Any, ...]:
    """The votes' fingerprint and the round's gold answers (gold accuracy is on the annotators page)."""
    gold = session.exec(
        select(func.count(), func.max(GoldAnswerRow.received_at), func.max(GoldAnswerRow.updated_at)).where(
            GoldAnswerRow.round_id == round_id
        )
    ).one()
    return (*votes_fingerprint(session, round_id), int(gold[0]), gold[1], gold[2])


def _round_agreement(services: Services, cache: FiguresCache, round_id: int) -> Cached[AgreementReport]:
    with services.database.reading() as session:
        get_round(session, round_id)
        fingerprint = votes_fingerprint(session, round_id)

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


def _counts(session: Session, round_ids: Sequence[int]) -> dict[int, RoundCounts]:
    """Counts by status, fooled and MER/VMER of each round, as the round summary computes them."""
    rows = session.exec(
        select(CandidateRow.round_id, CandidateRow.status, CandidateRow.fooled, func.count())
        .where(col(CandidateRow.round_id).in_(round_ids))
        .group_by(col(CandidateRow.round_id), col(CandidateRow.status), col(CandidateRow.fooled))
    ).all()
    grouped: dict[int, dict[tuple[str, bool], int]] = {r: {} for r in round_ids}
    for round_id, status, fooled, n in rows:
        key = (status, bool(fooled))
        grouped[round_id][key] = grouped[round_id].get(key, 0) + int(n)
    return {r: round_counts(g) for r, g in grouped.items()}


def _figures(row: RoundRow, counts: RoundCounts, cached: Cached[AgreementReport]) -> RoundFigures:
    assert row.id is not None
    report = cached.value
    ci = report.ci95
    return RoundFigures(
        id=row.id,
        name=row.name,
        state=row.state,
        task=row.task_type,
        model_hash=row.model_hash,
        label_studio_project_id=row.label_studio_project_id,
        counts=counts,
        alpha=report.alpha,
        alpha_undefined_reason=report.undefined_reason,
        ci_low=ci[0] if ci else None,
        ci_high=ci[1] if ci else None,
        agreement_as_of=cached.computed_at,
        agreement_current=cached.current,
    )


def rounds_overview(services: Services, cache: FiguresCache) -> list[RoundFigures]:
    """Every round's figures, oldest first: counts, MER, VMER, and alpha with its 95% interval."""
    with services.database.reading() as session:
        rows = list(session.exec(select(RoundRow).order_by(col(RoundRow.id))).all())
        counts = _counts(session, [r.id for r in rows if r.id is not None])
    return [
        _figures(r, counts[r.id], _round_agreement(services, cache, r.id)) for r in rows if r.id is not None
    ]


def round_figures(services: Services, cache: FiguresCache, round_id: int) -> RoundFigures:
    with services.database.reading() as session:
        row = get_round(session, round_id)
        counts = _counts(session, [round_id])[round_id]
    return _figures(row, counts, _round_agreement(services, cache, round_id))


@dataclass(frozen=True)
class RoundNav:
    """What the navigation bar shows of a round."""

    id: int
    name: str


def round_nav(services: Services, round_id: int) -> RoundNav:
    with services.database.reading() as session:
        row = get_round(session, round_id)
        return RoundNav(round_id, row.name)


def rounds_chart(figures: Sequence[RoundFigures]) -> dict[str, Any]:
    """The rounds chart's data: alpha with its interval and VMER, one point per round."""
    return {
        "labels": [f"#{f.id} {f.name}" for f in figures],
        "alpha": [f.alpha for f in figures],
        "ci_low": [f.ci_low for f in figures],
        "ci_high": [f.ci_high for f in figures],
        "vmer": [f.vmer for f in figures],
    }


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
    offset = (page - 1) * PAGE_SIZE
    with services.database.reading() as session:
        round_row = get_round(session, round_id)
        fields = services.catalog.get(round_row.task_type).data_fields
        conditions: list[Any] = [CandidateRow.round_id == round_id]
        if status:
            conditions.append(CandidateRow.status == status)
        if q:
            needle = q.lower()
            matches = [func.lower(col(CandidateRow.inputs)[name].as_string()) for name in fields]
            clauses = [m.contains(needle, autoescape=True) for m in matches]
            conditions.append(or_(*clauses))

        def count(where: list[Any]) -> int:
            return int(session.exec(select(func.count()).select_from(CandidateRow).where(*where)).one())

        known = by_status if by_status is not None and not q else None
        if known is not None:
            total = known.get(status, 0) if status else sum(known.values())
        else:
            total = count(conditions)
        parts: list[tuple[list[Any], int]]
        if status:
            parts = [(conditions, total)]
        else:
            urgent = [*conditions, col(CandidateRow.status).in_(URGENT)]
            n_urgent = sum(known.get(s, 0) for s in URGENT) if known is not None else count(urgent)
            parts = [
                (urgent, n_urgent),
                ([*conditions, col(CandidateRow.status).not_in(URGENT)], total - n_urgent),
            ]
        rows: list[CandidateRow] = []
        skip = offset
        for where, size in parts:
            if skip >= size:
                skip -= size
                continue
            rows += session.exec(
                select(CandidateRow)
                .where(*where)
                .order_by(col(CandidateRow.submitted_at), col(CandidateRow.id))
                .offset(skip)
                .limit(PAGE_SIZE - len(rows))
            ).all()
            skip = 0
            if len(rows) >= PAGE_SIZE:
                break
        annotations: dict[str, list[AnnotationRow]] = {c.id: [] for c in rows}
        if rows:
            for a in session.exec(
                select(AnnotationRow).where(col(AnnotationRow.candidate_id).in_(list(annotations)))
            ).all():
                annotations[a.candidate_id].append(a)
        queue_rows = [_queue_row(c, fields, annotations[c.id]) for c in rows]
    return QueuePage(
        round_id=round_id,
        rows=queue_rows,
        total=total,
        page=page,
        pages=max(1, math.ceil(total / PAGE_SIZE)),
        status=status,
        q=q,
    )


def _queue_row(candidate: CandidateRow, fields: Sequence[str], annotations: list[AnnotationRow]) -> QueueRow:
    ballots = current_ballots(annotation_records_of(annotations))
    decision = candidate.decision or {}
    return QueueRow(
        id=candidate.id,
        text=" / ".join(candidate.inputs.get(name, "") for name in fields),
        writer_label=candidate.writer_label,
        model_prediction=candidate.model_prediction,
        votes=[(b.label or "no label") + (" (flag)" if b.flagged else "") for b in ballots],
        item_agreement=decision.get("item_agreement"),
        status=candidate.status,
        rule_version=decision.get("rule_version"),
        rule_reason=decision.get("reason"),
        override=override_record(candidate),
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
    outcomes: tuple[str, ...] = overrides.OVERRIDE_OUTCOMES


def candidate_view(services: Services, candidate_id: str) -> CandidateView:
    public = candidates.get_candidate(services, candidate_id)
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
    with services.database.reading() as session:
        round_row = get_round(session, round_id)
        labels = list(round_row.labels)
        fingerprint = annotators_fingerprint(session, round_id)
    confusion = cache.get("confusion", round_id, fingerprint, lambda: _confusion(services, round_id, labels))
    report = cache.get(
        "annotators", round_id, fingerprint, lambda: annotators.annotators_report(services, round_id)
    )
    agreement_figures = _round_agreement(services, cache, round_id)
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
    majority = col(CandidateRow.decision)["majority_label"].as_string()
    with services.database.reading() as session:
        rows = session.exec(
            select(CandidateRow.writer_label, majority, func.count())
            .where(CandidateRow.round_id == round_id, majority.is_not(None))
            .group_by(col(CandidateRow.writer_label), majority)
        ).all()
    table = {w: dict.fromkeys(labels, 0) for w in labels}
    for writer, validators, n in rows:
        table.setdefault(writer, dict.fromkeys(labels, 0))[validators] = int(n)
    return table


def annotators_chart(view: AnnotatorsView) -> dict[str, Any]:
    """The annotators chart's data: agreement with the others and gold accuracy, per annotator."""
    return {
        "labels": [a["annotator"][:18] + "…" for a in view.annotators],
        "agreement": [a["agreement_with_others"] for a in view.annotators],
        "gold_accuracy": [a["gold_accuracy"] for a in view.annotators],
    }
