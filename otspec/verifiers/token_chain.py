r"""Token-level verification of a drafted block (Sun et al., Algorithm 1; Leviathan et al.).

A draft :math:`X^\gamma \sim M_s` is checked token by token: position :math:`i` is accepted with
probability :math:`\min(1, r_i)`, :math:`r_i = M_b(X_i \mid X^{i-1}) / M_s(X_i \mid X^{i-1})`, and
the first rejection stops the block; the next token is drawn from the residual
:math:`\mathrm{norm}((M_b - M_s)_+)` at the rejected position, or from :math:`M_b(\cdot\mid X^\gamma)`
(the bonus token) when all :math:`\gamma` drafts pass.

What every chain verifier shares (:class:`~otspec.verifiers.chain.ChainKernel`, the path checks,
the losslessness criterion) lives in :mod:`otspec.verifiers.chain`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec import prefixes
from otspec._docs import fill_doc
from otspec.errors import InvalidDraftsError, UnsupportedMethodError
from otspec.verifiers.chain import ChainKernel, check_path_arrays, check_sample_inputs, kernel_from_table, kernel_table, path_conditionals

__all__ = [
    "kernel",
    "conditional_law",
    "expected_accepted",
    "expected_accepted_given_path",
    "sample",
    "token_prefix_mass",
]


def _ratios(P: np.ndarray, Qc: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    g = x.shape[0]
    return P[np.arange(g), x], Qc[np.arange(g), x]


@fill_doc
def expected_accepted_given_path(p_conds: Any, q_conds: Any, drafts: Any, *, validate: bool = True) -> float:
    r"""Exact :math:`E[\tau \mid X^\gamma = x^\gamma]` for token verification, from the path's conditionals.

    .. math:: E[\tau \mid x^\gamma] = \sum_{i=1}^{\gamma} \prod_{j=1}^{i} \min(1, r_j), \qquad
              r_j = \frac{M_b(x_j \mid x^{j-1})}{M_s(x_j \mid x^{j-1})}.

    Averaging it over drafted paths is an unbiased, lower-variance estimate of :math:`E[\tau]` than
    counting accepted tokens (it integrates the accept coins out exactly).

    Parameters
    ----------
    p_conds : array, shape (gamma, V) or (gamma + 1, V)
        Target conditionals along the path, row ``i`` = :math:`M_b(\cdot \mid x^i)`.
    q_conds : array, shape (gamma, V)
        Draft conditionals, row ``i`` = :math:`M_s(\cdot \mid x^i)`.
    drafts : array of int, shape (gamma,)
        The drafted path.
    validate : bool
        Check every row sums to 1 (one pass over the arrays; turn off in hot loops).

    Returns
    -------
    float
        The conditional expectation, in ``[0, gamma]``.

    Raises
    ------
    {path_raises}

    Examples
    --------
    >>> from otspec.verifiers import token_chain
    >>> token_chain.expected_accepted_given_path([[1/3, 2/3]] * 2, [[2/3, 1/3]] * 2, [0, 1])
    1.0
    """
    P, Qc, x = check_path_arrays(p_conds, q_conds, drafts, validate=validate)
    px, qx = _ratios(P, Qc, x)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.minimum(1.0, np.where(qx > 0, px / qx, 1.0))
    return float(np.cumprod(a).sum())


def _path_law(P: np.ndarray, Qc: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(gamma + 1, V): P(tau = t, Y = y | path) for token verification."""
    g, V = Qc.shape
    px, qx = _ratios(P, Qc, x)
    a = np.minimum(1.0, px / qx)
    reach = np.concatenate([[1.0], np.cumprod(a)])  # P(tau >= t)
    law = np.zeros((g + 1, V))
    for t in range(g):
        stop = reach[t] * (1.0 - a[t])
        if stop > 0:
            res = np.maximum(P[t] - Qc[t], 0.0)
            mass = res.sum()
            if mass > 0:
                law[t] = stop * res / mass
    if P.shape[0] > g:
        law[g] = reach[g] * P[g]
    return law


@fill_doc
def kernel(p_model: Any, q_model: Any, gamma: int, *, memory_cap: float | None = None) -> ChainKernel:
    r"""The exact law of :math:`(\tau, Y)` given every drafted path (token verification).

    .. math:: P(\tau = t \mid x^\gamma) = \Big(\prod_{j \le t} a_j\Big)(1 - a_{t+1}), \quad
              a_j = \min(1, r_j), \qquad
              Y \mid \tau = t < \gamma \sim \mathrm{norm}\big((M_b - M_s)_+(\cdot \mid x^t)\big),

    and :math:`Y \sim M_b(\cdot \mid x^\gamma)` when :math:`\tau = \gamma`. Paths of draft
    probability 0 are left out.

    Parameters
    ----------
    {chain_models}
    memory_cap : float, optional
        Bytes for the prefix table and the ``(N, gamma + 1, V)`` kernel; ``None``: the default.

    Returns
    -------
    ChainKernel
        ``verifier="token"``; the law of :math:`(\tau, Y)` for every drafted path.

    Raises
    ------
    {chain_kernel_raises}

    References
    ----------
    Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh, "Block Verification Accelerates
    Speculative Decoding" (ICLR 2025), Algorithm 1.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import token_chain
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> round(token_chain.kernel(p, q, 2).expected_accepted() * 9, 9)
    10.0
    """
    return kernel_from_table(kernel_table(p_model, q_model, gamma, memory_cap), _path_law, "token")


