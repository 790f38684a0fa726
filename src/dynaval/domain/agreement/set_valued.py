"""Agreement on set-valued answers (a multi-choice control, several taxonomy paths). Pure, no I/O.

An answer is a set of choices. :func:`masi_alpha` is Krippendorff's alpha with the MASI distance
(Passonneau 2006) exactly as nltk defines it (``nltk.metrics.distance.masi_distance``, nltk 3.10):

    d(A, B) = 1 - |A n B| / |A u B| * m,   m = 1 if A = B, 2/3 if one contains the other,
                                           1/3 if they only overlap, 0 if they are disjoint,

and alpha as nltk's ``AnnotationTask(distance=masi_distance).alpha()`` computes it: items with
fewer than two answers are left out, ``alpha = 1 - (n - 1) * sum_u o_u / sum_jl N_j N_l d(j, l)``,
``o_u = sum_jl c_uj c_ul d(j, l) / (n_u - 1)`` over the distinct sets j, l answered on item u.
Where nltk returns 1 for a single distinct answer or raises on no data, this module says why alpha
is undefined instead. With only one-element sets MASI is the nominal distance, so alpha is the
nominal alpha.

:func:`per_choice_alpha` breaks it down: for each choice, the nominal alpha of "chosen / not
chosen" over the same answers.

Memory: the answers become a sparse items x distinct-sets count matrix (O(answers)); the MASI
distances are an S x S matrix over the S distinct sets answered (a few hundred at most for a
multi-choice control in practice; 2^k - 1 at worst for k choices).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import sparse

from dynaval.domain.agreement.encoding import Id
from dynaval.domain.agreement.report import NO_PAIRABLE, NO_VOTES, interval_to_dict, round_alpha

SetVote = tuple[Id, Id, frozenset[str]]
ONE_SET = "every pairable answer is the same set ({label}), so there is no expected disagreement"
BLOCK_REPLICATES = 64


def masi_distance(a: frozenset[str], b: frozenset[str]) -> float:
    """nltk's MASI distance between two non-empty sets."""
    common = len(a & b)
    if len(a) == len(b) == common:
        m = 1.0
    elif common == min(len(a), len(b)):
        m = 2 / 3
    elif common > 0:
        m = 1 / 3
    else:
        m = 0.0
    return 1 - common / len(a | b) * m


def set_label(answer: Iterable[str]) -> str:
    """One readable string for a set (its elements sorted, joined with " + ")."""
    return " + ".join(sorted(answer))


@dataclass(frozen=True)
class SetAlpha:
    alpha: float | None
    undefined_reason: str | None
    items: int
    """Items with two or more answers."""
    pairable_values: int
    ci95: tuple[float, float] | None
    resamples: int
    defined_resamples: int
    seed: int | None

    def to_dict(self) -> dict[str, object]:
        return {
            "alpha": self.alpha,
            "undefined_reason": self.undefined_reason,
            "items": self.items,
            "pairable_values": self.pairable_values,
            **interval_to_dict(self.ci95, self.resamples, self.defined_resamples, self.seed),
        }


def masi_alpha(votes: Sequence[SetVote], *, bootstrap: int = 1000, seed: int | None = 0) -> SetAlpha:
    """Krippendorff's alpha with the MASI distance, and a 95% percentile bootstrap interval over
    items (``bootstrap`` resamples, 0 for none; ``seed`` makes them reproducible)."""
    if any(not answer for _, _, answer in votes):
        raise ValueError("a set-valued answer must hold at least one choice")
    by_item: dict[Id, list[frozenset[str]]] = {}
    for item, _annotator, answer in votes:
        by_item.setdefault(item, []).append(answer)
    pairable = [answers for answers in by_item.values() if len(answers) >= 2]
    n = sum(len(answers) for answers in pairable)

    def undefined(reason: str) -> SetAlpha:
        return SetAlpha(None, reason, len(pairable), n, None, 0, 0, seed)

    if not votes:
        return undefined(NO_VOTES)
    if not pairable:
        return undefined(NO_PAIRABLE)
    sets = sorted({answer for answers in pairable for answer in answers}, key=lambda s: sorted(s))
    if len(sets) == 1:
        return undefined(ONE_SET.format(label=repr(set_label(sets[0]))))
    code = {answer: k for k, answer in enumerate(sets)}
    distance = np.array([[masi_distance(a, b) for b in sets] for a in sets])
    rows, columns, observed_list = [], [], []
    for row, answers in enumerate(pairable):
        codes = np.array([code[answer] for answer in answers])
        rows.extend([row] * len(codes))
        columns.extend(codes.tolist())
        observed_list.append(distance[np.ix_(codes, codes)].sum() / (len(codes) - 1))
    counts = sparse.csr_matrix(
        (np.ones(len(rows)), (np.array(rows), np.array(columns))), shape=(len(pairable), len(sets))
    )
    observed = np.array(observed_list)
    alpha = _alpha(np.asarray(counts.sum(axis=0), dtype=float), observed.sum()[None], distance)[0]
    ci95 = None
    defined = 0
    if bootstrap:
        rng = np.random.default_rng(seed)
        replicates: list[npt.NDArray[np.float64]] = []
        units = len(pairable)
        for start in range(0, bootstrap, BLOCK_REPLICATES):
            block = min(BLOCK_REPLICATES, bootstrap - start)
            drawn = rng.integers(0, units, size=(block, units))
            weights = np.stack([np.bincount(row, minlength=units) for row in drawn]).astype(float)
            marginals = np.asarray((counts.T @ weights.T).T, dtype=float)
            replicates.append(_alpha(marginals, weights @ observed, distance))
        values = np.concatenate(replicates)
        values = values[np.isfinite(values)]
        defined = int(values.size)
        if defined:
            low, high = np.percentile(values, [2.5, 97.5])
            ci95 = (float(low), float(high))
    return SetAlpha(float(alpha), None, len(pairable), n, ci95, bootstrap, defined, seed)


def _alpha(
    marginals: npt.NDArray[np.float64], observed: npt.NDArray[np.float64], distance: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """Alpha for each row of marginals (replicates x sets) and its summed observed disagreement."""
    n = marginals.sum(axis=1)
    expected = np.einsum("rj,jl,rl->r", marginals, distance, marginals)
    with np.errstate(divide="ignore", invalid="ignore"):
        result: npt.NDArray[np.float64] = 1 - (n - 1) * observed / expected
    return np.where(expected > 0, result, np.nan)


@dataclass(frozen=True)
class ChoiceAgreement:
    choice: str
    chosen: int
    """Answers that include the choice."""
    alpha: float | None
    undefined_reason: str | None

    def to_dict(self) -> dict[str, object]:
        return {
            "choice": self.choice,
            "chosen": self.chosen,
            "alpha": self.alpha,
            "undefined_reason": self.undefined_reason,
        }


def per_choice_alpha(votes: Sequence[SetVote]) -> list[ChoiceAgreement]:
    """For each choice used, the nominal alpha of chosen / not chosen over all answers."""
    choices = sorted({choice for _, _, answer in votes for choice in answer})
    rows = []
    for choice in choices:
        binary = [(item, who, "chosen" if choice in answer else "not chosen") for item, who, answer in votes]
        estimate = round_alpha(binary, level="nominal", bootstrap=0)
        rows.append(
            ChoiceAgreement(
                choice=choice,
                chosen=sum(choice in answer for _, _, answer in votes),
                alpha=estimate.alpha,
                undefined_reason=estimate.undefined_reason,
            )
        )
    return rows
