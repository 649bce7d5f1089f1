"""Checks of user input shared by the torch verifiers and the decoder (twin of
:mod:`otspec._validation`).

Value checks synchronise with the device (one ``bool`` per call for valid input), which is why
every caller makes them optional (``validate=False`` in a hot loop on CUDA).
"""

from __future__ import annotations

from typing import Any

import torch

from otspec.errors import InvalidDistributionError, InvalidDraftsError, ShapeMismatchError
from otspec_gpu._tolerances import SUM_TOL

__all__ = ["ROW_SUM_BLOCK", "check_probs", "check_rows", "check_same_device", "check_tensor_types", "row_sums"]


#: Entries per block of the fast row sum of :func:`check_rows`: the block sums' worst-case rounding
#: error, :math:`\gamma_{64} \approx 3.8 \cdot 10^{-6}` of the row mass in float32, is a small
#: fraction of the float32 tolerance (1e-4), so almost every valid row is decided by the fast pass.
ROW_SUM_BLOCK = 64


def _gamma(n: int, u: float) -> float:
    r"""Higham's :math:`\gamma_n = n u / (1 - n u)`: the relative error bound of ``n`` roundings."""
    return n * u / (1.0 - n * u)


def row_sums(x: torch.Tensor) -> tuple[torch.Tensor, float]:
    r"""Row sums of ``x`` ``[..., V]`` in blocks, with a rigorous bound on their relative error.

    Each block of :data:`ROW_SUM_BLOCK` consecutive entries is summed in ``x``'s own dtype (no
    float64 copy of ``x``); the block sums, and the ``r < c`` entries left over, are summed in
    float64. For non-negative entries the result :math:`\hat s` of a row of true sum :math:`s`
    satisfies

    .. math::

        |\hat s - s| \le \beta s, \qquad
        \beta = \gamma_c(u) + \gamma_{m + r + 1}(u_{64}) \, (1 + \gamma_c(u)),

    with :math:`c` the block size, :math:`m = \lfloor V / c \rfloor` blocks, :math:`u` the unit
    roundoff of ``x``'s dtype (:math:`2^{-24}` for float32), :math:`u_{64} = 2^{-53}` and
    :math:`\gamma_n(u) = n u / (1 - n u)`. Why: a sum of :math:`c` numbers computed by *any* order
    or tree of additions (whatever torch's kernel does, in the dtype or wider) rounds each term at
    most :math:`c` times, which gives :math:`\gamma_c \sum |x_i|` (Higham 2002, sec. 4.2, one
    rounding added for a wider accumulator stored back); the float64 stage adds the second term on
    the block sums, whose absolute values total at most :math:`(1 + \gamma_c) s`; with
    :math:`x \ge 0`, :math:`\sum |x_i| = s`.

    Parameters
    ----------
    x : torch.Tensor
        ``[..., V]`` float32 or float64.

    Returns
    -------
    (torch.Tensor, float)
        ``[...]`` float64 row sums and :math:`\beta`.

    References
    ----------
    N. J. Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., SIAM, 2002, ch. 4.

    Examples
    --------
    >>> import torch
    >>> s, beta = row_sums(torch.full((2, 100), 0.01))
    >>> bool(((s - 1).abs() <= beta * 1.01).all()), beta < 1e-5
    (True, True)
    """
    c, V = ROW_SUM_BLOCK, x.shape[-1]
    m = V // c
    r = V - m * c
    s = x[..., : m * c].reshape(*x.shape[:-1], m, c).sum(-1).sum(-1, dtype=torch.float64)  # [...]
    if r:
        s = s + x[..., m * c :].sum(-1, dtype=torch.float64)
    u = torch.finfo(x.dtype).eps / 2
    g_c = _gamma(c, u)
    return s, g_c + _gamma(m + r + 1, 2.0**-53) * (1.0 + g_c)


