"""The service as a deployment gets it: the built wheel in a fresh virtual environment.

The wheel is built from a copy of the working tree, installed (with its dependencies) into a new
virtual environment, and the deployable (``service/``) runs from that environment in a folder outside
the repository, with no ``PYTHONPATH``: nothing can come from the checkout. It must create a round
against the session's real Label Studio with the labels of the top-level ``label_config/``, which the
wheel carries as ``dynaval/label_config/`` (``setup.py``'s build step).

Installing the dependencies (torch, transformers, pyarrow...) straight from the package indexes
takes over a minute, half of it pip resolving them against the indexes. So they are downloaded once
into a wheelhouse (``.cache/wheelhouse/<key>``, the key being the wheel's requirements, the torch pin
and the interpreter) and every install takes them from there with ``--no-index``: pip still
resolves every requirement the wheel declares (offline), and a changed requirement gets a new
wheelhouse. Byte code is left to the first import (``--no-compile``), which halves the install.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

import pytest
import requests

from dynaval.adapters.label_config import parse_task_type
from tests.fixtures.service import (
    LEAD_TOKEN,
    PSEUDONYM_SECRET,
    SIGNING_SECRET,
    WEBHOOK_SECRET,
    WRITER_TOKEN,
    free_port,
)
from tests.support.gunicorn_service import GunicornService
from tests.support.label_studio_server import LabelStudioServer

pytestmark = pytest.mark.labelstudio

REPO_ROOT = Path(__file__).resolve().parents[2]
TORCH = "torch==2.13.0"
"""Pinned in the same pip call as the wheel, as scripts/_lib.sh does: the machine's CPU wheel."""
WHEELHOUSE_ROOT = REPO_ROOT / ".cache" / "wheelhouse"
WHEELHOUSE_UNUSED_DAYS = 7
"""A wheelhouse no run has used for this long is removed (each is about 500 MB)."""
PIP_TIMEOUT_S = 900


def run(
    command: list[str | Path], what: str, *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``command``; a failure says what failed, in pip's (or Python's) own words."""
    done = subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=PIP_TIMEOUT_S
    )
    output = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"{what} failed (exit status {done.returncode}):\n{output}"
    return done


def source_files() -> list[Path]:
    """The files a fresh clone with this working tree's changes has: tracked and not ignored."""
    listed = run(
        ["git", "-C", REPO_ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        "listing the repository's files (git ls-files)",
    ).stdout
    return [Path(name) for name in listed.split("\0") if name and (REPO_ROOT / name).is_file()]


@dataclass(frozen=True)
class BuiltWheel:
    path: Path
    seconds: float


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> BuiltWheel:
    """``pip wheel`` of a copy of the working tree (a build in the checkout would reuse its build/
    folder, whose leftovers could land in the wheel and hide a file the build no longer ships)."""
    began = time.monotonic()
    tree = tmp_path_factory.mktemp("source")
    for name in source_files():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, tree / name)
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", out, tree], "building the wheel")
    (wheel,) = out.glob("dynaval-*.whl")
    return BuiltWheel(wheel, time.monotonic() - began)


def label_configs() -> dict[str, bytes]:
    configs = {p.name: p.read_bytes() for p in sorted((REPO_ROOT / "label_config").glob("*.xml"))}
    assert configs, "the repository has no label_config/*.xml"
    return configs


def test_the_wheel_carries_the_label_configs_and_no_development_tooling(built_wheel: BuiltWheel) -> None:
    with zipfile.ZipFile(built_wheel.path) as wheel:
        names = wheel.namelist()
        for name, content in label_configs().items():
            packaged = f"dynaval/label_config/{name}"
            assert packaged in names, f"{packaged} is missing from the wheel"
            assert wheel.read(packaged) == content, f"{packaged} differs from label_config/{name}"
        for seed in sorted((REPO_ROOT / "src" / "dynaval" / "model_builder" / "seed").glob("*.jsonl")):
            packaged = f"dynaval/model_builder/seed/{seed.name}"  # build-default's seed sets, NLI's too
            assert packaged in names, f"{packaged} is missing from the wheel"
    top_level = {name.split("/", 1)[0] for name in names}
    assert {t for t in top_level if not t.endswith(".dist-info")} == {"dynaval"}, top_level
    assert not [n for n in names if n.startswith("dynaval/devtools/")], "the wheel ships dynaval/devtools"
    assert not [n for n in names if "/tests/" in n or n.startswith("tests/")], "the wheel ships tests"


