"""Writers placed at their first accepted example (:mod:`dynaval.domain.retraining.placement`),
so that a model may be trained on newly accepted examples before any release exists, and never on
an example that is, or could later be, in a dev or test split or in the regression suite.

The placements are made in acceptance order, over every accepted example of the task type's
adversarial rounds, and stored beside the releases' own (``writer_split``, with no release): every
later release keeps them, as it keeps the writers an earlier release placed. The regression suite's
cases of the task type and the accepted captures of its capture rounds are held out from the start.
Run it before anything reads the placements (a release's build, a training run): the placements it
makes are those the examples' order of acceptance gives, whenever it runs.

Keys so far: an example's text keys (its whole input; an NLI premise), the rule of a release's
text-disjoint splits. A near-duplicate of a held-out example is caught where a training set is made,
by the release build's own leak scan.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dynaval.domain.clock import utcnow
from dynaval.domain.releases.release import SplitKind, SplitRule, text_keys
from dynaval.domain.retraining.placement import Ledger
from dynaval.domain.validation.round import Round, RoundKind
from dynaval.service_layer.dataset_records.round_dataset import iter_round_dataset
from dynaval.service_layer.services import Services

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Placement:
    """What a placement pass found: the writers it placed now, and each accepted example's fate."""

    task_type: str
    placed_now: dict[str, SplitKind]
    trainable: list[str]
    """The example ids a model may be trained on (train writers', never near a held-out key)."""
    held_out: list[str]
    """The example ids of dev and test writers: never trained on."""
    withheld: dict[str, str] = field(default_factory=dict)
    """Example id -> why it is in no kind (a text of it sits in another kind)."""


def place_accepted_writers(services: Services, task_type: str, rule: SplitRule | None = None) -> Placement:
    """Place every writer of the task type's accepted examples not placed yet (see the module)."""
    rule = rule or SplitRule()
    fields = services.catalog.get(task_type).data_fields
    with services.uow(read_only=True) as uow:
        placed = uow.releases.writer_kinds(task_type)
        rounds = [r for r in uow.rounds.all() if r.task_type == task_type]
        # Retired cases too: a retired case's example stays in its release's dev or test split.
        suite = [
            c
            for c in (*uow.regression.cases(), *uow.regression.cases(retired=True))
            if c.task_type == task_type
        ]
    ledger = Ledger(task_type, rule=rule)
    ledger.place_writers(placed)
    ledger.hold_out(key for case in suite for key in text_keys(case.inputs, fields))
    captures = [r for r in rounds if r.kind is RoundKind.CAPTURE]
    ledger.hold_out(
        key for record in _records(services, captures) for key in text_keys(record["inputs"], fields)
    )
    adversarial = [r for r in rounds if r.kind is RoundKind.ADVERSARIAL]
    trainable: list[str] = []
    held_out: list[str] = []
    withheld: dict[str, str] = {}
    for record in sorted(_records(services, adversarial), key=_acceptance_order):
        outcome = ledger.accept(record["writer"], text_keys(record["inputs"], fields))
        example_id = record["example_id"]
        if outcome.withheld is not None:
            withheld[example_id] = outcome.withheld
        elif outcome.trainable:
            trainable.append(example_id)
        else:
            held_out.append(example_id)
    new = {writer: kind for writer, kind in ledger.writers.items() if writer not in placed}
    if new:
        with services.uow() as uow:
            uow.releases.place_writers(task_type, new, at=utcnow())
            uow.commit()
        log.info("%s: %d writers placed at their first accepted example", task_type, len(new))
    return Placement(task_type, new, trainable, held_out, withheld)


def _records(services: Services, rounds: list[Round]) -> Iterator[dict[str, Any]]:
    for round_ in rounds:
        assert round_.id is not None
        yield from iter_round_dataset(services, round_.id)


def _acceptance_order(record: dict[str, Any]) -> tuple[datetime, str]:
    """When its decision accepted it (its submission, for a decision with no time), then its id."""
    decided = record["decision"].get("decided_at") or record["submitted_at"]
    moment = datetime.fromisoformat(decided) if isinstance(decided, str) else decided
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC), record["example_id"])
