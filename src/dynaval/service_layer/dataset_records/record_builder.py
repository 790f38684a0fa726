"""The provenance record of an accepted example, built from what the database stores.

This is the record's one definition: the kept rows (:mod:`.keeping`) are written with it, and
``dynaval dataset rebuild`` compares them with it. The rows come from the
:class:`~dynaval.service_layer.dataset_records.dataset_port.DatasetReads` statements, shaped for the record
(times as ISO text, JSON decoded, only each candidate's votes); this module makes the record:
pseudonyms for the writer and the annotators, the rule's figures, the lead's override. A round has a
few hundred writers and annotators and a million records, so each pseudonym (an HMAC) is computed
once per builder, and the round's part of the record once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dynaval.domain.images.image import is_image_ref
from dynaval.domain.provenance import pseudonym, writer_pseudonym
from dynaval.service_layer.dataset_records.dataset_port import DatasetPage, RoundHeader
from dynaval.service_layer.images.stored_images import image_url

if TYPE_CHECKING:
    from dynaval.settings import Settings


class RecordBuilder:
    """Builds the records of one round's candidates, remembering the pseudonyms it computed."""

    def __init__(self, settings: Settings, header: RoundHeader) -> None:
        self.settings = settings
        self.secret = settings.pseudonym_secret
        self.header = header
        self.round_info = {"id": header.id, "name": header.name, "state": header.state}
        self.annotators: dict[str, str] = {}
        self.writers: dict[tuple[str, str | None], str] = {}

    def annotator(self, raw_id: str) -> str:
        found = self.annotators.get(raw_id)
        if found is None:
            found = self.annotators[raw_id] = pseudonym(self.secret, "annotator", raw_id)
        return found

    def writer(self, writer_id: str, collected_by: str | None) -> str:
        key = (writer_id, collected_by)
        found = self.writers.get(key)
        if found is None:
            found = self.writers[key] = writer_pseudonym(self.secret, writer_id, collected_by)
        return found

    def votes(self, rows: Sequence[Sequence[Any]]) -> dict[str, list[dict[str, Any]]]:
        """Each candidate's votes (ordered by annotator), by candidate id: of each annotator's rows,
        the first (their latest annotation; the rest are superseded)."""
        by_candidate: dict[str, list[dict[str, Any]]] = {}
        annotator = self.annotator
        previous: tuple[str, str] | None = None
        for candidate_id, annotation_id, raw_id, label, flagged, reason, lead_time, created, updated in rows:
            if previous is not None and previous[1] == raw_id and previous[0] == candidate_id:
                continue
            previous = (candidate_id, raw_id)
            vote = {
                "annotator": annotator(raw_id),
                "label": label,
                "flagged": flagged,
                "flag_reason": reason,
                "annotation_id": annotation_id,
                "created_at": created,
                "updated_at": updated,
                "lead_time_s": lead_time,
            }
            votes = by_candidate.get(candidate_id)
            if votes is None:
                by_candidate[candidate_id] = [vote]
            else:
                votes.append(vote)
        return by_candidate

    def page(self, page: DatasetPage) -> list[dict[str, Any]]:
        header = self.header
        round_info = self.round_info
        task_type = header.task_type
        model_name = header.model_name
        model_hash = header.model_hash
        project_id = header.label_studio_project_id
        policy = header.policy
        writer = self.writer
        votes = self.votes(page.votes)
        no_votes: list[dict[str, Any]] = []
        records = []
        for (
            candidate_id,
            inputs,
            writer_label,
            rationale,
            writer_id,
            collected_by,
            submitted_at,
            prediction,
            probabilities,
            signature,
            scored_by_name,
            scored_by_hash,
            fooled,
            task_id,
            decision,
            decided_at,
            override_outcome,
            override_reason,
            override_by,
            override_at,
            capture_source,
            capture_reference,
            observed_output,
            capture_model_name,
            capture_model_version,
            observed_at,
            _page_key,
        ) in page.candidates:
            # The stored decision also holds the ballots and excluded annotators: not in the record.
            rule = decision or {}
            record: dict[str, Any] = {
                "example_id": candidate_id,
                "round": round_info,
                "task_type": task_type,
                "inputs": inputs,
                "writer_label": writer_label,
                # Why the writer thinks the model is wrong, or None; never sent to validators.
                "rationale": rationale,
                "writer": writer(writer_id, collected_by),
                # The collector that submitted it for that writer (the writer's identity is its
                # word), or None when the writer's own token did.
                "collected_by": collected_by,
                "submitted_at": submitted_at,
                "model": {
                    # The model that scored it: the round's, unless a swap replaced it since.
                    "name": scored_by_name or model_name,
                    "hash": scored_by_hash or model_hash,
                    "prediction": prediction,
                    "probabilities": probabilities,
                    "signature": signature,
                    "fooled": fooled,
                },
                "label_studio": {"project_id": project_id, "task_id": task_id},
                "votes": votes.get(candidate_id, no_votes),
                "agreement": {
                    "item_agreement": rule.get("item_agreement"),
                    "majority_label": rule.get("majority_label"),
                    "majority_share": rule.get("majority_share"),
                    "writer_label_share": rule.get("writer_label_share"),
                    "label_counts": rule.get("label_counts"),
                },
                "decision": {
                    # The rule's; a lead's override, which decides the status, is recorded beside it.
                    "outcome": rule.get("outcome"),
                    "reason": rule.get("reason"),
                    "rule_version": rule.get("rule_version"),
                    "policy": policy,
                    "decided_at": decided_at,
                    "override": None
                    if override_outcome is None
                    else {
                        "outcome": override_outcome,
                        "reason": override_reason,
                        "by": override_by,
                        "at": override_at,
                    },
                },
            }
            if capture_source is not None:
                # A failure capture: where it was found and what the production model said. Its
                # reported label is ``writer_label``, its reporter ``writer`` (only captures carry
                # this key, so writers' records keep their shape).
                record["capture"] = {
                    "source": capture_source,
                    "reference": capture_reference,
                    "observed_output": observed_output,
                    "model_name": capture_model_name,
                    "model_version": capture_model_version,
                    "observed_at": observed_at,
                }
            images = {name: v for name, v in (inputs or {}).items() if is_image_ref(v)}
            if images:
                # An image task type's inputs name stored images; these signed URLs fetch them
                # (valid for DYNAVAL_IMAGE_URL_DAYS; a release holds the images themselves).
                record["image_urls"] = {n: image_url(self.settings, v) for n, v in images.items()}
            records.append(record)
        return records
