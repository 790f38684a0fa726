"""dynaval's agreement engine: Krippendorff's alpha, its bootstrap interval and breakdowns. Pure, no I/O.

Votes are ``(item, annotator, label)`` triples (or :class:`VoteColumns` of arrays) with any
pattern of missing votes. :func:`round_alpha` gives alpha at the nominal, ordinal, interval or
ratio level with a 95% bootstrap interval over items; :func:`agreement_report` adds agreement per
label, per annotator (against the others' majority, and pairwise) and per item. Both equal the
``krippendorff`` package on every input it accepts, and where it returns NaN or raises on valid
data (no pairable value, a single label) they say why alpha is undefined instead.

How it stays small. Alpha depends on the votes only through each item's count vector (votes per
label), so votes become sparse per-item entries, O(votes), and never an annotators x items or
items x labels x labels array (the ``krippendorff`` package builds the latter). Memory by level,
on top of the O(votes) codes and entries: nominal needs the marginals and one observed number per
item pattern, O(L); interval the same with per-pattern centred moments, O(L); ordinal turns
Krippendorff's metric into squared differences of mid-ranks taken from the cumulative marginals,
O(L) (plus one gather over the entries per evaluation); ratio has no moment form, so observed
disagreement sums over label pairs present in each pattern and expected disagreement is an
O(L^2)-time quadratic form computed in row blocks of O(L) memory. Bootstrap replicates are
weightings of the distinct count patterns, drawn from a multinomial and evaluated together with
matrix algebra, never a Python loop over items (see :mod:`.bootstrap`).

Keeping the round's alpha current as votes arrive. Alpha is a function of a few sums over items:
the marginals ``n_c`` (pairable votes per label) and the observed disagreement
``sum_u c_u^T d c_u / (n_u - 1)`` (for ordinal data the coincidence matrix instead, since its
metric moves with the marginals). A new or changed vote touches one item: subtract that item's old
contribution (its count vector before the vote), add the new one, and alpha is
``1 - (n - 1) * observed / expected`` with the expected part recomputed from the marginals in
O(L) (nominal, interval), O(L^2) (ratio) or O(L^2) with the coincidence matrix (ordinal). So
each vote costs O(labels on that item), not a pass over the round, and the state is O(L) (O(L^2)
for ordinal and for ratio's metric). :mod:`.incremental` implements it; the bootstrap interval, which
needs the pattern frequencies, is refreshed on demand from the same per-item counts.
"""

from dynaval.domain.agreement_engine.breakdown import (
    AnnotatorAgreement,
    ItemAgreement,
    LabelAgreement,
    PairwiseAgreement,
)
from dynaval.domain.agreement_engine.encoding import LEVELS, Id, Label, Level, Values, VoteColumns, Votes
from dynaval.domain.agreement_engine.incremental import RunningAlpha
from dynaval.domain.agreement_engine.report import (
    AgreementReport,
    AlphaEstimate,
    agreement_report,
    round_alpha,
)

__all__ = [
    "LEVELS",
    "AgreementReport",
    "AlphaEstimate",
    "AnnotatorAgreement",
    "Id",
    "ItemAgreement",
    "Label",
    "LabelAgreement",
    "Level",
    "PairwiseAgreement",
    "RunningAlpha",
    "Values",
    "VoteColumns",
    "Votes",
    "agreement_report",
    "round_alpha",
]