def requirements_of(wheel: Path) -> list[str]:
    """The wheel's own runtime requirements (``Requires-Dist`` without an extra), from its METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        message = Parser().parsestr(archive.read(metadata).decode())
    return sorted(r for r in message.get_all("Requires-Dist") or [] if "extra ==" not in r)


def wheelhouse_for(wheel: Path) -> Path:
    """The wheels of ``wheel``'s dependencies, downloaded once per set of requirements."""
    key_text = "\n".join([*requirements_of(wheel), TORCH, sys.version, platform.machine()])
    wheelhouse = WHEELHOUSE_ROOT / hashlib.sha256(key_text.encode()).hexdigest()[:16]
    WHEELHOUSE_ROOT.mkdir(parents=True, exist_ok=True)
    if not wheelhouse.is_dir():
        # Downloaded beside it and renamed at the end, so a run never sees half a wheelhouse (nor
        # do other checkouts sharing .cache/).
        partial = Path(tempfile.mkdtemp(prefix="partial-", dir=WHEELHOUSE_ROOT))
        try:
            # pip wheel, not pip download: a dependency published only as an sdist is built here,
            # so the offline install below never needs build tools from an index.
            run(
                [sys.executable, "-m", "pip", "wheel", "--wheel-dir", partial, TORCH, wheel],
                "fetching the wheel's dependencies",
            )
            for own in partial.glob("dynaval-*.whl"):
                own.unlink()
            with contextlib.suppress(OSError):  # another run renamed its own first: use that one
                partial.rename(wheelhouse)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    os.utime(wheelhouse)
    stale_before = time.time() - WHEELHOUSE_UNUSED_DAYS * 86400
    for other in WHEELHOUSE_ROOT.iterdir():
        if other != wheelhouse and other.stat().st_mtime < stale_before:
            shutil.rmtree(other, ignore_errors=True)
    return wheelhouse


@dataclass(frozen=True)
class Installed:
    python: Path
    site_packages: Path
    seconds: float


@pytest.fixture(scope="module")
def installed(built_wheel: BuiltWheel, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """A new virtual environment holding the wheel and its dependencies, nothing else."""
    began = time.monotonic()
    wheelhouse = wheelhouse_for(built_wheel.path)
    venv = tmp_path_factory.mktemp("installed") / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv], "creating the virtual environment")
    python = venv / "bin" / "python"
    # This environment's pip installs into the new one (--python), so the new one needs no pip of
    # its own. --no-compile: the service compiles what it imports; nothing else needs byte code.
    pip = [sys.executable, "-m", "pip", "--python", python]
    run(
        [*pip, "install", "--no-index", "--find-links", wheelhouse, "--no-compile", TORCH, built_wheel.path],
        "installing the wheel into a fresh virtual environment",
    )
    listed = run([*pip, "list", "--format=json"], "listing what was installed")
    names = {d["name"].lower() for d in json.loads(listed.stdout)}
    assert not {n for n in names if n.startswith("nvidia-")}, "a CUDA build of torch came in"
    site = run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], "site-packages")
    return Installed(python, Path(site.stdout.strip()), time.monotonic() - began)


@pytest.fixture
def deployment(tmp_path: Path) -> Path:
    """The deployable (service/) copied to a folder outside the repository, as a host would have it."""
    service_dir = tmp_path / "deploy" / "service"
    shutil.copytree(REPO_ROOT / "service", service_dir, ignore=shutil.ignore_patterns("__pycache__"))
    return service_dir


