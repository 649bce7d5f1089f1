r"""The one inverse-CDF sampler of the torch side (twin of :mod:`otspec.sampling`).

Every categorical draw in :mod:`otspec_gpu` (verifier residuals, bonus tokens, the decoder's
draft tokens and every draft law of :mod:`otspec_gpu.drafting`) goes through :func:`search_cdf`
(or :func:`invert_cdf`, for a position already scaled to the row's mass): the first index whose
cumulative weight exceeds :math:`x = \min(u S, S^-)`, :math:`S` the row total and :math:`S^-` the
float64 just below it. That index always carries positive weight (the cumulative sum steps up
there), so no token of weight 0 is ever returned, even when :math:`u S` rounds up to :math:`S`
(then the last token of positive weight is returned). Cumulative sums are taken in float64 (a float32 running sum over
:math:`V = 262\,144` tokens drifts by :math:`\sim 10^{-3}`).

Randomness: :func:`categorical` draws one float64 uniform per draw from the caller's
:class:`torch.Generator` in a single ``torch.rand`` call; :func:`sample_weights` takes uniforms the
caller drew from its own stream.
"""

from __future__ import annotations

import torch

from otspec_gpu._scratch import scratch

__all__ = ["categorical", "invert_cdf", "sample_weights", "search_cdf"]


def invert_cdf(cdf: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    r"""The inverse CDF at positions ``t`` of the cumulative weight, with the zero-weight guard.

    Parameters
    ----------
    cdf : torch.Tensor
        ``[B, V]`` float64 cumulative sums of non-negative weights (last column: the row total).
    t : torch.Tensor
        ``[B, n]`` float64 positions in ``[0, S]`` of each row (``n`` per row), or ``[n]`` with
        ``B == 1`` (``n`` positions in the one row).

    Returns
    -------
    torch.Tensor
        Long, the shape of ``t``: the first index whose cumulative sum exceeds
        :math:`\min(t, S^-)`; never a token of weight 0 (a row of total 0 returns ``V - 1``).

    Examples
    --------
    >>> import torch
    >>> cdf = torch.tensor([[0.0, 0.5, 1.0, 1.0]], dtype=torch.float64)
    >>> invert_cdf(cdf, torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)).tolist()
    [1, 2, 2]
    """
    V = cdf.shape[1]
    if t.ndim == 1:  # n positions in the one row
        total = cdf[0, -1]
        x = torch.minimum(t, torch.nextafter(total, torch.zeros_like(total)))
        return torch.searchsorted(cdf[0], x, right=True).clamp_(max=V - 1)
    total = cdf[:, -1:]  # [B, 1]
    x = torch.minimum(t, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, x, right=True).clamp_(max=V - 1)


def search_cdf(cdf: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    r"""Inverse CDF with the zero-weight guard: one token per uniform (:func:`invert_cdf` at
    :math:`u S`).

    Parameters
    ----------
    cdf : torch.Tensor
        ``[B, V]`` float64 cumulative sums of non-negative weights (last column: the row total).
    u : torch.Tensor
        ``[B]`` float64 uniforms on ``[0, 1)``, one per row; ``[B, n]``, ``n`` per row; or ``[n]``
        with ``B == 1`` (``n`` draws from the one row).

    Returns
    -------
    torch.Tensor
        Long, the shape of ``u``: the first index whose cumulative sum exceeds
        :math:`\min(u S, S^-)`; never a token of weight 0 (a row of total 0 returns ``V - 1``).

    Examples
    --------
    >>> import torch
    >>> cdf = torch.tensor([[0.0, 1.0, 1.0]], dtype=torch.float64)
    >>> search_cdf(cdf, torch.tensor([0.9999999999999999], dtype=torch.float64)).tolist()
    [1]
    """
    if u.ndim == 2:
        return invert_cdf(cdf, u * cdf[:, -1:])
    if cdf.shape[0] == 1 and u.shape[0] != 1:
        return invert_cdf(cdf, u * cdf[0, -1])
    return invert_cdf(cdf, (u * cdf[:, -1])[:, None]).squeeze(1)


def sample_weights(w: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    r"""One token per row of the non-negative weights ``w`` from the caller's uniforms ``u``.

    Parameters
    ----------
    w : torch.Tensor
        ``[B, V]`` non-negative weights (any float dtype, not necessarily normalised).
    u : torch.Tensor
        ``[B]`` uniforms on ``[0, 1)`` (or ``[n]`` with ``B == 1``), drawn by the caller.

    Returns
    -------
    torch.Tensor
        ``[B]`` (or ``[n]``) long token ids, :math:`P(y) = w_y / \sum w` (see :func:`search_cdf`).

    Examples
    --------
    >>> import torch
    >>> sample_weights(torch.tensor([[0.0, 1.0, 3.0]]), torch.tensor([0.3])).tolist()
    [2]
    """
    cdf = torch.cumsum(w, dim=-1, dtype=torch.float64, out=scratch("sample_cdf", tuple(w.shape), w.device))  # [B, V]
    return search_cdf(cdf, u.to(torch.float64))


def categorical(w: torch.Tensor, generator: torch.Generator, n: int | None = None) -> torch.Tensor:
    r"""One draw per row of the non-negative weights ``w`` ``[B, V]`` by inverse CDF, with one float64
    uniform per row from ``generator``. With ``w`` of shape ``[1, V]`` and ``n`` given, ``n``
    independent draws from that one row (O(V + n log V)).

    Parameters
    ----------
    w : torch.Tensor
        ``[B, V]`` non-negative weights, every row of positive mass.
    generator : torch.Generator
        Source of the uniforms (one ``torch.rand`` call of ``B`` (or ``n``) float64 values).
    n : int, optional
        With ``w`` of shape ``[1, V]``: the number of draws (default: one per row).

    Returns
    -------
    torch.Tensor
        ``[B]`` (or ``[n]``) long token ids, :math:`P(y) = w_y / \sum w`.

    Examples
    --------
    >>> import torch
    >>> categorical(torch.tensor([[0.0, 2.0, 0.0]]), torch.Generator().manual_seed(0), n=3).tolist()
    [1, 1, 1]
    """
    n = w.shape[0] if n is None else int(n)
    u = torch.rand(n, dtype=torch.float64, device=w.device, generator=generator)
    return sample_weights(w, u)
