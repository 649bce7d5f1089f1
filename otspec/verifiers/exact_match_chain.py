r"""Strict exact match in chain form, as engines run it (vLLM's strict rule, mlx-lm, MTP stacks).

A draft :math:`X^\gamma \sim M_s` is checked position by position: draw
:math:`Y_i \sim M_b(\cdot \mid x^{i-1})` with fresh randomness; if :math:`Y_i = x_i` the draft is
accepted and the walk goes on, otherwise :math:`Y_i` is emitted and the block stops. When every
draft matches, a bonus token :math:`Y \sim M_b(\cdot \mid x^\gamma)` is emitted. Every emitted
token is a draw from the target conditional, so the rule is lossless; given the path

.. math:: P(\tau \ge i \mid x^\gamma) = \prod_{j=1}^{i} M_b(x_j \mid x^{j-1}), \qquad
          Y \mid \tau = t < \gamma \ \sim\ M_b(\cdot \mid x^t) \text{ restricted to } y \ne x_{t+1},

and :math:`E[\tau] = \sum_{i=1}^{\gamma} \sum_{x^i} \prod_{j \le i} M_s(x_j \mid x^{j-1})\, M_b(x_j \mid x^{j-1})`,
the chain form of :math:`\sum_y p(y) q(y)` (:mod:`otspec.verifiers.step.exact_match`), far below
token verification's :math:`\prod \min(M_s, M_b)` at temperature :math:`> 0`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec._docs import fill_doc
from otspec.verifiers.chain import (
    ChainKernel,
    check_path_arrays,
    check_sample_inputs,
    drafted_targets,
    kernel_from_table,
    kernel_table,
    path_conditionals,
    prefix_expected_accepted,
)

__all__ = ["kernel", "conditional_law", "expected_accepted", "expected_accepted_given_path", "sample"]


def _path_law(P: np.ndarray, Qc: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(gamma + 1, V): P(tau = t, Y = y | path) for chain exact match."""
    g, V = Qc.shape
    a = P[np.arange(g), x]
    reach = np.concatenate([[1.0], np.cumprod(a)])  # P(tau >= t)
    law = np.zeros((g + 1, V))
    for t in range(g):
        miss = P[t].copy()
        miss[x[t]] = 0.0  # the mismatching draw Y_t itself is emitted
        law[t] = reach[t] * miss
    if P.shape[0] > g:
        law[g] = reach[g] * P[g]
    return law


@fill_doc
def expected_accepted_given_path(p_conds: Any, q_conds: Any, drafts: Any, *, validate: bool = True) -> float:
    r"""Exact :math:`E[\tau \mid X^\gamma = x^\gamma] = \sum_{i=1}^{\gamma} \prod_{j \le i} M_b(x_j \mid x^{j-1})`.

    Parameters
    ----------
    p_conds : array, shape (gamma, V) or (gamma + 1, V)
        Target conditionals along the path.
    q_conds : array, shape (gamma, V)
        Draft conditionals along the path (checked only: the rule does not read them).
    drafts : array of int, shape (gamma,)
        The drafted path.
    validate : bool
        Check every row sums to 1.

    Returns
    -------
    float
        In ``[0, gamma]``.

    Raises
    ------
    {path_raises}

    Examples
    --------
    >>> from otspec.verifiers import exact_match_chain
    >>> exact_match_chain.expected_accepted_given_path([[0.5, 0.5]] * 2, [[0.5, 0.5]] * 2, [0, 1])
    0.75
    """
    P, Qc, x = check_path_arrays(p_conds, q_conds, drafts, validate=validate)
    return float(np.cumprod(P[np.arange(x.shape[0]), x]).sum())


@fill_doc
def kernel(p_model: Any, q_model: Any, gamma: int, *, memory_cap: float | None = None) -> ChainKernel:
    r"""The exact law of :math:`(\tau, Y)` given every drafted path (chain exact match).

    Parameters
    ----------
    {chain_models}
    memory_cap : float, optional
        Bytes for the prefix table and the ``(N, gamma + 1, V)`` kernel; ``None``: the default.

    Returns
    -------
    ChainKernel
        ``verifier="exact_match"``.

    Raises
    ------
    {chain_kernel_raises}

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import exact_match_chain
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> round(exact_match_chain.kernel(p, q, 2).expected_accepted() * 81, 9)   # s + s^2, s = 4/9
    52.0
    """
    return kernel_from_table(kernel_table(p_model, q_model, gamma, memory_cap), _path_law, "exact_match")


