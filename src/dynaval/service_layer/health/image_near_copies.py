"""Near-copies at submission, for image task types: every new image is compared with every earlier
example of its task type (every round's candidates and captures, and the earlier items of its own
batch) by its perceptual fingerprint (:mod:`dynaval.domain.images.near_copies`), at its round's
``near_duplicate_image_bits``. The same picture (the same SHA-256) is an ``identical`` match; a
shifted or re-encoded one a ``perceptual`` match. The round's policy decides what a match leads
to, as for texts (:mod:`dynaval.service_layer.health.near_duplicates`).

The fingerprints live in the shared index in the database (each example's row holds its image's
fingerprint where a text's holds its band keys), held in each process's memory and topped up
before each check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dynaval.domain.health.near_duplicates import MAX_REPORTED, EarlierExample, NearDuplicateMatch, best
from dynaval.domain.images.image import ImageFingerprint, StoredImage, sha_of
from dynaval.domain.images.near_copies import FingerprintIndex, NearCopyRule, distance, similarity
from dynaval.domain.task_type import TaskType
from dynaval.domain.validation.candidate import Candidate
from dynaval.service_layer.images import stored_images
from dynaval.service_layer.images.ports import ImageServices
from dynaval.service_layer.unit_of_work import UnitOfWork

TOP_UP_PAGE = 50_000
LOOKUP_LIMIT = 200


def check_images(
    uow: UnitOfWork,
    index: FingerprintIndex,
    task_type: TaskType,
    rule: NearCopyRule,
    new: Sequence[Candidate],
    known: Mapping[str, StoredImage],
) -> list[tuple[ImageFingerprint, list[NearDuplicateMatch]]]:
    """Each new candidate's fingerprint and the earlier examples it repeats, most similar first.
    The caller holds the task type's check lock (``serialize_checks``)."""
    top_up(uow, index, task_type.name)
    in_batch: list[tuple[EarlierExample, ImageFingerprint]] = []
    found = []
    for candidate in new:
        ref = candidate.inputs[task_type.main_field]
        fingerprint = known[sha_of(ref)].fingerprint
        hits = index.lookup(task_type.name, fingerprint, rule, limit=LOOKUP_LIMIT)
        stored = uow.near_duplicates.examples([key for key, _ in hits])
        earlier = [(stored[key], bits) for key, bits in hits if key in stored]
        earlier += [
            (e, distance(fingerprint, p)) for e, p in in_batch if rule.holds(distance(fingerprint, p))
        ]
        matches = [_match(example, bits, ref, task_type.main_field) for example, bits in earlier]
        found.append((fingerprint, best(matches)[:MAX_REPORTED]))
        in_batch.append(
            (
                EarlierExample(candidate.id, candidate.round_id, candidate.inputs, candidate.submitted_by),
                fingerprint,
            )
        )
    return found


def _match(example: EarlierExample, bits: int, ref: str, field: str) -> NearDuplicateMatch:
    identical = example.inputs.get(field) == ref
    return NearDuplicateMatch(
        example.id,
        example.round_id,
        1.0 if identical else similarity(bits),
        "identical" if identical else "perceptual",
        example.submitted_by,
    )


def top_up(uow: UnitOfWork, index: FingerprintIndex, task: str) -> None:
    """Add the task type's examples stored since the last this process read, a page at a time."""
    while True:
        rows = uow.near_duplicates.keys_after(task, index.last_seq(task), limit=TOP_UP_PAGE)
        index.top_up(task, rows)
        if len(rows) < TOP_UP_PAGE:
            return


def stored_fingerprint(images: ImageServices, ref: str) -> bytes:
    """The index's bytes of a stored image's fingerprint (its PNG decoded again: a rebuild's work)."""
    png = stored_images.png_of(images, sha_of(ref))
    return stored_images.fingerprint_of_png(images, png).to_bytes()
