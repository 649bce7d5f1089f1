r"""Typical acceptance in chain form, as Medusa and vLLM run it: lossy.

Position by position along a draft :math:`X^\gamma \sim M_s`, the draft :math:`x_i` passes when
:math:`M_b(x_i \mid x^{i-1}) > \tau(M_b(\cdot \mid x^{i-1}))` with
:math:`\tau(p) = \min(\epsilon, \alpha e^{-H(p)})` (:func:`~otspec.verifiers.step.typical.typical_threshold`;
vLLM's ``posterior_threshold`` = 0.09 and ``posterior_alpha`` = 0.3 by default). The first failing
position stops the block and emits a token from the target there -- a draw
(``on_reject="sample"``, Medusa) or :math:`\arg\max` (``"argmax"``, vLLM's recovered token); when
every draft passes, a bonus token :math:`Y \sim M_b(\cdot \mid x^\gamma)` follows. Acceptance is
deterministic given the path:

.. math:: P(\tau \ge i \mid x^\gamma) = \prod_{j=1}^{i} 1\{M_b(x_j \mid x^{j-1}) > \tau_j\}, \qquad
          E[\tau] = \sum_{i=1}^{\gamma} \sum_{x^i} \prod_{j \le i} M_s(x_j \mid x^{j-1})\, 1\{M_b(x_j \mid x^{j-1}) > \tau_j\}.

Accepted tokens follow the draft, not the target, so the stream is not the target's:
:func:`stream_tv` gives the exact total-variation distance of its first :math:`n` tokens
(:mod:`otspec.verifiers.stream`). The per-position rule, its output law and TV are
:mod:`otspec.verifiers.step.typical`.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from otspec._docs import fill_doc
from otspec.verifiers import stream
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
from otspec.verifiers.step.typical import POSTERIOR_ALPHA, POSTERIOR_THRESHOLD, TypicalVerifier, typical_threshold

__all__ = ["kernel", "conditional_law", "expected_accepted", "expected_accepted_given_path", "sample", "stream_tv"]


def _rule(posterior_threshold: float, posterior_alpha: float, on_reject: str) -> TypicalVerifier:
    """The options, validated by the single-step rule (one place for their checks)."""
    return TypicalVerifier(posterior_threshold, posterior_alpha, on_reject=on_reject)


def _passes(rule: TypicalVerifier, P: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(gamma,) bool: whether each draft clears its position's threshold."""
    tau = np.array([typical_threshold(P[i], rule.posterior_threshold, rule.posterior_alpha) for i in range(x.shape[0])])
    return P[np.arange(x.shape[0]), x] > tau


def _reject_law(rule: TypicalVerifier, p: np.ndarray) -> np.ndarray:
    if rule.on_reject == "sample":
        return p
    r = np.zeros_like(p)
    r[int(np.argmax(p))] = 1.0
    return r


def _path_law(P: np.ndarray, Qc: np.ndarray, x: np.ndarray, *, rule: TypicalVerifier) -> np.ndarray:
    """(gamma + 1, V): P(tau = t, Y = y | path) for chain typical acceptance."""
    g, V = Qc.shape
    ok = _passes(rule, P, x)
    stop = int(np.argmin(ok)) if not ok.all() else g  # the first failing position (deterministic)
    law = np.zeros((g + 1, V))
    if stop < g:
        law[stop] = _reject_law(rule, P[stop])
    elif P.shape[0] > g:
        law[g] = P[g]
    return law


@fill_doc
def expected_accepted_given_path(
    p_conds: Any,
    q_conds: Any,
    drafts: Any,
    *,
    posterior_threshold: float = POSTERIOR_THRESHOLD,
    posterior_alpha: float = POSTERIOR_ALPHA,
    validate: bool = True,
) -> float:
    r""":math:`\tau` given the path (deterministic): the number of leading drafts that pass.

    Parameters
    ----------
    p_conds : array, shape (gamma, V) or (gamma + 1, V)
        Target conditionals along the path.
    q_conds : array, shape (gamma, V)
        Draft conditionals along the path (checked only).
    drafts : array of int, shape (gamma,)
        The drafted path.
    posterior_threshold, posterior_alpha : float
        :math:`\epsilon` and :math:`\alpha` of the threshold.
    validate : bool
        Check every row sums to 1.

    Returns
    -------
    float
        In ``{0, ..., gamma}``.

    Raises
    ------
    {path_raises}
    InvalidOptionError
        If a threshold option is out of range.

    Examples
    --------
    >>> from otspec.verifiers import typical_chain
    >>> typical_chain.expected_accepted_given_path([[0.95, 0.05]] * 2, [[0.5, 0.5]] * 2, [0, 1])
    1.0
    """
    rule = _rule(posterior_threshold, posterior_alpha, "sample")
    P, Qc, x = check_path_arrays(p_conds, q_conds, drafts, validate=validate)
    return float(np.cumprod(_passes(rule, P, x)).sum())


