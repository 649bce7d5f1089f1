r"""Back end ``method="subsets"``: the dual :math:`1 + \min_H [P(H) - Q(H^k)]` by brute force over
all :math:`2^V` token sets, the oracle for tiny vocabularies (V <= :data:`SUBSETS_MAX_V`).
:math:`Q(H^k)` for every H comes from one zeta transform of the law's set probabilities.
"""

from __future__ import annotations

import numpy as np

from otspec._tolerances import ROUNDING_PER_TERM
from otspec.bounds.certificate import CutAnswer
from otspec.laws import DraftLaw
from otspec.laws.enumeration import subset_sums

__all__ = ["SUBSETS_MAX_V", "solve", "subset_sums"]

#: Brute force over 2^V subsets is the oracle for tiny vocabularies only.
SUBSETS_MAX_V = 20


def solve(p: np.ndarray, law: DraftLaw, memory_cap: float | None) -> CutAnswer:
    """Brute force over all :math:`2^V` token sets (V <= :data:`SUBSETS_MAX_V`).

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution (validated).
    law : DraftLaw
        Any draft law (non-i.i.d. laws are enumerated first).
    memory_cap : float or None
        Bytes, for the law's enumeration (already checked by the caller).

    Returns
    -------
    CutAnswer
        The minimising set and its value.
    """
    V = law.V
    P = subset_sums(p)
    Qall = law.subset_prob_all_in(memory_cap=memory_cap)  # Q(H^k) for every H: the law's cut function
    vals = P + 1.0 - Qall
    m = int(np.argmin(vals))
    value = float(vals[m])
    cut = np.flatnonzero([(m >> b) & 1 for b in range(V)]).astype(np.int64)
    reason = "dual only: brute force over every cut gives the exact value and its cut, no coupling"
    return CutAnswer("subsets", value, cut, ROUNDING_PER_TERM * max(V, law.num_tuples()), lower_reason=reason)
