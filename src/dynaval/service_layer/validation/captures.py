"""Failure capture use cases: report wrong outputs found in production to a capture round, read
them back, and list the accepted ones (the regression suite's cases from production).

A capture is stored as a candidate of its round (the reported label in the writer's label's place,
the reporter as the writer), queued for Label Studio at once: from there the same push, blind
tasks, votes, decision rule, gold, escalation and agreement apply as to a fooled candidate. Its
provenance is stored beside it (:class:`~dynaval.domain.validation.capture.Capture`) and never sent to Label
Studio: validators see the inputs only.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dynaval.domain.clock import utcnow
from dynaval.domain.errors import Conflict, InvalidInput
from dynaval.domain.images.image import StoredImage
from dynaval.domain.task_type import TaskType
from dynaval.domain.validation.candidate import Candidate
from dynaval.domain.validation.capture import AcceptedCapture, Capture, CaptureSource, reported_candidate
from dynaval.domain.validation.round import Round
from dynaval.service_layer.health import near_duplicates
from dynaval.service_layer.images import stored_images
from dynaval.service_layer.images.ports import ImageServices
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation.inputs import CheckedInputs, GivenInputs, task_inputs


@dataclass(frozen=True)
class NewCapture:
    """A capture as a request gives it. The request model checked its shape: the inputs and the
    observed output readable NFC texts within ``DYNAVAL_MAX_TEXT_CHARS``, the source one of the
    four, ``observed_at`` a time with its zone, the names and the reference readable text. What
    depends on the round (its task type's fields, its labels, its references) is checked here."""

    inputs: GivenInputs
    observed_output: str
    reported_label: str
    source: CaptureSource
    model_name: str
    model_version: str
    observed_at: datetime
    reference: str | None = None


def report_captures(
    services: Services, *, round_id: int, captures: Sequence[NewCapture], reporter: str, batch: bool
) -> list[Candidate]:
    """Store the captures, all or none, and queue them for validation in Label Studio. Returns their
    candidates in the order given.

    ``reporter`` is the name of the token they came with (never a body field). ``batch``: they came
    as ``{"captures": [...]}`` (its size checked by the request model against
    ``DYNAVAL_MAX_BATCH_SIZE``), so an error names ``captures[i].field``. Refused: a round that is
    not an open capture round (409); a reference already reported in the round, or given twice in
    the batch (409, naming the earlier capture); under the round's ``reject`` policy, a
    near-duplicate of an earlier example (409 naming ``inputs``, see
    :mod:`dynaval.service_layer.health.near_duplicates`)."""
    where = [f"captures[{i}]." if batch else "" for i in range(len(captures))]
    _refuse_references_twice_in(captures, where)
    with services.uow(read_only=True) as uow:
        round_ = uow.rounds.get(round_id)
    round_.check_takes_captures()
    task_type = services.catalog.get(round_.task_type)
    at = utcnow()
    checked: list[CheckedInputs] = []
    image_services = services.images if task_type.reads_images else None
    made = [
        _new_capture(
            round_, task_type, given, prefix=prefix, reporter=reporter, at=at, into=(checked, image_services)
        )
        for given, prefix in zip(captures, where, strict=True)
    ]
    # The semantic check's model work, before the write transaction opens.
    encoded = near_duplicates.encode_new(services, task_type, [c for c, _ in made])
    references = {c.reference: p for (_, c), p in zip(made, where, strict=True) if c.reference}
    images = [image for inputs in checked for image in inputs.images]
    if not _store(services, round_id, task_type, made, where, encoded, references, images):
        _refuse_reported_meanwhile(services, round_id, references)
    services.work.push_soon(round_id)  # into Label Studio by the task queue, not in this request
    return [candidate for candidate, _ in made]


def _store(
    services: Services,
    round_id: int,
    task_type: TaskType,
    made: Sequence[tuple[Candidate, Capture]],
    where: Sequence[str],
    encoded: Sequence[Any],
    references: dict[str, str],
    images: Sequence[StoredImage],
) -> bool:
    """Store the captures with their index entries, checked for near-duplicates and for references
    reported earlier; False when another request reported one of the references meanwhile (the
    unique index refused it, and nothing is stored)."""
    with services.uow() as uow:
        round_ = uow.rounds.get(round_id)
        round_.check_takes_captures()  # again: it may have closed meanwhile
        taken = uow.captures.by_references(round_id, references)
        if taken:
            reference, earlier = next(iter(taken.items()))
            raise _taken(round_id, reference, earlier, field=references[reference] + "reference")
        checked = near_duplicates.check_new(
            services,
            uow,
            round_,
            task_type,
            [(c, prefix.rstrip(".")) for (c, _), prefix in zip(made, where, strict=True)],
            encoded,
            {image.sha256: image for image in images},
        )
        for candidate, _capture in made:
            uow.candidates.add(candidate)
        near_duplicates.index_new(uow, round_, checked)
        try:
            uow.captures.add_many([capture for _, capture in made])
        except Conflict:
            return False
        if images:
            stored_images.keep(services.images, images)
        uow.commit()
    return True


def _refuse_reported_meanwhile(services: Services, round_id: int, references: dict[str, str]) -> None:
    with services.uow(read_only=True) as uow:
        taken = uow.captures.by_references(round_id, references)
    if not taken:  # the other request's capture was not kept after all
        raise Conflict("a reference was being reported at the same moment; send it again", field="reference")
    reference, earlier = next(iter(taken.items()))
    raise _taken(round_id, reference, earlier, field=references[reference] + "reference")


def _refuse_references_twice_in(captures: Sequence[NewCapture], where: Sequence[str]) -> None:
    first: dict[str, int] = {}
    for i, given in enumerate(captures):
        if given.reference is None:
            continue
        if given.reference in first:
            raise Conflict(
                f"reference {given.reference!r} is given twice in this batch: "
                f"captures[{first[given.reference]}] has it already",
                field=where[i] + "reference",
            )
        first[given.reference] = i


def _taken(round_id: int, reference: str, earlier: str, *, field: str) -> Conflict:
    return Conflict(
        f"reference {reference!r} was already reported in round {round_id}: capture {earlier}",
        field=field,
    )


def _new_capture(
    round_: Round,
    task_type: TaskType,
    given: NewCapture,
    *,
    prefix: str,
    reporter: str,
    at: datetime,
    into: tuple[list[CheckedInputs], ImageServices | None],
) -> tuple[Candidate, Capture]:
    """The candidate and provenance of one capture (not stored yet), checked against the round; an
    error names the field under ``prefix`` (``captures[3].``, or nothing for a single capture).
    ``into``: the list its checked inputs join (with the images to keep), and the image services
    an image task type checks its image with."""
    checked, images = into
    checked_inputs = task_inputs(task_type, given.inputs, field_prefix=prefix, images=images)
    checked.append(checked_inputs)
    inputs = checked_inputs.values
    if given.reported_label not in round_.labels:
        raise InvalidInput(
            f"reported_label must be one of: {', '.join(round_.labels)}", field=prefix + "reported_label"
        )
    assert round_.id is not None  # a stored round
    candidate = reported_candidate(
        candidate_id=str(uuid.uuid4()),
        round_id=round_.id,
        inputs=inputs,
        reported_label=given.reported_label,
        reporter=reporter,
        at=at,
    )
    capture = Capture(
        candidate_id=candidate.id,
        round_id=round_.id,
        source=given.source,
        observed_output=given.observed_output,
        model_name=given.model_name,
        model_version=given.model_version,
        observed_at=given.observed_at,
        reporter=reporter,
        reference=given.reference,
    )
    return candidate, capture


def accepted_captures(services: Services, *, round_id: int | None = None) -> list[AcceptedCapture]:
    """Every accepted capture (of one round, or of all): each a regression case from production,
    with the id of the candidate it was validated as, its round, inputs, the reported label that
    validation confirmed, and its source."""
    with services.uow(read_only=True) as uow:
        return uow.captures.accepted_captures(round_id)
