"""The image store: one folder, each image a PNG named by its SHA-256 (``ab/abcdef….png``), written
once (to a temporary name, then renamed into place, so a reader never sees half a file) and never
changed (the service layer's :class:`~dynaval.service_layer.images.ports.ImageStore`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from dynaval.domain.images.image import is_sha256


class ImageFolder:
    """Images by content hash under ``root`` (``DYNAVAL_IMAGES_DIR``, by default ``<data dir>/images``)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path_of(self, sha256: str) -> Path:
        if not is_sha256(sha256):  # a path is built from it: nothing else may reach the file system
            raise ValueError(f"not a SHA-256: {sha256[:80]!r}")
        return self.root / sha256[:2] / f"{sha256}.png"

    def put(self, sha256: str, png: bytes) -> None:
        path = self.path_of(sha256)
        if path.is_file():
            return  # content-addressed: the file there holds these bytes
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, scratch = tempfile.mkstemp(dir=path.parent, prefix=".incoming-", suffix=".png")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(png)
                out.flush()
                os.fsync(out.fileno())
            os.replace(scratch, path)
        except BaseException:
            Path(scratch).unlink(missing_ok=True)
            raise

    def get(self, sha256: str) -> bytes | None:
        try:
            return self.path_of(sha256).read_bytes()
        except FileNotFoundError:
            return None

    def has(self, sha256: str) -> bool:
        return self.path_of(sha256).is_file()
