"""The project's scripts run as a user runs them, in a child process, offline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.fixtures.service import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_script(name: str, *args: str, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    """``scripts/<name>`` with ``--exit`` and free ports for the service and Label Studio, then
    ``args``; what it printed, and how it ended."""
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / name), "--exit",
         "--port", str(free_port()), "--label-studio-port", str(free_port()), *args],
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )  # fmt: skip