@fill_doc
def kernel(
    p_model: Any,
    q_model: Any,
    gamma: int,
    *,
    posterior_threshold: float = POSTERIOR_THRESHOLD,
    posterior_alpha: float = POSTERIOR_ALPHA,
    on_reject: str = "sample",
    memory_cap: float | None = None,
) -> ChainKernel:
    r"""The exact law of :math:`(\tau, Y)` given every drafted path (chain typical acceptance).

    Parameters
    ----------
    {chain_models}
    posterior_threshold, posterior_alpha : float
        :math:`\epsilon` and :math:`\alpha` (vLLM's defaults 0.09 and 0.3).
    on_reject : {"sample", "argmax"}
        The token emitted at the first failing position.
    memory_cap : float, optional
        Bytes for the prefix table and the kernel; ``None``: the default.

    Returns
    -------
    ChainKernel
        ``verifier="typical"``.

    Raises
    ------
    {chain_kernel_raises}
    InvalidOptionError
        If an option is out of range.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import typical_chain
    >>> p, q = models.context_free([0.95, 0.05]), models.context_free([0.5, 0.5])
    >>> typical_chain.kernel(p, q, 2).expected_accepted()   # token 1 fails: 0.05 < min(0.09, 0.3 e^-H)
    0.75
    """
    rule = _rule(posterior_threshold, posterior_alpha, on_reject)
    return kernel_from_table(kernel_table(p_model, q_model, gamma, memory_cap), partial(_path_law, rule=rule), "typical")


@fill_doc
def expected_accepted(
    p_model: Any,
    q_model: Any,
    gamma: int,
    *,
    posterior_threshold: float = POSTERIOR_THRESHOLD,
    posterior_alpha: float = POSTERIOR_ALPHA,
    method: str = "closed_form",
    memory_cap: float | None = None,
) -> float:
    r"""Exact :math:`E[\tau]` of chain typical acceptance.

    .. math:: E[\tau] = \sum_{i=1}^{\gamma} \sum_{x^i} \prod_{j=1}^{i} M_s(x_j \mid x^{j-1})\, 1\{M_b(x_j \mid x^{j-1}) > \tau_j\}.

    Parameters
    ----------
    {chain_models}
    posterior_threshold, posterior_alpha : float
        :math:`\epsilon` and :math:`\alpha`.
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
    InvalidOptionError
        If a threshold option is out of range.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import typical_chain
    >>> p = models.context_free([0.5, 0.5])
    >>> typical_chain.expected_accepted(p, p, 3)   # both tokens clear min(0.09, 0.15): every draft passes
    3.0
    """
    rule = _rule(posterior_threshold, posterior_alpha, "sample")

    def step(R, P, Q):
        tau = np.array([typical_threshold(row, rule.posterior_threshold, rule.posterior_alpha) for row in P])
        return R * Q * np.greater(P, tau[:, None])

    return prefix_expected_accepted(
        p_model,
        q_model,
        gamma,
        method=method,
        memory_cap=memory_cap,
        kernel=lambda: kernel(
            p_model, q_model, gamma, posterior_threshold=posterior_threshold, posterior_alpha=posterior_alpha, memory_cap=memory_cap
        ),
        step=step,
    )


