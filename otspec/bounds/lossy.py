r"""The exact lossy frontier under a total-variation budget (MATH §16).

For any draft law :math:`Q` and budget :math:`\varepsilon \ge 0`, the best membership acceptance of a
verifier whose output law :math:`p'` satisfies :math:`d_{TV}(p', p) \le \varepsilon` is

.. math:: \alpha^*(\varepsilon) = \min\big(1,\ \alpha^*(p, Q) + \varepsilon\big).

*Upper bound.* For any such :math:`p'` and any token set :math:`H`, acceptance
:math:`\le \alpha^*(p', Q) \le p'(H) + 1 - Q(H^k) \le p(H) + \varepsilon + 1 - Q(H^k)`; at the
optimal cut :math:`H` of :math:`\alpha^*(p, Q)` this is :math:`\alpha^* + \varepsilon`.
*Attained* by ``lossy_optimal`` (:mod:`otspec.verifiers.step.lossy_optimal`): an optimal plan
whose rejections output a draft with probability :math:`\min(1, \varepsilon / (1 - \alpha^*))`.

The result carries both sides: the upper bound re-computed in numpy from the cut
(:math:`\min(1, p(H) + 1 - Q(H^k) + \varepsilon)`) and the lower bound from the optimum's own
certified lower bound (:math:`\min(1, \alpha^*_{\text{lower}} + \varepsilon)`), when it has one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec.bounds.multidraft import optimal_acceptance
from otspec.bounds.result import AcceptanceResult
from otspec.errors import InvalidOptionError
from otspec.laws import DraftLaw

__all__ = ["LossyFrontier", "lossy_frontier"]


@dataclass(frozen=True, eq=False)
class LossyFrontier:
    r"""The best acceptance under a TV budget, with its certificate.

    Attributes
    ----------
    eps : float
        The budget :math:`\varepsilon`.
    value : float
        :math:`\min(1, \alpha^*(p, Q) + \varepsilon)`.
    tv_spent : float
        :math:`\min(\varepsilon, 1 - \alpha^*)`: the distortion the frontier rule needs (beyond it
        the acceptance is already 1).
    upper_bound : float
        :math:`\min(1, p(H) + 1 - Q(H^k) + \varepsilon)` re-computed from the cut :math:`H`.
    lower_bound : float or None
        :math:`\min(1, \alpha^*_{\text{lower}} + \varepsilon)` from the optimum's certified lower
        bound (``None`` when that method has none).
    optimum : AcceptanceResult
        The lossless optimum :math:`\alpha^*(p, Q)` and its certificate.
    """

    eps: float
    value: float
    tv_spent: float
    upper_bound: float
    lower_bound: float | None
    optimum: AcceptanceResult

    @property
    def ok(self) -> bool:
        """True when the underlying optimum can be trusted."""
        return self.optimum.ok

    def __repr__(self) -> str:
        lo = "None" if self.lower_bound is None else f"{self.lower_bound:.12g}"
        return (
            f"LossyFrontier(eps={self.eps:g}, value={self.value:.12g}, alpha_star={self.optimum.value:.12g}, "
            f"tv_spent={self.tv_spent:.6g}, bounds=[{lo}, {self.upper_bound:.12g}], status={self.optimum.status!r})"
        )


def lossy_frontier(p: Any, law: DraftLaw, eps: float, *, method: str = "auto", memory_cap: float | None = None) -> LossyFrontier:
    r"""The exact best acceptance of any verifier within TV distance ``eps`` of the target.

    .. math:: \max_{\pi:\ d_{TV}(P_\pi, p) \le \varepsilon} P_\pi(Y \in \bar X) = \min\big(1, \alpha^*(p, Q) + \varepsilon\big).

    Parameters
    ----------
    p : array_like, shape (V,)
        Target distribution.
    law : DraftLaw
        Any draft law over the same vocabulary.
    eps : float
        TV budget, ``0 <= eps <= 1``.
    method : str
        Passed to :func:`otspec.optimal_acceptance` for :math:`\alpha^*`.
    memory_cap : float, optional
        Passed to :func:`otspec.optimal_acceptance`.

    Returns
    -------
    LossyFrontier
        The value, the TV it needs, and the two certified sides.

    Raises
    ------
    InvalidOptionError
        If ``eps`` is not a number in ``[0, 1]``.
    NotADraftLawError, InvalidDistributionError, ShapeMismatchError, UnsupportedMethodError, ProblemTooLargeError
        As :func:`otspec.optimal_acceptance`.

    Notes
    -----
    MATH §16; checked against a linear program over the transport plan with a TV constraint
    (``tests/bounds/test_lossy_frontier.py``). Under a KL budget the frontier is a convex program,
    not a line.

    Examples
    --------
    >>> import otspec
    >>> from otspec.bounds.lossy import lossy_frontier
    >>> round(lossy_frontier([0.5, 0.5], otspec.iid([0.9, 0.1], 1), 0.1).value, 12)   # 0.6 + 0.1
    0.7
    """
    try:
        e = float(eps)
    except (TypeError, ValueError):
        e = float("nan")
    if isinstance(eps, bool) or not (0.0 <= e <= 1.0):
        raise InvalidOptionError(f"eps must be a number in [0, 1] (got {eps!r}); a total-variation budget; pass a value in that range")
    res = optimal_acceptance(p, law, method=method, memory_cap=memory_cap)
    pv = np.asarray(p, dtype=np.float64)
    H = np.asarray(res.cut, dtype=np.int64)
    cut_value = float(pv[H].sum()) + 1.0 - float(law.prob_all_in(H))
    lower = None if res.lower_bound is None else min(1.0, float(res.lower_bound) + e)
    return LossyFrontier(
        eps=e,
        value=min(1.0, res.value + e),
        tv_spent=min(e, max(0.0, 1.0 - res.value)),
        upper_bound=min(1.0, cut_value + e),
        lower_bound=lower,
        optimum=res,
    )
