"""Writers who are also annotators: each writer's Label Studio user, so that a writer's vote on
their own example never counts.

Label Studio Community cannot keep a user away from one task, so a writer who annotates may meet
their own example. The link is configured beside the writer's credential
(``DYNAVAL_WRITER_LABEL_STUDIO_USERS=ana=ana@example.org,bo=17``): a Label Studio user id, or the
user's email, which is looked up with the service's own key (and looked up again, at most once a
minute, while it is not found: the user may be created later).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from dynaval.domain.errors import DomainError
from dynaval.service_layer.validation.label_studio_port import LabelStudioGateway

log = logging.getLogger(__name__)

LOOKUP_AGAIN_S = 60.0


class WriterAnnotatorLinks:
    """Writers' Label Studio user ids (as annotations name them), by writer name."""

    def __init__(
        self,
        configured: Mapping[str, str],
        label_studio: LabelStudioGateway,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ids = {name: user for name, user in configured.items() if _is_user_id(user)}
        self._emails = {name: user.casefold() for name, user in configured.items() if not _is_user_id(user)}
        self._label_studio = label_studio
        self._clock = clock
        self._looked_up_at: float | None = None
        self._lock = threading.Lock()

    def current(self) -> dict[str, str]:
        """Every link known now: ids as configured, emails as Label Studio resolved them."""
        with self._lock:
            unresolved = [name for name in self._emails if name not in self._ids]
            due = self._looked_up_at is None or self._clock() - self._looked_up_at >= LOOKUP_AGAIN_S
            if unresolved and due:
                self._looked_up_at = self._clock()
                self._look_up(unresolved)
            return dict(self._ids)

    def _look_up(self, names: list[str]) -> None:
        try:
            by_email = {
                email.casefold(): user_id for email, user_id in self._label_studio.user_ids_by_email().items()
            }
        except DomainError as exc:
            log.warning("could not look up writers' Label Studio users (%s); trying again later", exc.message)
            return
        for name in names:
            user_id = by_email.get(self._emails[name])
            if user_id is None:
                log.warning("writer %s: no Label Studio user has the email configured for them", name)
            else:
                self._ids[name] = str(user_id)


def _is_user_id(user: str) -> bool:
    """Whether a configured link names a Label Studio user by id (ASCII digits, as Label Studio
    writes them: ``str.isdigit`` alone also takes other scripts' digits) rather than by email."""
    return user.isascii() and user.isdigit()
