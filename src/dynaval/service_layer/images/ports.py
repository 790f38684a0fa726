"""The images room's ports: the codec that decodes and checks an upload (Pillow and imagehash:
:class:`~dynaval.adapters.images.pillow_images.PillowImages`) and the store that keeps each image once
(:class:`~dynaval.adapters.images.image_files.ImageFolder`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from dynaval.domain.images.image import ImageFingerprint, ImageLimits, ImageUpload, StoredImage
from dynaval.domain.images.near_copies import FingerprintIndex


class ImageCodec(Protocol):
    def decode(self, upload: ImageUpload, limits: ImageLimits, *, field: str) -> StoredImage:
        """The upload checked (``TooLarge`` or ``InvalidInput`` naming ``field``) and made canonical:
        a PNG of its pixels, its hash and its fingerprint."""

    def thumbnail_png(self, png: bytes, side: int = ...) -> bytes:
        """A PNG of the image scaled to fit ``side`` pixels."""

    def fingerprint_png(self, png: bytes) -> ImageFingerprint:
        """The near-copy fingerprint of an image already checked (a stored one, a release's)."""


class ImageStore(Protocol):
    def put(self, sha256: str, png: bytes) -> None:
        """Keep the image (a no-op when it is kept already: content-addressed)."""

    def get(self, sha256: str) -> bytes | None:
        """The image's PNG; None when the store does not hold it."""

    def has(self, sha256: str) -> bool: ...


@dataclass
class ImageServices:
    """What the use cases on images need; the composition root builds it."""

    codec: ImageCodec
    store: ImageStore
    limits: ImageLimits
    fingerprints: FingerprintIndex = field(default_factory=FingerprintIndex)
    """The near-copy check's fingerprints held in memory (topped up from the database before each
    check)."""
