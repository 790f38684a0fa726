"""Assigning a release's examples to splits: writer-disjoint, sticky, text-disjoint, strong dev/test.

The rules, in the order they apply:

1. An example an earlier release (the parent) already placed keeps its place: its split, or its
   being withheld. A later release never rewrites its parent.
2. A writer's split kind (train, dev or test) is decided once, for the task type, and kept: every
   example of theirs in every later round goes to the same kind (Geva et al. 2019: models learn the
   writer, so a test writer must never be seen in training).
3. New writers are grouped with every writer they share a text with (the whole input, or an NLI
   premise; see :func:`~dynaval.domain.releases.release.text_keys`), so that no text lands in two splits.
   A group that touches an already-placed writer or text takes that kind. The other groups are
   assigned by scikit-learn's ``StratifiedGroupKFold`` over the examples' labels: with K folds
   (10 for shares of 10 %, fewer when there are fewer groups), the first folds go to test, the next
   to dev, the rest to train. Groups with no strongly validated example go to train directly: they
   could give dev or test nothing.
4. A dev or test writer's examples that are not strongly validated are withheld (not in train,
   which would put the writer in two splits). So is an example whose text already sits in a split
   of another kind (only possible between writers placed by earlier releases).

Near-duplicates (:mod:`dynaval.domain.health.near_duplicates`) follow the shared-text rules: a cluster of
near-duplicates is a key like a text, so new writers who share one are grouped (rule 3), and an
example whose cluster already sits in a split of another kind is withheld (rule 4), never moved:
a writer stays in one kind, so near-duplicates never break writer-disjointness. An earlier
release's test split places its clusters as test: a new example near one of them goes to test
with its group, or, when its writer is already a train or dev writer, is withheld.
5. With ``balance_dev_test``, each dev and test split keeps, per (label, model prediction) cell,
   as many examples as its smallest cell (a seeded choice); the rest are withheld.
"""

from __future__ import annotations

import random
import warnings
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from dynaval.domain.releases.release import SplitKind, SplitRule, split_name

_KINDS = (SplitKind.TRAIN, SplitKind.DEV, SplitKind.TEST)


@dataclass(frozen=True, slots=True)
class SplitInput:
    """What the assignment needs of one accepted example."""

    example_id: str
    round_index: int
    writer: str
    label: str
    prediction: str | None
    agreeing_validators: int
    text_keys: tuple[str, ...]
    near_keys: tuple[str, ...] = ()
    """The example's near-duplicate cluster (:func:`~dynaval.domain.health.near_duplicates.clusters`):
    kept together as a shared text is, but withheld for its own reason."""

    @property
    def keys(self) -> tuple[str, ...]:
        return self.text_keys + self.near_keys


@dataclass(frozen=True)
class FixedPlace:
    """An example's place in the parent release: a split name, or None (withheld) with the reason."""

    split: str | None
    withheld_reason: str | None = None


WEAK = "not strongly validated, and its writer is a dev or test writer"
TEXT_IN_OTHER_SPLIT = "its text is already in a split of another kind"
NEAR_DUPLICATE = (
    "a near-duplicate of an example in a split of another kind (or an earlier release's test split)"
)
BALANCE = "left out to balance dev and test by label x model prediction"


@dataclass
class SplitPlan:
    splits: dict[str, str] = field(default_factory=dict)
    """Example id -> split name, for every example in the release."""
    withheld: dict[str, str] = field(default_factory=dict)
    """Example id -> why it is not in the release."""
    new_writers: dict[str, SplitKind] = field(default_factory=dict)
    """Writers placed by this release (to be kept by every later one)."""

    def shares_reached(self, writers: Mapping[str, SplitKind]) -> dict[str, dict[str, float | int]]:
        """Writers and examples per split kind, as counts and shares of the release."""
        examples = Counter(split.split("_r", 1)[0] for split in self.splits.values())
        writer_kinds = Counter(kind.value for kind in writers.values())
        total_examples = sum(examples.values()) or 1
        total_writers = sum(writer_kinds.values()) or 1
        return {
            kind.value: {
                "writers": writer_kinds.get(kind.value, 0),
                "writer_share": round(writer_kinds.get(kind.value, 0) / total_writers, 4),
                "examples": examples.get(kind.value, 0),
                "example_share": round(examples.get(kind.value, 0) / total_examples, 4),
            }
            for kind in _KINDS
        }


