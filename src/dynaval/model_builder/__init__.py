"""Building the models dynaval ships with (the default sentiment and NLI models) from packaged seed data."""

from dynaval.model_builder.default_model import (
    NLI_SEED_LABELS,
    SEED_LABELS,
    TASKS,
    BuildReport,
    LabelledPair,
    LabelledText,
    build_default_model,
    load_nli_seed,
    load_seed,
    load_task_seed,
)

__all__ = [
    "NLI_SEED_LABELS",
    "SEED_LABELS",
    "TASKS",
    "BuildReport",
    "LabelledPair",
    "LabelledText",
    "build_default_model",
    "load_nli_seed",
    "load_seed",
    "load_task_seed",
]
