"""An image task's signed URL in Label Studio, kept valid for as long as annotators may open the
task: the reconcile pass (which reads every task of a live round) signs again the URLs that expire
within :data:`~dynaval.domain.images.signed_urls.RENEW_BEFORE_DAYS` and writes them into the tasks'
data (see :mod:`dynaval.domain.images.signed_urls` for why URLs expire at all)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from dynaval.domain.images import signed_urls
from dynaval.domain.task_type import TaskType
from dynaval.service_layer.images import stored_images
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation.label_studio_port import ExportedTask


def renew_image_urls(
    services: Services, task_type: TaskType, tasks: Sequence[ExportedTask], *, now: float | None = None
) -> int:
    """Sign again, as of ``now``, every image URL of ``tasks`` that expires too soon, and write it
    into its task; how many tasks were updated. Text task types have none."""
    if not task_type.reads_images:
        return 0
    now = time.time() if now is None else now
    days = services.settings.image_url_days
    renewed = 0
    for task in tasks:
        data = dict(task.data)
        for name in task_type.data_fields:
            signed = stored_images.signed_url_parts(data.get(name))
            if signed is not None and signed_urls.needs_renewal(signed[1], now=now, days=days):
                data[name] = stored_images.image_url(services.settings, signed[0], now=now)
        if data != task.data:
            services.label_studio.update_task_data(task_id=task.task_id, data=data)
            renewed += 1
    return renewed
