"""The dashboard's chart data: plain lists the templates hand to Chart.js."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dynaval.service_layer.dashboard import AnnotatorsView, RoundFigures


def rounds_chart(figures: Sequence[RoundFigures]) -> dict[str, Any]:
    """The rounds chart's data: alpha with its interval and VMER, one point per round."""
    return {
        "labels": [f"#{f.id} {f.name}" for f in figures],
        "alpha": [f.alpha for f in figures],
        "ci_low": [f.ci_low for f in figures],
        "ci_high": [f.ci_high for f in figures],
        "vmer": [f.vmer for f in figures],
    }


def annotators_chart(view: AnnotatorsView) -> dict[str, Any]:
    """The annotators chart's data: agreement with the others and gold accuracy, per annotator."""
    return {
        "labels": [a["annotator"][:18] + "…" for a in view.annotators],
        "agreement": [a["agreement_with_others"] for a in view.annotators],
        "gold_accuracy": [a["gold_accuracy"] for a in view.annotators],
    }
