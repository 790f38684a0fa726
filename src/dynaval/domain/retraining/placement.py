"""Writers placed in a split kind when their first example is accepted, so that a model can be
trained on newly accepted examples before any release exists, and no example that is, or could
later be, in a dev or test split or in the regression suite is ever trained on.

The rules are those of a release (:mod:`dynaval.domain.releases.splits`), taken one accepted
example at a time:

1. A writer's kind is decided once, at their first accepted example, and kept (sticky).
2. A new writer whose example shares a key (the whole text, an NLI premise, or a near-duplicate
   cluster) with an example already placed takes that example's kind; when its keys are placed in
   several kinds, the held-out kind wins (test, then dev): a writer who could be tested on is never
   trained on.
3. Otherwise the writer's kind is drawn from the split shares by a keyed hash of the task type,
   the writer and the seed: the same writer gets the same kind on every machine, in any order.
4. An example whose key already sits in another kind is withheld: a train writer's example near a
   held-out text is never trained on, and a held-out writer's example near a trained one never
   tested on. Keys held out from the start (the regression suite's cases, earlier releases' dev
   and test splits) count as held out.

Only the examples :meth:`Ledger.accept` places as train may be trained on.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from dynaval.domain.releases.release import SplitKind, SplitRule

HELD_OUT_FIRST = (SplitKind.TEST, SplitKind.DEV, SplitKind.TRAIN)
OTHER_KIND = "a text of it, or a near-duplicate, sits in another kind of split"


@dataclass(frozen=True)
class Placed:
    """Where one accepted example went: its writer's kind, or withheld (``withheld`` says why)."""

    kind: SplitKind
    withheld: str | None = None

    @property
    def trainable(self) -> bool:
        return self.kind is SplitKind.TRAIN and self.withheld is None


def drawn_kind(task_type: str, writer: str, rule: SplitRule) -> SplitKind:
    """A new writer's kind by the shares (rule 3): a keyed hash mapped onto [0, 1)."""
    digest = hashlib.sha256(f"{rule.seed}\x1f{task_type}\x1f{writer}".encode()).digest()
    point = int.from_bytes(digest[:8], "big") / 2**64
    _train, dev, test = rule.shares
    if point < test:
        return SplitKind.TEST
    if point < test + dev:
        return SplitKind.DEV
    return SplitKind.TRAIN


@dataclass
class Ledger:
    """The placements of a task type's writers and keys, as they are accepted."""

    task_type: str
    rule: SplitRule = field(default_factory=SplitRule)
    writers: dict[str, SplitKind] = field(default_factory=dict)
    keys: dict[str, SplitKind] = field(default_factory=dict)

    def hold_out(self, keys: Iterable[str]) -> None:
        """Keys that must never be trained on: the suite's cases, earlier dev and test splits."""
        for key in keys:
            if self.keys.get(key) is not SplitKind.TEST:
                self.keys[key] = SplitKind.TEST

    def place_writers(self, kinds: Mapping[str, SplitKind]) -> None:
        """Writers an earlier release or placement placed: they keep their kind."""
        self.writers.update(kinds)

    def accept(self, writer: str, keys: Iterable[str]) -> Placed:
        """Place an accepted example of ``writer`` with its ``keys`` (rules 1, 2 and 4)."""
        keys = tuple(dict.fromkeys(keys))
        kind = self.writers.get(writer)
        if kind is None:
            known = {self.keys[key] for key in keys if key in self.keys}
            if known:
                kind = next(k for k in HELD_OUT_FIRST if k in known)
            else:
                kind = drawn_kind(self.task_type, writer, self.rule)
            self.writers[writer] = kind
        if any(self.keys.get(key, kind) is not kind for key in keys):
            return Placed(kind, withheld=OTHER_KIND)
        for key in keys:
            self.keys.setdefault(key, kind)
        return Placed(kind)