class _Groups:
    """Union-find over writers."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, node: str) -> str:
        parent = self.parent.setdefault(node, node)
        while parent != node:
            grand = self.parent[parent]
            self.parent[node] = grand
            node, parent = parent, grand
        return node

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def _fold_kinds(folds: int, rule: SplitRule) -> list[SplitKind]:
    """Which kind each of ``folds`` folds gives its groups: test first, then dev, then train."""
    _train, dev, test = rule.shares
    n_test = max(1, round(folds * test)) if test > 0 else 0
    n_dev = max(1, round(folds * dev)) if dev > 0 else 0
    if n_test + n_dev >= folds:  # too few folds for every kind: train keeps at least one
        n_test, n_dev = (1 if test > 0 else 0), (1 if dev > 0 else 0)
        if n_test + n_dev >= folds:
            return [SplitKind.TRAIN] * folds
    return [SplitKind.TEST] * n_test + [SplitKind.DEV] * n_dev + [SplitKind.TRAIN] * (folds - n_test - n_dev)


def _assign_groups(groups: Mapping[str, list[SplitInput]], rule: SplitRule) -> dict[str, SplitKind]:
    """New groups of writers -> split kind, by ``StratifiedGroupKFold`` over their examples' labels."""
    from sklearn.model_selection import StratifiedGroupKFold

    kinds: dict[str, SplitKind] = {}
    eligible = sorted(
        g
        for g, examples in groups.items()
        if any(e.agreeing_validators >= rule.min_agreeing_validators for e in examples)
    )
    for group in groups:
        if group not in eligible:
            kinds[group] = SplitKind.TRAIN
    # One row per example, as integer columns (a million examples are placed): the labels numbered
    # in sorted order, as scikit-learn numbers them itself, so that the folds are those of the labels.
    label_codes = {
        label: code for code, label in enumerate(sorted({e.label for g in eligible for e in groups[g]}))
    }
    sizes = [len(groups[g]) for g in eligible]
    y = np.fromiter(
        (label_codes[e.label] for g in eligible for e in groups[g]), dtype=np.int64, count=sum(sizes)
    )
    smallest = min((s for s in rule.shares[1:] if s > 0), default=0.0)
    # No more folds than groups, nor than the commonest label has examples: scikit-learn refuses
    # more folds than every label has members (a small round of a few writers).
    most_of_one_label = int(np.bincount(y).max()) if y.size else 0
    folds = min(round(1 / smallest) if smallest else 1, len(eligible), most_of_one_label)
    if folds < 2:
        kinds.update({g: SplitKind.TRAIN for g in eligible})
        return kinds
    index_groups = np.repeat(np.arange(len(eligible)), sizes)
    splitter = StratifiedGroupKFold(n_splits=folds, shuffle=True, random_state=rule.seed)
    fold_kinds = _fold_kinds(folds, rule)
    with warnings.catch_warnings():
        # "The least populated class in y has only n members": expected with few examples per label.
        warnings.simplefilter("ignore", UserWarning)
        for fold, (_train_idx, held_idx) in enumerate(splitter.split(y, y, index_groups)):
            for group in np.unique(index_groups[held_idx]).tolist():
                kinds[eligible[group]] = fold_kinds[fold]
    return kinds


