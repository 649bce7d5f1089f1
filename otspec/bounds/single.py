r"""Single draft (k = 1): the maximal coupling."""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec._tolerances import CERTIFICATE_ATOL, ROUNDING_PER_TERM
from otspec._validation import as_distribution, check_same_vocab
from otspec.bounds.result import STATUS_CHECK_FAILED, STATUS_OPTIMAL, AcceptanceResult, MembershipPlan

__all__ = ["single_draft"]


def single_draft(p: Any, q: Any) -> AcceptanceResult:
    r"""Optimal acceptance of one draft :math:`X \sim q`: the maximal coupling.

    .. math:: \alpha^*(p, q) = \sum_x \min(p(x), q(x)) = 1 - d_{TV}(p, q),

    attained by speculative sampling (accept X w.p. :math:`\min(1, p/q)`, else draw from
    :math:`\mathrm{norm}((p-q)_+)`). The cut is :math:`H = \{x : p(x) < q(x)\}`. The returned plan
    is that coupling.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions (float64, sum to 1, same V).

    Returns
    -------
    AcceptanceResult
        ``method="closed_form"``, the cut and the coupling as a :class:`~otspec.MembershipPlan`.

    Raises
    ------
    InvalidDistributionError
        If ``p`` or ``q`` is not a distribution.
    ShapeMismatchError
        If their vocabulary sizes differ.

    Examples
    --------
    >>> import otspec
    >>> otspec.single_draft([0.5, 0.5], [0.9, 0.1]).value
    0.6
    """
    p = as_distribution(p, "p")
    q = as_distribution(q, "q")
    check_same_vocab(p, q)
    accept = np.minimum(p, q)
    value = float(accept.sum())
    cut = np.flatnonzero(p < q)
    supp = np.flatnonzero(q > 0)
    resid = p - accept
    mass = resid.sum()
    residual = resid / mass if mass > 0 else np.zeros_like(p)
    plan = MembershipPlan(
        sets=supp[:, None].astype(np.int64), set_weights=q[supp], accept=accept[supp][:, None], residual=residual, value=value
    )
    cut_val = float(p[cut].sum() + q[~np.isin(np.arange(p.size), cut)].sum())
    check = abs(cut_val - value)
    status = STATUS_OPTIMAL if check <= CERTIFICATE_ATOL else STATUS_CHECK_FAILED
    return AcceptanceResult(
        value=value,
        cut=cut,
        method="closed_form",
        status=status,
        gap=check,
        error_bound=ROUNDING_PER_TERM * p.size,
        plan=plan,
        law=f"iid(V={p.size}, k=1)",
        checks={"cut_value_minus_value": check},
        lower_bound=value,
    )
