"""Gold items: known answers mixed into a round's Label Studio project to check its annotators.

A lead uploads items with known labels. Pushes mix them among the candidates at the round's
``gold_rate``, with task data shaped exactly like a candidate's, so annotators cannot tell them
apart. The answers come back like votes (read from Label Studio) and feed the gold rule
(:mod:`dynaval.service_layer.validation.annotator_exclusion`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from dynaval.domain.errors import InvalidInput
from dynaval.domain.images.image import StoredImage
from dynaval.domain.validation.gold import GoldItem
from dynaval.service_layer.images import stored_images
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation.inputs import GivenInputs, task_inputs


@dataclass(frozen=True)
class NewGoldItem:
    """A gold item as a lead gives it. The request model checked its shape: each input a readable,
    NFC text within ``DYNAVAL_MAX_TEXT_CHARS``. What depends on the round is checked here."""

    inputs: GivenInputs
    label: str


def add_gold_items(services: Services, *, round_id: int, items: Sequence[NewGoldItem]) -> list[str]:
    """Store a lead's gold items (all or none): each must give exactly the input fields of the
    round's task type and one of its labels (an error names ``items[i].field``), and a frozen round
    takes none (409). Returns their ids, in the order given."""
    with services.uow() as uow:
        round_ = uow.rounds.get(round_id)
        round_.check_takes_gold()
        task_type = services.catalog.get(round_.task_type)
        images = services.images if task_type.reads_images else None
        added: list[GoldItem] = []
        checked: list[StoredImage] = []
        for index, item in enumerate(items):
            where = f"items[{index}]"
            inputs = task_inputs(task_type, item.inputs, field_prefix=f"{where}.", images=images)
            checked.extend(inputs.images)
            if item.label not in round_.labels:
                raise InvalidInput(
                    f"label must be one of: {', '.join(round_.labels)}", field=f"{where}.label"
                )
            added.append(
                GoldItem(id=str(uuid.uuid4()), round_id=round_id, inputs=inputs.values, label=item.label)
            )
        for gold_item in added:
            uow.gold.add(gold_item)
        if images is not None:
            stored_images.keep(images, checked)
        uow.commit()
    return [g.id for g in added]
