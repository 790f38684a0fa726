"""Run a real Label Studio server on 127.0.0.1, for the test suite, the demo and the benchmarks.

Development tooling: it lives beside the tests, outside the installed ``dynaval`` package.

Label Studio lives in its own virtual environment (``scripts/_lib.sh`` installs it under
``.cache/label-studio/venv-<version>``; ``DYNAVAL_LABEL_STUDIO_VENV`` points elsewhere). A fresh data
directory needs about a minute of database migrations, so the first start builds a migrated
*template* data directory once (``.cache/label-studio/template-<version>``) and every later start
copies it, which takes a few seconds.

Whatever Label Studio writes when it creates its organisation (the admin user, its legacy API token)
is part of the template, so the admin credentials are fixed per template: the default credentials
use ``template-<version>``, any other set of credentials gets its own ``template-<version>-<hash>``.

Typical use::

    with LabelStudioServer(data_dir=tmp_path / "ls") as server:
        annotators = server.create_annotators(3)
        client = server.client  # label_studio_sdk.LabelStudio
        server.annotate(task_id, annotators[0].id, "positive")
"""

from __future__ import annotations

import atexit
import ctypes
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Self

import httpx

from dynaval.adapters.label_config import parse_task_type
from dynaval.domain.task_type import TaskType

if TYPE_CHECKING:
    from label_studio_sdk import LabelStudio

logger = logging.getLogger(__name__)

LABEL_STUDIO_VERSION = "1.23.2"
VENV_ENV_VAR = "DYNAVAL_LABEL_STUDIO_VENV"
HOST = "127.0.0.1"

DEFAULT_ADMIN_EMAIL = "admin@dynaval.local"
DEFAULT_ADMIN_USERNAME = "admin"
DEFAULT_ADMIN_PASSWORD = "dynaval-admin-password"
DEFAULT_API_TOKEN = "dynaval-dev-legacy-api-token"
DEFAULT_ANNOTATOR_PASSWORD = "label-the-sentiment-2024"
DEFAULT_ANNOTATOR_DOMAIN = "dynaval.local"

TEMPLATE_META = "dynaval-template.json"
LOG_NAME = "label-studio.log"
DATABASE_NAME = "label_studio.sqlite3"

# Only these variables of the caller's environment reach Label Studio: its settings read many
# unprefixed names (HOST, PORT, DJANGO_DB, POSTGRE_*, DATABASE_NAME, ...) and PYTHONPATH could shadow
# its modules.
_PASS_THROUGH_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ", "SSL_CERT_FILE")
_STARTED_AT = re.compile(r"Starting development server at https?://[^\s/]+:(\d+)/")
_PR_SET_PDEATHSIG = 1


class LabelStudioServerError(RuntimeError):
    """Label Studio is missing, could not start, or refused a development-tool call."""


@dataclass(frozen=True)
class Annotator:
    """A real Label Studio user of the admin's organisation (can also log in through the UI)."""

    id: int
    email: str
    username: str
    password: str


def repo_root() -> Path:
    """The repository this module belongs to (``tests/support`` is two levels down)."""
    return Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    return repo_root() / ".cache" / "label-studio"


def default_venv() -> Path:
    """``$DYNAVAL_LABEL_STUDIO_VENV``, else ``<repo>/.cache/label-studio/venv-<version>``."""
    from_env = os.environ.get(VENV_ENV_VAR, "").strip()
    if from_env:
        return Path(from_env).expanduser()
    return cache_dir() / f"venv-{LABEL_STUDIO_VERSION}"


def installed_version(venv: Path) -> str | None:
    """The Label Studio version installed in ``venv`` (read from its dist-info, without starting it)."""
    for info in sorted(venv.glob("lib/python*/site-packages/label_studio-*.dist-info")):
        return info.name.removeprefix("label_studio-").removesuffix(".dist-info")
    return None