def service_environment(
    tmp_path: Path, server: LabelStudioServer, model_dir: Path, port: int
) -> dict[str, str]:
    """Only what a host sets: no DYNAVAL_* of the test run, no PYTHONPATH, no virtual environment."""
    kept = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ")
    env = {name: os.environ[name] for name in kept if name in os.environ}
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "DYNAVAL_DATA_DIR": str(tmp_path / "data"),
            "DYNAVAL_DATABASE_URL": f"sqlite:///{tmp_path / 'dynaval.sqlite3'}",
            "DYNAVAL_LABEL_STUDIO_URL": server.url,
            "DYNAVAL_LABEL_STUDIO_API_KEY": server.api_key,
            "DYNAVAL_PUBLIC_URL": f"http://127.0.0.1:{port}",
            "DYNAVAL_DEFAULT_MODEL_DIR": str(model_dir),
            "DYNAVAL_WRITER_TOKENS": WRITER_TOKEN,
            "DYNAVAL_LEAD_TOKENS": LEAD_TOKEN,
            "DYNAVAL_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "DYNAVAL_PSEUDONYM_SECRET": PSEUDONYM_SECRET,
            "DYNAVAL_SIGNING_SECRET": SIGNING_SECRET,
            "DYNAVAL_WORKERS": "1",
        }
    )
    return env


# Imports every module of the installed package (and the deployable's wsgi.py) the way the service
# does, then reports where each loaded module came from and where the settings find the configs.
WHERE_FROM = """
import importlib, json, pkgutil, sys
import dynaval
# alembic loads these by path, inside a migration (env.py runs one when imported)
skipped = ("dynaval.migrations.env", "dynaval.migrations.versions.")
for module in pkgutil.walk_packages(dynaval.__path__, "dynaval."):
    if not module.name.startswith(skipped):
        importlib.import_module(module.name)
import wsgi
from dynaval.settings import Settings
files = sorted({m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)})
print(json.dumps({"files": files, "label_config_dir": str(Settings().resolved_label_config_dir)}))
"""


def test_the_installed_wheel_creates_a_round_without_the_repository(
    built_wheel: BuiltWheel,
    installed: Installed,
    deployment: Path,
    label_studio_server: LabelStudioServer,
    tiny_model_dir: Path,
    tmp_path: Path,
) -> None:
    port = free_port()
    env = service_environment(tmp_path, label_studio_server, tiny_model_dir, port)

    began = time.monotonic()
    imported = run([installed.python, "-c", WHERE_FROM], "importing the package", cwd=deployment, env=env)
    report = json.loads(imported.stdout)
    from_repo = [f for f in report["files"] if Path(f).resolve().is_relative_to(REPO_ROOT)]
    assert not from_repo, f"the installed package loaded modules from the repository: {from_repo}"
    config_dir = Path(report["label_config_dir"])
    assert config_dir == installed.site_packages / "dynaval" / "label_config", config_dir
    imported_s = time.monotonic() - began

    began = time.monotonic()
    log = tmp_path / "gunicorn.log"
    with GunicornService(env, port, log, python=installed.python, service_dir=deployment) as service:
        started_s = time.monotonic() - began
        created = requests.post(
            service.url + "/api/rounds",
            json={"name": "from the installed wheel", "task": "sentiment"},
            headers={"Authorization": f"Bearer {LEAD_TOKEN}"},
            timeout=120,
        )
        assert created.status_code == 201, f"POST /api/rounds answered {created.status_code}: {created.text}"
        body = created.json()
    served_s = time.monotonic() - began
    xml = label_configs()["sentiment.xml"].decode()
    assert body["labels"] == list(parse_task_type("sentiment", xml).labels)
    project = label_studio_server.client.projects.get(id=body["label_studio_project_id"])
    assert project.label_config.strip() == xml.strip()  # Label Studio drops the final newline
    print(
        f"\ninstalled wheel: build {built_wheel.seconds:.0f} s, install {installed.seconds:.0f} s, "
        f"importing every module {imported_s:.0f} s, "
        f"service start {started_s:.0f} s, then round {served_s - started_s:.0f} s"
    )
