"""Checks of user input shared by the torch verifiers and the decoder (twin of
:mod:`otspec._validation`).

Value checks synchronise with the device (one ``bool`` per call), which is why every caller makes
them optional (``validate=False`` in a hot loop on CUDA).
"""

from __future__ import annotations

from typing import Any

import torch

from otspec.errors import InvalidDistributionError, InvalidDraftsError, ShapeMismatchError
from otspec_gpu._tolerances import SUM_TOL

__all__ = ["check_probs", "check_rows", "check_same_device", "check_tensor_types"]


def check_rows(x: torch.Tensor, name: str) -> None:
    r"""Check that every row ``x[..., :]`` of a float32/float64 tensor is a distribution: finite,
    non-negative and summing to 1 within :data:`otspec_gpu._tolerances.SUM_TOL` for its dtype.

    One fused pass: entries that are negative or NaN are replaced by NaN and every row is summed in
    float64, so a single comparison of the row sums (NaN and inf fail it) decides, with one device
    synchronisation; the failing row is only searched for when there is one.

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
