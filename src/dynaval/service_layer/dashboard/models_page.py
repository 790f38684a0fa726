"""What the lead's models page shows: the accuracy of every model on every round split (a Dynabench-style
leaderboard) with each case's answers underneath, accuracy per label, which model served when and
why each was or was not shipped, the recorded gate runs with their flips, the suspect queue and the
retired cases.

Read-only. The matrix is made of each model's latest result on each case still in the suite (a
retired case leaves it, as it leaves evaluation and the gate), with the evaluation's own accuracy
and bootstrap interval (:func:`dynaval.domain.regression.suite.accuracy_with_ci`, same resamples and
seed as ``dynaval evaluate``). Those intervals need every result and a bootstrap per cell (about
1.7 s for a split of 10,000 cases), so the matrix is kept in the dashboard's
:class:`~dynaval.service_layer.dashboard.figures_cache.FiguresCache` under a fingerprint of the finished
evaluation runs and the retired cases: it is recomputed only after an evaluation or a retirement,
in the background. Every list is bounded: the per-case view pages, the others are capped and say
how many more there are.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dynaval.domain.errors import InvalidInput
from dynaval.domain.jobs.job import Job
from dynaval.domain.regression.revalidation import Revalidation
from dynaval.domain.regression.suite import (
    CaseResult,
    RegisteredModel,
    RegressionCase,
    accuracy_groups,
    accuracy_with_ci,
)
from dynaval.domain.validation.round import Round
from dynaval.service_layer.dashboard.figures_cache import FiguresCache
from dynaval.service_layer.dashboard.model_history import HistoryLine, history_lines
from dynaval.service_layer.services import Services

CASES_PER_PAGE = 50
"""Cases per page of the per-case view."""
GATE_RUNS_SHOWN = 20
"""The newest gate runs shown (``GET /api/gate-runs`` lists more)."""
JOBS_SHOWN = 10
"""The newest jobs shown (``GET /api/jobs`` lists more)."""
FLIPS_SHOWN = 50
"""Negative flips listed per gate run; the rest are counted."""
CASES_SHOWN = 200
"""Suspect and retired cases listed, each; the rest are counted."""
SEED = 0
"""The bootstrap's seed: the one ``dynaval evaluate`` reports with."""
SHORT_HASH = 19
CACHE_KIND = "model accuracy"
SUITE_KEY = 0
"""The matrix is one entry of the figures cache, which keys its entries by round: the suite's is 0."""
"""``sha256:`` and the first 12 hex digits."""

_ROUND_SPLIT = re.compile(r"(dev|test)_r([0-9]+)")  # matched whole


def split_order(split: str) -> tuple[int, int, int, str]:
    """Round splits by round, dev before test (``dev_r1, test_r1, dev_r2``...); others (``capture``)
    after them, by name."""
    found = _ROUND_SPLIT.fullmatch(split)
    if found is None:
        return (1, 0, 0, split)
    return (0, int(found.group(2)), 0 if found.group(1) == "dev" else 1, split)


def short_hash(model_hash: str) -> str:
    return model_hash[:SHORT_HASH]


@dataclass(frozen=True)
class ModelRow:
    """One model's line of the matrix: per split, ``accuracy_with_ci``'s figures (cases, correct,
    accuracy, ci95); a split it has no result on has ``cases`` 0."""

    model: RegisteredModel
    cells: dict[str, dict[str, Any]]
    overall: dict[str, Any]

    @property
    def short_hash(self) -> str:
        return short_hash(self.model.hash)


@dataclass(frozen=True)
class CaseLine:
    """A case with each model's latest answer on it (model hash -> result)."""

    case: RegressionCase
    answers: Mapping[str, CaseResult]


@dataclass(frozen=True)
class CasePage:
    """One page of the per-case view: the cases of one split, by id."""

    split: str | None
    lines: list[CaseLine]
    total: int
    page: int
    pages: int


@dataclass(frozen=True)
class Suspect:
    """A suspect case and how many of the models evaluated on it failed it (their latest result)."""

    case: RegressionCase
    failed: int
    evaluated: int
    revalidation: Revalidation | None = None
    """Its latest re-validation: open (the round it is in), settled undecided, or None (never sent)."""

    @property
    def may_be_sent(self) -> bool:
        """Not confirmed, and not in an open re-validation: a lead may send it back to Label Studio."""
        return not self.case.confirmed and (self.revalidation is None or not self.revalidation.is_open)


@dataclass(frozen=True)
class GateRunView:
    """A recorded gate run (as ``GET /api/gate-runs`` gives it), its first flips and how many more."""

    run: Mapping[str, Any]
    candidate: RegisteredModel | None
    flips: list[Mapping[str, Any]]
    more_flips: int

    @property
    def flip_count(self) -> int:
        return len(self.flips) + self.more_flips


