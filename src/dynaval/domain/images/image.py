"""An image as the loop carries it. A body sends an :class:`ImageUpload` (the bytes of a PNG or JPEG
file); the service checks it and keeps it as a :class:`StoredImage`: its pixels as a canonical PNG,
named by that PNG's SHA-256, so that the same pixels sent twice, by any writer in any round, are one
file. A candidate's inputs name it by reference (``{"image": "sha256:<hex>"}``); a model reads an
:class:`ImageInput`.

>>> ref = image_ref("ab" * 32)
>>> ref[:11], sha_of(ref) == "ab" * 32
('sha256:abab', True)
>>> is_image_ref("sha256:" + "0" * 64), is_image_ref("a text")
(True, False)
>>> print_ = ImageFingerprint(centre=5, around=(7, 1 << 100))
>>> ImageFingerprint.from_bytes(print_.to_bytes()) == print_
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dynaval.domain.errors import InvalidInput

REF_PREFIX = "sha256:"
_REF = re.compile(r"sha256:[0-9a-f]{64}")
_REF_LENGTH = len("sha256:") + 64
_SHA = re.compile(r"[0-9a-f]{64}")

HASH_BYTES = 18
"""One perceptual hash's bytes: 144 bits."""
MEDIA_TYPES = {"image/png": "png", "image/jpeg": "jpeg"}
"""The media types an image may be sent as, and the format each names."""
STORED_MEDIA_TYPE = "image/png"
"""What a stored image is served as: every image is kept as a PNG of its pixels."""


@dataclass(frozen=True)
class ImageUpload:
    """An image as a body sent it: the file's bytes, and the media type the body declared (a data
    URL's, a file part's; None when it declared none). What the bytes are is found by decoding them,
    never by the declaration."""

    data: bytes
    declared_type: str | None = None

    def __repr__(self) -> str:  # a log line names the size, never megabytes of bytes
        return f"ImageUpload({len(self.data)} bytes, {self.declared_type!r})"


@dataclass(frozen=True)
class ImageLimits:
    """What an image may be: at most ``max_bytes`` as sent (``DYNAVAL_MAX_IMAGE_BYTES``) and at most
    ``max_pixels`` decoded (``DYNAVAL_MAX_IMAGE_PIXELS``: a small file may decode to gigabytes)."""

    max_bytes: int
    max_pixels: int


@dataclass(frozen=True)
class ImageFingerprint:
    """An image's perceptual hashes (see :mod:`dynaval.domain.images.near_copies`): ``centre``, of
    the image moved so that its ink's centre of mass is in the middle, and ``around``, of it moved a
    pixel further each way (a centre of mass rounded to the other pixel)."""

    centre: int
    around: tuple[int, ...]

    @property
    def hashes(self) -> tuple[int, ...]:
        return (self.centre, *self.around)

    def to_bytes(self) -> bytes:
        """The hashes, ``HASH_BYTES`` each, big-endian: how the index stores them."""
        return b"".join(value.to_bytes(HASH_BYTES, "big") for value in self.hashes)

    @classmethod
    def from_bytes(cls, data: bytes) -> ImageFingerprint:
        if not data or len(data) % HASH_BYTES:
            raise ValueError(f"an image fingerprint is a multiple of {HASH_BYTES} bytes, not {len(data)}")
        hashes = [int.from_bytes(data[i : i + HASH_BYTES], "big") for i in range(0, len(data), HASH_BYTES)]
        return cls(centre=hashes[0], around=tuple(hashes[1:]))


@dataclass(frozen=True)
class StoredImage:
    """A checked image: its canonical PNG, what it is, and its fingerprint."""

    sha256: str
    """The hex SHA-256 of :attr:`png`."""
    png: bytes
    width: int
    height: int
    mode: str
    """Pillow's mode of its pixels: ``L`` (grey), ``LA``, ``RGB`` or ``RGBA``."""
    source_format: str
    """What it was sent as: ``png`` or ``jpeg``."""
    fingerprint: ImageFingerprint

    @property
    def ref(self) -> str:
        return image_ref(self.sha256)

    def __repr__(self) -> str:
        return f"StoredImage({self.sha256[:12]}, {self.width}x{self.height} {self.mode})"


@dataclass(frozen=True)
class ImageShape:
    """What an image model reads: ``width`` x ``height`` pixels in Pillow's ``mode`` (``L``: grey,
    ``RGB``). A writers' page draws at that size, so the writer sees the model's input."""

    width: int
    height: int
    mode: str

    def to_dict(self) -> dict[str, object]:
        return {"width": self.width, "height": self.height, "mode": self.mode}


@dataclass(frozen=True)
class ImageInput:
    """What a model reads of an image example: the image's canonical PNG, named by its hash."""

    sha256: str
    png: bytes

    def __repr__(self) -> str:
        return f"ImageInput({self.sha256[:12]})"


def image_ref(sha256: str) -> str:
    """How a candidate's inputs name a stored image."""
    return REF_PREFIX + sha256


def is_image_ref(value: object) -> bool:
    # The length and prefix first: a text input (most inputs) is turned away without the pattern.
    return (
        isinstance(value, str)
        and len(value) == _REF_LENGTH
        and value.startswith(REF_PREFIX)
        and _REF.fullmatch(value) is not None
    )


def sha_of(ref: str) -> str:
    """The hex SHA-256 a reference names (``InvalidInput`` naming ``image`` when it names none)."""
    if not is_image_ref(ref):
        raise InvalidInput("not a stored image's reference (sha256:<64 hex digits>)", field="image")
    return ref[len(REF_PREFIX) :]


def is_sha256(value: str) -> bool:
    return _SHA.fullmatch(value) is not None


RELEASE_FOLDER = "images"
"""Where a release keeps its images: ``images/<sha256>.png``, each once."""
_RELEASE_PATH = re.compile(r"images/([0-9a-f]{64})\.png")


def release_path(ref: str) -> str:
    """Where a release keeps the image a reference names (its rows' JSONL points there).

    >>> release_path("sha256:" + "ab" * 32) == "images/" + "ab" * 32 + ".png"
    True
    """
    return f"{RELEASE_FOLDER}/{sha_of(ref)}.png"


def is_release_path(value: str) -> bool:
    """Whether ``value`` is where a release keeps an image (``images/<sha256>.png``)."""
    return _RELEASE_PATH.fullmatch(value) is not None


def sha_of_release_path(path: str) -> str:
    """The hex SHA-256 a release's image path names (``ValueError`` for any other value)."""
    found = _RELEASE_PATH.fullmatch(path)
    if found is None:
        raise ValueError(f"not a release's image path (images/<sha256>.png): {path[:80]!r}")
    return found.group(1)
