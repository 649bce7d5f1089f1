r"""SpecTr's K-SEQ in torch (twin of ``otspec.verifiers.kseq``), with :math:`\rho^*` by batched bisection.

With i.i.d. drafts :math:`X_1..X_k \sim q` and :math:`\beta(\rho) = \sum_x \min(p(x)/\rho, q(x))`:

.. math::
    \rho^* = \text{root in } [1, k] \text{ of } f(\rho) = 1-(1-\beta(\rho))^k - \rho\beta(\rho),\qquad
    \gamma = \frac{1-(1-\beta(\rho^*))^k}{\beta(\rho^*)};

return :math:`X_i` (first i) with probability :math:`\min(1, p(X_i)/(\rho^* q(X_i)))`, else draw
:math:`Y \sim \mathrm{norm}((p - \gamma\min(p/\rho^*, q))_+)`.

:func:`rho_star` mirrors the numpy core: :math:`f` is non-increasing, ``f(1) <= 0`` returns 1,
``f(k) > 0`` returns k (impossible in exact arithmetic), otherwise it bisects in float64 until the
bracket cannot shrink and returns its *upper* end, where :math:`f \le 0` (the rule is lossless at
the returned value). Rows with :math:`p = q` get :math:`\rho^* = 1` exactly (there the root is
ill-conditioned: summing :math:`\min(p, q)` leaves :math:`1-\beta \approx 10^{-16}` and moves the
root by :math:`10^{-16/k}`). Every row bisects at once (a loop over iterations only); tokens whose ratio
:math:`p/q` has left the bracket are folded into two per-row constants, and the working set is
compacted every few iterations when it has shrunk by half. Once no ratio is left inside any row's
bracket, :math:`\beta(\rho) = A/\rho + B` there and the remaining iterations cost O(B), not O(BV).
"""

from __future__ import annotations

import torch

from otspec_gpu.verifiers.base import StepOutput, TorchVerifier, check_step, step_output
from otspec_gpu.verifiers.plan import Plan, accept_ratio, gather, plan_conditional, plan_sample, residual

__all__ = ["conditional", "kseq", "plan", "rho_star", "sample"]

_MAX_ITER = 80  # enough to reach adjacent float64 values on [1, k] for k < 2**20
_CHECK_EVERY = 4


def _one_minus_pow(beta: torch.Tensor, k: int) -> torch.Tensor:
    """:math:`1-(1-\\beta)^k` accurately for small beta; 1 for beta >= 1."""
    b = torch.clamp(beta, max=1.0)
    return torch.where(beta >= 1.0, torch.ones_like(beta), -torch.expm1(k * torch.log1p(-b)))


def rho_star(p: torch.Tensor, q: torch.Tensor, k: int) -> torch.Tensor:
    r"""The optimal division factor :math:`\rho^* \in [1, k]` per row ``[B]`` (float64).

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` target and draft probability rows,
        float32 or float64.
    k : int
        Number of i.i.d. drafts.

    Returns
    -------
    torch.Tensor
        ``[B]`` float64 :math:`\rho^*` per row (bisection of :math:`1-(1-\beta(\rho))^k = \rho\beta(\rho)`, upper end of the bracket).

    Examples
    --------
    >>> import torch
    >>> rho_star(torch.tensor([[0.5, 0.5]]), torch.tensor([[0.5, 0.5]]), 4).tolist()
    [1.0]
    """
    p = p.double()
    q = q.double()
    B = p.shape[0]
    one = torch.ones(B, dtype=torch.float64, device=p.device)
    if k == 1:
        return one
    r = p / q  # q = 0: inf (or nan when p = 0): such tokens sit on the q branch and add q = 0
    lo = one.clone()
    hi = torch.full_like(one, float(k))
    below = r <= 1.0
    band = (r > 1.0) & (r <= float(k))
    A = torch.where(below, p, 0.0).sum(-1)  # tokens always on the p / rho branch
    Bc = torch.where(below | band, 0.0, q).sum(-1)  # tokens always on the q branch
    rb = torch.where(band, r, float("inf"))  # working set: ratio inf = out of the band
    pb = torch.where(band, p, 0.0)
    qb = torch.where(band, q, 0.0)

    def f_at(rho, P_in, Q_out):
        b = (A + P_in) / rho + Bc + Q_out
        return _one_minus_pow(b, k) - rho * b

    # p == q (on normalised rows): f(1) = t - t^k with t = sum (q - p)_+ = 0 exactly, so rho* = 1;
    # summing min(p, q) instead would leave t ~ 1e-16 and move rho* by t^(1/k) (ill-conditioned)
    same = torch.clamp(q - p, min=0.0).sum(-1) == 0.0
    f_lo = torch.where(same, torch.zeros_like(lo), f_at(lo, torch.zeros_like(lo), qb.sum(-1)))
    f_hi = f_at(hi, pb.sum(-1), torch.zeros_like(hi))
    result = torch.where(f_lo <= 0.0, lo, hi)
    active = (f_lo > 0.0) & (f_hi <= 0.0)
    for it in range(_MAX_ITER):
        mid = 0.5 * (lo + hi)
        active = active & (lo < mid) & (mid < hi)
        if it % _CHECK_EVERY == 0:
            if not bool(active.any()):
                break
            if it and rb.shape[1]:  # compact the working set when it has halved (to 0 columns at the end)
                inband = torch.isfinite(rb) & active[:, None]
                m = int(inband.sum(-1).max())
                if m <= rb.shape[1] // 2:
                    sel = torch.topk(inband.to(torch.float64), m, dim=1).indices
                    rb, pb, qb = rb.gather(1, sel), pb.gather(1, sel), qb.gather(1, sel)
        inside = rb <= mid[:, None]
        P_in = torch.where(inside, pb, 0.0).sum(-1)
        Q_out = torch.where(inside, 0.0, qb).sum(-1)
        up = f_at(mid, P_in, Q_out) > 0.0  # root above mid
        lo = torch.where(active & up, mid, lo)
        hi = torch.where(active & ~up, mid, hi)
        A = torch.where(active & up, A + P_in, A)
        Bc = torch.where(active & ~up, Bc + Q_out, Bc)
        # drop the tokens that left the bracket (folded into A or Bc above)
        drop = active[:, None] & torch.where(up[:, None], inside, ~inside)
        rb = torch.where(drop, float("inf"), rb)
        pb = torch.where(drop, 0.0, pb)
        qb = torch.where(drop, 0.0, qb)
    return torch.where((f_lo > 0.0) & (f_hi <= 0.0), hi, result)


