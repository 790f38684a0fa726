"""Candidate use cases: submit (score with the round's model) and read back."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dynaval.domain.clock import utcnow
from dynaval.domain.errors import Forbidden, InvalidInput, NotFound, Unavailable
from dynaval.domain.images.image import StoredImage
from dynaval.domain.labels import LabelMapping
from dynaval.domain.provenance import sign_prediction
from dynaval.domain.task_type import TaskType
from dynaval.domain.validation.candidate import Candidate, CandidateStatus
from dynaval.domain.validation.round import Round
from dynaval.service_layer.health import near_duplicates
from dynaval.service_layer.images import stored_images
from dynaval.service_layer.images.ports import ImageServices
from dynaval.service_layer.predictions import BatchedModel, Prediction
from dynaval.service_layer.services import Services
from dynaval.service_layer.validation.inputs import CheckedInputs, GivenInputs, model_inputs, task_inputs

log = logging.getLogger(__name__)

IMAGE_TOKENS = 1
"""What an image counts as in the scoring budget's tokens: one unit, whatever its size (the model
reads it scaled to its own input)."""

ScoringCharge = Callable[[Sequence[int], str], None]
"""Charges the caller for the model work of scoring some examples, given the tokens the model reads
of each (an error would name the field given); raises to refuse. The HTTP routes pass
``dynaval.entrypoints.guards.charge_scoring``."""


def round_model(services: Services, round_: Round) -> BatchedModel:
    """The round's model, loaded once per process. Its folder was checked when the round was made;
    one that cannot be loaded now (moved, deleted, damaged) is the service's trouble, not the
    caller's input: :class:`~dynaval.domain.errors.Unavailable` (503), saying nothing of the
    server's paths, and the reason in the log for whoever runs the service. A stored candidate
    stays in ``scoring`` meanwhile, and the minute sweep scores it once the model is back."""
    try:
        return services.models.get_path(round_.model_dir)
    except (InvalidInput, OSError) as exc:
        reason = exc.message if isinstance(exc, InvalidInput) else f"{type(exc).__name__}: {exc}"
        log.warning("round %s: its model cannot be loaded: %s", round_.id, reason)
        raise Unavailable(
            f"round {round_.id}'s model cannot be loaded now; a lead must restore its folder"
        ) from None


def score(
    services: Services,
    round_: Round,
    inputs: Sequence[Mapping[str, str]],
    known: Mapping[str, StoredImage] | None = None,
) -> list[Prediction]:
    """The round's model's answers for these inputs, read over the task's labels (a model may name
    them in another case, or know more: see :class:`~dynaval.domain.labels.LabelMapping`). An
    image is read from ``known`` (checked in this request) or the image store."""
    task_type = services.catalog.get(round_.task_type)
    batcher = round_model(services, round_)
    mapping = LabelMapping.between(batcher.predictor.labels, round_.labels, task=round_.task_type)
    images = services.images if task_type.reads_images else None
    read = model_inputs(task_type, inputs, images=images, known=known)
    answers = batcher.predict_many(read)
    return [Prediction(*mapping.read(answer.probabilities)) for answer in answers]


def check_model_reads_whole(
    services: Services,
    round_: Round,
    task_type: TaskType,
    examples: Sequence[tuple[Mapping[str, str], GivenInputs, str]],
) -> list[int]:
    """Refuse an example longer than the round's model reads (:attr:`Predictor.max_tokens`), and
    return how many tokens the model reads of each: what scoring them costs.

    The model would judge its beginning only: words past the cut could turn the label without the
    model ever reading them, and such an example would fool it for nothing it got wrong.
    ``examples`` holds each example's checked inputs, the inputs as the body gave them, and where
    the body has them (``candidates[3]``, or ``""``); the error names the example's longest field
    there. When the model cannot be loaded now, nothing is refused here: the candidate is stored
    and scored later, as any is when the model fails; each example is then counted at the most
    tokens a model of the service reads (``DYNAVAL_MODEL_MAX_TOKENS``).
    """
    if task_type.reads_images:
        return [IMAGE_TOKENS] * len(examples)  # an image is read whole: the model scales it
    try:
        predictor = round_model(services, round_).predictor
    except Unavailable:
        return [services.settings.model_max_tokens] * len(examples)
    read = model_inputs(task_type, [inputs for inputs, _, _ in examples], images=None)
    counts = predictor.token_counts(read)
    for (inputs, given, where), count in zip(examples, counts, strict=True):
        if count > predictor.max_tokens:
            longest = max(task_type.data_fields, key=lambda name: len(inputs[name]))
            fields = task_type.data_fields
            together = "" if len(fields) == 1 else f" ({' and '.join(fields)} together)"
            raise InvalidInput(
                f"this example is {count} tokens long{together} and the round's model reads at most "
                f"{predictor.max_tokens}: shorten it, since the model would judge only its beginning",
                field=(f"{where}." if where else "") + given.field(longest),
            )
    return counts


def model_reading(services: Services, *, round_id: int) -> dict[str, Any]:
    """What the round's model reads of an example, for a writer to know before writing: its name,
    content hash, and the most tokens it reads (``max_tokens``, counted over ``counted_over``
    together; a longer example is refused, :func:`check_model_reads_whole`); an image model, the
    size and mode of the images it reads (``image``: a writers' page draws at that size). Only an
    open round answers, as :func:`predict` does; a model that cannot be loaded now is 503, as
    there."""
    with services.uow(read_only=True) as uow:
        round_ = uow.rounds.get(round_id)
    round_.check_takes_candidates()
    predictor = round_model(services, round_).predictor
    shape = predictor.image_shape
    return {
        "name": round_.model_name,
        "hash": round_.model_hash,
        "max_tokens": predictor.max_tokens,
        "counted_over": list(services.catalog.get(round_.task_type).data_fields),
        "image": shape.to_dict() if shape is not None else None,
    }


def predict(
    services: Services, *, round_id: int, given: GivenInputs, charge: ScoringCharge | None = None
) -> Prediction:
    """What the round's model answers for these inputs, stored nowhere: a writer asks before
    submitting. Only an open round answers (a closed or frozen one takes no candidates, so there is
    nothing to try out for it). The inputs are the task type's, checked as a candidate's are;
    ``charge``, if given, is called once they are and before the model runs (the same charge as
    submitting them; a refusal names the first input)."""
    with services.uow(read_only=True) as uow:
        round_ = uow.rounds.get(round_id)
    round_.check_takes_candidates()
    task_type = services.catalog.get(round_.task_type)
    inputs = task_inputs(task_type, given, images=_images_of(services, task_type))
    tokens = check_model_reads_whole(services, round_, task_type, [(inputs.values, given, "")])
    if charge is not None:
        charge(tokens, given.field(task_type.main_field))
    (prediction,) = score(services, round_, [inputs.values], inputs.known_images())
    return prediction


@dataclass(frozen=True)
class NewCandidate:
    """A candidate as a request gives it. The request model checked its shape: each input a
    readable, NFC text within ``DYNAVAL_MAX_TEXT_CHARS``, ``writer_id`` (``None`` when not given)
    readable text of at most 200 characters. What depends on the round (its task type's fields, its
    labels) and on the credential (who the writer is) is checked here."""

    inputs: GivenInputs
    writer_label: str
    writer_id: str | None = None
    rationale: str | None = None


@dataclass(frozen=True)
class Submitter:
    """Who sends candidates, as their credential says: the token's name, and whether the token's
    role collects candidates for the writers it names (a collector) or submits its own (a writer,
    a lead)."""

    name: str
    collects_for_others: bool = False


def submit_candidate(
    services: Services,
    *,
    round_id: int,
    candidate: NewCandidate,
    submitter: Submitter,
    charge: ScoringCharge | None = None,
) -> Candidate:
    """Store the candidate, score it with the round's model and tell whether it fooled the model.

    The writer is the submitter, unless the submitter is a collector, which names the writer in
    ``writer_id`` (see :func:`_writer_of`). A writer or collector reads back only the candidates
    submitted under their name. The candidate is stored (status ``scoring``) before the model runs,
    so a model failure loses nothing: the task queue's minute sweep scores it later. ``charge``, if
    given, is called once the candidate is checked and before it is stored; if it raises, nothing is.
    """
    return _submit(services, round_id, [(candidate, "")], submitter=submitter, charge=charge)[0]


def submit_candidates(
    services: Services,
    *,
    round_id: int,
    candidates: Sequence[NewCandidate],
    submitter: Submitter,
    charge: ScoringCharge | None = None,
) -> list[Candidate]:
    """:func:`submit_candidate` for a batch (its size checked by the request model against
    ``DYNAVAL_MAX_BATCH_SIZE``), all or nothing: every item is checked before any is stored (an
    error names ``candidates[i].field``), then all are stored in one transaction and scored
    together through the model's micro-batcher. Returns them in the order given. ``charge`` is
    called once for the whole batch (naming ``candidates``)."""
    where = [(candidate, f"candidates[{i}]") for i, candidate in enumerate(candidates)]
    return _submit(services, round_id, where, submitter=submitter, charge=charge, charge_field="candidates")


def _submit(
    services: Services,
    round_id: int,
    given: list[tuple[NewCandidate, str]],
    *,
    submitter: Submitter,
    charge: ScoringCharge | None,
    charge_field: str | None = None,
) -> list[Candidate]:
    """Check every ``(candidate, where)``, charge for scoring them, encode them for the semantic
    check (outside any write transaction), check them for near-duplicates (under a ``reject``
    policy a match refuses them all), store them all with their index entries, then score them all."""
    with services.uow(read_only=True) as uow:
        round_ = uow.rounds.get(round_id)
    round_.check_takes_candidates()
    task_type = services.catalog.get(round_.task_type)
    images = _images_of(services, task_type)
    made = [
        _new_candidate(round_, task_type, candidate, where=where, submitter=submitter, images=images)
        for candidate, where in given
    ]
    candidates = [candidate for candidate, _ in made]
    known = {sha: image for _, inputs in made for sha, image in inputs.known_images().items()}
    tokens = check_model_reads_whole(
        services,
        round_,
        task_type,
        [(c.inputs, new.inputs, where) for c, (new, where) in zip(candidates, given, strict=True)],
    )
    if charge is not None:
        charge(tokens, charge_field or task_type.main_field)
    encoded = near_duplicates.encode_new(services, task_type, candidates)
    with services.uow() as uow:
        round_ = uow.rounds.get(round_id)
        round_.check_takes_candidates()  # again: it may have closed meanwhile
        checked = near_duplicates.check_new(
            services,
            uow,
            round_,
            task_type,
            [(c, where) for c, (_, where) in zip(candidates, given, strict=True)],
            encoded,
            known,
        )
        for candidate in candidates:
            uow.candidates.add(candidate)
        near_duplicates.index_new(uow, round_, checked)
        if images is not None:
            stored_images.keep(images, known.values())
        uow.commit()
    predictions = score(services, round_, [c.inputs for c in candidates], known)
    scored = [
        _store_score(services, candidate.id, prediction, round_)
        for candidate, prediction in zip(candidates, predictions, strict=True)
    ]
    if any(c.status is CandidateStatus.QUEUED for c in scored):
        services.work.push_soon(round_id)  # into Label Studio by the task queue, not in this request
    return scored


def _images_of(services: Services, task_type: TaskType) -> ImageServices | None:
    return services.images if task_type.reads_images else None


def _new_candidate(
    round_: Round,
    task_type: TaskType,
    given: NewCandidate,
    *,
    where: str,
    submitter: Submitter,
    images: ImageServices | None,
) -> tuple[Candidate, CheckedInputs]:
    """A candidate (not stored yet) from one request object, checked against the round and the
    credential, and its checked inputs (with the images to keep); an error names the field under
    ``where`` (``candidates[3].text``, or ``text`` when ``where`` is empty)."""
    prefix = f"{where}." if where else ""
    inputs = task_inputs(task_type, given.inputs, field_prefix=prefix, images=images)
    if given.writer_label not in round_.labels:
        raise InvalidInput(
            f"writer_label must be one of: {', '.join(round_.labels)}", field=prefix + "writer_label"
        )
    writer_id, collected_by = _writer_of(given.writer_id, submitter, field=prefix + "writer_id")
    assert round_.id is not None  # a stored round
    candidate = Candidate(
        id=str(uuid.uuid4()),
        round_id=round_.id,
        inputs=inputs.values,
        writer_label=given.writer_label,
        writer_id=writer_id,
        submitted_by=submitter.name,
        collected_by=collected_by,
        rationale=given.rationale,
        submitted_at=utcnow(),
    )
    return candidate, inputs


def _writer_of(given: str | None, submitter: Submitter, *, field: str) -> tuple[str, str | None]:
    """The candidate's writer and, when a collector submitted it, the collector's name.

    The identity comes from the credential: a writer (or a lead) is the writer, and may omit
    ``writer_id`` or give their own name; any other name is refused with 403. Only a collector
    names the writer, and must. ``null`` is the same as no ``writer_id``.
    """
    if given is None:
        if submitter.collects_for_others:
            raise InvalidInput(
                "writer_id is required: a collector names the writer of each candidate", field=field
            )
        return submitter.name, None
    if submitter.collects_for_others:
        return given, submitter.name
    if given != submitter.name:
        raise Forbidden(
            "writer_id names another writer; your token says who you are: omit writer_id "
            "(only a collector's token submits for other writers)",
            field=field,
        )
    return submitter.name, None


def _store_score(services: Services, candidate_id: str, prediction: Prediction, round_: Round) -> Candidate:
    """Record the model's answer, signed; a candidate scored already keeps its first answer."""
    with services.uow() as uow:
        candidate = uow.candidates.get(candidate_id, for_update=True)
        if candidate is None:
            raise NotFound(f"candidate {candidate_id} does not exist", field="candidate_id")
        signature = sign_prediction(
            services.settings.signing_secret,
            round_.model_hash,
            candidate.inputs,
            prediction.label,
            prediction.probabilities,
        )
        scored = candidate.score(
            prediction=prediction.label,
            probabilities=prediction.probabilities,
            signature=signature,
            model_hash=round_.model_hash,
            model_name=round_.model_name,
            validate_non_fooling=round_.decision_policy.validate_non_fooling,
            at=utcnow(),
        )
        if scored:
            uow.candidates.save(candidate)
            uow.commit()
        return candidate


def score_pending(services: Services, *, older_than_s: float = 10.0, limit: int = 200) -> int:
    """Score candidates left in ``scoring`` by a model failure or a crash. Returns how many."""
    with services.uow(read_only=True) as uow:
        left = uow.candidates.left_scoring(utcnow() - timedelta(seconds=older_than_s), limit)
        rounds = {round_id: uow.rounds.get(round_id) for round_id in {c.round_id for c in left}}
    done = 0
    unavailable: set[int] = set()
    for candidate in left:
        if candidate.round_id in unavailable:
            continue  # its model failed once in this sweep: not tried again for every candidate
        round_ = rounds[candidate.round_id]
        try:
            (prediction,) = score(services, round_, [candidate.inputs])
        except Unavailable:
            unavailable.add(candidate.round_id)
            continue
        _store_score(services, candidate.id, prediction, round_)
        done += 1
    return done
