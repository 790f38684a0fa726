"""Read models of a round: the figures the API, the dashboard and the agreement report show.

Plain columns, aggregated by the database; no domain object is built for a round's 250,000 votes.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import func, or_
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from dynaval.adapters.db.candidates import candidate_of, record_of
from dynaval.adapters.db.orm import (
    AnnotationRow,
    AnnotatorStatusRow,
    CandidateRow,
    ExclusionEventRow,
    GoldAnswerRow,
    as_utc,
)
from dynaval.domain.agreement.encoding import VoteColumns
from dynaval.domain.validation.candidate import Candidate
from dynaval.domain.validation.votes import AnnotationRecord
from dynaval.service_layer.validation.storage import LateAnnotation, WrittenCandidate

VOTE_PAGE = 20_000
"""Vote rows fetched from the database at a time."""


_CANDIDATES: Any = CandidateRow.__table__  # type: ignore[attr-defined]


class SqlRoundQueries:
    def __init__(self, session: Session) -> None:
        self._session = session

    def status_counts(self, round_id: int) -> dict[tuple[str, bool], int]:
        """Candidates of the round by (status, fooled)."""
        grouped = self._session.exec(
            select(CandidateRow.status, CandidateRow.fooled, func.count())
            .where(CandidateRow.round_id == round_id)
            .group_by(col(CandidateRow.status), col(CandidateRow.fooled))
        ).all()
        return {(status, bool(fooled)): int(n) for status, fooled, n in grouped}

    def status_counts_by_model(self, round_id: int) -> dict[tuple[str, str], dict[tuple[str, bool], int]]:
        candidate = _CANDIDATES
        grouped = self._session.execute(
            sa_select(
                candidate.c.model_hash,
                candidate.c.model_name,
                candidate.c.status,
                candidate.c.fooled,
                func.count(),
                func.min(candidate.c.scored_at),
            )
            .where(candidate.c.round_id == round_id, candidate.c.model_hash.is_not(None))
            .group_by(candidate.c.model_hash, candidate.c.model_name, candidate.c.status, candidate.c.fooled)
        ).all()
        first: dict[tuple[str, str], Any] = {}
        by_model: dict[tuple[str, str], dict[tuple[str, bool], int]] = {}
        for model_hash, model_name, status, fooled, n, scored in grouped:
            key = (str(model_hash), str(model_name or ""))
            by_model.setdefault(key, {})[(status, bool(fooled))] = int(n)
            if scored is not None and (key not in first or scored < first[key]):
                first[key] = scored
        order = sorted(by_model, key=lambda key: (key not in first, str(first.get(key, ""))))
        return {key: by_model[key] for key in order}

    def labelled_votes(self, round_id: int) -> list[tuple[str, str, str]]:
        """Every annotator's current labelled vote in the round as (candidate, annotator, label),
        excluded annotators included.

        The same votes as :func:`dynaval.domain.validation.votes.current_votes` per candidate
        (latest by update time, then annotation id; an annotation with neither label nor flag is no
        vote; a flag-only latest vote hides an earlier label), read as plain columns and ordered by
        the database: a
        round of 250,000 annotations takes about a second, not the many that ORM rows would.
        """
        return list(self._current_votes(round_id))

    def _current_votes(self, round_id: int) -> Iterator[tuple[str, str, str]]:
        """:meth:`labelled_votes` one at a time, read in pages: a million candidates' votes are
        never held as rows (ordered by candidate, so a candidate's votes come together)."""
        annotation = AnnotationRow.__table__  # type: ignore[attr-defined]
        # Core rows, not ORM ones: a million candidates' three million votes read in 6 to 7 s
        # instead of 8.5 s on SQLite (docs/benchmarks.md).
        rows = (
            self._session.connection()
            .execute(
                sa_select(annotation.c.candidate_id, annotation.c.annotator_id, annotation.c.label)
                .where(
                    annotation.c.round_id == round_id,
                    annotation.c.was_cancelled.is_(False),
                    annotation.c.late.is_(False),
                    annotation.c.label.is_not(None) | annotation.c.flagged.is_(True),
                )
                .order_by(
                    annotation.c.candidate_id,
                    annotation.c.annotator_id,
                    annotation.c.updated_at,
                    annotation.c.id,
                )
                .execution_options(yield_per=VOTE_PAGE)
            )
            .partitions()
        )
        # Ordered: of each (candidate, annotator)'s rows the last is the vote.
        previous: Any = None
        for page in rows:
            for row in page:
                if (
                    previous is not None
                    and previous[2] is not None
                    and (previous[0] != row[0] or previous[1] != row[1])
                ):
                    yield previous[0], previous[1], previous[2]
                previous = row
        if previous is not None and previous[2] is not None:
            yield previous[0], previous[1], previous[2]

    def _counted(
        self, round_id: int, writer_annotators: Mapping[str, str] | None
    ) -> Iterator[tuple[str, str, str]]:
        excluded = set(
            self._session.exec(
                select(AnnotatorStatusRow.annotator_id).where(
                    AnnotatorStatusRow.round_id == round_id, col(AnnotatorStatusRow.excluded).is_(True)
                )
            ).all()
        )
        own: dict[str, str] = {}
        if writer_annotators:
            # A collector's writers are names of its front end: never linked (Candidate.decide).
            written = self._session.exec(
                select(CandidateRow.id, CandidateRow.writer_id).where(
                    CandidateRow.round_id == round_id,
                    col(CandidateRow.collected_by).is_(None),
                    col(CandidateRow.writer_id).in_(list(writer_annotators)),
                )
            ).all()
            own = {candidate_id: writer_annotators[writer] for candidate_id, writer in written}
        for vote in self._current_votes(round_id):
            if vote[1] not in excluded and own.get(vote[0]) != vote[1]:
                yield vote

    def counted_votes(
        self, round_id: int, writer_annotators: Mapping[str, str] | None = None
    ) -> list[tuple[str, str, str]]:
        """:meth:`labelled_votes` without the excluded annotators' votes, nor the writers' votes on
        their own examples: what the round counts."""
        return list(self._counted(round_id, writer_annotators))

    def counted_vote_codes(
        self, round_id: int, writer_annotators: Mapping[str, str] | None = None
    ) -> VoteColumns:
        """:meth:`counted_votes` as integer columns, for the round's alpha without a tuple per vote:
        items and annotators numbered in the order :meth:`counted_votes` first gives them (so
        alpha and its seeded interval come out exactly as from the tuples), labels as text."""
        items, annotators, labels = array("q"), array("q"), array("q")
        annotator_codes: dict[str, int] = {}
        label_codes: dict[str, int] = {}
        item = -1
        last_item: str | None = None
        for candidate_id, annotator, label in self._counted(round_id, writer_annotators):
            if candidate_id != last_item:
                item, last_item = item + 1, candidate_id
            items.append(item)
            annotators.append(annotator_codes.setdefault(annotator, len(annotator_codes)))
            labels.append(label_codes.setdefault(label, len(label_codes)))
        return VoteColumns.from_codes(items, annotators, labels, label_codes)

    def validated_candidates(self, round_id: int) -> int:
        """Candidates whose task is in Label Studio."""
        return int(
            self._session.exec(
                select(func.count())
                .select_from(CandidateRow)
                .where(CandidateRow.round_id == round_id, col(CandidateRow.label_studio_task_id).is_not(None))
            ).one()
        )

    def annotation_count(self, round_id: int) -> int:
        """Non-cancelled annotations stored for the round, late ones left out."""
        return int(
            self._session.exec(
                select(func.count())
                .select_from(AnnotationRow)
                .where(
                    AnnotationRow.round_id == round_id,
                    col(AnnotationRow.was_cancelled).is_(False),
                    col(AnnotationRow.late).is_(False),
                )
            ).one()
        )

    def late_annotations(self, round_id: int, limit: int) -> tuple[int, list[LateAnnotation]]:
        """How many annotations were read after the round was frozen, and the latest ``limit`` of them."""
        where = (AnnotationRow.round_id == round_id, col(AnnotationRow.late).is_(True))
        total = self._session.exec(select(func.count()).select_from(AnnotationRow).where(*where)).one()
        rows = self._session.exec(
            select(AnnotationRow)
            .where(*where)
            .order_by(col(AnnotationRow.received_at).desc(), col(AnnotationRow.id).desc())
            .limit(limit)
        ).all()
        return int(total), [
            LateAnnotation(
                annotation_id=r.id,
                candidate_id=r.candidate_id,
                annotator=r.annotator_id,
                label=r.label,
                was_cancelled=r.was_cancelled,
                received_at=as_utc(r.received_at),
            )
            for r in rows
        ]

    def late_counts(self, round_ids: Sequence[int]) -> dict[int, int]:
        """Annotations read after each round was frozen, by round (0 for none)."""
        counts = dict.fromkeys(round_ids, 0)
        if round_ids:
            for round_id, n in self._session.exec(
                select(AnnotationRow.round_id, func.count())
                .where(col(AnnotationRow.round_id).in_(list(round_ids)), col(AnnotationRow.late).is_(True))
                .group_by(col(AnnotationRow.round_id))
            ).all():
                counts[int(round_id)] = int(n)
        return counts

    def writer_labels(self, round_id: int) -> list[tuple[str, str]]:
        """Every candidate of the round with its writer's label."""
        return list(
            self._session.exec(
                select(CandidateRow.id, CandidateRow.writer_label).where(CandidateRow.round_id == round_id)
            ).all()
        )

    def written_candidates(self, round_id: int) -> list[WrittenCandidate]:
        """Every candidate of the round in submission order, as plain columns."""
        rows = self._session.execute(
            sa_select(
                col(CandidateRow.id),
                col(CandidateRow.inputs),
                col(CandidateRow.writer_id),
                col(CandidateRow.collected_by),
                col(CandidateRow.fooled),
                col(CandidateRow.status),
            )
            .where(col(CandidateRow.round_id) == round_id)
            .order_by(col(CandidateRow.submitted_at), col(CandidateRow.id))
        ).all()
        return [
            WrittenCandidate(str(i), dict(inputs or {}), str(writer), collected_by, bool(fooled), str(status))
            for i, inputs, writer, collected_by, fooled, status in rows
        ]

    def candidates_fingerprint(self, round_id: int) -> tuple[Any, ...]:
        """How many candidates, the latest submission, how many are not scored yet and how many
        fooled the model: the first two read the submission index, the last two the status index."""
        where = CandidateRow.round_id == round_id
        count = self._session.exec(select(func.count()).select_from(CandidateRow).where(where)).one()
        latest = self._session.exec(select(func.max(CandidateRow.submitted_at)).where(where)).one()
        unscored = self._session.exec(
            select(func.count()).select_from(CandidateRow).where(where, col(CandidateRow.fooled).is_(None))
        ).one()
        fooled = self._session.exec(
            select(func.count()).select_from(CandidateRow).where(where, col(CandidateRow.fooled).is_(True))
        ).one()
        return (round_id, int(count), latest, int(unscored), int(fooled))


class SqlDashboardQueries:
    """What the lead's dashboard reads: fingerprints of a round's votes, counts, the paged queue."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def votes_fingerprint(self, round_id: int) -> tuple[Any, ...]:
        """What the round's counted votes depend on: its annotations (how many, and the latest time
        one was stored or changed) and its exclusion log (every exclusion or reinstatement adds an
        event). Cheap indexed queries (a count and a max are faster apart than together)."""
        where = AnnotationRow.round_id == round_id
        annotations = self._session.exec(select(func.count()).select_from(AnnotationRow).where(where)).one()
        latest = self._session.exec(select(func.max(AnnotationRow.received_at)).where(where)).one()
        exclusions = self._session.exec(
            select(func.count(), func.max(ExclusionEventRow.id)).where(ExclusionEventRow.round_id == round_id)
        ).one()
        return (round_id, int(annotations), latest, int(exclusions[0]), exclusions[1])

    def annotators_fingerprint(self, round_id: int) -> tuple[Any, ...]:
        """The votes' fingerprint and the round's gold answers (gold accuracy is on the annotators page)."""
        gold = self._session.exec(
            select(
                func.count(), func.max(GoldAnswerRow.received_at), func.max(GoldAnswerRow.updated_at)
            ).where(GoldAnswerRow.round_id == round_id)
        ).one()
        return (*self.votes_fingerprint(round_id), int(gold[0]), gold[1], gold[2])

    def status_counts(self, round_ids: Sequence[int]) -> dict[int, dict[tuple[str, bool], int]]:
        """Candidates of each round by (status, fooled), read at once."""
        rows = self._session.exec(
            select(CandidateRow.round_id, CandidateRow.status, CandidateRow.fooled, func.count())
            .where(col(CandidateRow.round_id).in_(list(round_ids)))
            .group_by(col(CandidateRow.round_id), col(CandidateRow.status), col(CandidateRow.fooled))
        ).all()
        grouped: dict[int, dict[tuple[str, bool], int]] = {r: {} for r in round_ids}
        for round_id, status, fooled, n in rows:
            key = (status, bool(fooled))
            grouped[round_id][key] = grouped[round_id].get(key, 0) + int(n)
        return grouped

    def queue_page(
        self,
        round_id: int,
        *,
        fields: Sequence[str],
        status: str,
        q: str,
        urgent: Sequence[str],
        offset: int,
        limit: int,
        by_status: Mapping[str, int] | None,
    ) -> tuple[list[Candidate], dict[str, list[AnnotationRecord]], int]:
        """One page of the round's candidates, ``urgent`` statuses first, then the rest, each by
        submission time; with their annotations, and the total the filters keep. ``q`` keeps
        candidates whose ``fields`` contain it (case-insensitive); ``by_status``, the round's counts
        when the caller has them, saves counting again."""
        session = self._session
        conditions: list[Any] = [CandidateRow.round_id == round_id]
        if status:
            conditions.append(CandidateRow.status == status)
        if q:
            needle = q.lower()
            matches = [func.lower(col(CandidateRow.inputs)[name].as_string()) for name in fields]
            conditions.append(or_(*(m.contains(needle, autoescape=True) for m in matches)))

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
            first = [*conditions, col(CandidateRow.status).in_(list(urgent))]
            n_first = sum(known.get(s, 0) for s in urgent) if known is not None else count(first)
            parts = [
                (first, n_first),
                ([*conditions, col(CandidateRow.status).not_in(list(urgent))], total - n_first),
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
                .limit(limit - len(rows))
            ).all()
            skip = 0
            if len(rows) >= limit:
                break
        annotations: dict[str, list[AnnotationRecord]] = {c.id: [] for c in rows}
        if rows:
            for a in session.exec(
                select(AnnotationRow).where(col(AnnotationRow.candidate_id).in_(list(annotations)))
            ):
                annotations[a.candidate_id].append(record_of(a))
        return [candidate_of(r) for r in rows], annotations, total

    def writer_by_validators(self, round_id: int) -> list[tuple[str, str, int]]:
        """Candidates by writer label and validators' majority label (each candidate's latest rule
        decision; candidates without a majority are left out)."""
        majority = col(CandidateRow.decision)["majority_label"].as_string()
        rows = self._session.exec(
            select(CandidateRow.writer_label, majority, func.count())
            .where(CandidateRow.round_id == round_id, majority.is_not(None))
            .group_by(col(CandidateRow.writer_label), majority)
        ).all()
        return [(str(w), str(v), int(n)) for w, v, n in rows]
