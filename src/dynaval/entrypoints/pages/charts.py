"""The dashboard's chart data: plain lists the templates hand to Chart.js."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dynaval.service_layer.dashboard.views import AnnotatorsView, RoundFigures
from dynaval.service_layer.health.round_health import HealthView

CLUSTERS_CHARTED = 20


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


def health_chart(view: HealthView) -> dict[str, Any]:
    """The Health page's charts: the round's shares and rates, its largest clusters' sizes, and
    MER, VMER, alpha and distinct-2 across the rounds of its task type."""
    health = view.health
    shares = health.writers.top
    varied = health.diversity.figures()  # distinct-n of a text round; an image round's perceptual figures
    rate_without = health.fooled_rate_without_repeats
    return {
        "round": {
            "labels": [
                *(f"top {k} writers" for k in shares),
                *(label.lower() for label, _key, _value in varied),
                "fooled rate",
                "fooled, each pattern once",
            ],
            "values": [
                *shares.values(),
                *(value for _l, _k, value in varied),
                health.fooled_rate,
                rate_without,
            ],
            "groups": [*("writers" for _ in shares), *("diversity" for _ in varied), "fooled", "fooled"],
        },
        "clusters": {
            "labels": [c.first_id[:8] for c in health.clusters[:CLUSTERS_CHARTED]],
            "sizes": [c.size for c in health.clusters[:CLUSTERS_CHARTED]],
            "fooled": [c.fooled for c in health.clusters[:CLUSTERS_CHARTED]],
        },
        "trend": {
            "labels": [f"#{t.point.round_id} {t.point.name}" for t in view.trend],
            "mer": [t.point.mer for t in view.trend],
            "vmer": [t.point.vmer for t in view.trend],
            "alpha": [t.point.alpha for t in view.trend],
            "diversity": [t.point.diversity.value for t in view.trend],
            "inflation": [t.possible_score_inflation for t in view.trend],
        },
    }
