"""Pillow and imagehash: an uploaded file decoded under limits, kept as a canonical PNG of its
pixels, fingerprinted for near-copies, and scaled into thumbnails (the service layer's
:class:`~dynaval.service_layer.images.ports.ImageCodec`).

The checks, in order, each refusing with the field named and nothing stored:

- more than ``max_bytes`` sent: :class:`~dynaval.domain.errors.TooLarge` (413);
- not a PNG or JPEG file (whatever the body declared): 422;
- more than ``max_pixels`` (width x height, read from the header before any pixel is decoded): 422,
  so a decompression bomb is refused before it takes memory;
- a truncated or damaged file (Pillow's full decode fails): 422.

The canonical PNG holds the decoded pixels in mode ``L``, ``LA``, ``RGB`` or ``RGBA`` (a one-bit or
palette image widened, a CMYK JPEG made RGB, a 16-bit grey image refused), without metadata: EXIF,
text chunks and ICC profiles are dropped, so that a served image says nothing of who made it, and
the same pixels always give the same file and hash.
"""

from __future__ import annotations

import hashlib
import io
import warnings

import imagehash
import numpy as np
import numpy.typing as npt
from PIL import Image, UnidentifiedImageError

from dynaval.domain.errors import InvalidInput, TooLarge
from dynaval.domain.images.image import ImageFingerprint, ImageLimits, ImageUpload, StoredImage

FORMATS = {"PNG": "png", "JPEG": "jpeg"}
HASH_SIZE = 12
"""The pHash's side: 144 bits (see :mod:`dynaval.domain.images.near_copies`)."""
INK_FLOOR = 0.3
"""Pixels below this share of the strongest ink do not move the centre of mass (JPEG's ringing)."""
SHIFTS = tuple((dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0))
THUMBNAIL_SIDE = 96


class PillowImages:
    """Decoding, fingerprinting and thumbnails with Pillow and imagehash."""

    def decode(self, upload: ImageUpload, limits: ImageLimits, *, field: str) -> StoredImage:
        """The upload checked and made canonical; the error names ``field``."""
        if len(upload.data) > limits.max_bytes:
            raise TooLarge(
                f"the image is {len(upload.data)} bytes; at most {limits.max_bytes} "
                "(DYNAVAL_MAX_IMAGE_BYTES)",
                field=field,
            )
        image, source_format = _open(upload.data, limits, field=field)
        pixels = _canonical_pixels(image, field=field)
        png = _png(pixels)
        return StoredImage(
            sha256=hashlib.sha256(png).hexdigest(),
            png=png,
            width=pixels.width,
            height=pixels.height,
            mode=pixels.mode,
            source_format=source_format,
            fingerprint=fingerprint(pixels),
        )

    def fingerprint_png(self, png: bytes) -> ImageFingerprint:
        with Image.open(io.BytesIO(png)) as image:
            image.load()
            return fingerprint(image)

    def thumbnail_png(self, png: bytes, side: int = THUMBNAIL_SIDE) -> bytes:
        """A PNG of the image scaled to fit ``side`` pixels (a small image scaled up with nearest
        neighbours, so a 28x28 drawing's pixels stay sharp)."""
        with Image.open(io.BytesIO(png)) as image:
            image.load()
            scale = side / max(image.width, image.height)
            size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
            resample = Image.Resampling.NEAREST if scale >= 1 else Image.Resampling.LANCZOS
            return _png(image.resize(size, resample))


def _open(data: bytes, limits: ImageLimits, *, field: str) -> tuple[Image.Image, str]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=list(FORMATS))
            source_format = FORMATS[str(image.format)]
            if image.width * image.height > limits.max_pixels:
                raise InvalidInput(
                    f"the image is {image.width}x{image.height} pixels; at most {limits.max_pixels} "
                    "pixels in all (DYNAVAL_MAX_IMAGE_PIXELS)",
                    field=field,
                )
            image.load()  # the whole decode: a truncated or damaged file fails here
    except InvalidInput:
        raise
    except (UnidentifiedImageError, KeyError):
        raise InvalidInput("must be a PNG or JPEG image; this is neither", field=field) from None
    except (Image.DecompressionBombWarning, Image.DecompressionBombError):
        raise InvalidInput(
            f"the image decodes to more than {limits.max_pixels} pixels (DYNAVAL_MAX_IMAGE_PIXELS)",
            field=field,
        ) from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:  # Pillow's kinds for a broken file
        raise InvalidInput(
            f"the image cannot be decoded: it is truncated or damaged ({type(exc).__name__})", field=field
        ) from None
    return image, source_format


def _canonical_pixels(image: Image.Image, *, field: str) -> Image.Image:
    mode = image.mode
    if mode in ("L", "LA", "RGB", "RGBA"):
        return image
    if mode == "1":
        return image.convert("L")
    if mode in ("P", "PA"):
        return image.convert("RGBA" if "transparency" in image.info or mode == "PA" else "RGB")
    if mode in ("CMYK", "YCbCr", "LAB", "HSV"):
        return image.convert("RGB")
    raise InvalidInput(
        f"images of {mode} pixels (16-bit or floating point) are not taken; send 8-bit grey or colour",
        field=field,
    )


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    # No metadata is passed on (Pillow writes none unless given pnginfo, exif or icc_profile).
    image.save(buffer, format="PNG", optimize=False, compress_level=6)
    return buffer.getvalue()


def fingerprint(image: Image.Image) -> ImageFingerprint:
    """The centred perceptual hash of an image, and those of it one pixel off each way."""
    ink = _ink(image)
    return ImageFingerprint(
        centre=_phash(_centred(ink, (0, 0))), around=tuple(_phash(_centred(ink, s)) for s in SHIFTS)
    )


def _ink(image: Image.Image) -> npt.NDArray[np.float32]:
    grey = np.asarray(image.convert("L"), dtype=np.float32)
    border = np.concatenate([grey[0], grey[-1], grey[:, 0], grey[:, -1]])
    ink: npt.NDArray[np.float32] = np.abs(grey - np.median(border))
    return ink


def _centred(ink: npt.NDArray[np.float32], shift: tuple[int, int]) -> Image.Image:
    height, width = ink.shape
    side = max(height, width)
    strong = np.where(ink >= INK_FLOOR * ink.max(), ink, 0.0) if ink.max() > 0 else ink
    total = float(strong.sum())
    if total > 0:
        cy = float((strong.sum(axis=1) * np.arange(height)).sum()) / total
        cx = float((strong.sum(axis=0) * np.arange(width)).sum()) / total
    else:
        cy, cx = (height - 1) / 2, (width - 1) / 2
    canvas = np.zeros((side + 2 * height, side + 2 * width), dtype=np.float32)
    top = round(side / 2 - cy) + height + shift[0]
    left = round(side / 2 - cx) + width + shift[1]
    canvas[top : top + height, left : left + width] = ink
    window = canvas[height : height + side, width : width + side]
    return Image.fromarray(np.clip(window, 0, 255).astype(np.uint8))


def _phash(image: Image.Image) -> int:
    return int(str(imagehash.phash(image, hash_size=HASH_SIZE)), 16)