@fill_doc
def expected_accepted(p_model: Any, q_model: Any, gamma: int, *, method: str = "closed_form", memory_cap: float | None = None) -> float:
    r"""Exact :math:`E[\tau]` of token verification over a block of ``gamma`` drafts.

    .. math:: E[\tau_{\text{token}}] = \sum_{i=1}^{\gamma} \sum_{x^i} \prod_{j=1}^{i}
              \min\{M_s(x_j \mid x^{j-1}), M_b(x_j \mid x^{j-1})\}.

    Parameters
    ----------
    {chain_models}
    method : {"closed_form", "kernel"}
        ``"closed_form"``: the product-of-mins sum above, vectorised over all prefixes;
        ``"kernel"``: from the exact per-path law of :func:`kernel` (a cross-check).
    memory_cap : float, optional
        Bytes for the enumeration; ``None``: the library default.

    Returns
    -------
    float
        :math:`E[\tau]`, the expected number of accepted drafts per block, in ``[0, gamma]``.

    Raises
    ------
    {chain_expected_raises}

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import token_chain
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> round(token_chain.expected_accepted(p, q, 2) * 9, 9)
    10.0
    """
    if method == "kernel":
        return kernel(p_model, q_model, gamma, memory_cap=memory_cap).expected_accepted()
    if method != "closed_form":
        raise UnsupportedMethodError(f"method must be 'closed_form' or 'kernel' (got {method!r})")
    table = prefixes.enumerate_prefixes(p_model, q_model, gamma, memory_cap=memory_cap)
    return float(sum(m.sum() for m in token_prefix_mass(table)[1:]))


def token_prefix_mass(table: prefixes.PrefixTable) -> list:
    r"""``[T_0, ..., T_gamma]`` with :math:`T_i(x^i) = P(\tau \ge i, X^i = x^i) = \prod_j \min(M_s, M_b)`.

    The minimum is taken at each position along the prefix:
    :math:`T_i(x^i) = \prod_{j=1}^{i} \min\{M_s(x_j \mid x^{j-1}), M_b(x_j \mid x^{j-1})\}`.

    Parameters
    ----------
    table : PrefixTable
        The enumerated target/draft pair (:func:`otspec.prefixes.enumerate_prefixes`).

    Returns
    -------
    list of ndarray
        ``gamma + 1`` arrays, ``T[i]`` of shape ``(V**i,)`` in the table's node order; ``T[0] = [1]``.
    """
    out = [np.ones(1, dtype=table.q_joint[0].dtype)]
    for i in range(1, table.gamma + 1):
        out.append((out[-1][:, None] * np.minimum(table.p_cond[i - 1], table.q_cond[i - 1])).ravel())
    return out


@fill_doc
def sample(p_model: Any, q_model: Any, drafts: Any, *, rng: np.random.Generator) -> tuple[int, int]:
    r"""Run token verification once on a drafted path; returns ``(tau, y)``.

    The accept coins and the residual / bonus draw use two independent streams spawned from
    ``rng`` (reusing one uniform for both biases the output, :doc:`verifiers`, the verifier contract: separate streams).

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target :math:`M_b` and draft :math:`M_s` models over one vocabulary (:mod:`otspec.models`).
    drafts : array_like of int, shape (gamma,)
        The drafted path (``gamma = len(drafts) >= 1``).
    rng : numpy.random.Generator
        The caller's generator; the coin and draw streams are spawned from it.

    Returns
    -------
    tau : int
        Number of accepted drafts, ``0..gamma``.
    y : int
        The token emitted after them (from the residual at the first rejection, or the bonus conditional when every draft passes).

    Raises
    ------
    {chain_sample_raises}

    Examples
    --------
    >>> import numpy as np
    >>> from otspec import models
    >>> from otspec.verifiers import token_chain
    >>> p = models.context_free([0.5, 0.5])
    >>> token_chain.sample(p, p, [0, 1], rng=np.random.default_rng(0))[0]
    2
    """
    p_model, q_model, x, rng = check_sample_inputs(p_model, q_model, drafts, rng)
    g = len(x)
    coins, draws = rng.spawn(2)
    for i in range(g):
        p, q = p_model(x[:i]), q_model(x[:i])
        if q[x[i]] <= 0:
            raise InvalidDraftsError(f"drafts[{i}] = {x[i]} has draft probability 0 after {x[:i]}; pass a path the draft can produce")
        if not coins.random() < min(1.0, p[x[i]] / q[x[i]]):
            res = np.maximum(p - q, 0.0)
            return i, int(draws.choice(p_model.V, p=res / res.sum()))
    return g, int(draws.choice(p_model.V, p=p_model(x)))


@fill_doc
def conditional_law(p_model: Any, q_model: Any, drafts: Any) -> np.ndarray:
    r"""``(gamma + 1, V)``: :math:`P(\tau = t, Y = y \mid X^\gamma = \text{drafts})` for one path.

    Token verification's law (Algorithm 1) given one drafted path, from the models' conditionals
    along it.

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target :math:`M_b` and draft :math:`M_s` models over one vocabulary (:mod:`otspec.models`).
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
    >>> from otspec.verifiers import token_chain
    >>> p = models.context_free([0.5, 0.5])
    >>> token_chain.conditional_law(p, p, [1]).tolist()
    [[0.0, 0.0], [0.5, 0.5]]
    """
    P, Qc, x = path_conditionals(p_model, q_model, drafts)
    return _path_law(P, Qc, x)
