"""The model catalog: models registered by the content hash of their folder, and shipped by a lead.

Not to be confused with :class:`~dynaval.service_layer.predictions.Models`, the service's cache
of loaded predictors. A round's pinned model is registered when the round is created.
"""

from __future__ import annotations

import logging
from pathlib import Path

from dynaval.domain.clock import utcnow
from dynaval.domain.errors import InvalidInput
from dynaval.domain.regression.suite import RegisteredModel
from dynaval.service_layer.services import Services
from dynaval.service_layer.unit_of_work import UnitOfWork

log = logging.getLogger(__name__)

HASH_PREFIX = "sha256:"
MAX_NAME_CHARS = 200


def model_folder(services: Services, path: str | Path, *, field: str = "model") -> Path:
    """An existing model folder (with ``config.json``), given by its absolute path (the command line
    makes a relative path absolute first)."""
    folder = Path(path).expanduser()
    if not folder.is_absolute():
        raise InvalidInput("must be the absolute path of a local model folder", field=field)
    found = services.models.look_at(folder)
    if not found.is_dir:
        raise InvalidInput(f"{path} is not a model folder (no such directory)", field=field)
    if not found.has_model:
        raise InvalidInput(f"no transformers model in {folder} (config.json missing)", field=field)
    return found.path


def register_in(
    uow: UnitOfWork, *, folder: Path, model_hash: str, name: str | None = None
) -> RegisteredModel:
    """Register a model inside a unit of work the caller commits (the round's creation does)."""
    name = (name or folder.name).strip()[:MAX_NAME_CHARS] or folder.name
    return uow.regression.register(
        RegisteredModel(hash=model_hash, name=name, folder=str(folder), registered_at=utcnow())
    )


def register_model(services: Services, path: str | Path, *, name: str | None = None) -> RegisteredModel:
    """Register the model in ``path`` by its content hash; registering it again changes nothing."""
    folder = model_folder(services, path)
    model_hash = services.models.folder_hash(folder)
    with services.uow() as uow:
        model = register_in(uow, folder=folder, model_hash=model_hash, name=name)
        uow.commit()
    return model


def ship_model(services: Services, model_hash: str, *, by: str, reason: str) -> RegisteredModel:
    """Mark a registered model shipped: the gate's default baseline includes it from now on."""
    with services.uow() as uow:
        model = uow.regression.model(model_hash).ship(by=by, reason=reason, at=utcnow())
        uow.regression.save_model(model)
        uow.commit()
    log.warning("model %s (%s) shipped by %s: %s", model.hash, model.name, by, model.shipped_reason)
    return model


def list_models(services: Services) -> list[RegisteredModel]:
    with services.uow(read_only=True) as uow:
        return uow.regression.models()


def shipped_models(services: Services) -> list[RegisteredModel]:
    return [m for m in list_models(services) if m.shipped]


def find_model(services: Services, reference: str, *, field: str = "model") -> RegisteredModel:
    """A model by its hash (``sha256:...``, registered) or by its folder (registered now)."""
    if reference.startswith(HASH_PREFIX):
        with services.uow(read_only=True) as uow:
            return uow.regression.model(reference)
    return register_model(services, model_folder(services, reference, field=field))
