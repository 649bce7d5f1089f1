r"""Logits to probabilities: one transform, applied identically to the target and the draft.

Applying temperature / top-k / top-p to one model and not the other silently breaks losslessness
(the verifier must see the distributions the drafts were actually sampled from), so the decoding
harness passes both models' logits through :func:`probs_from_logits` with the same arguments.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from otspec.errors import InvalidDistributionError, UnsupportedMethodError

__all__ = ["probs_from_logits"]


# long-function: a long numpydoc docstring on the processing order; the code is short
def probs_from_logits(
    logits: Any, *, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None, dtype: torch.dtype | None = None
) -> torch.Tensor:
    r"""Probabilities ``[..., V]`` from logits ``[..., V]``, in this order: temperature, top-k, top-p.

    .. math:: \pi(x) \propto \exp(\ell(x)/T)\,1\{x \in K\}\,1\{x \in P\}

    * ``temperature`` T > 0 divides the logits; ``T == 0`` returns the one-hot argmax (ties go to
      the lowest token id), ignoring top-k / top-p.
    * ``top_k``: keep every token whose logit is at least the k-th largest (tokens tied with the
      k-th are all kept, as in ``transformers``' top-k warper).
    * ``top_p``: on the tempered, top-k-truncated distribution sorted by decreasing probability
      (ties: lower token id first), keep the shortest prefix whose mass reaches ``top_p`` (a token
      is kept iff the mass strictly before it is ``< top_p``; the most likely token is always kept).

    Parameters
    ----------
    logits : Tensor, shape (..., V)
    temperature : float, >= 0
    top_k : int >= 1 or None
    top_p : float in (0, 1] or None
    dtype : torch.dtype, optional
        Output dtype (default: the logits' dtype when it is float32/float64, else float32). All
        arithmetic is done in this dtype.

    Returns
    -------
    Tensor, shape (..., V), rows summing to 1.

    Raises
    ------
    UnsupportedMethodError
        If ``dtype`` is not float32 or float64.
    InvalidDistributionError
        If ``logits`` has no vocabulary axis or holds NaN, or ``temperature``, ``top_k`` or
        ``top_p`` is out of range.

    Examples
    --------
    >>> import torch
    >>> probs_from_logits(torch.tensor([[0.0, 0.0, 2.0]]), temperature=0).tolist()
    [[0.0, 0.0, 1.0]]
    >>> probs_from_logits(torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64), top_k=2).tolist()
    [[0.5, 0.5, 0.0]]
    """
    # Over 80 lines only through this docstring (the order of the three transforms and their tie rules).
    if not isinstance(logits, torch.Tensor):
        logits = torch.as_tensor(logits)
    if dtype is None:
        dtype = logits.dtype if logits.dtype in (torch.float32, torch.float64) else torch.float32
    if dtype not in (torch.float32, torch.float64):
        raise UnsupportedMethodError(f"dtype must be torch.float32 or torch.float64 (got {dtype}); pick one of those")
    if logits.ndim < 1 or logits.shape[-1] < 1:
        raise InvalidDistributionError(
            f"logits must have shape [..., V] with V >= 1 (got {tuple(logits.shape)}); pass one row of logits per position"
        )
    t = float(temperature)
    if not math.isfinite(t) or t < 0:
        raise InvalidDistributionError(f"temperature must be a finite number >= 0 (got {temperature}); use 0 for greedy decoding")
    V = logits.shape[-1]
    if top_k is not None and (int(top_k) != top_k or top_k < 1):
        raise InvalidDistributionError(f"top_k must be an integer >= 1 or None (got {top_k}); pass None to disable it")
    if top_p is not None and not (0.0 < float(top_p) <= 1.0):
        raise InvalidDistributionError(f"top_p must lie in (0, 1] (got {top_p}); pass None or 1.0 to disable it")
    x = logits.to(dtype)
    if bool(torch.isnan(x).any()):
        raise InvalidDistributionError("logits contain NaN; check the model output")
    if t == 0.0:
        arg = torch.argmax(x, dim=-1, keepdim=True)  # first maximal index = lowest token id
        return torch.zeros_like(x).scatter_(-1, arg, 1.0)
    x = x / t
    if top_k is not None and int(top_k) < V:
        kth = torch.topk(x, int(top_k), dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if top_p is not None and float(top_p) < 1.0:
        srt = torch.sort(probs, dim=-1, descending=True, stable=True)
        before = torch.cumsum(srt.values, dim=-1) - srt.values  # mass strictly before each sorted token
        keep_sorted = before < float(top_p)
        keep = torch.zeros_like(keep_sorted).scatter_(-1, srt.indices, keep_sorted)
        probs = torch.where(keep, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs
