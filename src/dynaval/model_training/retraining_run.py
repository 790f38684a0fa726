"""A run of a task type's retraining policy, as a job (``retrain:<task type>``): place the writers
of newly accepted examples, train on what a model may learn from
(:mod:`dynaval.model_training.retraining_data`, the leak rule), gate the new model against the model
it would replace, and ship it (the next round opens on it) or keep it unshipped, saying why.

Each step goes to the job's log and the retraining audit log.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dynaval.domain.clock import utcnow
from dynaval.domain.errors import Conflict, DomainError, InvalidInput, NotFound
from dynaval.domain.jobs.job import Job
from dynaval.domain.retraining.audit import RetrainingStep
from dynaval.domain.retraining.policy import RetrainingPolicy, ShipMode, TrainFrom
from dynaval.domain.task_type import TaskType
from dynaval.domain.validation.round import Round, RoundKind, RoundState
from dynaval.model_training.retraining_data import choose_training_set, labelled_examples
from dynaval.model_training.train import TrainingData, TrainingRequest, fit_model
from dynaval.service_layer.jobs.ports import JobCancelled, JobReporter, JobWork
from dynaval.service_layer.regression.gate import run_gate
from dynaval.service_layer.regression.model_catalog import register_model, ship_model
from dynaval.service_layer.retraining.policies import BY_POLICY, log_step, open_round
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation.rounds import close_round, create_round

log = logging.getLogger(__name__)

RETRAINED_FOLDER = "retrained"
NEAR_LISTED = 20


def retraining_work(services: Services) -> JobWork:
    """The work of a :attr:`~dynaval.domain.jobs.job.JobKind.RETRAIN` job, bound to ``services``."""

    def work(job: Job, reporter: JobReporter) -> dict[str, Any]:
        task_type = str(job.params["task_type"])
        try:
            return _Run(services, job, reporter).run()
        except JobCancelled:
            log_step(services, task_type, RetrainingStep.FAILED, {"error": "cancelled"}, job_id=job.id)
            raise
        except DomainError as exc:
            log_step(services, task_type, RetrainingStep.FAILED, {"error": exc.message}, job_id=job.id)
            raise
        except Exception:
            error = "an unexpected error stopped it; the service log has the details"
            log_step(services, task_type, RetrainingStep.FAILED, {"error": error}, job_id=job.id)
            raise

    return work


def retrained_folder(services: Services, job: Job) -> Path:
    root = services.settings.data_dir.resolve()  # a model folder is registered by its absolute path
    return root / "models" / RETRAINED_FOLDER / f"{job.params['task_type']}-{job.id}"


class _Run:
    def __init__(self, services: Services, job: Job, reporter: JobReporter) -> None:
        self.services = services
        self.job = job
        self.reporter = reporter
        self.task: TaskType = services.catalog.get(str(job.params["task_type"]))
        self.policy = RetrainingPolicy.set_by(
            self.task.name, job.params["policy"], accepted=0, by=BY_POLICY, at=job.created_at
        )

    def _log(self, step: RetrainingStep, detail: dict[str, Any]) -> None:
        log_step(self.services, self.task.name, step, detail, job_id=self.job.id)

    def run(self) -> dict[str, Any]:
        round_ = self._replaced_round()
        base_folder, base_hash = self._base(round_)
        data = choose_training_set(self.services, self.task, self.reporter)
        train, dev = data.train, data.dev
        out = self._fresh_folder()
        scratch = out.with_name(out.name + ".images")
        try:
            trained = fit_model(
                TrainingData(
                    task_type=self.task.name,
                    labels=self.task.labels,
                    reads_images=self.task.reads_images,
                    train=labelled_examples(self.services, self.task, train, scratch),
                    split_rows={"accepted (train writers)": len(train)},
                    dev={"dev writers": labelled_examples(self.services, self.task, dev, scratch)}
                    if dev
                    else {},
                    releases=(),
                    described=f"the accepted examples of {self.task.name}'s train writers",
                ),
                TrainingRequest(
                    releases=(),
                    base=base_folder,
                    out=out,
                    epochs=self.policy.training.epochs,
                    seed=self.policy.training.seed,
                    with_seed_set=self.policy.training.with_seed_set,
                    learning_rate=self.policy.training.learning_rate,
                    batch_size=self.policy.training.batch_size,
                ),
                log=self.reporter.say,
                progress=self.reporter,
            )
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        self.reporter.step("registering the model")
        model = register_model(
            self.services, trained.folder, name=f"{self.task.name}-retrained-{self.job.id}"
        )
        with self.services.uow() as uow:  # a release keeps these texts in train from now on
            uow.retraining.record_trained(
                self.task.name,
                [e.example_id for e in train],
                job_id=self.job.id,
                model_hash=model.hash,
                at=utcnow(),
            )
            uow.commit()
        record = trained.record
        trained_detail = {
            "model": model.hash,
            "base": base_hash,
            "examples": data.counts(),
            "training_set_sha256": _ids_hash(e.example_id for e in train),
            "near_held_out_listed": sorted(data.near)[:NEAR_LISTED],
            "dev": [
                {"split": d.split, "rows": d.rows, "before": d.before, "after": d.after} for d in record.dev
            ],
            "final_loss": record.final_loss,
        }
        self._log(RetrainingStep.TRAINED, trained_detail)
        self.reporter.step("evaluating on the suite and gating against the replaced model")
        gate = self._gate(trained.folder, round_)
        self._log(RetrainingStep.GATED, gate)
        result: dict[str, Any] = {
            "model": {"hash": model.hash, "name": model.name, "folder": str(trained.folder)},
            "replaces": {"round": round_.id, "model": round_.model_hash},
            "trained": trained_detail,
            "gate": gate,
            "shipped": False,
        }
        if not gate["passed"]:
            reason = gate.get("reason") or _flips_reason(gate)
            self._log(RetrainingStep.KEPT, {"model": model.hash, "reason": reason})
            self.reporter.say(f"not shipped: {reason}")
            return {**result, "reason": reason}
        self.reporter.step("shipping")
        shipped = self._ship(model.hash, model.name, trained.folder, round_, gate)
        self._log(RetrainingStep.SHIPPED, shipped)
        return {**result, "shipped": True, **shipped}

    def _fresh_folder(self) -> Path:
        """Where the model is written: emptied when an earlier attempt of this job (whose worker
        stopped) left it, unless that attempt got as far as registering it, which this one never
        undoes (a swapped round may be answering with it)."""
        out = retrained_folder(self.services, self.job)
        if out.exists():
            with self.services.uow(read_only=True) as uow:
                in_use = any(m.folder == str(out) for m in uow.regression.models()) or any(
                    r.model_dir == str(out) for r in uow.rounds.all()
                )
            if in_use:
                raise Conflict(
                    f"an earlier attempt of this run registered the model in {out} already: not trained "
                    "again (see the retraining audit log for how far it got)",
                    field="job_id",
                )
            shutil.rmtree(out)
        return out

    def _replaced_round(self) -> Round:
        with self.services.uow(read_only=True) as uow:
            round_ = uow.rounds.get(int(self.job.params["round_id"]))
        if round_.state is not RoundState.OPEN:
            raise Conflict(
                f"round {round_.id} was {round_.state.value} after this run started: its model is replaced "
                "by nothing; the policy's next run retrains for the open round",
                field="round_id",
            )
        return round_

    def _base(self, round_: Round) -> tuple[Path, str]:
        if self.policy.base is TrainFrom.ROUND:
            return Path(round_.model_dir), round_.model_hash
        with self.services.uow(read_only=True) as uow:
            pinned = {r.model_hash for r in uow.rounds.all() if r.task_type == self.task.name}
            shipped = [m for m in uow.regression.models() if m.shipped and m.hash in pinned]
        if not shipped:
            raise InvalidInput(
                f"no model of {self.task.name} is shipped yet: ship one, or set the policy's base to round",
                field="base",
            )
        newest = max(shipped, key=lambda m: m.shipped_at or m.registered_at)  # a shipped model has the first
        return Path(newest.folder), newest.hash

    def _gate(self, folder: Path, round_: Round) -> dict[str, Any]:
        try:
            outcome = run_gate(
                self.services,
                folder,
                baseline=round_.model_hash,
                max_flips=self.policy.max_flips,
                by=BY_POLICY,
            )
        except (InvalidInput, NotFound, Conflict) as exc:
            return {"passed": False, "reason": f"the gate could not compare the models: {exc.message}"}
        return outcome.to_dict()

    def _swap(self, round_id: int, folder: Path, model_hash: str, model_name: str) -> Round:
        """The open round's model replaced by the new one, under the round's lock: candidates
        scored from now on are scored by it; those scored before keep their model's hash."""
        with self.services.uow() as uow:
            round_ = uow.rounds.get(round_id, for_update=True)
            round_.swap_model(folder=str(folder), name=model_name, model_hash=model_hash)
            uow.rounds.save(round_)
            uow.commit()
        return round_

    def _ship(
        self, model_hash: str, model_name: str, folder: Path, round_: Round, gate: dict[str, Any]
    ) -> dict[str, Any]:
        reason = (
            f"retraining policy of {self.task.name} (job {self.job.id}): passed gate run "
            f"{gate['gate_run_id']} against {round_.model_hash}"
        )
        assert round_.id is not None
        # Training takes a while: the round must still be the task type's open one to be replaced.
        current = self._replaced_round()
        if not _still_newest_open(self.services, current):
            raise Conflict(
                f"round {round_.id} is no longer the newest open round of {self.task.name}: a lead opened "
                "another while this run trained; the model is kept, not shipped",
                field="round_id",
            )
        if self.policy.ship is ShipMode.SWAP:
            swapped = self._swap(round_.id, folder, model_hash, model_name)
            ship_model(self.services, model_hash, by=BY_POLICY, reason=reason)
            self.reporter.say(f"shipped {model_hash}: round {round_.id}'s model replaced by it")
            return {"swapped_round": {"id": round_.id, "name": swapped.name, "replaced": round_.model_hash}}
        opened = create_round(
            self.services,
            name=_next_name(self.services, self.task.name),
            task=self.task.name,
            model=str(folder),
            policy=round_.policy,
        )
        with contextlib.suppress(Conflict):  # a lead closed it meanwhile: what the policy wanted
            close_round(self.services, round_.id)
        ship_model(self.services, model_hash, by=BY_POLICY, reason=reason)
        self.reporter.say(f"shipped {model_hash}: round {round_.id} closed, round {opened.id} open on it")
        return {"closed_round": round_.id, "next_round": {"id": opened.id, "name": opened.name}}


def _still_newest_open(services: Services, round_: Round) -> bool:
    with services.uow(read_only=True) as uow:
        newest = open_round(uow, round_.task_type)
    return newest is not None and newest.id == round_.id


def _next_name(services: Services, task_type: str) -> str:
    with services.uow(read_only=True) as uow:
        rounds = [r for r in uow.rounds.all() if r.task_type == task_type and r.kind is RoundKind.ADVERSARIAL]
    return f"{task_type} round {len(rounds) + 1}"


def _ids_hash(ids: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for example_id in sorted(ids):
        digest.update(example_id.encode() + b"\n")
    return "sha256:" + digest.hexdigest()


def _flips_reason(gate: dict[str, Any]) -> str:
    flips = gate.get("negative_flips") or []
    cases = ", ".join(str(f.get("case_id")) for f in flips[:10])
    return (
        f"the gate refused it: {len(flips)} suite cases the replaced model got right are wrong now "
        f"(at most {gate.get('max_flips', 0)} allowed): {cases}"
    )
