"""The releases made: listed, read, downloaded as one archive, copied, and their cards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dynaval.domain.errors import Conflict
from dynaval.domain.releases.card import render_card
from dynaval.domain.releases.release import Release
from dynaval.service_layer.files import ReleaseFiles
from dynaval.service_layer.services import Services


def list_releases(services: Services) -> list[Release]:
    with services.uow(read_only=True) as uow:
        return uow.releases.all()


def get_release(services: Services, release_id: int) -> Release:
    with services.uow(read_only=True) as uow:
        return uow.releases.get(release_id)


def release_summary(release: Release) -> dict[str, Any]:
    """A release as lists show it: without the manifest's per-example lists."""
    manifest = release.manifest
    return {
        **{k: v for k, v in release.to_dict().items() if k != "manifest"},
        "splits": {name: s["rows"] for name, s in manifest["splits"].items()},
        "withheld": manifest["withheld"]["count"],
        "license": manifest["license"],
    }


def release_archive(services: Services, release_id: int) -> tuple[str, Iterator[bytes]]:
    """The release's files as one tar: its file name and its bytes, a piece at a time."""
    release = get_release(services, release_id)
    folder = Path(release.folder)
    if not services.release_files.holds_release(folder):
        raise Conflict(
            f"the files of release {release.version} are missing from {folder}", field="release_id"
        )
    prefix = f"{release.name}-{release.version}"
    return f"{prefix}.tar", services.release_files.archive(folder, prefix)


def copy_release(files: ReleaseFiles, release: Release, out: Path) -> Path:
    """Copy a release's files to ``out``: a new folder, or an empty one (``InvalidInput`` naming
    ``out`` otherwise)."""
    files.check_copy_target(out)
    return files.copy(Path(release.folder), out)


def release_card(files: ReleaseFiles, release: Release) -> str:
    """The card the release's folder holds (made from the manifest again if the file is gone)."""
    card = files.read_card(Path(release.folder))
    return card if card is not None else render_card(release.manifest)
