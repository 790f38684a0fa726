"""Pseudonymous identities and signed model predictions.

Both are keyed HMAC-SHA256: without the secret a pseudonym cannot be reversed or recomputed
from a guessed username, and a changed prediction no longer matches its signature.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping


def pseudonym(secret: str, kind: str, raw_id: str) -> str:
    """A stable pseudonymous id such as ``annotator_3f9c...`` for one raw identity."""
    digest = hmac.new(secret.encode(), f"{kind}:{raw_id}".encode(), hashlib.sha256).hexdigest()
    return f"{kind}_{digest[:32]}"


def writer_pseudonym(secret: str, writer_id: str, collected_by: str | None) -> str:
    """The pseudonymous writer of a candidate.

    A writer's own token names them (``writer_id`` is the token's name). A collector names writers
    of its own front end, which only it vouches for, so their ids are read within the collector's
    name: a collector that names ``ana`` gives ``ana`` a pseudonym of its own, never the one of the
    writer whose token is named ``ana``. Token names hold no ``:``, so no collector's writer can
    take a direct writer's pseudonym.
    """
    raw_id = writer_id if collected_by is None else f"{collected_by}:{writer_id}"
    return pseudonym(secret, "writer", raw_id)


def _prediction_message(
    model_hash: str, inputs: Mapping[str, str], prediction: str, probabilities: Mapping[str, float]
) -> bytes:
    payload = {
        "model_hash": model_hash,
        "inputs": dict(sorted(inputs.items())),
        "prediction": prediction,
        "probabilities": {label: round(p, 6) for label, p in sorted(probabilities.items())},
    }
    return json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def sign_prediction(
    secret: str,
    model_hash: str,
    inputs: Mapping[str, str],
    prediction: str,
    probabilities: Mapping[str, float],
) -> str:
    """HMAC over the model hash, the input fields and the model's answer (label and probabilities).

    Keys are sorted before signing, so the order of ``inputs`` or ``probabilities`` never matters.
    """
    message = _prediction_message(model_hash, inputs, prediction, probabilities)
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify_prediction(
    secret: str,
    signature: str,
    model_hash: str,
    inputs: Mapping[str, str],
    prediction: str,
    probabilities: Mapping[str, float],
) -> bool:
    expected = sign_prediction(secret, model_hash, inputs, prediction, probabilities)
    return hmac.compare_digest(expected, signature)
