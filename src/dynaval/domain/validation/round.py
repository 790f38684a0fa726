"""A round's lifecycle: ``open`` (takes candidates) → ``closed`` (validation finishes) → ``frozen``
(its decisions are final and its dataset may be released)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from dynaval.domain.errors import Conflict, InvalidInput
from dynaval.domain.validation.policy import DecisionPolicy


class RoundKind(StrEnum):
    """What a round collects: writers' attempts to fool its pinned model (``adversarial``), or
    failures found in production and reported with the output observed (``capture``: no model in
    the loop, see docs/captures.md), or suspect regression cases sent back to the validators
    (``revalidation``: made by ``dynaval suite revalidate`` only, never by ``POST /api/rounds``; see
    docs/regression.md)."""

    ADVERSARIAL = "adversarial"
    CAPTURE = "capture"
    REVALIDATION = "revalidation"


RoundKindName = Literal["adversarial", "capture"]
"""The kinds a request may create (a revalidation round is made from the suite's suspects only)."""


_REVALIDATION_TAKES_NOTHING = (
    "is a revalidation round: it holds suspect regression cases sent back to the validators and "
    "takes neither candidates nor captures"
)


class RoundState(StrEnum):
    OPEN = "open"
    CLOSED = "closed"
    FROZEN = "frozen"


@dataclass
class Round:
    """One collection period for one task type, with one pinned model (none for a capture round:
    its model fields are empty)."""

    name: str
    task_type: str
    model_dir: str
    model_name: str
    model_hash: str
    labels: list[str]
    policy: dict[str, Any]
    state: RoundState = RoundState.OPEN
    id: int | None = None
    label_studio_project_id: int | None = None
    label_studio_webhook_id: int | None = None
    created_at: datetime | None = None
    closed_at: datetime | None = None
    frozen_at: datetime | None = None
    push_failures: int = 0
    """Pushes in a row that Label Studio failed; the next waits ``push_retry_base_s * 2**(n-1)``."""
    push_retry_at: datetime | None = None
    kind: RoundKind = RoundKind.ADVERSARIAL

    @property
    def has_model(self) -> bool:
        """Whether a model is in the loop (a capture round has none: nothing loads one for it)."""
        return self.kind is RoundKind.ADVERSARIAL

    @property
    def decision_policy(self) -> DecisionPolicy:
        return DecisionPolicy(**self.policy)

    def _conflict(self, message: str, field: str = "round_id") -> Conflict:
        return Conflict(f"round {self.id} {message}", field=field)

    def check_takes_candidates(self) -> None:
        """Only an open adversarial round takes writers' candidates (and answers ``predict``)."""
        if self.kind is RoundKind.REVALIDATION:
            raise self._conflict(_REVALIDATION_TAKES_NOTHING)
        if self.kind is not RoundKind.ADVERSARIAL:
            raise self._conflict(
                f"is a {self.kind.value} round: it has no model and takes no writers' candidates; "
                "report failures to it with POST /api/rounds/<id>/captures"
            )
        if self.state is not RoundState.OPEN:
            raise self._conflict(f"is {self.state.value} and takes no candidates")

    def check_takes_captures(self) -> None:
        """Only an open capture round takes failure captures."""
        if self.kind is RoundKind.REVALIDATION:
            raise self._conflict(_REVALIDATION_TAKES_NOTHING)
        if self.kind is not RoundKind.CAPTURE:
            raise self._conflict(
                f"is an {self.kind.value} round: it takes writers' candidates, not captures; "
                'report failures to a round created with "kind": "capture"'
            )
        if self.state is not RoundState.OPEN:
            raise self._conflict(f"is {self.state.value} and takes no captures")

    def check_decisions_may_change(self, *, field: str = "round_id") -> None:
        """A frozen round's decisions are final: no override, no vote changes them (the
        :class:`Conflict` names ``field``, the request's handle on the round)."""
        if self.state is RoundState.FROZEN:
            raise self._conflict("is frozen; its decisions are final", field)

    def check_takes_gold(self, *, field: str = "round_id") -> None:
        """Gold items may join a round until it is frozen: a frozen round changes no more (its
        annotators' gold accuracy, and so whose votes count, is final)."""
        if self.state is RoundState.FROZEN:
            raise self._conflict("is frozen; it takes no more gold items", field)

    def check_releasable(self) -> None:
        """Only a frozen round of writers' examples is released. A capture round's accepted captures
        are regression cases (the suite takes them at its freeze) and a revalidation round re-checks
        cases: in a release's train split they would become training data for the models the suite
        judges (``InvalidInput``); a round not frozen yet may still change (``Conflict``)."""
        if self.kind is not RoundKind.ADVERSARIAL:
            raise InvalidInput(
                f"round {self.id} is a {self.kind.value} round: its examples are regression cases, not "
                "new data, and are never released (a release holds writers' rounds)",
                field="rounds",
            )
        if self.state is not RoundState.FROZEN:
            raise self._conflict(
                f"is {self.state.value}: only frozen rounds are released "
                f"(freeze it with `dynaval round freeze --round {self.id}`)",
                "rounds",
            )

    @property
    def is_live(self) -> bool:
        """Whether Label Studio work (pushes, reads, escalations) still concerns the round."""
        return self.state is not RoundState.FROZEN

    def close(self, at: datetime) -> None:
        """``open`` → ``closed``: no more candidates; validation goes on."""
        if self.state is not RoundState.OPEN:
            raise self._conflict(f"is already {self.state.value}")
        self.state = RoundState.CLOSED
        self.closed_at = at

    def swap_model(self, *, folder: str, name: str, model_hash: str) -> None:
        """An open adversarial round's model is replaced (a retraining policy's ``swap``): the
        candidates scored before keep the hash of the model that scored them."""
        if self.kind is not RoundKind.ADVERSARIAL:
            raise self._conflict(f"is a {self.kind.value} round: it has no model to replace")
        if self.state is not RoundState.OPEN:
            raise self._conflict(f"is {self.state.value}: only an open round's model is replaced")
        self.model_dir, self.model_name, self.model_hash = folder, name, model_hash

    def freeze(
        self, at: datetime, *, waiting: int = 0, force: bool = False, reason: str | None = None
    ) -> None:
        """``closed`` → ``frozen``: nothing changes a decision any more.

        ``waiting`` candidates are not decided yet (waiting for votes, for their push or for the
        model): refused while there are any, unless a lead forces it, which needs a ``reason`` (the
        caller then leaves them ``unvalidated``)."""
        if self.state is RoundState.OPEN:
            raise self._conflict("is open: close it before freezing it")
        if self.state is RoundState.FROZEN:
            raise self._conflict("is already frozen")
        if force and not (reason or "").strip():
            raise InvalidInput("reason is required to force a freeze", field="reason")
        if waiting and not force:
            raise self._conflict(
                f"has {waiting} candidate{'s' if waiting != 1 else ''} still waiting for votes; "
                "wait for them, or force the freeze with a reason (they are then left unvalidated)",
                field="force",
            )
        self.state = RoundState.FROZEN
        self.frozen_at = at
