"""The images room's use cases: an uploaded image checked, kept once by content hash, read back for
a model, and shown through signed URLs (Label Studio's annotators, the writer, the dashboard)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from urllib.parse import parse_qs, urlencode, urlsplit

from dynaval.domain.errors import NotFound, Unavailable
from dynaval.domain.images import signed_urls
from dynaval.domain.images.image import (
    ImageFingerprint,
    ImageInput,
    ImageUpload,
    StoredImage,
    is_sha256,
    sha_of,
    sha_of_release_path,
)
from dynaval.service_layer.images.ports import ImageServices
from dynaval.settings import Settings

log = logging.getLogger(__name__)

IMAGE_PATH = "/images/"
NO_IMAGE = "no image at this link: it is wrong, or it expired (ask for the page again)"


def checked_image(images: ImageServices, upload: ImageUpload, *, field: str) -> StoredImage:
    """The upload decoded under the limits and made canonical (nothing kept yet): ``TooLarge`` (413)
    or ``InvalidInput`` (422) naming ``field`` when it is not an image the service takes."""
    return images.codec.decode(upload, images.limits, field=field)


def keep(images: ImageServices, stored: Iterable[StoredImage]) -> None:
    """Keep the images in the store (each once, whoever sends it again). Called just before the
    unit of work that stores what refers to them commits: a refused request keeps nothing."""
    for image in stored:
        images.store.put(image.sha256, image.png)


def model_inputs(
    images: ImageServices, refs: Iterable[str], known: Mapping[str, StoredImage] | None = None
) -> list[ImageInput]:
    """What a model reads of the images ``refs`` names (``sha256:…``): from ``known`` (images checked
    in this request) or from the store. An image missing from the store is the service's trouble
    (a lost or moved folder): :class:`~dynaval.domain.errors.Unavailable`, and the log says which."""
    found = []
    for ref in refs:
        sha = sha_of(ref)
        if known and sha in known:
            found.append(ImageInput(sha, known[sha].png))
            continue
        png = images.store.get(sha)
        if png is None:
            log.warning("image %s is missing from the image store (DYNAVAL_IMAGES_DIR)", sha)
            raise Unavailable("an image of this example is missing from the service's image store")
        found.append(ImageInput(sha, png))
    return found


def png_of(images: ImageServices, sha: str) -> bytes:
    """A stored image's PNG; :class:`~dynaval.domain.errors.Unavailable` when the store lost it."""
    png = images.store.get(sha)
    if png is None:
        log.warning("image %s is missing from the image store (DYNAVAL_IMAGES_DIR)", sha)
        raise Unavailable(f"image {sha} is missing from the service's image store")
    return png


def fingerprint_of_png(images: ImageServices, png: bytes) -> ImageFingerprint:
    """The near-copy fingerprint of a stored (already checked) image."""
    return images.codec.fingerprint_png(png)


def release_fingerprints(images: ImageServices) -> Callable[[str], ImageFingerprint]:
    """The fingerprint of an image named by its path in a release (``images/<sha256>.png``), read
    from the image store: what a build's leak scan compares."""

    def fingerprint(path: str) -> ImageFingerprint:
        return fingerprint_of_png(images, png_of(images, sha_of_release_path(path)))

    return fingerprint


def image_url(settings: Settings, ref_or_sha: str, *, now: float | None = None) -> str:
    """The signed URL of a stored image, valid for ``DYNAVAL_IMAGE_URL_DAYS`` (see
    :mod:`dynaval.domain.images.signed_urls`)."""
    sha = ref_or_sha if is_sha256(ref_or_sha) else sha_of(ref_or_sha)
    expires = signed_urls.expiry_for(now=time.time() if now is None else now, days=settings.image_url_days)
    signature = signed_urls.sign(signed_urls.url_key(settings.signing_secret), sha, expires)
    query = urlencode({"expires": expires, "signature": signature})
    return f"{settings.public_url.rstrip('/')}{IMAGE_PATH}{sha}.png?{query}"


def signed_url_parts(url: object) -> tuple[str, int] | None:
    """The image hash and expiry a signed image URL of this service carries; None for anything else."""
    if not isinstance(url, str):
        return None
    parts = urlsplit(url)
    name = parts.path.rsplit(IMAGE_PATH, 1)[-1] if IMAGE_PATH in parts.path else ""
    sha = name.removesuffix(".png")
    expires = parse_qs(parts.query).get("expires", [""])[0]
    if not (is_sha256(sha) and expires.isdigit()):
        return None
    return sha, int(expires)


def signed_image(
    images: ImageServices, settings: Settings, sha: str, *, expires: str, signature: str
) -> bytes:
    """The image a signed URL names; :class:`~dynaval.domain.errors.NotFound` alike for a wrong
    hash, a wrong or expired signature and an image not held (nothing tells them apart)."""
    if not (is_sha256(sha) and expires.isdigit() and len(expires) <= 12):
        raise NotFound(NO_IMAGE, field="image")
    key = signed_urls.url_key(settings.signing_secret)
    if not signed_urls.check(key, sha, int(expires), signature, now=time.time()):
        raise NotFound(NO_IMAGE, field="image")
    png = images.store.get(sha)
    if png is None:
        raise NotFound(NO_IMAGE, field="image")
    return png


def thumbnail(images: ImageServices, ref: str) -> bytes:
    """A small PNG of a stored image, for the dashboard's lists."""
    png = images.store.get(sha_of(ref))
    if png is None:
        raise NotFound("no such image in the image store", field="image")
    return images.codec.thumbnail_png(png)
