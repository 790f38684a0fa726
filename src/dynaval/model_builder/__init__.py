"""Building the models dynaval ships with (the default sentiment model) from packaged seed data."""

from dynaval.model_builder.default_model import (
    SEED_LABELS,
    BuildReport,
    LabelledText,
    build_default_model,
    load_seed,
)

__all__ = ["SEED_LABELS", "BuildReport", "LabelledText", "build_default_model", "load_seed"]
