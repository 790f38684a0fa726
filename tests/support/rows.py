"""Rows written straight into the database for the tests that need a round's stored state without
going through the use cases: a round and a candidate builder with defaults, so that each test
names only what it is about."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from dynaval.adapters.db.orm import CandidateRow, RoundRow

SUBMITTED_AT = datetime(2026, 3, 1, 10, 0, 0, tzinfo=UTC)


def round_row(**fields: Any) -> RoundRow:
    """A live sentiment round on a model folder that need not exist, with Label Studio project 1;
    ``fields`` override any column."""
    values: dict[str, Any] = {
        "name": "round",
        "task_type": "sentiment",
        "model_dir": "/models/x",
        "model_name": "x",
        "model_hash": "sha256:0",
        "labels": ["positive", "negative", "neutral"],
        "policy": {"min_votes": 3, "max_votes": 5},
        "label_studio_project_id": 1,
    }
    values.update(fields)
    return RoundRow(**values)


def candidate_row(**fields: Any) -> CandidateRow:
    """A candidate of round 1 that fooled the model and was accepted (a new id, a sentiment text,
    a writer who submitted it as themselves); ``fields`` override any column."""
    writer = fields.get("writer_id", "writer-1")
    values: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "round_id": 1,
        "inputs": {"text": "the soup was cold"},
        "writer_label": "negative",
        "writer_id": writer,
        "submitted_by": writer,
        "status": "accepted",
        "model_prediction": "positive",
        "model_probabilities": {"positive": 0.8, "negative": 0.1, "neutral": 0.1},
        "fooled": True,
        "submitted_at": SUBMITTED_AT,
    }
    values.update(fields)
    return CandidateRow(**values)
