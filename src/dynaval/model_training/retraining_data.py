"""What a retraining run may train on (:mod:`dynaval.model_training.retraining_run`): the leak rule.

Every accepted example of the task type's adversarial rounds whose writer is placed in train
(:mod:`dynaval.service_layer.retraining.placement`: never an example that is, or could later be, in
a dev or test split or the suite), less every one that the release build's own leak scan finds near
a held-out example (a dev or test writer's example, a suite case, an accepted capture): MinHash and,
when the settings turn it on, the sentence encoder for texts; perceptual hashes for images. Dev
writers' examples measure the model before and after.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynaval.domain.errors import InvalidInput
from dynaval.domain.health.near_duplicates import NearDuplicateRule
from dynaval.domain.health.semantic_duplicates import SemanticRule
from dynaval.domain.images.image import sha_of
from dynaval.domain.images.near_copies import ImagePairIndex, NearCopyRule
from dynaval.domain.releases.release import SplitKind
from dynaval.domain.task_type import TaskType
from dynaval.domain.validation.round import Round, RoundKind
from dynaval.model_builder.image_fine_tuning import LabelledImage
from dynaval.model_training.release_data import TrainingExample, labelled_text
from dynaval.service_layer.dataset_records.round_dataset import iter_round_dataset
from dynaval.service_layer.health.release_leaks import CrossSplitScan
from dynaval.service_layer.images.stored_images import fingerprint_of_png, png_of
from dynaval.service_layer.progress import Progress, Unwatched
from dynaval.service_layer.retraining.placement import place_accepted_writers
from dynaval.service_layer.services import Services

TRAIN_SPLIT, HELD_OUT_SPLIT = "train_r1", "test_r1"
"""How the leak scan sees the two sides: train, and a kind it must never meet."""


@dataclass(frozen=True)
class AcceptedExample:
    example_id: str
    inputs: dict[str, Any]
    label: str
    writer: str


@dataclass(frozen=True)
class TrainingSet:
    """What a run trains on and measures with, and why the rest is left out."""

    train: list[AcceptedExample]
    dev: list[AcceptedExample]
    """Dev writers' examples: measured before and after, never trained on."""
    accepted: int
    held_out: int
    withheld: int
    near: set[str]
    """Train writers' examples left out as near a held-out example (their ids)."""

    def counts(self) -> dict[str, int]:
        return {
            "accepted": self.accepted,
            "trained_on": len(self.train),
            "held_out": self.held_out,
            "withheld": self.withheld,
            "near_held_out": len(self.near),
            "dev": len(self.dev),
        }


def choose_training_set(services: Services, task: TaskType, progress: Progress | None = None) -> TrainingSet:
    """Place the writers of the task type's accepted examples, then keep the train writers' examples
    that the leak scan finds near no held-out example (see the module); 422 when none is left."""
    return _TrainingSetChooser(services, task, progress or Unwatched()).choose()


class _TrainingSetChooser:
    def __init__(self, services: Services, task: TaskType, progress: Progress) -> None:
        self.services = services
        self.task = task
        self.progress = progress

    def choose(self) -> TrainingSet:
        self.progress.step("placing the writers of accepted examples")
        placement = place_accepted_writers(self.services, self.task.name)
        self.progress.step("reading the accepted examples")
        examples = {e.example_id: e for e in self._examples()}
        trainable = [examples[i] for i in placement.trainable if i in examples]
        with self.services.uow(read_only=True) as uow:
            kinds = uow.releases.writer_kinds(self.task.name)
        held_out = [examples[i] for i in placement.held_out if i in examples]
        dev = [e for e in held_out if kinds.get(e.writer) is SplitKind.DEV]
        self.progress.step("looking for near-duplicates of held-out examples", len(trainable))
        near = self._near_held_out(trainable, held_out)
        train = [e for e in trainable if e.example_id not in near]
        if not train:
            raise InvalidInput(
                f"none of the {len(examples)} accepted examples may be trained on "
                f"({len(placement.held_out)} held out, {len(placement.withheld)} withheld, "
                f"{len(near)} near a held-out one)",
                field="task_type",
            )
        return TrainingSet(train, dev, len(examples), len(placement.held_out), len(placement.withheld), near)

    def _rounds(self, kind: RoundKind) -> list[Round]:
        with self.services.uow(read_only=True) as uow:
            return [r for r in uow.rounds.all() if r.task_type == self.task.name and r.kind is kind]

    def _examples(self) -> Iterator[AcceptedExample]:
        for round_ in self._rounds(RoundKind.ADVERSARIAL):
            assert round_.id is not None
            for record in iter_round_dataset(self.services, round_.id):
                # An accepted example's label is its writer's (as a release row's is).
                label = record["writer_label"]
                yield AcceptedExample(record["example_id"], record["inputs"], label, record["writer"])

    def _held_out_inputs(self, held_out: list[AcceptedExample]) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every held-out example's inputs: dev and test writers', the suite's cases, captures."""
        for example in held_out:
            yield example.example_id, example.inputs
        with self.services.uow(read_only=True) as uow:
            # Retired cases too: a retired case's example stays in its release's dev or test split.
            every = (*uow.regression.cases(), *uow.regression.cases(retired=True))
            cases = [c for c in every if c.task_type == self.task.name]
        for case in cases:
            yield f"suite\x1f{case.id}", dict(case.inputs)
        for round_ in self._rounds(RoundKind.CAPTURE):
            assert round_.id is not None
            for record in iter_round_dataset(self.services, round_.id):
                yield f"capture\x1f{record['example_id']}", record["inputs"]

    def _near_held_out(self, trainable: list[AcceptedExample], held_out: list[AcceptedExample]) -> set[str]:
        """The trainable examples the release build's leak scan finds near a held-out one."""
        fields = self.task.data_fields
        if self.task.reads_images:
            images = self.services.images

            def fingerprint(ref: str) -> Any:
                return fingerprint_of_png(images, png_of(images, sha_of(ref)))

            scan = CrossSplitScan(
                fields,
                NearDuplicateRule(),
                None,
                encoder=self.services.encoder,
                index=ImagePairIndex(NearCopyRule(), fingerprint),
                index_kind="perceptual",
            )
        else:
            semantic = SemanticRule() if self.services.settings.near_duplicate_semantic else None
            scan = CrossSplitScan(fields, NearDuplicateRule(), semantic, encoder=self.services.encoder)
        trainable_ids = {e.example_id for e in trainable}
        for example in trainable:
            scan.add(example.example_id, TRAIN_SPLIT, example.inputs)
        for key, inputs in self._held_out_inputs(held_out):
            scan.add(key, HELD_OUT_SPLIT, inputs)
        near: set[str] = set()
        for pair in scan.pairs():
            near.update(k for k in (pair.a, pair.b) if k in trainable_ids)
        return near


def labelled_examples(
    services: Services, task: TaskType, examples: list[AcceptedExample], scratch: Path
) -> list[TrainingExample]:
    """The examples as training rows: texts as they are; images written as PNG files to ``scratch``."""
    fields = task.data_fields
    if not task.reads_images:
        return [labelled_text(e.inputs, e.label, fields, field="task_type") for e in examples]
    scratch.mkdir(parents=True, exist_ok=True)
    out: list[TrainingExample] = []
    for example in examples:
        sha = sha_of(str(example.inputs[fields[0]]))
        path = scratch / f"{sha}.png"
        if not path.exists():
            path.write_bytes(png_of(services.images, sha))
        out.append(LabelledImage(path, example.label))
    return out
