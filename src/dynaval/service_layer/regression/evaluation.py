"""Evaluation: a model over the regression suite, micro-batched, every case's result recorded.

``evaluate`` registers the model, takes the cases the suite lacks, runs the model over the
non-retired cases of the task types its labels fit (in chunks of ``DYNAVAL_BATCH_MAX_SIZE``, the
predictor's own batch predict), stores each case's prediction, probabilities and whether it is
right, and reports accuracy per round split and per label with a bootstrap 95% CI, next to the
round's own model (its answer is in each example's provenance). After it, cases that every model
evaluated on them fails (at least three models) are marked suspect.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynaval.domain.clock import utcnow
from dynaval.domain.errors import InvalidInput
from dynaval.domain.labels import LabelMapping
from dynaval.domain.regression.suite import (
    CaseResult,
    RegisteredModel,
    RegressionCase,
    accuracy_groups,
    accuracy_with_ci,
    suspect_cases,
)
from dynaval.service_layer.files import FileServices, ReleaseUnreadable
from dynaval.service_layer.predictions import Predictor
from dynaval.service_layer.progress import Progress, Unwatched
from dynaval.service_layer.regression.model_catalog import model_folder, register_in
from dynaval.service_layer.regression.suite import sync_suite
from dynaval.service_layer.releases.verification import verify_release
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation.inputs import model_inputs

SUITE_SPLIT_PREFIXES = ("dev_", "test_")


@dataclass
class Evaluation:
    model: RegisteredModel
    run_id: int | None
    cases: list[RegressionCase]
    results: dict[str, CaseResult]
    skipped_task_types: list[str] = field(default_factory=list)
    suspects_marked: int = 0
    seconds: float = 0.0

    def report(self, *, seed: int = 0) -> dict[str, Any]:
        """Accuracy per split and per label, with CIs, next to the round's own model."""
        correct = {case_id: r.correct for case_id, r in self.results.items()}
        answered = [c for c in self.cases if c.id in self.results]
        own = {c.id: c.round_model_prediction == c.label for c in answered if c.round_model_prediction}
        model_groups = accuracy_groups(answered, correct)
        own_groups = accuracy_groups(answered, own)
        report: dict[str, Any] = {
            "model": self.model.to_dict(),
            "run_id": self.run_id,
            "cases": len(answered),
            "overall": accuracy_with_ci(list(correct.values()), seed=seed),
            "seconds": self.seconds,
            "skipped_task_types": self.skipped_task_types,
            "suspects_marked": self.suspects_marked,
        }
        for kind in ("split", "label"):
            report[f"by_{kind}"] = {
                key: {
                    "model": accuracy_with_ci(values, seed=seed),
                    "round_model": accuracy_with_ci(own_groups[kind].get(key, []), seed=seed),
                }
                for key, values in sorted(model_groups[kind].items())
            }
        return report


def release_case_ids(files: FileServices, folders: Sequence[Path]) -> set[str]:
    """The ids of the dev and test examples of these release folders, each verified offline first
    (a folder that fails a check is refused, naming ``release``)."""
    ids: set[str] = set()
    reader = files.release_files
    for folder in folders:
        findings = verify_release(folder, files)
        if findings:
            raise InvalidInput(
                f"{folder} fails release verification ({len(findings)} checks; first: {findings[0]})",
                field="release",
            )
        try:
            manifest = reader.read_manifest(folder)
        except ReleaseUnreadable as exc:  # verified a moment ago; a race with someone editing it
            raise InvalidInput(f"{folder}: {exc}", field="release") from None
        for entry in manifest["files"]:
            if entry["path"].endswith(".jsonl") and entry["split"].startswith(SUITE_SPLIT_PREFIXES):
                ids.update(row["example_id"] for _line, row in reader.iter_rows(folder / entry["path"]))
    return ids


def _mappings(
    services: Services, predictor: Predictor, task_types: set[str]
) -> tuple[dict[str, LabelMapping], list[str]]:
    fits, skipped = {}, []
    for task in sorted(task_types):
        task_type = services.catalog.get(task)
        if task_type.input_kind is not predictor.input_kind:
            skipped.append(task)  # an image model reads no text case, a text model no image one
            continue
        try:
            fits[task] = LabelMapping.between(predictor.labels, task_type.labels, task=task)
        except InvalidInput:
            skipped.append(task)
    return fits, skipped


