r"""The law of the decoded stream of a chain verifier: what a lossy chain rule costs over sequences.

A chain verifier emits a block :math:`O = (X^\tau, Y)` per target call; the decoding loop then
restarts from the emitted prefix. The first :math:`n` tokens of the stream have the law

.. math:: L_n(x^n) = \sum_{\text{block boundaries } s \prec x^n} F(s)\, P(O_s \text{ extends } s \text{ to a prefix of } x^n \text{ or past it}),

with :math:`F(s)` the probability that a block boundary falls right after :math:`s` (:math:`F(\emptyset) = 1`)
and :math:`O_s` the block emitted from context :math:`s`. A lossless verifier gives
:math:`L_n = M_b(x^n)` (the criterion of :func:`otspec.verifiers.chain.lossless_violation`, over whole
sequences); a lossy one (typical acceptance in chain form) is scored by
:math:`d_{TV}(L_n, M_b^{(n)})`, the distance a reader of the first :math:`n` tokens can detect.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from otspec import models as _models
from otspec import prefixes
from otspec._validation import as_int_in_range

__all__ = ["stream_law", "stream_tv"]


def _shifted(model: _models.Model, head: tuple[int, ...]) -> _models.Model:
    """``model`` read after the context ``head`` (the conditional of ``x`` is ``model(head + x)``)."""
    if not head:
        return model
    return _models.as_model(lambda x: model(head + tuple(x)), V=model.V, name="model")


def stream_law(kernel: Callable, p_model: Any, q_model: Any, gamma: int, n: int, *, memory_cap: float | None = None) -> np.ndarray:
    r"""Exact law of the first ``n`` tokens the decoding loop emits with a chain verifier.

    Parameters
    ----------
    kernel : callable
        ``kernel(p_model, q_model, gamma)`` returning a :class:`~otspec.verifiers.chain.ChainKernel`
        (e.g. :func:`otspec.verifiers.token_chain.kernel`, :func:`otspec.verifiers.typical_chain.kernel`).
    p_model, q_model : Model or callable
        Target and draft models over one vocabulary.
    gamma : int
        Draft block length, ``>= 1``.
    n : int
        Stream length, ``>= 1``.
    memory_cap : float, optional
        Bytes for the target's ``n``-token enumeration (the stream law has the same size).

    Returns
    -------
    ndarray, shape (V**n,)
        :math:`L_n(x^n)` in lexicographic order (index :math:`\sum_j x_j V^{n-j}`); sums to 1.

    Raises
    ------
    NotAnIntegerError, InvalidDraftCountError
        If ``gamma`` or ``n`` is not an integer ``>= 1``.
    ProblemTooLargeError
        If the ``n``-token enumeration exceeds its cap.
    InvalidDistributionError, ShapeMismatchError
        If a model is invalid or the vocabularies differ.

    Notes
    -----
    One chain kernel per block boundary shorter than ``n`` (at most :math:`\sum_{i < n} V^i` of
    them): for small V, ``gamma`` and ``n``.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import stream, token_chain
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> L = stream.stream_law(token_chain.kernel, p, q, 2, 2)
    >>> [round(float(x) * 9, 9) for x in L]   # lossless: the target's two-token law
    [1.0, 2.0, 2.0, 4.0]
    """
    p_model = _models.as_model(p_model, name="p_model")
    q_model = _models.as_model(q_model, V=p_model.V, name="q_model")
    gamma = as_int_in_range(gamma, "gamma")
    n = as_int_in_range(n, "n")
    V = p_model.V
    prefixes.check_prefix_enumeration(V, n, hint="use a smaller V or n")
    weights = V ** np.arange(n - 1, -1, -1)
    law = np.zeros(V**n)
    frontier: dict[tuple[int, ...], float] = {(): 1.0}
    while frontier:  # every block emits >= 1 token, so boundaries only move right
        head = min(frontier, key=len)
        mass = frontier.pop(head)
        block = kernel(_shifted(p_model, head), _shifted(q_model, head), gamma).output_law()
        for o, w in block.items():
            seq = head + o
            if len(seq) >= n:
                law[int(np.dot(seq[:n], weights))] += mass * w
            else:
                frontier[seq] = frontier.get(seq, 0.0) + mass * w
    return law


def stream_tv(kernel: Callable, p_model: Any, q_model: Any, gamma: int, n: int, *, memory_cap: float | None = None) -> float:
    r""":math:`d_{TV}(L_n, M_b^{(n)})`: the distance of the decoded stream's first ``n`` tokens to the target's.

    Parameters
    ----------
    kernel : callable
        As :func:`stream_law`.
    p_model, q_model : Model or callable
        Target and draft models.
    gamma, n : int
        Draft block length and stream length.
    memory_cap : float, optional
        As :func:`stream_law`.

    Returns
    -------
    float
        0 for a lossless verifier (up to rounding); in ``[0, 1]``.

    Raises
    ------
    NotAnIntegerError, InvalidDraftCountError, ProblemTooLargeError, InvalidDistributionError, ShapeMismatchError
        As :func:`stream_law`.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import stream, token_chain
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> stream.stream_tv(token_chain.kernel, p, q, 2, 3) < 1e-15
    True
    """
    L = stream_law(kernel, p_model, q_model, gamma, n, memory_cap=memory_cap)
    target = prefixes.enumerate_prefixes(p_model, p_model, n, memory_cap=memory_cap).p_joint[n]
    return float(0.5 * np.abs(L - target).sum())
