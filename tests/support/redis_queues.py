"""A task queue of a test's own on the shared Redis (127.0.0.1:6379), its keys deleted afterwards.

huey keeps only the letters, digits and underscores of a queue's name in its Redis keys, so the
name made here has nothing else: the keys deleted are exactly the queue's (and its lanes').
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis

REDIS_URL = "redis://127.0.0.1:6379/0"


@contextmanager
def redis_queue_name(prefix: str) -> Iterator[str]:
    """A fresh queue name starting with ``prefix`` (letters and digits); the test fails at once if
    Redis does not answer."""
    name = f"{prefix}{uuid.uuid4().hex[:10]}"
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis does not answer at {REDIS_URL}: {exc}", pytrace=False)
    try:
        yield name
    finally:
        keys = list(client.scan_iter(match=f"*{name}*"))
        if keys:
            client.delete(*keys)
        client.close()
