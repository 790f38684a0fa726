"""Gold items: known answers mixed into a round's Label Studio project to check its annotators.

A lead uploads items with known labels. Pushes mix them among the candidates at the round's
``gold_rate``, with task data shaped exactly like a candidate's, so annotators cannot tell them
apart. The answers come back like votes (read from Label Studio) and feed the gold rule
(:mod:`dynaval.service_layer.annotator_exclusion`).
"""

from __future__ import annotations

import uuid

from dynaval.domain.errors import InvalidInput
from dynaval.domain.gold import GoldItem
from dynaval.service_layer.candidates import validated_inputs
from dynaval.service_layer.services import Services

MAX_GOLD_ITEMS_PER_REQUEST = 1000


def add_gold_items(services: Services, *, round_id: int, items: object) -> list[str]:
    """Store a lead's gold items (all or none). Returns their ids, in the order given."""
    if not isinstance(items, list) or not items:
        raise InvalidInput("items must be a non-empty list of {text, label} objects", field="items")
    if len(items) > MAX_GOLD_ITEMS_PER_REQUEST:
        raise InvalidInput(f"at most {MAX_GOLD_ITEMS_PER_REQUEST} items per request", field="items")
    with services.uow() as uow:
        round_ = uow.rounds.get(round_id)
        task_type = services.catalog.get(round_.task_type)
        added = []
        for index, item in enumerate(items):
            where = f"items[{index}]"
            if not isinstance(item, dict):
                raise InvalidInput("each item must be an object", field=where)
            inputs = validated_inputs(services, task_type, item, field_prefix=f"{where}.")
            label = item.get("label")
            if not isinstance(label, str) or label not in round_.labels:
                raise InvalidInput(
                    f"label must be one of: {', '.join(round_.labels)}", field=f"{where}.label"
                )
            added.append(GoldItem(id=str(uuid.uuid4()), round_id=round_id, inputs=inputs, label=label))
        for gold_item in added:
            uow.gold.add(gold_item)
        uow.commit()
    return [g.id for g in added]
