"""Signed, expiring image URLs: what lets a Label Studio annotator's browser (which holds no dynaval
token) load a candidate's image, and no one list or guess another.

The URL names the image by its content hash and an expiry, signed with an HMAC-SHA256 of both under
a key derived from the service's signing secret. It says nothing of the writer, the model or the
writer's label: the same picture has the same URL whoever sent it. Without the secret no one can
sign another hash, and there is no listing.

Expiry: a task's URL must still work when an annotator opens the task, however late, so it is
signed for ``DYNAVAL_IMAGE_URL_DAYS`` (365 by default: longer than any round's validation we have
seen), rounded up to the next whole day so that every push of a day gives the same URL; and the
reconcile pass renews the URL of every task of a round not frozen yet once its expiry is less than
``RENEW_BEFORE_DAYS`` away (:func:`needs_renewal`; docs/task_types.md).

>>> key = url_key("secret")
>>> signature = sign(key, "ab" * 32, 1_900_000_000)
>>> check(key, "ab" * 32, 1_900_000_000, signature, now=1_800_000_000)
True
>>> check(key, "cd" * 32, 1_900_000_000, signature, now=1_800_000_000)
False
>>> check(key, "ab" * 32, 1_900_000_000, signature, now=1_900_000_001)
False
>>> expiry_for(now=86_400 * 10 + 5, days=3)
1209600
"""

from __future__ import annotations

import hashlib
import hmac

DAY_S = 86_400
RENEW_BEFORE_DAYS = 30


def url_key(signing_secret: str) -> bytes:
    """The key image URLs are signed with, derived from the signing secret for this use alone."""
    return hmac.new(signing_secret.encode(), b"dynaval:image-url", hashlib.sha256).digest()


def sign(key: bytes, sha256: str, expires: int) -> str:
    return hmac.new(key, f"{sha256}:{expires}".encode(), hashlib.sha256).hexdigest()


def check(key: bytes, sha256: str, expires: int, signature: str, *, now: float) -> bool:
    """Whether ``signature`` is this image's until ``expires`` (Unix seconds), and it is not past."""
    if now > expires:
        return False
    return hmac.compare_digest(sign(key, sha256, expires), signature)


def expiry_for(*, now: float, days: int) -> int:
    """The expiry of a URL signed at ``now`` for ``days``: the end of that day (UTC), so that the
    URLs signed during one day are the same."""
    return (int(now) // DAY_S + days + 1) * DAY_S


def needs_renewal(expires: int, *, now: float, days: int) -> bool:
    """Whether a URL signed for ``days`` should be signed again at ``now``: less than
    ``RENEW_BEFORE_DAYS`` of it left (a third of it, for URLs signed for less than 90 days).

    >>> expires = 100 * DAY_S
    >>> needs_renewal(expires, now=80 * DAY_S, days=365), needs_renewal(expires, now=60 * DAY_S, days=365)
    (True, False)
    """
    return expires - now < min(RENEW_BEFORE_DAYS, days / 3) * DAY_S
