"""Training as a job: a lead asks for a model trained on releases the service keeps
(``POST /api/models/train``), a task-queue worker trains it (:func:`train_next_model`, with its
checks and its leak rule), registers it in the model catalog, and the job's result names it.

The request is checked before it is queued (the releases exist, the base model is there, the name
is free among active jobs), so a refused request queues nothing; what only training can find (a
release whose files no longer verify, a split that is not a train split) fails the job, saying so.
The model is written to ``<data dir>/models/trained/<name>-<job id>``; a cancelled or failed job
leaves nothing there.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dynaval.domain.errors import InvalidInput, NotFound
from dynaval.domain.jobs.job import Job, JobKind
from dynaval.model_training.train import DEFAULT_EPOCHS, TrainingRequest, train_next_model
from dynaval.service_layer.jobs import jobs
from dynaval.service_layer.jobs.ports import JobReporter, JobWork
from dynaval.service_layer.regression.model_catalog import find_model, register_model
from dynaval.service_layer.releases import catalog
from dynaval.service_layer.services import Services

MODEL_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,79}")
TRAINED_FOLDER = "trained"


@dataclass(frozen=True)
class TrainingOrder:
    """What a lead asks to train (the API's body, checked for shape)."""

    releases: list[int]
    """Release ids: versions of one release (rows repeated across them count once); text or images."""
    base: str
    """A registered model's hash (``sha256:...``) or the absolute path of a model folder."""
    name: str
    """The new model's name: lower-case letters, digits, ``.``, ``-`` and ``_``."""
    splits: list[str] | None = None
    epochs: int = DEFAULT_EPOCHS
    seed: int = 13
    learning_rate: float | None = None
    batch_size: int = 16
    with_seed_set: bool = False


def submit_training(services: Services, order: TrainingOrder, *, by: str) -> Job:
    """Queue a training job (see the module); 409 while another active job trains ``name``."""
    if not MODEL_NAME.fullmatch(order.name):
        raise InvalidInput(
            "must be 1 to 80 lower-case letters, digits, '.', '-' or '_', starting with a letter or digit",
            field="name",
        )
    for release_id in order.releases:
        try:
            catalog.get_release(services, release_id)
        except NotFound:
            raise InvalidInput(f"no release {release_id}", field="releases") from None
    try:
        base = find_model(services, order.base, field="base")
    except NotFound as exc:
        raise InvalidInput(exc.message, field="base") from None
    if not services.models.look_at(Path(base.folder)).has_model:
        raise InvalidInput(f"model {base.hash}'s folder {base.folder} holds no model any more", field="base")
    params: dict[str, Any] = {**asdict(order), "base_hash": base.hash, "base_folder": base.folder}
    return jobs.submit_job(services, kind=JobKind.TRAIN, key=f"train:{order.name}", params=params, by=by)


def trained_folder(services: Services, job: Job) -> Path:
    root = services.settings.data_dir.resolve()  # a model folder is registered by its absolute path
    return root / "models" / TRAINED_FOLDER / f"{job.params['name']}-{job.id}"


def training_work(services: Services) -> JobWork:
    """The work of a :attr:`JobKind.TRAIN` job, bound to ``services`` (by the composition root)."""

    def work(job: Job, reporter: JobReporter) -> dict[str, Any]:
        params = job.params
        out = trained_folder(services, job)
        if out.exists():  # an earlier attempt of this job, whose worker stopped after writing it
            shutil.rmtree(out)
        folders = [
            Path(catalog.get_release(services, release_id).folder) for release_id in params["releases"]
        ]
        trained = train_next_model(
            TrainingRequest(
                releases=folders,
                base=Path(params["base_folder"]),
                out=out,
                splits=params["splits"],
                epochs=params["epochs"],
                seed=params["seed"],
                with_seed_set=params["with_seed_set"],
                learning_rate=params["learning_rate"],
                batch_size=params["batch_size"],
            ),
            files=services,
            log=reporter.say,
            progress=reporter,
        )
        reporter.step("registering the model")
        model = register_model(services, trained.folder, name=params["name"])
        record = trained.record
        return {
            "model": {"hash": model.hash, "name": model.name, "folder": str(trained.folder)},
            "base": {"hash": params["base_hash"]},
            "trained_on": dict(record.split_rows),
            "seed_set_rows": record.seed_set_rows,
            "dev": [
                {"split": dev.split, "rows": dev.rows, "before": dev.before, "after": dev.after}
                for dev in record.dev
            ],
            "final_loss": record.final_loss,
        }

    return work