def plan(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> Plan:
    r"""The K-SEQ plan: rounds over every draft with accept ``min(1, p/(rho* q))``, one residual.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``, shared by every row of drafts) target and draft probability rows,
        float32 or float64.
    drafts : torch.Tensor
        ``[B, k]`` long i.i.d. drafts (``k = drafts.shape[1]``).

    Returns
    -------
    Plan
        ``k`` rounds, accept :math:`\min(1, p(x_j)/(\rho^* q(x_j)))`, residual :math:`\mathrm{norm}((p - \gamma \min(p/\rho^*, q))_+)`.
    """
    k = drafts.shape[1]
    # the root is ill-conditioned near p == q (a 1e-8 error in sum(p) moves rho* by 1e-4 at k = 2),
    # so the rows are renormalised in float64 first: the rule is exact for the normalised laws
    p64, q64 = p.double(), q.double()
    p64 = p64 / p64.sum(-1, keepdim=True)
    q64 = q64 / q64.sum(-1, keepdim=True)
    rho = rho_star(p64, q64, k)
    m = torch.minimum(p64 / rho[:, None], q64)
    beta = m.sum(-1)
    pos = beta > 0
    gamma = torch.where(pos, _one_minus_pow(beta, k) / torch.where(pos, beta, torch.ones_like(beta)), torch.zeros_like(beta))
    res, _ = residual(p64, gamma[:, None] * m)
    acc = accept_ratio(gather(p64, drafts), rho[:, None] * gather(q64, drafts))
    return Plan(drafts, acc, res)


def conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    r"""Exact K-SEQ output law ``[B, V]`` for i.i.d. drafts ``[B, k]`` (k = ``drafts.shape[1]``).

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``, shared by every row of drafts) target and draft probability rows,
        float32 or float64.
    drafts : torch.Tensor
        ``[B, k]`` long i.i.d. drafts (``k = drafts.shape[1]``).
    validate : bool
        Also check the values of ``p``, ``q`` and ``drafts`` (synchronises on CUDA); shapes are
        always checked.

    Returns
    -------
    torch.Tensor
        ``[B, V]``: the exact output law :math:`\pi(\cdot \mid \bar x)` of each row, in ``p``'s dtype.

    Raises
    ------
    InvalidDistributionError, ShapeMismatchError
        If ``p`` or ``q`` is malformed, or ``p``, ``q`` and ``drafts`` disagree in shape, dtype or device.
    InvalidDraftsError
        If ``drafts`` is not a long tensor, or (``validate``) holds an id outside ``[0, V)`` or a draft
        with ``q = 0``.
    InvalidDraftCountError
        If the number of drafts is not one the rule takes.

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.5, 0.5]], dtype=torch.float64); q = torch.tensor([[0.9, 0.1]], dtype=torch.float64)
    >>> conditional(p, q, torch.tensor([[0, 1]])).sum().item()
    1.0
    """
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="kseq")
    return plan_conditional(plan(p, q, drafts), p.dtype)


def sample(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, generator: torch.Generator, validate: bool = True) -> StepOutput:
    """One output token per row (accept coins and residual draws from separate ``rand`` calls).

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``, shared by every row of drafts) target and draft probability rows,
        float32 or float64.
    drafts : torch.Tensor
        ``[B, k]`` long i.i.d. drafts (``k = drafts.shape[1]``).
    generator : torch.Generator
        The only source of randomness (separate ``rand`` calls per family of uniforms).
    validate : bool
        Also check the values of ``p``, ``q`` and ``drafts`` (synchronises on CUDA); shapes are
        always checked.

    Returns
    -------
    StepOutput
        ``token`` ``[B]``, ``accepted`` ``[B]`` (the output is one of the drafts) and ``index`` (its
        first draft slot, ``-1`` if none).

    Raises
    ------
    InvalidDistributionError, ShapeMismatchError
        If ``p`` or ``q`` is malformed, or ``p``, ``q`` and ``drafts`` disagree in shape, dtype or device.
    InvalidDraftsError
        If ``drafts`` is not a long tensor, or (``validate``) holds an id outside ``[0, V)`` or a draft
        with ``q = 0``.
    InvalidDraftCountError
        If the number of drafts is not one the rule takes.
    """
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="kseq")
    return step_output(plan_sample(plan(p, q, drafts), generator), drafts)


kseq = TorchVerifier("kseq", "iid", True, sample, conditional, reference="SpecTr (Sun et al. 2023), Algorithm 2")
