"""Waiting in tests for what the service does in the background (pushes, escalations)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    """Poll ``check`` every 0.1 s until it is true; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
