"""Retraining by policy: its use cases (writers placed at their first accepted example, so far)."""
