r"""The tree optimum: the largest :math:`E[\tau]` of any lossless verifier of ``k`` drafted sequences.

A draft tree is ``k`` sequences of length :math:`\gamma` (i.i.d. :math:`\sim M_s`, or with distinct
first tokens drawn without replacement; see :mod:`otspec.verifiers.tree`). A one-iteration verifier
sees the drafted tree :math:`T` (and every conditional of both models) and emits a block
:math:`O = (z^\tau, y)` whose accepted prefix :math:`z^\tau` is a path of :math:`T` (a node of its
trie at depth :math:`\tau`). The full-information *tree LP* optimises over the joint law
:math:`\pi(T, \tau, z^\tau, y) \ge 0`:

.. math::
    \max \sum \tau\, \pi \quad \text{s.t.} \quad
    \sum_{\tau, z, y} \pi(T, \tau, z, y) = Q(T), \qquad
    \sum_{T, \tau \le \gamma} \pi(T, \tau, z^\tau, z_{\tau+1})\, M_b(z_{\tau+2..\gamma+1} \mid z^{\tau+1}) = M_b(z^{\gamma+1})
    \ \ \forall z^{\gamma+1},

i.e. the emitted block extended by the target to :math:`\gamma + 1` tokens has the target's joint
law, which is equivalent to the losslessness criterion of :doc:`block` (marginalise the extension
one position at a time). Trees with the same trie are merged (constraints and objective depend on
the trie only). With ``k = 1`` this is exactly the block LP of :func:`otspec.block_optimum`.

No published tree verifier is proven to reach this optimum; it upper-bounds SpecTr over sequences,
recursive rejection over the tree, and every other lossless rule that sees the same drafts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec import models as _models
from otspec import prefixes
from otspec._validation import as_int_in_range
from otspec.bounds.block import BlockOptimumResult, solve_path_lp
from otspec.trees import draft_trees

__all__ = ["tree_optimum"]


def tree_optimum(
    p_model: Any, q_model: Any, k: int, gamma: int, *, replacement: bool = True, memory_cap: float | None = None
) -> BlockOptimumResult:
    r"""Solve the full-information tree LP for ``k`` drafted sequences of length ``gamma``.

    Parameters
    ----------
    p_model, q_model : model
        Target and draft models (:mod:`otspec.models`).
    k, gamma : int
        Number of drafted sequences and their length.
    replacement : bool
        i.i.d. drafts (``True``) or distinct first tokens drawn without replacement (``False``).
    memory_cap : float, optional
        Bytes; the LP size is estimated first and larger problems raise
        :class:`~otspec.errors.ProblemTooLargeError` with the size.

    Returns
    -------
    BlockOptimumResult
        ``method="lp"``, ``k``, ``value`` (certified in numpy: draft marginal, target law, dual
        feasibility, duality gap), ``joint_coupling_bound`` of the single chain (for reference only).

    Raises
    ------
    NotAnIntegerError, InvalidDraftCountError
        If ``k`` or ``gamma`` is not an integer ``>= 1``, or ``k`` exceeds the first-token support
        without replacement.
    InvalidDistributionError, ShapeMismatchError
        If a model is invalid or the two vocabularies differ.
    ProblemTooLargeError
        If the enumeration of draft trees or the LP exceeds its cap or ``memory_cap``.

    References
    ----------
    Sun et al., "Block Verification Accelerates Speculative Decoding" (ICLR 2025) for the k = 1
    case; SpecTr (NeurIPS 2023) for the sequence setting of k drafts.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.bounds.tree import tree_optimum
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> round(tree_optimum(p, q, 1, 2).value * 9, 9)
    11.0
    """
    k = as_int_in_range(k, "k")
    gamma = as_int_in_range(gamma, "gamma")
    p_model = _models.as_model(p_model, name="p_model")
    q_model = _models.as_model(q_model, V=p_model.V, name="q_model")
    trees, weights = draft_trees(q_model, k, gamma, replacement=bool(replacement))
    V = p_model.V
    table = prefixes.enumerate_prefixes(p_model, q_model, gamma, memory_cap=memory_cap)
    # Merge trees by trie (the set of distinct drafted paths).
    power = V ** np.arange(gamma - 1, -1, -1, dtype=np.int64)
    leaf = trees @ power  # (M, k) lexicographic index of every drafted path at depth gamma
    keys = np.sort(leaf, axis=1)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    w = np.bincount(inverse.ravel(), weights=weights, minlength=uniq.shape[0])
    nodes = []
    for row in uniq:
        leaves = np.unique(row)
        nodes.append([np.unique(leaves // V ** (gamma - t)) for t in range(gamma + 1)])
    return solve_path_lp(
        table,
        w,
        nodes,
        k=k,
        memory_cap=memory_cap,
        what=f"the tree LP at V = {V}, k = {k}, gamma = {gamma} ({uniq.shape[0]:,} distinct tries)",
    )
