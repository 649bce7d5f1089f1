r"""The exact theory of one decoding round for the live prompts of a batch: the round's tensors
taken to float64 numpy, then :mod:`otspec.theory` (the core's numpy functions, re-exported here).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from otspec.theory import SMALL_KERNEL_ENTRIES, chain_theory, single_step_rows, single_theory, tree_expected, tree_theory

__all__ = [
    "SMALL_KERNEL_ENTRIES",
    "chain_theory",
    "round_theory",
    "round_tree_interval",
    "single_step_rows",
    "single_theory",
    "tree_expected",
    "tree_theory",
]


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


def round_tree_interval(mode, P, Q, X, live: Sequence[int], *, n_drafts: Sequence[int] | None = None, top_k: int = 8) -> dict:
    r"""The certified interval for the tree optimum :math:`T^*` of each live prompt's round (:func:`otspec.tree_interval`).

    From the round's drafted trie and the top-``top_k`` children of each drafted node (no extra
    forward pass): ``{"tree_lower": [n], "tree_upper": [n]}``. :math:`T^*` is the optimum for the
    round's i.i.d. drafts (``n`` real drafts of a prompt); a tree drawn without replacement gets NaN
    (its optimum has another coverage function, :doc:`trees`).

    Parameters
    ----------
    mode : otspec_gpu.decoding.DecodeMode
        The run's mode (a tree).
    P, Q, X : torch.Tensor
        ``[R, gamma + 1, V]``, ``[R, gamma, V]``, ``[R, gamma]`` (``R = B k``).
    live : sequence of int
        Prompts still decoding.
    n_drafts : sequence of int, optional
        Real drafts per prompt (default ``k``).
    top_k : int
        Children kept per drafted node under each model.

    Returns
    -------
    dict of str to ndarray
        ``tree_lower`` and ``tree_upper``, float64 ``[len(live)]``.
    """
    from otspec import tree_interval

    k = mode.k
    lo, up = [], []
    for b in live:
        r0, n = b * k, (k if n_drafts is None else int(n_drafts[b]))
        if mode.draft_law != "iid":
            lo.append(math.nan)
            up.append(math.nan)
            continue
        r = tree_interval(X[r0 : r0 + n].cpu().numpy(), _np(P[r0 : r0 + n]), _np(Q[r0 : r0 + n]), top_k=top_k)
        lo.append(r.lower)
        up.append(r.upper)
    return {"tree_lower": np.array(lo, dtype=np.float64), "tree_upper": np.array(up, dtype=np.float64)}