def port_is_free(port: int, host: str = HOST) -> bool:
    """True if nothing listens on ``host:port`` and we may bind it.

    Label Studio itself probes ``localhost:port`` and silently moves to ``port + 1`` when busy.
    """
    for probe_host in {host, "localhost"}:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.settimeout(0.5)
            try:
                if probe.connect_ex((probe_host, port)) == 0:
                    return False
            except OSError:
                pass
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As a server binds: connections of a stopped server left in TIME_WAIT do not count.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _wait_port_free(port: int, timeout_s: float) -> bool:
    """Wait a little for a port a stopped server has just released (a restart on the same port)."""
    deadline = time.monotonic() + timeout_s
    while not port_is_free(port):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def free_port(host: str = HOST) -> int:
    """A port that is free on ``host`` right now."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port_is_free(port, host):
            return port
    raise LabelStudioServerError(f"found no free port on {host}")


def _fingerprint(email: str, username: str, password: str, token: str) -> str:
    return hashlib.sha256("\0".join((email, username, password, token)).encode()).hexdigest()


def _log_tail(path: Path, *, offset: int = 0, lines: int = 40) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: SIGTERM the server when the process that started it dies (a crashed test run)."""
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


class LabelStudioServer:
    """One Label Studio process with its own data directory, bound to 127.0.0.1.

    ``start()`` (or ``with``) copies the migrated template into ``data_dir`` unless ``data_dir``
    already holds a Label Studio database (then it is reused: a demo can be restarted), starts
    ``label-studio start`` and waits until ``GET /health`` answers ``{"status": "UP"}``.
    """

    def __init__(
        self,
        data_dir: Path | str,
        *,
        venv: Path | str | None = None,
        port: int | None = None,
        admin_email: str = DEFAULT_ADMIN_EMAIL,
        admin_username: str = DEFAULT_ADMIN_USERNAME,
        admin_password: str = DEFAULT_ADMIN_PASSWORD,
        api_token: str = DEFAULT_API_TOKEN,
        template_dir: Path | str | None = None,
        task_type: TaskType | None = None,
        startup_timeout_s: float = 120.0,
        template_timeout_s: float = 420.0,
        log_level: str = "WARNING",
        die_with_parent: bool = True,
    ) -> None:
        if len(api_token) <= 5:
            raise ValueError("Label Studio ignores legacy API tokens of 5 characters or fewer")
        self._data_dir = Path(data_dir).expanduser().resolve()
        self._venv = Path(venv).expanduser() if venv is not None else default_venv()
        self._requested_port = port
        self._port: int | None = None
        self._admin_email = admin_email
        self._admin_username = admin_username
        self._admin_password = admin_password
        self._api_token = api_token
        self._fingerprint = _fingerprint(admin_email, admin_username, admin_password, api_token)
        self._template_dir = Path(template_dir).expanduser() if template_dir is not None else None
        self._task_type = task_type
        self._startup_timeout_s = startup_timeout_s
        self._template_timeout_s = template_timeout_s
        self._log_level = log_level
        self._die_with_parent = die_with_parent and sys.platform.startswith("linux")
        self._process: subprocess.Popen[bytes] | None = None
        self._log_handle: IO[bytes] | None = None
        self._admin_user_id: int | None = None
        self._client: LabelStudio | None = None
        self._flag_values: dict[str, str] = {}
        # Seconds the last start() took (template creation included, when it ran).
        self.startup_s: float | None = None

    # ------------------------------------------------------------------ properties

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    @property
    def venv(self) -> Path:
        return self._venv

    @property
    def log_path(self) -> Path:
        return self._data_dir / LOG_NAME

    @property
    def port(self) -> int:
        if self._port is None:
            raise LabelStudioServerError("Label Studio is not started")
        return self._port

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def api_key(self) -> str:
        """The admin's legacy token: ``LabelStudio(base_url=server.url, api_key=server.api_key)``."""
        return self._api_token

    @property
    def admin_email(self) -> str:
        return self._admin_email

    @property
    def admin_username(self) -> str:
        return self._admin_username

    @property
    def admin_password(self) -> str:
        return self._admin_password

    @property
    def admin_user_id(self) -> int:
        if self._admin_user_id is None:
            raise LabelStudioServerError("Label Studio is not started")
        return self._admin_user_id

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def template_dir(self) -> Path:
        if self._template_dir is not None:
            return self._template_dir
        default = _fingerprint(
            DEFAULT_ADMIN_EMAIL, DEFAULT_ADMIN_USERNAME, DEFAULT_ADMIN_PASSWORD, DEFAULT_API_TOKEN
        )
        suffix = "" if self._fingerprint == default else f"-{self._fingerprint[:10]}"
        return cache_dir() / f"template-{self._version()}{suffix}"

    @property
    def task_type(self) -> TaskType:
        """The task type ``annotate`` builds results for (default: ``label_config/sentiment.xml``)."""
        if self._task_type is None:
            path = repo_root() / "label_config" / "sentiment.xml"
            if not path.is_file():
                raise LabelStudioServerError(f"no labelling config at {path}; pass task_type=")
            self._task_type = parse_task_type("sentiment", path.read_text(encoding="utf-8"))
        return self._task_type

    @property
    def client(self) -> LabelStudio:
        """A ``label_studio_sdk.LabelStudio`` client authenticated as the admin."""
        if self._client is None:
            from label_studio_sdk import LabelStudio

            self._client = LabelStudio(base_url=self.url, api_key=self.api_key, timeout=60.0)
        return self._client

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        """Start the server (building the template first if needed) and wait until it is healthy."""
        if self.running:
            return self
        began = time.monotonic()
        self._check_venv()
        if not (self._data_dir / DATABASE_NAME).is_file():
            template = self.ensure_template()
            self._data_dir.mkdir(parents=True, exist_ok=True)
            shutil.copytree(template, self._data_dir, dirs_exist_ok=True)
        port = self._requested_port
        if port is None:
            port = free_port()
        elif not _wait_port_free(port, timeout_s=10.0):
            raise LabelStudioServerError(
                f"port {port} on {HOST} is busy (Label Studio would move to {port + 1})"
            )
        self._port = port
        self._client = None
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._log_handle = self.log_path.open("ab")
        self._process = self._spawn(self._data_dir, port, self._log_handle)
        atexit.register(self.stop)
        try:
            self._wait_healthy(self._process, port, self.log_path, log_offset, self._startup_timeout_s)
            self._admin_user_id = self._whoami(port)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - began
        logger.info("Label Studio is up at %s after %.1f s (pid %s)", self.url, self.startup_s, self.pid)
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop the server by its PID: SIGTERM, wait, then SIGKILL. Safe to call twice."""
        process, self._process = self._process, None
        atexit.unregister(self.stop)
        if process is not None:
            _terminate(process, timeout_s)
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None
        self._client = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def ensure_template(self) -> Path:
        """Return the migrated template data directory, building it once (about a minute)."""
        template = self.template_dir
        self._check_venv()
        with _file_lock(template.with_name(template.name + ".lock")):
            if self._template_matches(template):
                return template
            began = time.monotonic()
            logger.warning(
                "building the Label Studio template data directory %s (about a minute, once)", template
            )
            building = template.with_name(f"{template.name}.building-{os.getpid()}")
            shutil.rmtree(building, ignore_errors=True)
            building.mkdir(parents=True)
            port = free_port()
            log_path = building / LOG_NAME
            kept_log = template.with_name(f"{template.name}.build.log")
            try:
                with log_path.open("ab") as log_handle:
                    process = self._spawn(building, port, log_handle)
                    try:
                        self._wait_healthy(process, port, log_path, 0, self._template_timeout_s)
                        admin_id = self._whoami(port)
                        self._set_admin_username(port, admin_id)
                    finally:
                        _terminate(process, 30.0)
            finally:
                # The build log stays next to the template, for whoever must debug a failed build.
                if log_path.exists():
                    shutil.move(str(log_path), kept_log)
            try:
                meta = {
                    "label_studio_version": self._version(),
                    "admin_user_id": admin_id,
                    "admin_email": self._admin_email,
                    "admin_username": self._admin_username,
                    "credentials_sha256": self._fingerprint,
                }
                (building / TEMPLATE_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
                shutil.rmtree(template, ignore_errors=True)
                os.replace(building, template)
            finally:
                shutil.rmtree(building, ignore_errors=True)
            logger.warning("Label Studio template built in %.1f s", time.monotonic() - began)
            return template

    # ------------------------------------------------------------------ users and annotations

    def create_annotators(
        self,
        n: int,
        *,
        prefix: str = "annotator",
        domain: str = DEFAULT_ANNOTATOR_DOMAIN,
        password: str = DEFAULT_ANNOTATOR_PASSWORD,
    ) -> list[Annotator]:
        """Create ``n`` new users in the admin's organisation, through Label Studio's own sign-up form
        with the organisation's invite token (so each one has a password, an active organisation and
        can log in through the UI). Emails are ``<prefix><k>@<domain>`` with the next free ``k``."""
        if n < 0:
            raise ValueError("n must be >= 0")
        headers = {"Authorization": f"Token {self.api_key}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=30.0) as admin:
            existing = {str(u.get("email", "")).lower() for u in _json_list(admin.get("/api/users/"))}
            invite = admin.get("/api/invite")
            _raise_for(invite, "read the organisation's invite token")
            invite_token = str(invite.json()["token"])
        annotators: list[Annotator] = []
        k = 0
        while len(annotators) < n:
            k += 1
            email = f"{prefix}{k}@{domain}".lower()
            if email in existing:
                continue
            annotators.append(self._sign_up(email, password, invite_token))
        return annotators

    def log_in(self, annotator: Annotator) -> httpx.Client:
        """A session logged in through Label Studio's login form, as the annotator's browser has
        it: whatever the annotator can read or do through the API, this client can. The caller closes
        it; it is open already, so do not enter it with ``with``."""
        session = httpx.Client(base_url=self.url, timeout=30.0, follow_redirects=False)
        try:
            form = session.get("/user/login/")
            _raise_for(form, "open the login form")
            csrf = session.cookies.get("csrftoken")
            if not csrf:
                raise LabelStudioServerError("the login form set no CSRF cookie")
            response = session.post(
                "/user/login/",
                data={"email": annotator.email, "password": annotator.password, "csrfmiddlewaretoken": csrf},
                headers={"Referer": f"{self.url}/user/login/"},
            )
            if response.status_code != 302:
                raise LabelStudioServerError(
                    f"{annotator.email} could not log in (HTTP {response.status_code})"
                )
        except BaseException:
            session.close()
            raise
        return session

    def annotate(
        self,
        task_id: int,
        annotator_id: int | str | Annotator,
        label: str | None,
        *,
        flag_reason: str | None = None,
        cancelled: bool = False,
        lead_time_s: float | None = None,
        task_type: TaskType | None = None,
    ) -> int:
        """Create one annotation of ``task_id`` as ``annotator_id`` and return its id.

        ``flag_reason`` not None ticks the flag control (with that reason text when non-empty).
        ``cancelled=True`` makes a skipped annotation (``was_cancelled``); its result holds the
        label only if one is given. Fires ANNOTATION_CREATED webhooks like an annotator would.
        """
        result = self.annotation_result(label, flag_reason=flag_reason, task_type=task_type)
        kwargs: dict[str, Any] = {"result": result, "completed_by": _user_id(annotator_id)}
        if cancelled:
            kwargs["was_cancelled"] = True
        if lead_time_s is not None:
            kwargs["lead_time"] = lead_time_s
        annotation = self.client.annotations.create(id=task_id, **kwargs)
        return int(annotation.id)

    def update_annotation(
        self,
        annotation_id: int,
        label: str | None,
        *,
        flag_reason: str | None = None,
        task_type: TaskType | None = None,
    ) -> None:
        """Replace an annotation's result (fires ANNOTATION_UPDATED)."""
        result = self.annotation_result(label, flag_reason=flag_reason, task_type=task_type)
        self.client.annotations.update(id=annotation_id, result=result)

    def delete_annotation(self, annotation_id: int) -> None:
        """Delete an annotation (fires ANNOTATIONS_DELETED with only its id)."""
        self.client.annotations.delete(id=annotation_id)

    def annotation_result(
        self, label: str | None, *, flag_reason: str | None = None, task_type: TaskType | None = None
    ) -> list[dict[str, Any]]:
        """The ``result`` list a Label Studio annotator would submit for this label/flag/reason."""
        tt = task_type or self.task_type
        to_name = tt.object_name
        result: list[dict[str, Any]] = []
        if label is not None:
            if label not in tt.labels:
                raise ValueError(f"label {label!r} is not one of {tt.labels}")
            result.append(_region(tt.label_control, to_name, "choices", {"choices": [label]}))
        if flag_reason is not None:
            if tt.flag_control is None:
                raise ValueError(f"task type {tt.name} has no flag control")
            flag_value = self._flag_value(tt)
            result.append(_region(tt.flag_control, to_name, "choices", {"choices": [flag_value]}))
            if flag_reason and tt.reason_control is not None:
                result.append(_region(tt.reason_control, to_name, "textarea", {"text": [flag_reason]}))
        return result

    # ------------------------------------------------------------------ internals

    def _version(self) -> str:
        return installed_version(self._venv) or LABEL_STUDIO_VERSION

    def _check_venv(self) -> None:
        binary = self._venv / "bin" / "label-studio"
        if not binary.is_file() or not (self._venv / ".dynaval-installed").is_file():
            raise LabelStudioServerError(
                f"Label Studio {LABEL_STUDIO_VERSION} is not installed at {self._venv}: run scripts/test or "
                f"scripts/demo once (they install it there), or set {VENV_ENV_VAR} to a virtual environment "
                f"that has label-studio=={LABEL_STUDIO_VERSION}"
            )

    def _template_matches(self, template: Path) -> bool:
        try:
            meta = json.loads((template / TEMPLATE_META).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return (
            isinstance(meta, dict)
            and meta.get("credentials_sha256") == self._fingerprint
            and meta.get("label_studio_version") == self._version()
            and (template / DATABASE_NAME).is_file()
        )

    def _environment(self, data_dir: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in _PASS_THROUGH_ENV}
        env.setdefault("HOME", str(data_dir))
        env["PATH"] = os.pathsep.join(p for p in (str(self._venv / "bin"), env.get("PATH", "")) if p)
        env.update(
            {
                "LABEL_STUDIO_BASE_DATA_DIR": str(data_dir),
                "LABEL_STUDIO_USERNAME": self._admin_email,
                "LABEL_STUDIO_PASSWORD": self._admin_password,
                "LABEL_STUDIO_USER_TOKEN": self._api_token,
                "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
                "SSRF_PROTECTION_ENABLED": "false",
                "LATEST_VERSION_CHECK": "false",
                "COLLECT_ANALYTICS": "false",
                "SENTRY_DSN": "",
                "FRONTEND_SENTRY_DSN": "",
                "LOG_LEVEL": self._log_level,
                "PYTHONUNBUFFERED": "1",
            }
        )
        return env

    def _spawn(self, data_dir: Path, port: int, log: IO[bytes]) -> subprocess.Popen[bytes]:
        command = [
            str(self._venv / "bin" / "label-studio"),
            "start",
            "--no-browser",
            "--internal-host",
            HOST,
            "--port",
            str(port),
        ]
        preexec: Callable[[], None] | None = _die_with_parent if self._die_with_parent else None
        return subprocess.Popen(
            command,
            cwd=data_dir,
            env=self._environment(data_dir),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=preexec,
        )

    def _wait_healthy(
        self, process: subprocess.Popen[bytes], port: int, log_path: Path, log_offset: int, timeout_s: float
    ) -> None:
        deadline = time.monotonic() + timeout_s
        health = f"http://{HOST}:{port}/health"
        while True:
            code = process.poll()
            if code is not None:
                raise LabelStudioServerError(
                    f"Label Studio exited with code {code} before it was healthy; "
                    f"last lines of {log_path}:\n{_log_tail(log_path, offset=log_offset)}"
                )
            try:
                response = httpx.get(health, timeout=2.0)
                if response.status_code == 200 and response.json() == {"status": "UP"}:
                    break
            except (httpx.HTTPError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise LabelStudioServerError(
                    f"Label Studio did not answer {health} within {timeout_s:.0f} s; "
                    f"last lines of {log_path}:\n{_log_tail(log_path, offset=log_offset)}"
                )
            time.sleep(0.25)
        # Label Studio moves to port + 1 silently when the port is busy: make sure the process that
        # answered is ours.
        log_text = _log_tail(log_path, offset=log_offset, lines=100_000)
        started = _STARTED_AT.findall(log_text)
        if (started and int(started[-1]) != port) or f"Port {port} is in use" in log_text:
            raise LabelStudioServerError(
                f"port {port} was taken while Label Studio started (it moved elsewhere); try again"
            )

    def _whoami(self, port: int) -> int:
        response = httpx.get(
            f"http://{HOST}:{port}/api/current-user/whoami",
            headers={"Authorization": f"Token {self._api_token}"},
            timeout=30.0,
        )
        if response.status_code != 200:
            raise LabelStudioServerError(
                f"Label Studio refused the admin's legacy API token (HTTP {response.status_code}); "
                f"is the data directory {self._data_dir} from another template? Delete it and retry."
            )
        body = response.json()
        if str(body.get("email", "")).lower() != self._admin_email.lower():
            raise LabelStudioServerError(
                f"the API token belongs to {body.get('email')!r}, not {self._admin_email!r}"
            )
        return int(body["id"])

    def _set_admin_username(self, port: int, admin_id: int) -> None:
        response = httpx.patch(
            f"http://{HOST}:{port}/api/users/{admin_id}/",
            headers={"Authorization": f"Token {self._api_token}"},
            json={"username": self._admin_username},
            timeout=30.0,
        )
        _raise_for(response, "set the admin's username")

    def _sign_up(self, email: str, password: str, invite_token: str) -> Annotator:
        with httpx.Client(base_url=self.url, timeout=30.0, follow_redirects=False) as session:
            form = session.get("/user/signup/", params={"token": invite_token})
            _raise_for(form, "open the sign-up form")
            csrf = session.cookies.get("csrftoken")
            if not csrf:
                raise LabelStudioServerError("the sign-up form set no CSRF cookie")
            response = session.post(
                "/user/signup/",
                params={"token": invite_token},
                data={"email": email, "password": password, "csrfmiddlewaretoken": csrf},
                headers={"Referer": f"{self.url}/user/signup/"},
            )
            if response.status_code != 302:
                errors = re.findall(r'class="[^"]*error[^"]*"[^>]*>([^<]+)<', response.text)
                raise LabelStudioServerError(
                    f"Label Studio refused to sign up {email} (HTTP {response.status_code}): "
                    f"{'; '.join(e.strip() for e in errors if e.strip()) or 'see its log'}"
                )
            who = session.get("/api/current-user/whoami")
            _raise_for(who, f"read the new user {email}")
            body = who.json()
        return Annotator(
            id=int(body["id"]), email=email, username=str(body.get("username") or ""), password=password
        )

    def _flag_value(self, task_type: TaskType) -> str:
        if task_type.name not in self._flag_values:
            assert task_type.flag_control is not None
            from label_studio_sdk.label_interface import LabelInterface

            control = LabelInterface(task_type.label_config).get_control(task_type.flag_control)
            labels: Sequence[str] = control.labels or ()
            if not labels:
                raise ValueError(f"the flag control of {task_type.name} has no <Choice>")
            self._flag_values[task_type.name] = str(labels[0])
        return self._flag_values[task_type.name]


def _region(from_name: str, to_name: str, kind: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"from_name": from_name, "to_name": to_name, "type": kind, "value": value, "origin": "manual"}


def _user_id(who: int | str | Annotator) -> int:
    return who.id if isinstance(who, Annotator) else int(who)


def _terminate(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout_s)


def _raise_for(response: httpx.Response, what: str) -> None:
    if response.status_code >= 400:
        raise LabelStudioServerError(
            f"Label Studio refused to {what} (HTTP {response.status_code}): {response.text[:300]}"
        )


def _json_list(response: httpx.Response) -> list[dict[str, Any]]:
    _raise_for(response, "list users")
    body = response.json()
    items = body.get("results", []) if isinstance(body, dict) else body
    return [item for item in items if isinstance(item, dict)]
