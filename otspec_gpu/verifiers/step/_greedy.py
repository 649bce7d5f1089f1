"""Helpers shared by the torch verifiers of greedy drafts (:mod:`~otspec_gpu.verifiers.step.greedy_optimal`
and :mod:`~otspec_gpu.verifiers.step.spechub`)."""

from __future__ import annotations

import torch

from otspec.errors import InvalidDraftsError
from otspec_gpu.drafting import greedy_top

__all__ = ["check_greedy", "q_rest"]


def q_rest(q: torch.Tensor, top: torch.Tensor) -> torch.Tensor:
    """:math:`\\tilde q`: q with the greedy top set removed, renormalised (float64).

    Parameters
    ----------
    q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``) draft rows.
    top : torch.Tensor
        ``[B, m]`` (or ``[1, m]``) long: the greedy top set G of each row.

    Returns
    -------
    torch.Tensor
        ``[B, V]`` float64 rows :math:`q 1_{G^c} / q(G^c)` (0 where :math:`q(G^c) = 0`).
    """
    rest = q.double().scatter(1, top, 0.0)
    tot = rest.sum(-1, keepdim=True)
    return rest / torch.where(tot > 0, tot, torch.ones_like(tot))


def check_greedy(q: torch.Tensor, drafts: torch.Tensor) -> None:
    """Check that ``drafts`` can be greedy drafts of ``q``: the top-(k-1) tokens of q in the tie
    order of ``otspec.greedy``, then a random draft from the rest (never one of the top tokens,
    which the greedy drafter cannot draw twice), as the numpy law's ``sample`` check does.

    Parameters
    ----------
    q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``) draft rows.
    drafts : torch.Tensor
        ``[B, k]`` long drafts.

    Raises
    ------
    InvalidDraftsError
        If a row's first ``k - 1`` drafts are not q's top-(k-1) tokens, or its last draft is one of them.
    """
    k = drafts.shape[1]
    top = greedy_top(q, k - 1)  # [B or 1, k - 1]
    if not bool((drafts[:, :-1] == top).all()):
        raise InvalidDraftsError(
            f"greedy drafts must start with the top-{k - 1} tokens of q (larger q first, ties to the lower id); draw them with sample_drafts(q, k, 'greedy')"
        )
    again = (drafts[:, -1:] == top).any(dim=1)  # [B] the random draft repeats a top token
    if bool(again.any()):
        b = int(again.nonzero()[0, 0])
        raise InvalidDraftsError(
            f"the last greedy draft of row {b} ({int(drafts[b, -1])}) is one of the top-{k - 1} tokens of q, which the greedy drafter "
            "never draws again (it samples from q with the top set removed); draw the drafts with sample_drafts(q, k, 'greedy')"
        )
