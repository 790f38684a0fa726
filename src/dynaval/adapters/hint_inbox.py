"""The hint inbox: the webhooks' hints that wait for a worker, on the task queue's storage.

A webhook that finds SQLite's write lock taken does not wait for it: it puts its hint (the round,
the tasks it named, the webhook's time) here and answers. A worker takes the hints many at a time
and records them in one transaction (``dynaval.take_queued_hints``), where one queue task per
webhook cost a write transaction each: at 600,000 votes the worker fell 435,442 hints behind.

The inbox is a queue of its own on the task queue's storage (``<name>-hints``, beside the job lane:
the same SQLite file, or the same Redis), holding plain messages that no consumer runs. Hints wait
there while no worker runs; a hint put back after a failed transaction is taken again. Taking is
atomic on both storages, so several workers never take the same hint. Taking and putting back many
at once use huey 3's storage layout (its SQLite ``task`` table, its Redis list), which
``pyproject.toml`` pins to huey 3.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from huey import Huey
from huey.storage import RedisStorage, SqliteStorage

log = logging.getLogger(__name__)


class QueuedHint(NamedTuple):
    """What one webhook said: these tasks of the round changed at ``at``."""

    round_id: int
    task_ids: tuple[int, ...]
    at: datetime


class HintInbox:
    """The hints waiting on ``lane``'s storage (a huey whose queue no consumer reads)."""

    def __init__(self, lane: Huey) -> None:
        self._storage: Any = lane.storage
        self.name = str(lane.name)

    def put(self, round_id: int, task_ids: Collection[int], at: datetime) -> None:
        """Keep a webhook's hint until a worker takes it; raises if the storage is out of reach."""
        self._storage.enqueue(_encode(round_id, task_ids, at))

    def put_back(self, hints: Sequence[QueuedHint]) -> None:
        """Return, in one step, hints a worker took but could not record (taken again later)."""
        messages = [_encode(hint.round_id, hint.task_ids, hint.at) for hint in hints]
        storage = self._storage
        if not messages:
            return
        if isinstance(storage, SqliteStorage):
            with storage.db(commit=True) as cursor:
                cursor.executemany(
                    "insert into task (queue, data, priority) values (?, ?, 0)",
                    [(storage.name, message) for message in messages],
                )
        elif _plain_redis(storage):
            storage.conn.lpush(storage.queue_key, *messages)
        else:
            for message in messages:
                storage.enqueue(message)

    def take(self, limit: int) -> list[QueuedHint]:
        """Up to ``limit`` hints, in the order they were put (hints put back come after those
        waiting then), removed from the inbox in one step. A message that is not a hint (none is
        ever written so) is logged and dropped: the next reconcile reads what it may have named."""
        hints: list[QueuedHint] = []
        for message in self._take_messages(limit):
            try:
                hints.append(_decode(message))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning(
                    "hint inbox %s: a message that is not a hint dropped (%r): %r",
                    self.name,
                    exc,
                    message[:200],
                )
        return hints

    def size(self) -> int:
        """How many hints wait."""
        return int(self._storage.queue_size())

    def _take_messages(self, limit: int) -> list[bytes]:
        storage = self._storage
        if isinstance(storage, SqliteStorage):
            # huey's own table (huey 3.x), read and emptied in one exclusive transaction.
            with storage.db(commit=True) as cursor:
                cursor.execute(
                    "select id, data from task where queue = ? order by priority desc, id limit ?",
                    (storage.name, limit),
                )
                rows = cursor.fetchall()
                ids = [row[0] for row in rows]
                for start in range(0, len(ids), 500):
                    chunk = ids[start : start + 500]
                    cursor.execute(f"delete from task where id in ({','.join('?' * len(chunk))})", chunk)
            return [bytes(row[1]) for row in rows]
        if _plain_redis(storage):
            # huey pushes on the left and pops on the right: the oldest are the last ``limit``.
            pipe = storage.conn.pipeline(transaction=True)
            pipe.lrange(storage.queue_key, -limit, -1)
            pipe.ltrim(storage.queue_key, 0, -limit - 1)
            taken, _trimmed = pipe.execute()
            return [bytes(message) for message in reversed(taken)]
        messages: list[bytes] = []  # any other storage: one at a time
        while len(messages) < limit and (message := storage.dequeue()) is not None:
            messages.append(bytes(message))
        return messages


def _plain_redis(storage: Any) -> bool:
    """huey's Redis storage with its queue as a list (its priority variant keeps a sorted set)."""
    return isinstance(storage, RedisStorage) and not storage.priority


def _encode(round_id: int, task_ids: Collection[int], at: datetime) -> bytes:
    hint = {"round": round_id, "tasks": sorted(task_ids), "at": at.astimezone(UTC).isoformat()}
    return json.dumps(hint, separators=(",", ":")).encode()


def _decode(message: bytes) -> QueuedHint:
    hint = json.loads(message)
    return QueuedHint(
        round_id=int(hint["round"]),
        task_ids=tuple(int(task_id) for task_id in hint["tasks"]),
        at=datetime.fromisoformat(hint["at"]),
    )