@dataclass(frozen=True)
class Matrix:
    """The matrix's figures, as cached: its splits, and per model hash its cells and overall
    figures (``accuracy_with_ci``'s), for the models that have results."""

    splits: list[str]
    cells: dict[str, dict[str, dict[str, Any]]]
    overall: dict[str, dict[str, Any]]
    labels: dict[str, list[str]]
    """Per task type of the suite, its labels (the labelling config's order)."""
    label_cells: dict[str, dict[str, dict[str, dict[str, Any]]]]
    """Per task type, per model hash with results on it, per label: ``accuracy_with_ci``'s figures."""


@dataclass(frozen=True)
class LabelTable:
    """One task type's accuracy per label, one row per model evaluated on it (oldest model first:
    model versions in the order they came), as the walkthrough's per-digit dashboard shows it."""

    task_type: str
    labels: list[str]
    rows: list[tuple[RegisteredModel, dict[str, dict[str, Any]]]]


@dataclass(frozen=True)
class ModelsPage:
    splits: list[str]
    """The matrix's splits (as of its computation)."""
    case_splits: list[str]
    """The suite's splits now (the per-case view's)."""
    rows: list[ModelRow]
    matrix_as_of: datetime
    matrix_current: bool
    """False while a newer evaluation or retirement is being counted (the previous figures shown)."""
    cases: CasePage
    per_label: list[LabelTable]
    history: list[HistoryLine]
    """Which model served when, and why each was or was not shipped (oldest first)."""
    gate_runs: list[GateRunView]
    jobs: list[Job]
    """The newest jobs (training...), newest first, with their progress."""
    suspects: list[Suspect]
    more_suspects: int
    retired: list[RegressionCase]
    more_retired: int


def compute_matrix(services: Services) -> Matrix:
    """Every evaluated model's accuracy per split of the suite, with its bootstrap interval."""
    with services.uow(read_only=True) as uow:
        models = uow.regression.models()
        cases = uow.regression.cases()
        outcomes = uow.regression.latest_outcomes()
    splits = sorted({c.split for c in cases}, key=split_order)
    cells: dict[str, dict[str, dict[str, Any]]] = {}
    overall: dict[str, dict[str, Any]] = {}
    for model in models:
        correct = {
            case_id: by_model[model.hash] for case_id, by_model in outcomes.items() if model.hash in by_model
        }
        if not correct:
            continue  # registered, never evaluated
        groups = accuracy_groups(cases, correct)["split"]
        cells[model.hash] = {split: accuracy_with_ci(groups.get(split, []), seed=SEED) for split in splits}
        overall[model.hash] = accuracy_with_ci([correct[c.id] for c in cases if c.id in correct], seed=SEED)
    labels = {task: _labels_of(services, task, cases) for task in sorted({c.task_type for c in cases})}
    label_cells: dict[str, dict[str, dict[str, dict[str, Any]]]] = {task: {} for task in labels}
    for model_hash in cells:
        for task, task_labels in labels.items():
            of_task = [c for c in cases if c.task_type == task and model_hash in outcomes.get(c.id, {})]
            if not of_task:
                continue  # not evaluated on this task type
            by_label = accuracy_groups(of_task, {c.id: outcomes[c.id][model_hash] for c in of_task})["label"]
            label_cells[task][model_hash] = {
                label: accuracy_with_ci(by_label.get(label, []), seed=SEED) for label in task_labels
            }
    return Matrix(splits, cells, overall, labels, label_cells)


def _labels_of(services: Services, task: str, cases: Sequence[RegressionCase]) -> list[str]:
    """The task type's labels in its config's order, then any label its cases hold beyond them."""
    try:
        known = list(services.catalog.get(task).labels)
    except InvalidInput:  # a task type whose config was removed: its cases' labels, sorted
        known = []
    extra = sorted({c.label for c in cases if c.task_type == task} - set(known))
    return known + extra


def _latest(results: Sequence[CaseResult]) -> dict[str, dict[str, CaseResult]]:
    """Case id -> model hash -> that model's latest result, from results in evaluation order."""
    latest: dict[str, dict[str, CaseResult]] = {}
    for result in results:
        latest.setdefault(result.case_id, {})[result.model_hash] = result
    return latest


