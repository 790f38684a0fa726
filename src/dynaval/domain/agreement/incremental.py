"""Alpha kept current as votes arrive: running sums updated per changed item, no pass over the round.

Alpha depends on the votes only through the marginals ``n_c`` of the pairable values and the
observed disagreement ``sum_u c_u^T d c_u / (n_u - 1)`` (see :mod:`.alpha`). Both are sums over
items, so when a vote arrives, changes or is withdrawn, only its item's term changes: subtract the
item's term for its votes before, add the term for its votes after. That costs O(k) for nominal
and interval data and O(k^2) for ratio data, k being the labels on the item; reading alpha costs
O(L) (nominal, interval) or O(L^2) (ratio: its metric has no moment form).

Ordinal data differ: the metric is the squared distance between mid-ranks, which move with the
marginals, so the state keeps the coincidence matrix itself (O(L^2), updated in O(k^2)) and
reading alpha costs O(L^2): ``sum_ck o_ck (r_c - r_k)^2 = 2 sum_c n_c r_c^2 - 2 r^T o r``.

The state is immutable; each update returns a new one (copying O(L), or O(L^2) for ordinal data).
Sums drift by rounding as terms are added and removed (about 1e-16 relative per update);
:func:`.round_alpha` recomputes from scratch and adds the bootstrap interval.

>>> state = RunningAlpha.start(level="nominal", values=["pos", "neg"])
>>> state = state.replace_item(before=[], after=["pos", "pos"])
>>> state = state.replace_item(before=[], after=["neg", "pos"])
>>> state.alpha is None, state.undefined_reason is None
(False, True)
>>> state.alpha  # krippendorff.alpha(value_counts=[[2, 0], [1, 1]], level_of_measurement="nominal")
0.0
>>> state = state.replace_item(before=["neg", "pos"], after=["neg", "neg"])
>>> state.alpha
1.0
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from dynaval.domain.agreement.alpha import ratio_distance
from dynaval.domain.agreement.encoding import (
    Domain,
    FloatArray,
    Label,
    Level,
    Values,
    check_level,
    check_values,
    label_codes,
)
from dynaval.domain.agreement.report import NO_PAIRABLE, ONE_LABEL, RATIO_ZERO


@dataclass(frozen=True)
class RunningAlpha:
    """Running sums of one round's votes, from which alpha follows at any time."""

    level: Level
    domain: Domain
    marginals: FloatArray
    """Pairable values per label."""
    observed: float
    """Sum over items of ``c^T d c / (n - 1)`` (not used for ordinal data)."""
    coincidences: FloatArray | None
    """The coincidence matrix (ordinal data only)."""
    items: int
    """Items with two or more votes."""

    @classmethod
    def start(cls, *, level: Level = "nominal", values: Values) -> RunningAlpha:
        """An empty round; ``values`` as for :func:`.round_alpha` (required: the label set is fixed)."""
        checked = check_level(level)
        domain = check_values(checked, values)
        if domain is None:
            raise ValueError("a running alpha needs values, the round's labels")
        size = len(domain.labels)
        coincidences = np.zeros((size, size)) if checked == "ordinal" else None
        return cls(checked, domain, np.zeros(size), 0.0, coincidences, 0)

    def replace_item(self, *, before: Sequence[Label], after: Sequence[Label]) -> RunningAlpha:
        """The state after one item's votes went from ``before`` to ``after`` (labels, any order)."""
        codes = label_codes(self.domain)
        old, new = self._counts(before, codes), self._counts(after, codes)
        marginals = self.marginals.copy()
        coincidences = None if self.coincidences is None else self.coincidences.copy()
        observed = self.observed
        for counts, sign in ((old, -1.0), (new, 1.0)):
            votes = sum(counts.values())
            if votes < 2:
                continue
            for code, count in counts.items():
                marginals[code] += sign * count
            if coincidences is not None:
                for first, a in counts.items():
                    for second, b in counts.items():
                        coincidences[first, second] += (
                            sign * (a * b - (a if first == second else 0)) / (votes - 1)
                        )
            else:
                observed += sign * self._observed(counts, votes)
        items = self.items + (sum(new.values()) >= 2) - (sum(old.values()) >= 2)
        return replace(self, marginals=marginals, observed=observed, coincidences=coincidences, items=items)

    @property
    def pairable_values(self) -> int:
        return round(float(self.marginals.sum()))

    @property
    def alpha(self) -> float | None:
        return self._alpha()[0]

    @property
    def undefined_reason(self) -> str | None:
        return self._alpha()[1]

    def _alpha(self) -> tuple[float | None, str | None]:
        n_c = np.round(self.marginals)  # counts: undo the rounding drift
        total = float(n_c.sum())
        if self.items == 0:
            return None, NO_PAIRABLE
        used = np.flatnonzero(n_c)
        if used.size < 2:
            return None, ONE_LABEL.format(label=self.domain.labels[int(used[0])])
        if self.level == "nominal":
            expected = float((n_c * (total - n_c)).sum())
            observed = self.observed
        elif self.level == "ordinal":
            assert self.coincidences is not None
            ranks = np.cumsum(n_c) - n_c / 2 - total / 2
            expected = 2 * total * float((n_c * (ranks - (n_c @ ranks) / total) ** 2).sum())
            observed = 2 * float(n_c @ ranks**2) - 2 * float(ranks @ self.coincidences @ ranks)
        else:
            assert self.domain.numbers is not None
            numbers = self.domain.numbers[used]
            weights = n_c[used]
            if self.level == "interval":
                mean = float(weights @ numbers) / total
                expected = 2 * total * float((weights * (numbers - mean) ** 2).sum())
            else:
                expected = float(weights @ ratio_distance(numbers[:, None], numbers[None, :]) @ weights)
            observed = self.observed
        if expected <= 0:
            return None, RATIO_ZERO
        return 1 - (total - 1) * observed / expected, None

    def _counts(self, labels: Sequence[Label], codes: dict[Label, int]) -> Counter[int]:
        if isinstance(labels, str | bytes):
            raise ValueError(f"an item's votes must be a sequence of labels, not the string {labels!r}")
        outside = [label for label in labels if isinstance(label, bool) or label not in codes]
        if outside:
            raise ValueError(f"labels outside values: {outside!r}")
        return Counter(codes[label] for label in labels)

    def _observed(self, counts: Counter[int], votes: int) -> float:
        if self.level == "nominal":
            return sum(c * (votes - c) for c in counts.values()) / (votes - 1)
        assert self.domain.numbers is not None
        numbers = self.domain.numbers
        if self.level == "interval":
            mean = sum(c * numbers[code] for code, c in counts.items()) / votes
            spread = sum(c * (numbers[code] - mean) ** 2 for code, c in counts.items())
            return float(2 * votes * spread / (votes - 1))
        codes = np.fromiter(counts.keys(), dtype=np.intp)
        weights = np.fromiter(counts.values(), dtype=np.float64)
        distance = ratio_distance(numbers[codes][:, None], numbers[codes][None, :])
        return float(weights @ distance @ weights) / (votes - 1)
