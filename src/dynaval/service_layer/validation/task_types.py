"""The task types a round can have: each labelling config in the config folder, with its fields,
its labels and its default model, if built."""

from __future__ import annotations

import logging
from typing import Any

from dynaval.domain.errors import InvalidInput
from dynaval.service_layer.services import Services

log = logging.getLogger(__name__)


def list_task_types(services: Services, *, with_model_folder: bool) -> list[dict[str, Any]]:
    """Every task type, by name. A config that cannot be read is left out (and logged): a round
    could not be made with it. The default model's folder is a path on the server, shown to leads
    only (``with_model_folder``)."""
    listed = []
    for name in services.catalog.names():
        try:
            task_type = services.catalog.get(name)
        except (InvalidInput, ValueError) as exc:
            log.warning("labelling config %s.xml cannot be read, so it is not listed: %s", name, exc)
            continue
        folder = services.settings.default_model_dir_for(name)
        default_model: dict[str, Any] = {
            "built": services.models.look_at(folder).has_model,
            "name": folder.name,
            "build": f"dynaval model build-default --task {name}",
        }
        if with_model_folder:
            default_model["folder"] = str(folder)
        listed.append(
            {
                "name": name,
                "fields": task_type.fields(),
                "labels": list(task_type.labels),
                "default_model": default_model,
            }
        )
    return listed
