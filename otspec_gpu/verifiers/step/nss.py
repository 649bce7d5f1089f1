r"""NSS in torch (twin of ``otspec.verifiers.nss``): ignores the drafts and outputs :math:`Y \sim p`
(any draft law).
"""

from __future__ import annotations

import torch

from otspec_gpu.sampling import categorical
from otspec_gpu.verifiers.base import StepOutput, TorchVerifier, check_step, step_output

__all__ = ["conditional", "nss", "sample"]


def conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    """Output law ``[B, V]`` of NSS: p itself, whatever the drafts.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``, shared by every row of drafts) target and draft probability rows,
        float32 or float64.
    drafts : torch.Tensor
        ``[B, k]`` long drafts (any law).
    validate : bool
        Also check the values of ``p``, ``q`` and ``drafts`` (synchronises on CUDA); shapes are
        always checked.

    Returns
    -------
    torch.Tensor
        ``[B, V]``: ``p`` broadcast over the rows (the drafts are ignored).

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
    >>> p = torch.tensor([[0.5, 0.5]]); q = torch.tensor([[1.0, 0.0]])
    >>> conditional(p, q, torch.tensor([[0, 0]])).tolist()
    [[0.5, 0.5]]
    """
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="nss")
    return p.expand(drafts.shape[0], -1).clone()


def sample(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, generator: torch.Generator, validate: bool = True) -> StepOutput:
    """One draw from p per row (one ``rand`` call).

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``, shared by every row of drafts) target and draft probability rows,
        float32 or float64.
    drafts : torch.Tensor
        ``[B, k]`` long drafts (any law).
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
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="nss")
    return step_output(categorical(p, generator, n=drafts.shape[0]), drafts)


nss = TorchVerifier("nss", "iid", True, sample, conditional, reference="Miao et al. (SpecInfer) naive sampling")
