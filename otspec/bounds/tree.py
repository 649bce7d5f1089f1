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

:func:`tree_optimum` is the front door. ``method="node"`` solves the polynomial node LP of
:doc:`trees` (one variable per prefix, Hall conditions over antichains separated exactly; see
:mod:`otspec.bounds.tree_node`) and certifies it with the dual of :doc:`trees` (Theorem 3);
``method="trie"`` solves the full-information LP above by enumerating drafted tries (exponential
in ``k``; the independent reference, and the only method for drafts without replacement with
``k >= 2``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otspec import models as _models
from otspec import prefixes
from otspec._tolerances import CERTIFICATE_ATOL, ERROR_BOUND_MAX, ROUNDING_PER_TERM
from otspec._validation import as_int_in_range
from otspec.bounds.block import BlockOptimumResult, solve_path_lp
from otspec.bounds.result import STATUS_CHECK_FAILED, STATUS_OPTIMAL, STATUS_SOLVER_FAILED, BlockPlan
from otspec.errors import UnsupportedMethodError
from otspec.trees import draft_trees

__all__ = ["tree_optimum", "TreeOptimumResult", "METHODS"]

#: ``tree_optimum`` methods: ``"auto"`` is ``"node"`` where it applies, else ``"trie"``.
METHODS = ("auto", "node", "trie")


@dataclass(frozen=True, eq=False)
class TreeOptimumResult:
    r"""The tree optimum :math:`T^*`: the largest :math:`E[\tau]` of any lossless verifier of ``k`` drafted sequences.

    Attributes
    ----------
    value : float
        :math:`T^*` (the certified primal value: :math:`\sum_u A(u)` of a feasible node solution, or
        the trie LP's objective).
    method : str
        ``"node"`` or ``"trie"``.
    status : str
        ``"optimal"``; ``"check_failed"`` or ``"solver_failed"`` when the value must not be trusted.
    gamma, V, k : int
        Draft length, vocabulary size, number of drafted sequences.
    replacement : bool
        i.i.d. drafts (``True``) or distinct first tokens (``False``).
    upper_bound : float
        A certified upper bound on :math:`T^*` re-computed in numpy (the Theorem-3 dual of
        :doc:`trees` for ``"node"``, the LP dual for ``"trie"``).
    gap : float
        ``upper_bound - value``.
    error_bound : float
        Bound on the numerical error of ``value``.
    checks : mapping
        Residual of every plain-numpy re-check (name -> float).
    node_weights : tuple of ndarray or None
        ``"node"``: :math:`A(u) = P(\text{accepted prefix passes } u)` per depth, ``node_weights[d]``
        of shape ``(V**d,)`` in lexicographic order (``node_weights[0] = [1]``).
    cut_weights : tuple of ndarray or None
        ``"node"``: the dual's :math:`\beta(u) \ge 0` per depth (``cut_weights[0]`` unused).
    plan : BlockPlan or None
        ``"trie"``: the LP's optimal coupling of drafted tries and emitted blocks.
    solver_info : str
        HiGHS' last model status and, for ``"node"``, the cutting-plane rounds.
    """

    value: float
    method: str
    status: str
    gamma: int
    V: int
    k: int
    replacement: bool = True
    upper_bound: float = float("nan")
    gap: float = 0.0
    error_bound: float = 0.0
    checks: Mapping[str, float] = field(default_factory=dict)
    node_weights: tuple | None = None
    cut_weights: tuple | None = None
    plan: BlockPlan | None = None
    solver_info: str = ""

    @property
    def ok(self) -> bool:
        """True when the value can be trusted (status ``"optimal"``)."""
        return self.status == STATUS_OPTIMAL

    @property
    def block_efficiency(self) -> float:
        """:math:`T^* + 1`, tokens emitted per target call."""
        return self.value + 1.0

    def __repr__(self) -> str:
        return (
            f"TreeOptimumResult(value={self.value:.12g}, method={self.method!r}, status={self.status!r}, "
            f"k={self.k}, gamma={self.gamma}, V={self.V}, replacement={self.replacement}, gap={self.gap:.2e})"
        )

    def to_dict(self) -> dict:
        """JSON-ready summary (the arrays and the plan are left out).

        Returns
        -------
        dict
            Every scalar field, plus ``block_efficiency``, as plain Python types.
        """
        return {
            "value": float(self.value),
            "block_efficiency": float(self.value + 1.0),
            "method": self.method,
            "status": self.status,
            "gamma": self.gamma,
            "V": self.V,
            "k": self.k,
            "replacement": bool(self.replacement),
            "upper_bound": float(self.upper_bound),
            "gap": float(self.gap),
            "error_bound": float(self.error_bound),
            "checks": {k: float(v) for k, v in self.checks.items()},
            "solver_info": self.solver_info,
        }


# long-function: the front door: validation, method dispatch and the certified result in one readable place
def tree_optimum(
    p_model: Any,
    q_model: Any,
    k: int,
    gamma: int,
    *,
    method: str = "auto",
    replacement: bool = True,
    memory_cap: float | None = None,
) -> TreeOptimumResult:
    r"""The tree optimum :math:`T^*`: the largest :math:`E[\tau]` of any lossless verifier of ``k`` drafted sequences.

    .. math::
        T^* = \max \sum_{u \ne \emptyset} A(u) \quad \text{s.t.} \quad A(uy) \le M_b(y \mid u)\, A(u),
        \quad A(\emptyset) = 1, \quad \sum_{r \in R} A(r) \le 1 - (1 - M_s(R))^k
        \ \text{for every antichain } R

    (:doc:`trees`, Theorem 1): :math:`A(u)` is the chance that the accepted prefix passes the prefix
    :math:`u`; an antichain is a set of prefixes no two on one path.

    Parameters
    ----------
    p_model, q_model : model
        Target :math:`M_b` and draft :math:`M_s` (:mod:`otspec.models`).
    k, gamma : int
        Number of drafted sequences and their length.
    method : {"auto", "node", "trie"}
        ``"node"``: the node LP by cutting planes with exact separation
        (:func:`otspec.bounds.tree_node.solve_node_lp`), i.i.d. drafts (and ``k = 1``);
        polynomial in the :math:`\sum_i V^i` prefixes, independent of ``k``.
        ``"trie"``: the full-information LP over every drafted trie (:math:`V^{k\gamma}` of them).
        ``"auto"``: ``"node"`` where it applies, else ``"trie"``.
    replacement : bool
        i.i.d. drafts (``True``) or distinct first tokens drawn without replacement (``False``;
        ``"node"`` covers it only for ``k = 1``: the Hall conditions then involve the coverage
        function of that law, whose exact separation is not known, see :doc:`trees`).
    memory_cap : float, optional
        Bytes; larger problems raise :class:`~otspec.errors.ProblemTooLargeError`.

    Returns
    -------
    TreeOptimumResult
        ``value``, ``upper_bound``, ``gap``, ``status`` and the checks. ``"node"``: the primal is
        re-checked in numpy (the chain rule exactly, the Hall conditions by the exact separation) and
        the upper bound is the Theorem-3 dual evaluated in numpy at the LP's cut weights.

    Raises
    ------
    UnsupportedMethodError
        If ``method`` is unknown, or ``"node"`` is asked for drafts without replacement with ``k >= 2``.
    NotAnIntegerError, InvalidDraftCountError
        If ``k`` or ``gamma`` is not an integer ``>= 1`` (or ``k`` exceeds the first-token support
        without replacement).
    InvalidDistributionError, ShapeMismatchError
        If a model is invalid or the two vocabularies differ.
    ProblemTooLargeError
        If an enumeration or the LP exceeds its cap or ``memory_cap``.

    References
    ----------
    Sun et al., "Block Verification Accelerates Speculative Decoding" (ICLR 2025) for ``k = 1``;
    SpecTr (NeurIPS 2023) for the setting of k drafted sequences; :doc:`trees` for Theorems 1-3.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.bounds.tree import tree_optimum
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> round(tree_optimum(p, q, 1, 2).value * 9, 9)
    11.0
    >>> r = tree_optimum(p, q, 2, 2)
    >>> r.ok and abs(r.value - tree_optimum(p, q, 2, 2, method="trie").value) < 1e-9
    True
    """
    if method not in METHODS:
        raise UnsupportedMethodError(f"method must be one of {METHODS} (got {method!r}); 'auto' picks the node LP where it applies")
    k = as_int_in_range(k, "k")
    gamma = as_int_in_range(gamma, "gamma")
    replacement = bool(replacement)
    node_applies = replacement or k == 1
    if method == "node" and not node_applies:
        raise UnsupportedMethodError(
            f"method='node' needs i.i.d. drafts or k = 1 (got replacement=False, k = {k}): the Hall conditions of drafts "
            "without replacement have no known exact separation; use method='trie'"
        )
    if method == "trie" or (method == "auto" and not node_applies):
        r = _trie_lp(p_model, q_model, k, gamma, replacement=replacement, memory_cap=memory_cap)
        return TreeOptimumResult(
            value=r.value,
            method="trie",
            status=r.status,
            gamma=r.gamma,
            V=r.V,
            k=r.k,
            replacement=replacement,
            upper_bound=r.value + r.gap,
            gap=r.gap,
            error_bound=r.error_bound,
            checks=r.checks,
            plan=r.plan,
            solver_info=r.solver_info,
        )
    return _node(p_model, q_model, k, gamma, replacement, memory_cap)


def _node(p_model: Any, q_model: Any, k: int, gamma: int, replacement: bool, memory_cap: float | None) -> TreeOptimumResult:
    """The node LP and its plain-numpy certificate."""
    from otspec.bounds import tree_node

    table = prefixes.enumerate_prefixes(p_model, q_model, gamma, memory_cap=memory_cap)
    sol = tree_node.solve_node_lp(table, k)
    A = sol.A
    V = table.V
    value = float(sum(a.sum() for a in A[1:]))
    chain = max(float(np.maximum(A[d] - (A[d - 1][:, None] * table.p_cond[d - 1]).ravel(), 0.0).max()) for d in range(1, gamma + 1))
    hall, _ = tree_node.antichain_violation(table, A, k)
    upper = tree_node.dual_bound(table, sol.beta, k)
    gap = upper - value
    n_terms = sum(a.size for a in A)
    rounding = ROUNDING_PER_TERM * n_terms * (gamma + 1)
    checks = {
        "chain_rule": chain,
        "hall": hall,
        "negative_gap": max(0.0, -gap - rounding),
        "gap": abs(gap),
        "rounds": float(sol.rounds),
        "cuts": float(sol.cuts),
        "polished": float(sol.polished),
    }
    error_bound = abs(gap) + (chain + hall) * n_terms + rounding
    good = sol.ok and max(chain, hall, checks["negative_gap"], abs(gap)) <= CERTIFICATE_ATOL and error_bound <= ERROR_BOUND_MAX
    status = STATUS_OPTIMAL if good else (STATUS_SOLVER_FAILED if not sol.ok else STATUS_CHECK_FAILED)
    for a in A:
        a.setflags(write=False)
    for b in sol.beta:
        b.setflags(write=False)
    return TreeOptimumResult(
        value=value,
        method="node",
        status=status,
        gamma=gamma,
        V=V,
        k=k,
        replacement=replacement,
        upper_bound=upper,
        gap=gap,
        error_bound=error_bound,
        checks=checks,
        node_weights=tuple(A),
        cut_weights=tuple(sol.beta),
        solver_info=f"{sol.info}; {sol.rounds} cutting-plane rounds, {sol.cuts} tangent blocks",
    )


def _trie_lp(
    p_model: Any, q_model: Any, k: int, gamma: int, *, replacement: bool = True, memory_cap: float | None = None
) -> BlockOptimumResult:
    """The full-information trie LP (module docstring), as a :class:`~otspec.BlockOptimumResult`."""
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
