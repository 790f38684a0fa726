"""The composition root: the one place that builds the real objects and wires them together."""

from __future__ import annotations

from pathlib import Path

from dynaval.adapters.database import Database
from dynaval.adapters.label_config import LabelConfigCatalog
from dynaval.adapters.label_studio import LabelStudioGateway, SdkLabelStudioGateway
from dynaval.adapters.predictor import Predictor, TransformersPredictor
from dynaval.adapters.task_queue import make_huey
from dynaval.entrypoints.worker import QueuedWork
from dynaval.service_layer.services import ModelRegistry, PredictorFactory, Services
from dynaval.settings import Settings


def _load_transformers(folder: Path) -> Predictor:
    return TransformersPredictor(folder)


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
        factory=predictor_factory or _load_transformers,
        max_batch=settings.batch_max_size,
        max_wait_s=settings.batch_max_wait_ms / 1000,
    )
    services = Services(
        settings=settings,
        database=database,
        catalog=LabelConfigCatalog(settings.resolved_label_config_dir),
        label_studio=gateway,
        models=models,
    )
    # The task queue's tasks call the use cases, which ask for work through services.work.
    services.task_queue = make_huey(settings.queue_url, settings.data_dir, settings.queue_name)
    services.work = QueuedWork(services, services.task_queue)
    return services
