"""Releases made by an earlier dynaval still verify under this one.

``tests/data/releases/format-<N>/`` holds small releases written once by the dynaval of their day
(``tests/support/release_fixtures.py``) and kept unchanged since, as researchers keep theirs.
``verify`` makes each card again and hashes the canonical rows again, so a change to the card's
wording, the canonical row or the layout breaks these tests: such a change is a new format, and the
code reading the old one stays. A release of a format newer than this dynaval reads is refused with
one line saying so, not a list of failures that look like tampering.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dynaval.bootstrap import offline_services
from dynaval.domain.releases.release import RELEASE_FORMAT
from dynaval.entrypoints.cli import main as cli
from dynaval.service_layer.releases.verification import verify_release

KEPT = Path(__file__).resolve().parents[1] / "data" / "releases"
RELEASES = sorted(path for path in KEPT.glob("format-*/*") if path.is_dir())


def test_every_format_up_to_this_one_is_kept() -> None:
    formats = {int(path.parent.name.removeprefix("format-")) for path in RELEASES}
    assert formats == set(range(1, RELEASE_FORMAT + 1))
    for path in RELEASES:
        manifest = json.loads((path / "manifest.json").read_text())
        assert manifest["format"] == int(path.parent.name.removeprefix("format-"))


@pytest.mark.parametrize("kept", RELEASES, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_a_kept_release_verifies(kept: Path, tmp_path: Path) -> None:
    root = tmp_path / kept.name
    shutil.copytree(kept, root)  # verify reads only; a copy keeps the kept files safe all the same
    assert verify_release(root, offline_services()) == []

    # Not vacuous: the same kept release with one word of its card changed fails, naming the line.
    card = root / "README.md"
    lines = card.read_text().splitlines(keepends=True)
    number = next(i for i, line in enumerate(lines) if line.startswith("# "))
    lines[number] = lines[number].replace("# ", "# Our ", 1)
    card.write_text("".join(lines))
    assert verify_release(root, offline_services()) == [
        f"card: README.md line {number + 1} is not what the manifest gives ({lines[number].rstrip()!r})"
    ]


def test_a_kept_release_with_a_parent_loads_with_datasets() -> None:
    import datasets

    extended = next(path for path in RELEASES if json.loads((path / "manifest.json").read_text())["parent"])
    loaded = datasets.load_dataset(str(extended))
    manifest = json.loads((extended / "manifest.json").read_text())
    assert {split: data.num_rows for split, data in loaded.items()} == {
        split: figures["rows"] for split, figures in manifest["splits"].items()
    }
    assert set(loaded) >= {"train_r1", "train_r2", "test_r2"}
    assert loaded["train_r1"].features["label"].names == manifest["labels"]


@pytest.mark.parametrize(
    ("stated", "finding"),
    [
        (
            RELEASE_FORMAT + 1,
            f"manifest: the release is format {RELEASE_FORMAT + 1}, and this dynaval reads formats up"
            f" to {RELEASE_FORMAT}: verify it with a newer dynaval",
        ),
        ("1", "manifest: format is '1', not a positive whole number: not a dynaval release manifest"),
        (None, "manifest: format is None, not a positive whole number: not a dynaval release manifest"),
    ],
)
def test_a_format_this_dynaval_cannot_read_is_one_line(stated: object, finding: str, tmp_path: Path) -> None:
    root = tmp_path / "release"
    shutil.copytree(RELEASES[0], root)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["format"] = stated
    (root / "manifest.json").write_text(json.dumps(manifest))
    assert verify_release(root, offline_services()) == [finding]


def test_the_command_says_so_and_exits_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "release"
    shutil.copytree(RELEASES[0], root)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["format"] = RELEASE_FORMAT + 1
    (root / "manifest.json").write_text(json.dumps(manifest))

    assert cli.main(["release", "verify", str(root)]) == 1
    out = capsys.readouterr()
    assert f"this dynaval reads formats up to {RELEASE_FORMAT}" in out.out + out.err
    assert "Traceback" not in out.out + out.err


def test_verify_loads_none_of_the_services_adapters(tmp_path: Path) -> None:
    """``release verify`` works on files alone: a fresh interpreter running it imports none of the
    libraries of the database, Label Studio, the queue or the web app, and its modules bring no
    datasketch (with scipy) until an index in this process needs it (a large release's index runs
    in a process of its own), so its memory and start are the files' and the checks'."""
    root = tmp_path / RELEASES[0].name
    shutil.copytree(RELEASES[0], root)
    service = ["alembic", "flask", "huey", "label_studio_sdk", "sqlalchemy", "sqlmodel"]
    probe = (
        "import sys\n"
        "from dynaval.entrypoints.cli.main import main\n"
        "import dynaval.bootstrap, dynaval.service_layer.releases.verification\n"
        f"print(sorted(m for m in ['datasketch', 'scipy', *{service!r}] if m in sys.modules))\n"
        f"status = main(['release', 'verify', {str(root)!r}])\n"
        f"print(status, sorted(m for m in {service!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", f"release {root}: every check passed", "0 []"]
