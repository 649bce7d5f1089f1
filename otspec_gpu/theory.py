r"""The exact theory of one decoding round for the live prompts of a batch: the round's tensors
taken to float64 numpy, then :mod:`otspec.theory` (the core's numpy functions, re-exported here).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from otspec.theory import SMALL_KERNEL_ENTRIES, chain_theory, single_step_rows, single_theory, tree_expected, tree_theory

__all__ = ["SMALL_KERNEL_ENTRIES", "chain_theory", "round_theory", "single_step_rows", "single_theory", "tree_expected", "tree_theory"]


def _np(t) -> np.ndarray:
    return t.detach().to("cpu").double().numpy()


def round_theory(mode, P, Q, X, live: Sequence[int], *, n_drafts: Sequence[int] | None = None, rule_for=None) -> dict:
    """Theory for the live prompts of one round, as ``{column: float64 array [len(live)]}``.

    ``P`` [R, gamma+1, V], ``Q`` [R, gamma, V], ``X`` [R, gamma] (``R = B * k`` rows, prompt ``b``
    owns rows ``b*k .. b*k+k-1``). The values are exact expectations given the drafts: they do not
    depend on the round's realized outcome.

    Parameters
    ----------
    mode : otspec_gpu.decoding.DecodeMode
        The run's mode, rule, draft count ``k`` and draft law.
    P, Q, X : torch.Tensor
        The round's target and draft conditionals and the drafted tokens (shapes above).
    live : sequence of int
        Prompts still decoding.
    n_drafts : sequence of int, optional
        Real drafts per prompt (default ``k`` each): a prompt with ``n < k`` (a short draft
        support) is evaluated on its first ``n`` rows.
    rule_for : callable, optional
        ``rule_for(n)``, the rule that verified ``n`` drafts (default: the mode's rule).

    Returns
    -------
    dict of str to ndarray
        One float64 array ``[len(live)]`` per theory column (NaN where a record lacks it).
    """
    k = mode.k
    recs = []
    for b in live:
        r0, n = b * k, (k if n_drafts is None else int(n_drafts[b]))
        rule = mode.rule if rule_for is None else rule_for(n)
        if mode.mode == "chain":
            recs.append(chain_theory(_np(P[r0]), _np(Q[r0]), X[r0].cpu().numpy(), rule))
        elif mode.mode == "single":
            law = mode.draft_law if rule == mode.rule else "iid"  # the token fallback: one draft of a point mass
            recs.append(single_theory(_np(P[r0, 0]), _np(Q[r0, 0]), X[r0 : r0 + n, 0].cpu().numpy(), rule, law))
        else:
            recs.append(tree_theory(_np(P[r0 : r0 + n]), _np(Q[r0 : r0 + n]), X[r0 : r0 + n].cpu().numpy(), rule))
    keys = sorted({key for r in recs for key in r})
    return {key: np.array([r.get(key, math.nan) for r in recs], dtype=np.float64) for key in keys}
