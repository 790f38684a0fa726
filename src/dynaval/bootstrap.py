"""The composition root: the one place that builds the real objects and wires them together.

The service's adapters (the database, Label Studio, the task queue, the model) are imported when
the service is built, in :func:`bootstrap`: a command on files alone (``release verify``) builds
:func:`offline_services` and loads none of them (measured: its imports 54 MB and half a second,
against 171 MB and four seconds; docs/benchmarks.md)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from dynaval.adapters.files.corpus_files import TextCorpora
from dynaval.adapters.files.release_files import ReleaseFolders
from dynaval.adapters.health.minhash_process import MinHashProcess
from dynaval.adapters.health.semantic_index import shared_encoder
from dynaval.adapters.images.image_files import ImageFolder
from dynaval.adapters.images.pillow_images import PillowImages
from dynaval.domain.images.image import ImageLimits
from dynaval.service_layer.files import OfflineServices
from dynaval.service_layer.images.ports import ImageServices
from dynaval.settings import Settings

if TYPE_CHECKING:
    from dynaval.adapters.label_studio import LabelStudioGateway
    from dynaval.adapters.predictor import PredictorFactory
    from dynaval.adapters.task_queue import BackgroundJobs
    from dynaval.service_layer.predictions import Predictor
    from dynaval.service_layer.services import Services


def _transformers_loader(max_tokens: int) -> PredictorFactory:
    from dynaval.adapters.predictor import load_model_folder

    def load(folder: Path) -> Predictor:
        return load_model_folder(folder, max_length=max_tokens)

    return load


def bootstrap(
    settings: Settings | None = None,
    *,
    label_studio: LabelStudioGateway | None = None,
    predictor_factory: PredictorFactory | None = None,
    migrate: bool = True,
) -> Services:
    """Build the services from settings (read from the environment when not given).

    Tests pass fakes for the outside systems through the keyword arguments.
    """
    from dynaval.adapters.db.database import Database
    from dynaval.adapters.db.dataset_query import DatasetQuery
    from dynaval.adapters.db.unit_of_work import sql_units_of_work
    from dynaval.adapters.health.semantic_index import SemanticVectors
    from dynaval.adapters.hint_inbox import HintInbox
    from dynaval.adapters.label_config import LabelConfigCatalog
    from dynaval.adapters.label_studio import SdkLabelStudioGateway
    from dynaval.adapters.predictor import ModelRegistry
    from dynaval.adapters.task_queue import QueuedWork, hint_lane, job_lane, make_huey
    from dynaval.domain.health.band_keys import BandKeyIndex
    from dynaval.domain.jobs.job import JobKind
    from dynaval.model_training.retraining_run import retraining_work
    from dynaval.model_training.training_job import training_work
    from dynaval.service_layer.dataset_records.keeping import keep_records
    from dynaval.service_layer.regression import revalidation, suite_jobs
    from dynaval.service_layer.releases import release_jobs
    from dynaval.service_layer.services import Services
    from dynaval.service_layer.validation.writer_links import WriterAnnotatorLinks

    settings = settings or Settings()
    database = Database(settings.resolved_database_url)
    if migrate:
        database.migrate()
    gateway = label_studio or SdkLabelStudioGateway(
        base_url=settings.label_studio_url,
        api_key=settings.label_studio_api_key,
        timeout_s=settings.label_studio_timeout_s,
    )
    models = ModelRegistry(
        factory=predictor_factory or _transformers_loader(settings.model_max_tokens),
        max_batch=settings.batch_max_size,
        max_wait_s=settings.batch_max_wait_ms / 1000,
    )
    services = Services(
        settings=settings,
        database=database,
        dataset_reads=DatasetQuery(database),
        uow=sql_units_of_work(database, keep_records=functools.partial(keep_records, settings=settings)),
        catalog=LabelConfigCatalog(settings.resolved_label_config_dir),
        label_studio=gateway,
        models=models,
        writer_links=WriterAnnotatorLinks(settings.writer_label_studio_links, gateway),
        band_keys=BandKeyIndex(),
        vectors=SemanticVectors() if settings.near_duplicate_semantic else None,
        offline=offline_services(),
        image_services=image_services(settings),
    )
    services.job_work[JobKind.TRAIN] = training_work(services)
    services.job_work[JobKind.RELEASE] = release_jobs.release_work(services)
    services.job_work[JobKind.EVALUATE] = suite_jobs.evaluation_work(services)
    services.job_work[JobKind.GATE] = suite_jobs.gate_work(services)
    services.job_work[JobKind.RETRAIN] = retraining_work(services)
    services.after_freeze.append(lambda round_id: revalidation.settle_after_freeze(services, round_id))
    # The task queue's tasks call the use cases, which ask for work through services.work.
    services.task_queue = make_huey(settings.queue_url, settings.data_dir, settings.queue_name)
    services.job_queue = job_lane(services.task_queue, settings.queue_url, settings.data_dir)
    hints = HintInbox(hint_lane(services.task_queue, settings.queue_url, settings.data_dir))
    services.work = QueuedWork(
        services.task_queue, settings, background_jobs(services), job_lane=services.job_queue, hints=hints
    )
    return services


def offline_services() -> OfflineServices:
    """What the use cases on release files and corpora need: for commands on files alone, and
    inside the service's :class:`Services`. Nothing loads until used (the encoder at its first
    call)."""
    return OfflineServices(
        release_files=ReleaseFolders(),
        encoder=shared_encoder,
        release_index=MinHashProcess,
        corpus=TextCorpora(),
        image_codec=PillowImages(),
    )


def image_services(settings: Settings) -> ImageServices:
    """The image codec, the image store in ``DYNAVAL_IMAGES_DIR`` and the limits of the settings."""
    return ImageServices(
        codec=PillowImages(),
        store=ImageFolder(settings.resolved_images_dir),
        limits=ImageLimits(max_bytes=settings.max_image_bytes, max_pixels=settings.max_image_pixels),
    )


def background_jobs(services: Services) -> BackgroundJobs:
    """The use cases the task queue runs, bound to ``services``."""
    from dynaval.adapters.task_queue import BackgroundJobs
    from dynaval.service_layer.jobs import jobs
    from dynaval.service_layer.regression import revalidation
    from dynaval.service_layer.retraining import policies as retraining
    from dynaval.service_layer.validation import pushing, webhooks
    from dynaval.service_layer.validation import vote_reading as verification

    def sweep() -> None:
        jobs.recover_jobs(services)  # first: a Label Studio that is down must not hold jobs up
        pushing.background_pass(services)
        verification.verify_pending_rounds(services)
        revalidation.settle_revalidations(services)  # the safety net: whatever decided a case
        retraining.start_due_runs(services)

    def verify(round_id: int) -> object:
        read = verification.verify_round(services, round_id)
        retraining.start_due_runs(services)  # votes read back may have made a policy due
        return read

    return BackgroundJobs(
        push=lambda round_id: pushing.push_pending(services, round_id),
        push_retry_at=lambda round_id: pushing.push_retry_at(services, round_id),
        escalate=lambda round_id: pushing.apply_escalations(services, round_id),
        verify=verify,
        take_hints=lambda hints: webhooks.take_hints(services, hints),
        sweep=sweep,
        reconcile=lambda: list(verification.reconcile_live_rounds(services)),
        run_job=lambda job_id: jobs.run_job(services, job_id),
    )
