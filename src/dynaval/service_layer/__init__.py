"""Use cases: short functions that take the app's services and do one thing each."""