def models_page(
    services: Services, cache: FiguresCache, *, split: str | None = None, page: int = 1
) -> ModelsPage:
    """Everything the models page shows; the per-case view shows ``split`` (the first split when
    None; one the suite lacks is refused, naming ``split``) at ``page`` (past the end: empty)."""
    read = _read_suite(services, split, max(page, 1))
    matrix = cache.get(CACHE_KIND, SUITE_KEY, read.fingerprint, lambda: compute_matrix(services))
    by_hash = {m.hash: m for m in read.models}
    retired = sorted(
        read.retired, key=lambda c: c.retired_at.isoformat() if c.retired_at else "", reverse=True
    )
    return ModelsPage(
        splits=matrix.value.splits,
        case_splits=read.splits,
        rows=[
            ModelRow(model=m, cells=matrix.value.cells[m.hash], overall=matrix.value.overall[m.hash])
            for m in read.models
            if m.hash in matrix.value.cells
        ],
        matrix_as_of=matrix.computed_at,
        matrix_current=matrix.current,
        cases=read.case_page(),
        per_label=[
            LabelTable(
                task,
                task_labels,
                [
                    (m, matrix.value.label_cells[task][m.hash])
                    for m in read.models
                    if m.hash in matrix.value.label_cells[task]
                ],
            )
            for task, task_labels in matrix.value.labels.items()
            if matrix.value.label_cells[task]
        ],
        history=history_lines(read.models, read.rounds, read.latest_gates),
        gate_runs=[_gate_run_view(run, by_hash) for run in read.runs],
        jobs=read.jobs,
        suspects=read.suspects(),
        more_suspects=max(0, len(read.all_suspects) - CASES_SHOWN),
        retired=retired[:CASES_SHOWN],  # newest first
        more_retired=max(0, len(retired) - CASES_SHOWN),
    )


@dataclass
class _SuiteRead:
    """What the models page reads of the suite in one unit of work."""

    split: str | None
    page: int
    splits: list[str]
    in_split: list[RegressionCase]
    all_suspects: list[RegressionCase]
    latest: dict[str, dict[str, CaseResult]]
    models: list[RegisteredModel]
    retired: list[RegressionCase]
    runs: list[dict[str, Any]]
    rounds: list[Round]
    latest_gates: dict[str, dict[str, Any]]
    """Per candidate hash, its latest gate run (the history's reason a model was not shipped)."""
    jobs: list[Job]
    fingerprint: Any
    revalidations: dict[str, Any]

    def case_page(self) -> CasePage:
        shown = self.in_split[(self.page - 1) * CASES_PER_PAGE : self.page * CASES_PER_PAGE]
        return CasePage(
            split=self.split,
            lines=[CaseLine(c, self.latest.get(c.id, {})) for c in shown],
            total=len(self.in_split),
            page=self.page,
            pages=max(1, math.ceil(len(self.in_split) / CASES_PER_PAGE)),
        )

    def suspects(self) -> list[Suspect]:
        suspects = []
        for case in self.all_suspects[:CASES_SHOWN]:
            answers = self.latest.get(case.id, {}).values()
            failed = sum(not r.correct for r in answers)
            suspects.append(Suspect(case, failed, len(answers), self.revalidations.get(case.id)))
        return suspects


def _read_suite(services: Services, split: str | None, page: int) -> _SuiteRead:
    with services.uow(read_only=True) as uow:
        cases = uow.regression.cases()
        splits = sorted({c.split for c in cases}, key=split_order)
        if split is None:
            split = splits[0] if splits else None
        elif split not in splits:
            known = ", ".join(splits) or "none"
            raise InvalidInput(f"the suite has no split {split!r} (its splits: {known})", field="split")
        in_split = [c for c in cases if c.split == split]
        shown = in_split[(page - 1) * CASES_PER_PAGE : page * CASES_PER_PAGE]
        all_suspects = [c for c in cases if c.suspect]
        # Only the cases shown: their results, not the whole table's.
        wanted = [c.id for c in shown] + [c.id for c in all_suspects[:CASES_SHOWN]]
        return _SuiteRead(
            split=split,
            page=page,
            splits=splits,
            in_split=in_split,
            all_suspects=all_suspects,
            latest=_latest(uow.regression.results(case_ids=wanted)) if wanted else {},
            models=uow.regression.models(),
            retired=uow.regression.cases(retired=True),
            runs=uow.regression.gate_runs(GATE_RUNS_SHOWN),
            rounds=uow.rounds.all(),
            latest_gates=uow.regression.latest_gate_run_of_each(),
            jobs=uow.jobs.latest(JOBS_SHOWN),
            fingerprint=uow.regression.results_fingerprint(),
            revalidations=uow.revalidations.of_cases([c.id for c in all_suspects[:CASES_SHOWN]]),
        )


def _gate_run_view(run: dict[str, Any], by_hash: dict[str, RegisteredModel]) -> GateRunView:
    return GateRunView(
        run=run,
        candidate=by_hash.get(run["candidate"]),
        flips=list(run["negative_flips"][:FLIPS_SHOWN]),
        more_flips=max(0, len(run["negative_flips"]) - FLIPS_SHOWN),
    )