def predict_cases(
    services: Services,
    predictor: Predictor,
    cases: Sequence[RegressionCase],
    mappings: dict[str, LabelMapping],
    progress: Progress | None = None,
) -> list[CaseResult]:
    """The model's result on each case, predicted in chunks of the service's batch size."""
    chunk = max(1, services.settings.batch_max_size)
    results: list[CaseResult] = []
    progress = progress or Unwatched()
    progress.step("predicting the suite's cases", len(cases))
    for start in range(0, len(cases), chunk):
        part = cases[start : start + chunk]
        inputs = [
            read
            for c in part
            for read in model_inputs(
                services.catalog.get(c.task_type), [c.inputs], images=services.image_services
            )
        ]
        for case, answer in zip(part, predictor.predict(inputs), strict=True):
            label, probabilities = mappings[case.task_type].read(answer.probabilities)
            results.append(
                CaseResult(
                    case_id=case.id,
                    model_hash=predictor.model_hash,
                    prediction=label,
                    probabilities=probabilities,
                    correct=label == case.label,
                )
            )
        progress.advance(len(results))
    return results


def evaluate(
    services: Services,
    folder: str | Path,
    *,
    releases: Sequence[Path] = (),
    name: str | None = None,
    predictor: Predictor | None = None,
    progress: Progress | None = None,
) -> Evaluation:
    """Run the model in ``folder`` over the suite (or the dev and test cases of ``releases``) and
    record every case's result. ``predictor``: the model already loaded from ``folder`` (a caller
    that evaluates it repeatedly, as the benchmark does); by default it is loaded here."""
    path = model_folder(services, folder)
    wanted = release_case_ids(services, releases) if releases else None
    # Loaded for this evaluation only, from the folder as it is now: the service's cache of round
    # models could hold an older model once loaded from the same path, and would keep every
    # evaluated model in memory. The predictor hashes the folder it loaded; an unloadable folder is
    # refused here, before anything is registered.
    predictor = predictor or services.models.load_alone(path)
    with services.uow() as uow:
        model = register_in(uow, folder=path, model_hash=predictor.model_hash, name=name)
        uow.commit()
    sync_suite(services)
    cases, mappings, skipped = _answerable_cases(services, predictor, wanted, from_releases=bool(releases))
    started, clock = utcnow(), time.perf_counter()
    results = predict_cases(services, predictor, cases, mappings, progress)
    seconds = time.perf_counter() - clock
    with services.uow() as uow:
        run_id = uow.regression.start_run(model.hash, at=started)
        uow.regression.add_results(run_id, results)
        uow.regression.finish_run(run_id, at=utcnow(), case_count=len(results))
        uow.commit()
    return Evaluation(
        model=model,
        run_id=run_id,
        cases=cases,
        results={r.case_id: r for r in results},
        skipped_task_types=skipped,
        suspects_marked=mark_suspects(services),
        seconds=seconds,
    )


def _answerable_cases(
    services: Services, predictor: Predictor, wanted: set[str] | None, *, from_releases: bool
) -> tuple[list[RegressionCase], dict[str, LabelMapping], list[str]]:
    """The suite's cases (those ``wanted``, when given) of the task types whose labels the model
    answers, their label mappings, and the task types skipped; none at all is refused."""
    with services.uow(read_only=True) as uow:
        cases = uow.regression.cases(ids=wanted)
    mappings, skipped = _mappings(services, predictor, {c.task_type for c in cases})
    cases = [c for c in cases if c.task_type in mappings]
    if not cases:
        where = "the named releases hold" if from_releases else "the suite holds"
        raise InvalidInput(
            f"{where} no case this model can answer (its labels: {', '.join(predictor.labels)}; "
            f"task types of the cases: {', '.join(skipped) or 'none'})",
            field="release" if from_releases else "model",
        )
    return cases, mappings, skipped


def mark_suspects(services: Services) -> int:
    """Mark suspect the cases every model evaluated on them fails, once at least three were, and
    clear the mark of those a later model got right; how many were newly marked."""
    with services.uow() as uow:
        suspects = suspect_cases(uow.regression.latest_outcomes())
        marked = uow.regression.mark_suspect(suspects)
        uow.regression.clear_suspects(suspects)
        uow.commit()
    return marked


def latest_results(services: Services, model_hash: str) -> dict[str, CaseResult]:
    """The model's latest result on each case it was evaluated on."""
    with services.uow(read_only=True) as uow:
        return {r.case_id: r for r in uow.regression.results(model_hash=model_hash)}
