"""The release gate: may a candidate model ship? It may when it gets right every case that the
baseline (a named model, or by default any shipped model) got right, give or take ``max_flips``.

The candidate is evaluated unless it already has a result for every case of its task types; so is
a baseline whose results are missing when its folder is known. Each gate run is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynaval.domain.clock import utcnow
from dynaval.domain.errors import Conflict, InvalidInput, NotFound
from dynaval.domain.regression.gate import Answer, GateResult, check_max_flips, decide
from dynaval.domain.regression.suite import CaseResult, RegisteredModel, RegressionCase
from dynaval.service_layer.regression import evaluation
from dynaval.service_layer.regression.model_catalog import HASH_PREFIX, model_folder, shipped_models
from dynaval.service_layer.regression.suite import sync_suite
from dynaval.service_layer.services import Services


@dataclass(frozen=True)
class GateOutcome:
    run_id: int
    candidate: RegisteredModel
    baseline: str
    result: GateResult

    def to_dict(self) -> dict[str, Any]:
        return {
            "gate_run_id": self.run_id,
            "candidate": self.candidate.to_dict(),
            "baseline": self.baseline,
            **self.result.to_dict(),
        }


def _missing(cases: list[RegressionCase], results: dict[str, CaseResult]) -> bool:
    """Whether the model lacks a result on a case of the task types it was evaluated on (or has none)."""
    if not results:
        return True
    answered_tasks = {c.task_type for c in cases if c.id in results}
    return any(c.task_type in answered_tasks and c.id not in results for c in cases)


def ensure_evaluated(
    services: Services, model: RegisteredModel, cases: list[RegressionCase]
) -> dict[str, CaseResult]:
    """The model's latest result per case, evaluating it first when some are missing and its
    folder is still there."""
    results = evaluation.latest_results(services, model.hash)
    if _missing(cases, results) and services.models.look_at(Path(model.folder)).has_model:
        _evaluate(services, Path(model.folder), field="baseline")
        results = evaluation.latest_results(services, model.hash)
    return results


def _evaluate(services: Services, folder: Path, *, field: str) -> RegisteredModel:
    """Evaluate the folder (registering it once it loaded); its errors name ``field``."""
    try:
        return evaluation.evaluate(services, folder).model
    except InvalidInput as exc:
        raise InvalidInput(exc.message, field=field) from None


def _evaluated_folder(
    services: Services, folder: Path, cases: list[RegressionCase], *, field: str
) -> tuple[RegisteredModel, dict[str, CaseResult]]:
    """The model in ``folder`` (by the hash of its files now) and its latest result per case,
    evaluated first when some are missing. Nothing is registered for a folder that does not load."""
    model_hash = services.models.folder_hash(folder)
    results = evaluation.latest_results(services, model_hash)
    if _missing(cases, results):
        model = _evaluate(services, folder, field=field)
        return model, evaluation.latest_results(services, model.hash)
    with services.uow(read_only=True) as uow:  # results exist only for a registered model
        return uow.regression.model(model_hash), results


def check_baseline(services: Services, baseline: str | None) -> str | None:
    """The baseline as the gate takes it, checked before anything is evaluated (422 naming
    ``baseline``): None (the shipped models; one must be shipped), a registered model's hash, or
    a model folder's absolute path."""
    if baseline is None:
        if not shipped_models(services):
            raise InvalidInput(
                "no model is shipped yet: name a baseline (a registered model's hash or a model folder), "
                "or ship one with `dynaval models ship`",
                field="baseline",
            )
        return None
    if baseline.startswith(HASH_PREFIX):
        try:
            with services.uow(read_only=True) as uow:
                uow.regression.model(baseline)
        except NotFound as exc:
            raise InvalidInput(exc.message, field="baseline") from None
        return baseline
    return str(model_folder(services, baseline, field="baseline"))


def _baseline_models(
    services: Services, baseline: str | None, cases: list[RegressionCase]
) -> list[RegisteredModel]:
    checked = check_baseline(services, baseline)
    if checked is None:
        return shipped_models(services)
    if checked.startswith(HASH_PREFIX):
        with services.uow(read_only=True) as uow:
            return [uow.regression.model(checked)]
    return [_evaluated_folder(services, Path(checked), cases, field="baseline")[0]]


def _check_compared(
    cases: list[RegressionCase], candidate: dict[str, CaseResult], baseline: dict[str, Answer]
) -> None:
    """A gate passes only on cases it compared: the candidate must have a result on every case of
    its task types that the baseline got right, and the two must share at least one case."""
    answered = {c.task_type for c in cases if c.id in candidate}
    missing = [
        c.id
        for c in cases
        if c.task_type in answered and c.id not in candidate and (b := baseline.get(c.id)) and b.correct
    ]
    if missing:
        raise Conflict(
            f"the candidate has no result on {len(missing)} cases the baseline got right (e.g. "
            f"{missing[0]}); was its folder changed while it was evaluated? run the gate again",
            field="candidate",
        )
    if not any(c.id in candidate and c.id in baseline for c in cases):
        raise InvalidInput(
            "the baseline has no result on any case the candidate answered, and cannot be evaluated "
            "(its folder is gone or holds another model): nothing to compare",
            field="baseline",
        )


def _baseline_answers(per_model: dict[str, dict[str, CaseResult]]) -> dict[str, Answer]:
    """Per case: right if any baseline model got it right in its latest evaluation (that model's
    answer), else the first baseline model's wrong answer."""
    answers: dict[str, Answer] = {}
    for model_hash, results in per_model.items():
        for case_id, r in results.items():
            known = answers.get(case_id)
            if known is None or (r.correct and not known.correct):
                answers[case_id] = Answer(r.prediction, r.correct, model_hash)
    return answers


def run_gate(
    services: Services, candidate: str | Path, *, baseline: str | None = None, max_flips: int = 0, by: str
) -> GateOutcome:
    """Evaluate what is missing, compare, record the gate run."""
    check_max_flips(max_flips)
    folder = model_folder(services, candidate, field="candidate")
    sync_suite(services)
    with services.uow(read_only=True) as uow:
        cases = uow.regression.cases()
    baselines = _baseline_models(services, baseline, cases)
    model, candidate_results = _evaluated_folder(services, folder, cases, field="candidate")
    base_answers = _baseline_answers({b.hash: ensure_evaluated(services, b, cases) for b in baselines})
    _check_compared(cases, candidate_results, base_answers)
    result = decide(
        cases,
        baseline=base_answers,
        candidate={k: Answer(r.prediction, r.correct, model.hash) for k, r in candidate_results.items()},
        max_flips=max_flips,
    )
    described = (
        f"model {baselines[0].hash}"
        if baseline is not None
        else "shipped models " + ", ".join(b.hash for b in baselines)
    )
    with services.uow() as uow:
        run_id = uow.regression.add_gate_run(
            candidate_hash=model.hash, baseline=described, result=result, by=by, at=utcnow()
        )
        uow.commit()
    return GateOutcome(run_id, model, described, result)


def gate_runs(services: Services, limit: int = 100) -> list[dict[str, Any]]:
    with services.uow(read_only=True) as uow:
        return uow.regression.gate_runs(limit)
