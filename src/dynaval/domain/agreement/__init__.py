"""dynaval's agreement engine: Krippendorff's alpha, its bootstrap interval and breakdowns. Pure, no I/O.

Votes are ``(item, annotator, label)`` triples (or :class:`VoteColumns` of arrays) with any
pattern of missing votes. :func:`round_alpha` gives alpha at the nominal, ordinal, interval or
ratio level with a 95% bootstrap interval over items; :func:`agreement_report` adds agreement per
label, per annotator (against the others' majority, and pairwise) and per item. Both equal the
``krippendorff`` package on every input it accepts, and where it returns NaN or raises on valid
data (no pairable value, a single label) they say why alpha is undefined instead.

Memory. Alpha depends on the votes only through each item's count vector (votes per label), so
the votes become sparse per-item entries, one per (item, label) that got a vote: O(votes), and
never an annotators x items matrix nor the items x labels x labels array the ``krippendorff``
package builds. On top of those O(votes) codes and entries, with L the labels in use:

* nominal: the marginals and one observed number per count pattern, O(L + patterns);
* interval: the same, the observed number from per-pattern centred moments, O(L + patterns);
* ordinal: Krippendorff's metric is the squared difference of mid-ranks, taken from the
  cumulative marginals in O(L); the observed part is one pass over the pattern entries;
* ratio: no moment form; observed disagreement sums over the label pairs present in each pattern
  (O(sum over patterns of distinct labels squared), in chunks) and the expected one is an O(L^2)
  time quadratic form in the marginals, built a block of rows at a time (O(L) memory per row).

The bootstrap (:mod:`.resampling`) draws replicates as multinomial weightings of the distinct
count patterns and evaluates a block of them with one matrix product, never a Python loop over
items; its temporaries are capped at :data:`.alpha.BLOCK_CELLS` elements.

Keeping the round's alpha current as votes arrive (docs/agreement.md). Alpha depends on the votes
only through per-item count vectors, and only through two sums over items: the marginals n_c
(pairable votes per label) and the observed disagreement, the sum over items of
c_u^T d c_u / (n_u - 1). A new, changed or withdrawn vote touches one item, so the running state
is updated by subtracting that item's term for its old count vector and adding the term for the
new one: O(k) work for nominal and interval data, O(k^2) for ratio data, k being the labels on
that item. Alpha is then 1 - (n - 1) * observed / expected, the expected part recomputed from the
marginals in O(L) (nominal, interval) or O(L^2) (ratio). Ordinal data are the one exception: their
metric moves with the marginals, so the state keeps the L x L coincidence matrix (updated in
O(k^2)) and alpha is read in O(L^2). Either way no vote triggers a pass over the round;
:class:`RunningAlpha` implements this, and the bootstrap interval is recomputed on demand by
:func:`round_alpha`.
"""

from dynaval.domain.agreement.breakdown import (
    AnnotatorAgreement,
    ItemAgreement,
    LabelAgreement,
    PairwiseAgreement,
)
from dynaval.domain.agreement.encoding import (
    LEVELS,
    Id,
    Label,
    Level,
    Values,
    VoteColumns,
    Votes,
    WriterLabels,
)
from dynaval.domain.agreement.incremental import RunningAlpha
from dynaval.domain.agreement.report import (
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
    "WriterLabels",
    "agreement_report",
    "round_alpha",
]
