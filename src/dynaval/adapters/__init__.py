"""Adapters: one per outside system (Label Studio, the model, the database)."""