@fill_doc
def expected_accepted(p_model: Any, q_model: Any, gamma: int, *, method: str = "closed_form", memory_cap: float | None = None) -> float:
    r"""Exact :math:`E[\tau]` of chain exact match.

    .. math:: E[\tau] = \sum_{i=1}^{\gamma} \sum_{x^i} \prod_{j=1}^{i} M_s(x_j \mid x^{j-1})\, M_b(x_j \mid x^{j-1}).

    Parameters
    ----------
    {chain_models}
    method : {"closed_form", "kernel"}
        The sum above over all prefixes, or from :func:`kernel` (a cross-check).
    memory_cap : float, optional
        Bytes for the enumeration; ``None``: the library default.

    Returns
    -------
    float
        In ``[0, gamma]``.

    Raises
    ------
    {chain_expected_raises}

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import exact_match_chain
    >>> p = models.context_free([0.5, 0.5])
    >>> exact_match_chain.expected_accepted(p, p, 2)   # 1/2 + 1/4 (sum p^2 = 1/2 per position)
    0.75
    """
    return prefix_expected_accepted(
        p_model,
        q_model,
        gamma,
        method=method,
        memory_cap=memory_cap,
        kernel=lambda: kernel(p_model, q_model, gamma, memory_cap=memory_cap),
        step=lambda R, P, Q: R * P * Q,
    )


@fill_doc
def sample(p_model: Any, q_model: Any, drafts: Any, *, rng: np.random.Generator) -> tuple[int, int]:
    r"""Run chain exact match once on a drafted path; returns ``(tau, y)``.

    One stream of target draws (spawned from ``rng``): the draw at each position is both the match
    test and, on a mismatch, the emitted token, exactly as engines do.

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target and draft models over one vocabulary.
    drafts : array_like of int, shape (gamma,)
        The drafted path.
    rng : numpy.random.Generator
        The caller's generator.

    Returns
    -------
    tau : int
        Number of accepted drafts, ``0..gamma``.
    y : int
        The mismatching draw, or the bonus token when every draft matched.

    Raises
    ------
    {chain_sample_raises}

    Examples
    --------
    >>> import numpy as np
    >>> from otspec import models
    >>> from otspec.verifiers import exact_match_chain
    >>> p = models.context_free([1.0, 0.0])
    >>> exact_match_chain.sample(p, models.context_free([0.5, 0.5]), [0, 0], rng=np.random.default_rng(0))
    (2, 0)
    """
    p_model, q_model, x, rng = check_sample_inputs(p_model, q_model, drafts, rng)
    (draws,) = rng.spawn(1)
    for i, p in drafted_targets(p_model, q_model, x):
        y = int(draws.choice(p_model.V, p=p))
        if y != x[i]:
            return i, y
    return len(x), int(draws.choice(p_model.V, p=p_model(x)))


@fill_doc
def conditional_law(p_model: Any, q_model: Any, drafts: Any) -> np.ndarray:
    r"""``(gamma + 1, V)``: :math:`P(\tau = t, Y = y \mid X^\gamma = \text{drafts})` for one path.

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target and draft models over one vocabulary.
    drafts : array_like of int, shape (gamma,)
        The drafted path.

    Returns
    -------
    ndarray, shape (gamma + 1, V)
        ``law[t, y]``; sums to 1.

    Raises
    ------
    {chain_law_raises}

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import exact_match_chain
    >>> p = models.context_free([0.5, 0.5])
    >>> exact_match_chain.conditional_law(p, p, [1]).tolist()
    [[0.5, 0.0], [0.25, 0.25]]
    """
    P, Qc, x = path_conditionals(p_model, q_model, drafts)
    return _path_law(P, Qc, x)
