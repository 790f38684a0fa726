"""dynaval: validation of adversarial examples with several human annotators."""

__version__ = "0.1.0"
