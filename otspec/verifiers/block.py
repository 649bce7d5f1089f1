r"""Block verification of a drafted block (Sun et al., Algorithm 2), exactly as in :doc:`block`, token and block verification.

For a draft :math:`X^\gamma \sim M_s`, with :math:`r_i = M_b(X_i \mid X^{i-1}) / M_s(X_i \mid X^{i-1})`:

.. math::
    p_0 = 1, \quad p_i = \min(p_{i-1} r_i, 1), \quad
    Z_{i+1} = \sum_x \big(p_i M_b(x \mid X^i) - M_s(x \mid X^i)\big)_+, \quad
    h_i = \frac{Z_{i+1}}{Z_{i+1} + 1 - p_i}\ (i < \gamma), \quad h_\gamma = p_\gamma .

Every position draws its own coin :math:`\eta_i \sim U(0, 1)`; :math:`\tau` is the *last* index with
:math:`\eta_i \le h_i` (no break), and
:math:`Y \sim \mathrm{norm}((p_\tau M_b(\cdot \mid X^\tau) - M_s(\cdot \mid X^\tau))_+)` for
:math:`\tau < \gamma`, :math:`Y \sim M_b(\cdot \mid X^\gamma)` for :math:`\tau = \gamma`.

Key facts (:doc:`block`, key identities): :math:`P(\tau \ge i \mid X^i) = p_i`, :math:`P(\tau = i \mid X^i) = Z_{i+1}`,
and :math:`E[\tau] = \sum_i \sum_{x^i} W(x^i)` with
:math:`W(x^i) = \min\{W(x^{i-1}) M_b(x_i \mid x^{i-1}),\ M_s(x^i)\}`, the optimum over all lossless
"as-is" chain verifiers (:func:`otspec.block_optimum`).

References
----------
Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh, "Block Verification Accelerates Speculative
Decoding" (ICLR 2025; arXiv 2403.10444), Algorithm 2 and Theorems 1-2.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec import prefixes
from otspec._docs import fill_doc
from otspec.errors import InvalidDraftsError, UnsupportedMethodError
from otspec.verifiers.chain import (
    ChainKernel,
    check_drafted,
    check_path_arrays,
    check_path_row,
    check_sample_inputs,
    kernel_from_table,
    kernel_table,
    path_conditionals,
)

__all__ = [
    "kernel",
    "conditional_law",
    "expected_accepted",
    "expected_accepted_given_path",
    "acceptance_profile_given_path",
    "sample",
    "running_ratio",
]


@fill_doc
def running_ratio(p_conds: Any, q_conds: Any, drafts: Any, *, validate: bool = True) -> np.ndarray:
    r"""``log p_i`` for ``i = 1..gamma`` along a path: :math:`\log p_i = \min(\log p_{i-1} + \log r_i, 0)`.

    Computed in log space (a product of ratios over a long block under/overflows otherwise);
    :math:`-\infty` where the target gives a drafted token probability 0.

    Parameters
    ----------
    p_conds : array_like, shape (gamma, V) or (gamma + 1, V)
        Target conditionals along the path, row ``i`` = :math:`M_b(\cdot \mid x^i)`.
    q_conds : array_like, shape (gamma, V)
        Draft conditionals, row ``i`` = :math:`M_s(\cdot \mid x^i)`.
    drafts : array_like of int, shape (gamma,)
        The drafted path :math:`x^\gamma`.
    validate : bool
        Check every row is a distribution and every draft had positive draft probability.

    Returns
    -------
    ndarray, shape (gamma,)
        :math:`\log p_1, \dots, \log p_\gamma`, each :math:`\le 0`.

    Raises
    ------
    {path_raises}

    Examples
    --------
    >>> import numpy as np
    >>> from otspec.verifiers import block
    >>> np.exp(block.running_ratio([[1/3, 2/3]] * 2, [[2/3, 1/3]] * 2, [0, 1])).round(12).tolist()
    [0.5, 1.0]
    """
    P, Qc, x = check_path_arrays(p_conds, q_conds, drafts, validate=validate)
    return _log_running_ratio(P, Qc, x)


def _log_running_ratio(P: np.ndarray, Qc: np.ndarray, x: np.ndarray) -> np.ndarray:
    g = x.shape[0]
    idx = np.arange(g)
    with np.errstate(divide="ignore"):
        logr = np.log(P[idx, x]) - np.log(Qc[idx, x])
    # log p_i = min(log p_{i-1} + log r_i, 0): p_i = R_i / max_{j<=i} R_j (docs/block.rst, key identity 3), so with
    # L_i = log R_i: log p_i = L_i - max(0, max_{j<=i} L_j). Vectorised, and exact in log space.
    L = np.cumsum(logr)
    return L - np.maximum.accumulate(np.maximum(L, 0.0))


def _h_and_ratio(P: np.ndarray, Qc: np.ndarray, x: np.ndarray, validate: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(p, Z, h): p[i-1] = p_i, Z[i-1] = Z_{i+1} (i < gamma), h[i-1] = h_i, for i = 1..gamma.

    With ``validate``, each row is checked right before it is used, while it is in cache (checking
    the whole arrays first costs two more passes over memory)."""
    g = x.shape[0]
    if validate:
        check_drafted(Qc, x)
        check_path_row(P[0], "p_conds", 0)
        check_path_row(Qc[0], "q_conds", 0)
    with np.errstate(invalid="ignore"):  # unvalidated input: NaN propagates, no warning
        p = np.exp(_log_running_ratio(P, Qc, x))
    Z = np.empty(max(g - 1, 0))
    if g > 1:
        # One vocabulary-sized reduction per position, row by row through one cache-sized buffer
        # (measured faster than one (gamma - 1, V) temporary at V = 262 144).
        buf = np.empty(P.shape[1])
        for i in range(1, g):
            if validate:
                check_path_row(P[i], "p_conds", i)
                check_path_row(Qc[i], "q_conds", i)
            np.multiply(P[i], p[i - 1], out=buf)
            np.subtract(buf, Qc[i], out=buf)
            np.maximum(buf, 0.0, out=buf)
            Z[i - 1] = buf.sum()
    h = np.empty(g)
    denom = Z + 1.0 - p[: g - 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        h[: g - 1] = np.where(denom > 0, Z / np.where(denom > 0, denom, 1.0), 1.0)
    h[g - 1] = p[g - 1]
    np.clip(h, 0.0, 1.0, out=h)
    return p, Z, h


@fill_doc
def acceptance_profile_given_path(p_conds: Any, q_conds: Any, drafts: Any, *, validate: bool = True) -> np.ndarray:
    r"""``(gamma,)``: :math:`P(\tau \ge i \mid X^\gamma = x^\gamma)` for ``i = 1..gamma`` (block verification).

    .. math:: P(\tau \ge i \mid x^\gamma) = 1 - \prod_{j=i}^{\gamma} (1 - h_j).

    Parameters
    ----------
    p_conds : array_like, shape (gamma, V) or (gamma + 1, V)
        Target conditionals along the path, row ``i`` = :math:`M_b(\cdot \mid x^i)`.
    q_conds : array_like, shape (gamma, V)
        Draft conditionals, row ``i`` = :math:`M_s(\cdot \mid x^i)`.
    drafts : array_like of int, shape (gamma,)
        The drafted path :math:`x^\gamma`.
    validate : bool
        Check every row is a distribution and every draft had positive draft probability.

    Returns
    -------
    ndarray, shape (gamma,)
        Non-increasing probabilities; their sum is :func:`expected_accepted_given_path`.

    Raises
    ------
    {path_raises}

    Examples
    --------
    >>> from otspec.verifiers import block
    >>> block.acceptance_profile_given_path([[1/3, 2/3]] * 2, [[2/3, 1/3]] * 2, [0, 1]).round(12).tolist()
    [1.0, 1.0]
    """
    P, Qc, x = check_path_arrays(p_conds, q_conds, drafts, validate=False)
    _, _, h = _h_and_ratio(P, Qc, x, validate=validate)
    return 1.0 - np.cumprod((1.0 - h)[::-1])[::-1]


@fill_doc
def expected_accepted_given_path(p_conds: Any, q_conds: Any, drafts: Any, *, validate: bool = True) -> float:
    r"""Exact :math:`E[\tau \mid X^\gamma = x^\gamma]` for block verification, from the path's conditionals.

    .. math:: E[\tau \mid x^\gamma] = \sum_{i=1}^{\gamma} \Big(1 - \prod_{j=i}^{\gamma} (1 - h_j)\Big),

    with :math:`h_j` from the running ratio (log space) and the look-ahead residual masses
    :math:`Z_{j+1}`: one vocabulary-sized reduction per position, :math:`O(\gamma V)`, vectorised.
    The coins are integrated out exactly, so averaging it over real drafted paths estimates
    :math:`E[\tau]` with less variance than counting accepted tokens.

    Parameters
    ----------
    p_conds : array, shape (gamma, V) or (gamma + 1, V)
        Target conditionals along the path, row ``i`` = :math:`M_b(\cdot \mid x^i)` (the bonus row
        ``gamma`` is not needed and is ignored).
    q_conds : array, shape (gamma, V)
        Draft conditionals, row ``i`` = :math:`M_s(\cdot \mid x^i)`.
    drafts : array of int, shape (gamma,)
        The drafted path.
    validate : bool
        Check the rows sum to 1 and the drafts have positive draft probability (one extra pass).

    Returns
    -------
    float
        The conditional expectation, in ``[0, gamma]``.

    Raises
    ------
    {path_raises}

    Examples
    --------
    >>> from otspec.verifiers import block
    >>> round(block.expected_accepted_given_path([[1/3, 2/3]] * 2, [[2/3, 1/3]] * 2, [0, 0]), 12)
    0.5
    """
    P, Qc, x = check_path_arrays(p_conds, q_conds, drafts, validate=False)
    _, _, h = _h_and_ratio(P, Qc, x, validate=validate)
    return float((1.0 - np.cumprod((1.0 - h)[::-1])).sum())


def _path_law(P: np.ndarray, Qc: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(gamma + 1, V): P(tau = t, Y = y | path) for block verification."""
    g, V = Qc.shape
    p, Z, h = _h_and_ratio(P, Qc, x)
    hh = np.concatenate([[1.0], h])  # h_0 = 1: tau = 0 when every coin fails
    after = np.concatenate([np.cumprod((1.0 - hh[1:])[::-1])[::-1], [1.0]])  # prod_{j > t} (1 - h_j)
    tau = hh * after
    law = np.zeros((g + 1, V))
    pt = np.concatenate([[1.0], p])
    for t in range(g):
        if tau[t] > 0:
            res = np.maximum(pt[t] * P[t] - Qc[t], 0.0)
            mass = res.sum()
            if mass > 0:
                law[t] = tau[t] * res / mass
    if P.shape[0] > g:
        law[g] = tau[g] * P[g]
    return law


@fill_doc
def kernel(p_model: Any, q_model: Any, gamma: int, *, memory_cap: float | None = None) -> ChainKernel:
    r"""The exact law of :math:`(\tau, Y)` given every drafted path (block verification).

    With :math:`h_0 = 1`: :math:`P(\tau = t \mid x^\gamma) = h_t \prod_{j > t} (1 - h_j)` (independent
    coins, :math:`\tau` = last pass), and :math:`Y` from the weighted residual at :math:`x^t` or the
    bonus conditional. Paths of draft probability 0 are left out.

    Parameters
    ----------
    {chain_models}
    memory_cap : float, optional
        Bytes for the prefix table and the ``(N, gamma + 1, V)`` kernel; ``None``: the default.

    Returns
    -------
    ChainKernel
        ``verifier="block"``; the law of :math:`(\tau, Y)` for every drafted path.

    Raises
    ------
    {chain_kernel_raises}

    References
    ----------
    Sun et al., "Block Verification Accelerates Speculative Decoding" (ICLR 2025), Algorithm 2.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import block
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> round(block.kernel(p, q, 2).expected_accepted() * 9, 9)
    11.0
    """
    return kernel_from_table(kernel_table(p_model, q_model, gamma, memory_cap), _path_law, "block")


@fill_doc
def expected_accepted(p_model: Any, q_model: Any, gamma: int, *, method: str = "closed_form", memory_cap: float | None = None) -> float:
    r"""Exact :math:`E[\tau]` of block verification over a block of ``gamma`` drafts.

    .. math:: E[\tau_{\text{block}}] = \sum_{i=1}^{\gamma} \sum_{x^i} W(x^i), \qquad
              W(x^i) = \min_{0 \le j \le i} M_s(x^j)\, M_b(x_{j+1..i} \mid x^j).

    Parameters
    ----------
    {chain_models}
    method : {"closed_form", "kernel"}
        ``"closed_form"``: the W recursion over all prefixes (vectorised);
        ``"kernel"``: from the exact per-path law of Algorithm 2 (:func:`kernel`), a cross-check.
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
    >>> from otspec.verifiers import block
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> round(block.expected_accepted(p, q, 2) * 9, 9)
    11.0
    """
    if method == "kernel":
        return kernel(p_model, q_model, gamma, memory_cap=memory_cap).expected_accepted()
    if method != "closed_form":
        raise UnsupportedMethodError(f"method must be 'closed_form' or 'kernel' (got {method!r})")
    table = prefixes.enumerate_prefixes(p_model, q_model, gamma, memory_cap=memory_cap)
    return float(sum(w.sum() for w in prefixes.prefix_weights(table)[1:]))


@fill_doc
def sample(p_model: Any, q_model: Any, drafts: Any, *, rng: np.random.Generator) -> tuple[int, int]:
    r"""Run block verification (Algorithm 2) once on a drafted path; returns ``(tau, y)``.

    Implements the pseudo-code literally: running ratio in log space, one coin per position from
    an accept-coin stream, :math:`\tau` = last index that passes, residual / bonus token from a
    separate stream (both spawned from ``rng``).

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
        The token emitted after them (from the weighted residual at :math:`x^\tau`, or the bonus conditional when :math:`\tau = \gamma`).

    Raises
    ------
    {chain_sample_raises}

    Examples
    --------
    >>> import numpy as np
    >>> from otspec import models
    >>> from otspec.verifiers import block
    >>> p = models.context_free([0.5, 0.5])
    >>> block.sample(p, p, [0, 1], rng=np.random.default_rng(0))[0]
    2
    """
    p_model, q_model, x, rng = check_sample_inputs(p_model, q_model, drafts, rng)
    g = len(x)
    coins, draws = rng.spawn(2)
    logp = [0.0]
    tau = 0
    for i in range(1, g + 1):
        pb, qb = p_model(x[: i - 1]), q_model(x[: i - 1])
        if qb[x[i - 1]] <= 0:
            raise InvalidDraftsError(
                f"drafts[{i - 1}] = {x[i - 1]} has draft probability 0 after {x[: i - 1]}; pass a path the draft can produce"
            )
        with np.errstate(divide="ignore"):
            lp = min(logp[-1] + np.log(pb[x[i - 1]]) - np.log(qb[x[i - 1]]), 0.0)
        logp.append(lp)
        pi = float(np.exp(lp))
        if i < g:
            z = float(np.maximum(pi * p_model(x[:i]) - q_model(x[:i]), 0.0).sum())
            denom = z + 1.0 - pi
            h = z / denom if denom > 0 else 1.0
        else:
            h = pi
        if coins.random() <= h:
            tau = i
    if tau == g:
        return g, int(draws.choice(p_model.V, p=p_model(x)))
    res = np.maximum(np.exp(logp[tau]) * p_model(x[:tau]) - q_model(x[:tau]), 0.0)
    return tau, int(draws.choice(p_model.V, p=res / res.sum()))


@fill_doc
def conditional_law(p_model: Any, q_model: Any, drafts: Any) -> np.ndarray:
    r"""``(gamma + 1, V)``: :math:`P(\tau = t, Y = y \mid X^\gamma = \text{drafts})` for one path.

    Block verification's law (Algorithm 2) given one drafted path, from the models' conditionals
    along it (the per-path form :func:`otspec.testing.as_verifier` adapts to a chain verifier).

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
    >>> from otspec.verifiers import block
    >>> p = models.context_free([0.5, 0.5])
    >>> block.conditional_law(p, p, [1]).tolist()
    [[0.0, 0.0], [0.5, 0.5]]
    """
    P, Qc, x = path_conditionals(p_model, q_model, drafts)
    return _path_law(P, Qc, x)
