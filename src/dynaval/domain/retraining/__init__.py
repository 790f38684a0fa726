"""Retraining by policy: when a task type's model is trained again, on what, and what may ship."""
