"""The deployed service for tests: ``gunicorn -c service/gunicorn.conf.py`` as a child process."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"


def _die_with_parent() -> None:  # runs in the child between fork and exec
    """Linux: SIGTERM gunicorn when the test process dies without cleaning up."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class GunicornService:
    """The service under gunicorn on ``127.0.0.1:port``, configured by ``env`` (``DYNAVAL_*``).

    Stopped by its PID (SIGTERM, then SIGKILL), also when the ``with`` block fails.
    """

    def __init__(
        self,
        env: dict[str, str],
        port: int,
        log_path: Path,
        *,
        python: Path | None = None,
        service_dir: Path = REPO_ROOT / "service",
    ) -> None:
        """``python``: the interpreter whose environment runs gunicorn (default: this one's);
        ``service_dir``: the deployable's folder (gunicorn.conf.py, wsgi.py), whose parent is the
        working directory."""
        self.url = f"http://{HOST}:{port}"
        self.log_path = log_path
        self._python = str(python) if python is not None else sys.executable
        self._service_dir = service_dir
        self._env = {**env, "DYNAVAL_BIND": f"{HOST}:{port}"}
        self._log: IO[bytes] | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 180.0) -> Self:
        self._log = self.log_path.open("ab")
        self._process = subprocess.Popen(
            [self._python, "-m", "gunicorn", "-c", str(self._service_dir / "gunicorn.conf.py")],
            cwd=self._service_dir.parent,
            env=self._env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        deadline = time.monotonic() + timeout_s
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"gunicorn exited at start:\n{self.log_tail()}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"gunicorn did not answer /health in {timeout_s:.0f} s:\n{self.log_tail()}"
                )
            time.sleep(0.25)

    def stop(self, timeout_s: float = 30.0) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=timeout_s)
        if self._log is not None:
            self._log.close()
            self._log = None

    def worker_pids(self) -> list[int]:
        """The PIDs of gunicorn's HTTP worker processes now: the master's children forked from it
        (the same command line), from /proc."""
        master = self._master_pid()
        if master is None:
            return []
        return [pid for pid in _children(master) if _command_line(pid) == _command_line(master)]

    def worker_process_pids(self) -> list[int]:
        """The PIDs of the ``dynaval worker`` processes the master started (the queue's consumer)."""
        master = self._master_pid()
        if master is None:
            return []
        return [
            pid for pid in _children(master) if b"dynaval.entrypoints.cli\x00worker" in _command_line(pid)
        ]

    def _master_pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _children(parent: int) -> list[int]:
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == parent:
                children.append(int(stat.parent.name))
    return sorted(children)


def _command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