@fill_doc
def sample(
    p_model: Any,
    q_model: Any,
    drafts: Any,
    *,
    rng: np.random.Generator,
    posterior_threshold: float = POSTERIOR_THRESHOLD,
    posterior_alpha: float = POSTERIOR_ALPHA,
    on_reject: str = "sample",
) -> tuple[int, int]:
    r"""Run chain typical acceptance once on a drafted path; returns ``(tau, y)``.

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target and draft models over one vocabulary.
    drafts : array_like of int, shape (gamma,)
        The drafted path.
    rng : numpy.random.Generator
        The caller's generator (the reject / bonus draw uses a stream spawned from it).
    posterior_threshold, posterior_alpha : float
        :math:`\epsilon` and :math:`\alpha`.
    on_reject : {"sample", "argmax"}
        The token emitted at the first failing position.

    Returns
    -------
    tau : int
        Number of accepted drafts.
    y : int
        The token emitted after them.

    Raises
    ------
    {chain_sample_raises}
    InvalidOptionError
        If an option is out of range.

    Examples
    --------
    >>> import numpy as np
    >>> from otspec import models
    >>> from otspec.verifiers import typical_chain
    >>> p, q = models.context_free([0.95, 0.05]), models.context_free([0.5, 0.5])
    >>> typical_chain.sample(p, q, [0, 1], rng=np.random.default_rng(0), on_reject="argmax")
    (1, 0)
    """
    rule = _rule(posterior_threshold, posterior_alpha, on_reject)
    p_model, q_model, x, rng = check_sample_inputs(p_model, q_model, drafts, rng)
    (draws,) = rng.spawn(1)
    for i, p in drafted_targets(p_model, q_model, x):
        if not p[x[i]] > typical_threshold(p, rule.posterior_threshold, rule.posterior_alpha):
            return i, int(draws.choice(p_model.V, p=_reject_law(rule, p)))
    return len(x), int(draws.choice(p_model.V, p=p_model(x)))


@fill_doc
def conditional_law(
    p_model: Any,
    q_model: Any,
    drafts: Any,
    *,
    posterior_threshold: float = POSTERIOR_THRESHOLD,
    posterior_alpha: float = POSTERIOR_ALPHA,
    on_reject: str = "sample",
) -> np.ndarray:
    r"""``(gamma + 1, V)``: :math:`P(\tau = t, Y = y \mid X^\gamma = \text{drafts})` for one path.

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target and draft models over one vocabulary.
    drafts : array_like of int, shape (gamma,)
        The drafted path.
    posterior_threshold, posterior_alpha : float
        :math:`\epsilon` and :math:`\alpha`.
    on_reject : {"sample", "argmax"}
        The token emitted at the first failing position.

    Returns
    -------
    ndarray, shape (gamma + 1, V)
        ``law[t, y]``; sums to 1.

    Raises
    ------
    {chain_law_raises}
    InvalidOptionError
        If an option is out of range.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import typical_chain
    >>> p = models.context_free([0.95, 0.05])
    >>> typical_chain.conditional_law(p, p, [1], on_reject="argmax").tolist()
    [[1.0, 0.0], [0.0, 0.0]]
    """
    rule = _rule(posterior_threshold, posterior_alpha, on_reject)
    P, Qc, x = path_conditionals(p_model, q_model, drafts)
    return _path_law(P, Qc, x, rule=rule)


@fill_doc
def stream_tv(
    p_model: Any,
    q_model: Any,
    gamma: int,
    n: int,
    *,
    posterior_threshold: float = POSTERIOR_THRESHOLD,
    posterior_alpha: float = POSTERIOR_ALPHA,
    on_reject: str = "sample",
    memory_cap: float | None = None,
) -> float:
    r"""Exact :math:`d_{TV}` between the first ``n`` decoded tokens and the target's ``n``-token law.

    Parameters
    ----------
    {chain_models}
    n : int
        Stream length, ``>= 1``.
    posterior_threshold, posterior_alpha : float
        :math:`\epsilon` and :math:`\alpha`.
    on_reject : {"sample", "argmax"}
        The token emitted at the first failing position.
    memory_cap : float, optional
        As :func:`otspec.verifiers.stream.stream_law`.

    Returns
    -------
    float
        In ``[0, 1]``.

    Raises
    ------
    {chain_kernel_raises}
    InvalidOptionError
        If an option is out of range.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import typical_chain
    >>> p, q = models.context_free([0.95, 0.05]), models.context_free([0.5, 0.5])
    >>> round(typical_chain.stream_tv(p, q, 1, 1), 12)   # accepts token 0 at 1/2, else samples p
    0.025
    """
    _rule(posterior_threshold, posterior_alpha, on_reject)
    k = partial(kernel, posterior_threshold=posterior_threshold, posterior_alpha=posterior_alpha, on_reject=on_reject)
    return stream.stream_tv(k, p_model, q_model, gamma, n, memory_cap=memory_cap)
