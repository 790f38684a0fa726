"""Dawid-Skene against crowd-kit's ``DawidSkene`` on the same votes: per-item labels and posteriors.

crowd-kit stops on its own evidence bound; dynaval stops when the parameters settle. Run for the
same number of iterations (crowd-kit with ``tol=-inf`` never stops early), the two agree: the same
label for every item, posteriors and priors within ``CROWD_KIT_TOLERANCE`` (crowd-kit floors its
returned posteriors at 1e-10; everything else is rounding).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from crowdkit.aggregation import DawidSkene

from dynaval.domain.agreement.dawid_skene import dawid_skene

CROWD_KIT_TOLERANCE = 1e-9

Vote = tuple[str, str, str]


def simulated_crowd(
    *,
    seed: int,
    items: int,
    priors: list[float],
    accuracies: list[float],
    votes_per_item: int,
    spammers: int = 0,
) -> list[Vote]:
    """Annotators of the given accuracies (errors spread over the other labels, biased towards
    the next label), plus uniform spammers; each item gets ``votes_per_item`` random annotators."""
    rng = np.random.default_rng(seed)
    n_labels = len(priors)
    labels = [f"L{k}" for k in range(n_labels)]
    truth = rng.choice(n_labels, size=items, p=priors)
    skills = accuracies + [1.0 / n_labels] * spammers
    votes: list[Vote] = []
    for item in range(items):
        for annotator in rng.choice(len(skills), size=votes_per_item, replace=False):
            true = int(truth[item])
            if rng.random() < skills[annotator]:
                given = true
            elif rng.random() < 0.6:
                given = (true + 1) % n_labels
            else:
                given = int(rng.integers(n_labels))
            votes.append((f"item{item:05d}", f"annotator{annotator:02d}", labels[given]))
    return votes


CROWDS = {
    "mixed_skill_crowd": {
        "seed": 11,
        "items": 400,
        "priors": [0.3, 0.3, 0.25, 0.15],
        "accuracies": [0.95, 0.9, 0.8, 0.7, 0.65, 0.55],
        "votes_per_item": 4,
        "spammers": 2,
    },
    "imbalanced_binary_like": {
        "seed": 12,
        "items": 1500,
        "priors": [0.86, 0.09, 0.05],
        "accuracies": [0.92, 0.85, 0.8, 0.75],
        "votes_per_item": 3,
        "spammers": 1,
    },
}


def crowd_kit_fit(votes: list[Vote], iterations: int) -> DawidSkene:
    frame = pd.DataFrame(votes, columns=["task", "worker", "label"])
    return DawidSkene(n_iter=iterations, tol=-math.inf).fit(frame)


@pytest.mark.parametrize("name", sorted(CROWDS))
def test_settled_labels_and_posteriors_match_crowd_kit(name: str) -> None:
    votes = simulated_crowd(**CROWDS[name])  # type: ignore[arg-type]
    ours = dawid_skene(votes)
    assert ours.converged and ours.parameter_change < ours.tolerance
    theirs = crowd_kit_fit(votes, ours.iterations)
    assert len(theirs.loss_history_) == ours.iterations
    their_labels = theirs.labels_.reindex(list(ours.items))
    assert list(their_labels) == list(ours.aggregated)
    their_posteriors = theirs.probas_.reindex(index=list(ours.items), columns=list(ours.labels)).to_numpy()
    np.testing.assert_allclose(ours.posteriors, their_posteriors, rtol=0, atol=CROWD_KIT_TOLERANCE)
    their_priors = theirs.priors_.reindex(list(ours.labels)).to_numpy()
    np.testing.assert_allclose(ours.priors, their_priors, rtol=0, atol=CROWD_KIT_TOLERANCE)
    winning = their_posteriors[np.arange(len(ours.items)), [ours.labels.index(x) for x in ours.aggregated]]
    np.testing.assert_allclose(ours.winning_posteriors(), winning, rtol=0, atol=CROWD_KIT_TOLERANCE)


@pytest.mark.parametrize("name", sorted(CROWDS))
def test_crowd_kit_default_stop_is_earlier_than_settled(name: str) -> None:
    """crowd-kit's own stopping rule ends where dynaval's parameters are still moving."""
    votes = simulated_crowd(**CROWDS[name])  # type: ignore[arg-type]
    frame = pd.DataFrame(votes, columns=["task", "worker", "label"])
    stopped = len(DawidSkene(n_iter=100, tol=1e-6).fit(frame).loss_history_)
    settled = dawid_skene(votes)
    assert stopped < settled.iterations
    early = dawid_skene(votes, max_iterations=stopped, tolerance=1e-6)
    assert not early.converged and early.parameter_change >= 1e-6


def test_iteration_cap_is_reported_and_likelihood_never_falls() -> None:
    votes = simulated_crowd(**CROWDS["mixed_skill_crowd"])  # type: ignore[arg-type]
    likelihoods = [dawid_skene(votes, max_iterations=n, tolerance=0.0).log_likelihood for n in range(1, 12)]
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(likelihoods))
    capped = dawid_skene(votes, max_iterations=2)
    assert (capped.iterations, capped.converged) == (2, False)
    assert capped.to_dict()["converged"] is False