def check_rows(x: torch.Tensor, name: str) -> None:
    r"""Check that every row ``x[..., :]`` of a float32/float64 tensor is a distribution: finite,
    non-negative and summing to 1 within :data:`otspec_gpu._tolerances.SUM_TOL` for its dtype.

    **Fast pass** (one device synchronisation, no float64 copy of ``x``): the row minima and the
    blocked row sums :math:`\hat s` of :func:`row_sums`, whose error is at most
    :math:`E = \beta \hat s / (1 - \beta)` on a non-negative row (:math:`|\hat s - s| \le \beta s`
    and :math:`s \le \hat s / (1 - \beta)`). Every row with minimum :math:`\ge 0` and
    :math:`|\hat s - 1| + E \le \mathrm{tol}` has a true sum within the tolerance and passes.
    NaN and inf fail this comparison.

    **Exact pass**, only when some row is not decided (a bad value, a row off by more than the
    tolerance, or one within :math:`E` of the tolerance's edge): entries that are negative or NaN
    are replaced by NaN and every row is summed in float64 (error :math:`\le \gamma_V(u_{64})`,
    ~3e-11 at V = 262 144); that comparison decides and the failing row is reported. So a row
    within the tolerance passes and a row off by more than the tolerance (plus the float64 sum's
    error) fails, exactly as with a float64 sum of every row, at the cost of two float32 passes
    over ``x`` for valid input (measured 10x cheaper on CPU at B = 64, V = 49 152,
    ``experiments/bench/bench_torch_chains.py``).

    Parameters
    ----------
    x : torch.Tensor
        ``[..., V]`` float32 or float64 probability rows (any number of leading dimensions).
    name : str
        Argument name for the messages (``"p"``, ``"q"``).

    Raises
    ------
    InvalidDistributionError
        If an entry is NaN, infinite or negative, or a row does not sum to 1 within the tolerance.

    Examples
    --------
    >>> import torch
    >>> check_rows(torch.tensor([[[0.25, 0.75]]]), "p")
    """
    if not x.numel():
        return
    tol = SUM_TOL[x.dtype]
    s_hat, beta = row_sums(x)
    # E bounds |s_hat - s|; 4 u64 covers the float64 rounding of this comparison itself
    err = s_hat * (beta / (1.0 - beta)) + 4 * 2.0**-53
    sure = (x.amin(-1) >= 0) & ((s_hat - 1.0).abs() + err <= tol)  # NaN compares False
    if bool(sure.all()):
        return
    s = torch.where(x >= 0, x, float("nan")).sum(-1, dtype=torch.float64)  # [...] NaN where a value is bad
    ok = (s - 1.0).abs() <= tol
    if bool(ok.all()):
        return
    if not bool(torch.isfinite(x).all()) or bool((x < 0).any()):
        raise InvalidDistributionError(
            f"{name} must be finite and non-negative in every row; pass probabilities, not logits (see probs_from_logits)"
        )
    where = tuple(int(i) for i in (~ok).nonzero()[0])
    dev = float((s - 1.0).abs().max())
    raise InvalidDistributionError(
        f"every row of {name} must sum to 1 (row {list(where)} is off by {dev:.3g} > {tol:g} for {x.dtype}); normalise it first"
    )


def check_probs(x: Any, name: str, *, validate: bool = True) -> torch.Tensor:
    """``x`` as a ``[B, V]`` float32/float64 tensor of probability rows (values checked if ``validate``).

    Parameters
    ----------
    x : torch.Tensor
        The probability rows to check.
    name : str
        Argument name for the messages (``"p"``, ``"q"``).
    validate : bool
        Also check the values (:func:`check_rows`: finite, non-negative, rows summing to 1).

    Returns
    -------
    torch.Tensor
        ``x`` itself.

    Raises
    ------
    InvalidDistributionError
        If ``x`` is not a float32/float64 tensor, or (``validate``) a value or row sum is invalid.
    ShapeMismatchError
        If ``x`` is not two-dimensional ``[B, V]``.
    """
    if not isinstance(x, torch.Tensor):
        raise InvalidDistributionError(f"{name} must be a torch.Tensor (got {type(x).__name__}); convert it with torch.as_tensor")
    if x.dtype not in (torch.float32, torch.float64):
        raise InvalidDistributionError(f"{name} must be float32 or float64 (got {x.dtype}); cast it with .float() or .double()")
    if x.ndim != 2 or x.shape[1] < 1:
        raise ShapeMismatchError(f"{name} must have shape [B, V] (got {tuple(x.shape)}); add a batch dimension with {name}[None]")
    if validate:
        check_rows(x, name)
    return x


def check_tensor_types(p: Any, q: Any, drafts: Any) -> None:
    """Check the types of a multi-token problem: three tensors, ``p`` and ``q`` of one float32 or
    float64 dtype, integer ``drafts`` (the shapes are the caller's: chain and tree differ).

    Parameters
    ----------
    p, q : torch.Tensor
        Target and draft conditionals.
    drafts : torch.Tensor
        Drafted tokens.

    Raises
    ------
    ShapeMismatchError
        If one of the three is not a tensor.
    InvalidDistributionError
        If ``p`` and ``q`` do not share a float32 or float64 dtype.
    InvalidDraftsError
        If ``drafts`` is not an integer tensor.
    """
    for name, t in (("p", p), ("q", q), ("drafts", drafts)):
        if not isinstance(t, torch.Tensor):
            raise ShapeMismatchError(f"{name} must be a torch.Tensor (got {type(t).__name__}); convert it with torch.as_tensor")
    if p.dtype not in (torch.float32, torch.float64) or q.dtype != p.dtype:
        raise InvalidDistributionError(
            f"p and q must share a float32 or float64 dtype (got {p.dtype} and {q.dtype}); cast both with .to(dtype)"
        )
    if drafts.dtype.is_floating_point or drafts.dtype == torch.bool or drafts.is_complex():
        raise InvalidDraftsError(f"drafts must be an integer tensor (got {drafts.dtype}); cast it with .long()")


def check_same_device(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> None:
    """Check that ``p``, ``q`` and ``drafts`` live on one device.

    Parameters
    ----------
    p, q, drafts : torch.Tensor
        The problem's tensors.

    Raises
    ------
    ShapeMismatchError
        If they are on different devices.
    """
    if p.device != q.device or drafts.device != p.device:
        raise ShapeMismatchError(
            f"p, q and drafts must be on one device (got {p.device}, {q.device}, {drafts.device}); move them with .to(device)"
        )
