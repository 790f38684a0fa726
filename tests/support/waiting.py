"""Waiting in tests for what the service does in the background (pushes, verification, escalations)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    """Poll ``check`` every 0.1 s until it is true; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def wait_verified(call: Callable[..., Any], round_id: int, timeout_s: float = 60.0) -> None:
    """Wait until every task of the round that a webhook named was read back from Label Studio.

    Label Studio sends its webhook inside the request that changed an annotation, so once that
    request returned, the round's backlog (``GET /api/rounds/<id>`` ``verification``) holds the task
    until the service has read it back and applied what Label Studio has. ``call(method, path)`` is
    a lead's call to the service (``LiveService.call``).
    """

    def settled() -> bool:
        summary = call("GET", f"/api/rounds/{round_id}")
        assert summary.status_code == 200, summary.text
        return int(summary.json()["verification"]["tasks_waiting"]) == 0

    wait_for(f"round {round_id}'s webhooks read back from Label Studio", settled, timeout_s)