def plan_splits(
    examples: Sequence[SplitInput],
    *,
    writer_kinds: Mapping[str, SplitKind],
    fixed: Mapping[str, FixedPlace],
    rule: SplitRule,
    placed_near: Mapping[str, SplitKind] | None = None,
) -> SplitPlan:
    """Place every example (see the module's rules). ``writer_kinds`` are the writers earlier
    releases placed; ``fixed`` the examples the parent release placed; ``placed_near`` the
    near-duplicate clusters that already hold an example of a kind elsewhere (an earlier release's
    test split: a train example near one is withheld, never trained on)."""
    plan = SplitPlan()
    kinds: dict[str, SplitKind] = dict(writer_kinds)
    ordered = sorted(examples, key=lambda e: (e.round_index, e.example_id))
    new = [e for e in ordered if e.example_id not in fixed]
    # Texts already placed, by kind: the parent's examples.
    placed_keys: dict[str, SplitKind] = dict(placed_near or {})
    for e in ordered:
        place = fixed.get(e.example_id)
        if place is None:
            continue
        if place.split is None:
            plan.withheld[e.example_id] = place.withheld_reason or "withheld by the parent release"
        else:
            plan.splits[e.example_id] = place.split
            for key in e.keys:
                placed_keys.setdefault(key, SplitKind(place.split.split("_r", 1)[0]))

    # 3. Group new writers with the writers and texts they share.
    # Writers are the nodes; a text joins each writer who has it to the first writer who had it.
    groups = _Groups()
    first_writer: dict[str, str] = {}
    for e in new:
        groups.find(e.writer)
        for key in e.keys:
            groups.union(e.writer, first_writer.setdefault(key, e.writer))
    del first_writer
    members: dict[str, list[SplitInput]] = defaultdict(list)
    known: dict[str, Counter[SplitKind]] = defaultdict(Counter)
    for e in new:
        root = groups.find(e.writer)
        members[root].append(e)
        if e.writer in kinds:
            known[root][kinds[e.writer]] += 1
        for key in e.keys:
            if key in placed_keys:
                known[root][placed_keys[key]] += 1
    to_assign = {root: group for root, group in members.items() if not known[root]}
    group_kinds = _assign_groups(to_assign, rule)
    for root, counts in known.items():
        if counts:  # the most common known kind; ties go to the kind earlier in train, dev, test
            group_kinds[root] = max(_KINDS, key=lambda k: (counts[k], -_KINDS.index(k)))
    for e in new:
        if e.writer not in kinds:
            kinds[e.writer] = plan.new_writers[e.writer] = group_kinds[groups.find(e.writer)]

    # 4. Weak dev/test examples, and texts in a split of another kind, are withheld.
    chosen: list[SplitInput] = []
    for e in new:
        kind = kinds[e.writer]
        if kind is not SplitKind.TRAIN and e.agreeing_validators < rule.min_agreeing_validators:
            plan.withheld[e.example_id] = WEAK
            continue
        if any(placed_keys.get(key, kind) is not kind for key in e.text_keys):
            plan.withheld[e.example_id] = TEXT_IN_OTHER_SPLIT
            continue
        if any(placed_keys.get(key, kind) is not kind for key in e.near_keys):
            plan.withheld[e.example_id] = NEAR_DUPLICATE
            continue
        for key in e.keys:
            placed_keys.setdefault(key, kind)
        chosen.append(e)

    # 5. DynaSent's balance of dev and test.
    if rule.balance_dev_test:
        chosen = _balanced(chosen, kinds, rule, plan)
    names: dict[tuple[SplitKind, int], str] = {}  # one string per split, not one per example
    for e in chosen:
        where = (kinds[e.writer], e.round_index)
        name = names.get(where)
        if name is None:
            name = names[where] = split_name(*where)
        plan.splits[e.example_id] = name
    return plan


def _balanced(
    chosen: list[SplitInput], kinds: Mapping[str, SplitKind], rule: SplitRule, plan: SplitPlan
) -> list[SplitInput]:
    cells: dict[tuple[str, tuple[str, str | None]], list[SplitInput]] = defaultdict(list)
    for e in chosen:
        kind = kinds[e.writer]
        if kind is not SplitKind.TRAIN:
            cells[(split_name(kind, e.round_index), (e.label, e.prediction))].append(e)
    by_split: dict[str, list[list[SplitInput]]] = defaultdict(list)
    for (split, _cell), group in sorted(cells.items(), key=lambda item: (item[0][0], str(item[0][1]))):
        by_split[split].append(group)
    dropped: set[str] = set()
    rng = random.Random(rule.seed)
    for _split, groups in sorted(by_split.items()):
        keep = min(len(g) for g in groups)
        for group in groups:
            extra = rng.sample(group, len(group) - keep)
            for e in extra:
                dropped.add(e.example_id)
                plan.withheld[e.example_id] = BALANCE
    return [e for e in chosen if e.example_id not in dropped]
