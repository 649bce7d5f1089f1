r"""Hierarchical speculative decoding, HSD (Zhou et al., arXiv 2601.05724): one drafted chain,
verified at the sequence level with "step back" coins.

The paper's rule is read from the authors' public code (the paper's text did not give per-position
formulas in the form we could recover); we restate it in the notation of :doc:`block`. For a draft
:math:`x^\gamma \sim M_s`, with :math:`P = M_b(x^{i})`, :math:`Q = M_s(x^{i})` the prefix joints
and :math:`R_i = P/Q` the cumulative ratio, position :math:`i = 0..\gamma-1` (the token after
:math:`x^i`) has the sequence-level residual

.. math:: d_i(y) = \min\big(M_b(x^i), M_s(x^i)\big) M_b(y \mid x^i) - M_s(x^i) M_s(y \mid x^i),
          \qquad p'_i = \frac{(d_i)_+}{\max\big(\sum (d_i)_+, \sum (d_i)_-\big)},

and a step-back probability :math:`b_i = 1 - \sum_y p'_i(y)`, set to 0 where
:math:`R_{i+1} \ge 1` (the HSD switch). The block is accepted whole with probability
:math:`\min(1, R_\gamma)` (then a bonus :math:`\sim M_b(\cdot \mid x^\gamma)`); otherwise
independent coins step back with probabilities :math:`b_i`, and the block stops at the last
position s that does not step back: it emits :math:`x^s` and a correction
:math:`\sim p'_s / \sum p'_s`, or, when :math:`\sum p'_s = 0`, the drafted :math:`x^{s+1}` with
no correction (the code's special case).

:func:`block_law` gives the exact law of the emitted block by enumeration of the drafted chains,
so the claim "provably lossless" is checked with :func:`otspec.verifiers.chain.lossless_violation`
(:doc:`referee`).

References
----------
Zhou et al., "Hierarchical Speculative Decoding", arXiv 2601.05724; the authors' repository
``ZhouYuxuanYX/Hierarchical-Speculative-Decoding`` (``algorithm_clean.py``, ``HSD=True``, default
``approxi=False``), read for the rule only.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from otspec import models as _models
from otspec._validation import as_generator, as_int_in_range
from otspec.sampling import spawn_streams

__all__ = ["path_law", "block_law", "expected_accepted", "sample"]


def _position_terms(p_model, q_model, x: tuple, i: int):
    """(p'_i, b_i) at position i of the drafted chain x."""
    P = float(np.prod([p_model(x[:j])[x[j]] for j in range(i)])) if i else 1.0
    Q = float(np.prod([q_model(x[:j])[x[j]] for j in range(i)])) if i else 1.0
    d = min(P, Q) * p_model(x[:i]) - Q * q_model(x[:i])
    plus, minus = np.maximum(d, 0.0), np.maximum(-d, 0.0)
    den = max(plus.sum(), minus.sum())
    pp = plus / den if den > 0 else np.zeros_like(plus)
    b = 1.0 - float(pp.sum())
    P1, Q1 = P * p_model(x[:i])[x[i]], Q * q_model(x[:i])[x[i]]
    if P1 >= Q1:  # R_{i+1} >= 1: never step back here (the HSD switch)
        b = 0.0
    return pp, b


def path_law(p_model: Any, q_model: Any, x: Any) -> dict:
    r"""Exact law ``{O: P(O | x)}`` of the emitted block given one drafted chain ``x``.

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target :math:`M_b` and draft :math:`M_s`.
    x : sequence of int, length gamma
        The drafted chain (positive draft probability).

    Returns
    -------
    dict of tuple of int to float

    Raises
    ------
    InvalidDistributionError, ShapeMismatchError
        If a model is invalid or the vocabularies differ.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import hsd
    >>> p = models.context_free([0.5, 0.5])
    >>> sorted(hsd.path_law(p, p, (1,)).items())  # p == q: accepted, then a bonus token
    [((1, 0), 0.5), ((1, 1), 0.5)]
    """
    p_model = _models.as_model(p_model, name="p_model")
    q_model = _models.as_model(q_model, V=p_model.V, name="q_model")
    x = tuple(int(v) for v in x)
    gamma = len(x)
    out: dict = {}
    R = float(np.prod([p_model(x[:j])[x[j]] / q_model(x[:j])[x[j]] for j in range(gamma)]))
    accept = min(1.0, R)
    bonus = p_model(x)
    for y in np.flatnonzero(bonus > 0):
        out[x + (int(y),)] = accept * float(bonus[y])
    terms = [_position_terms(p_model, q_model, x, i) for i in range(gamma)]
    later = 1.0  # prod_{j > s} b_j
    for s in range(gamma - 1, -1, -1):
        pp, b = terms[s]
        w = (1.0 - accept) * (1.0 - b) * later
        if s == gamma - 1:  # every coin steps back: the code's argmax lands on the last position
            w += (1.0 - accept) * float(np.prod([t[1] for t in terms]))
        later *= b
        if w <= 0.0:
            continue
        tot = float(pp.sum())
        if tot <= 0.0:
            o = x[: s + 1]
            out[o] = out.get(o, 0.0) + w
            continue
        for y in np.flatnonzero(pp > 0):
            o = x[:s] + (int(y),)
            out[o] = out.get(o, 0.0) + w * float(pp[y]) / tot
    return out


def block_law(p_model: Any, q_model: Any, gamma: int) -> dict:
    """Exact law ``{O: P(O)}`` of HSD's emitted block, over every drafted chain of length gamma.

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target and draft models.
    gamma : int
        Draft length, ``>= 1``.

    Returns
    -------
    dict of tuple of int to float

    Raises
    ------
    NotAnIntegerError
        If ``gamma`` is not an integer ``>= 1``.
    InvalidDistributionError, ShapeMismatchError
        If a model is invalid or the vocabularies differ.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import hsd
    >>> p = models.context_free([0.5, 0.5])
    >>> round(float(sum(hsd.block_law(p, p, 2).values())), 12)
    1.0
    """
    p_model = _models.as_model(p_model, name="p_model")
    q_model = _models.as_model(q_model, V=p_model.V, name="q_model")
    gamma = as_int_in_range(gamma, "gamma")
    out: dict = {}
    for x in itertools.product(range(p_model.V), repeat=gamma):
        qx = float(np.prod([q_model(x[:j])[x[j]] for j in range(gamma)]))
        if qx <= 0.0:
            continue
        for o, w in path_law(p_model, q_model, x).items():
            out[o] = out.get(o, 0.0) + qx * w
    return out


def expected_accepted(p_model: Any, q_model: Any, gamma: int) -> float:
    r"""Exact :math:`E[|O| - 1]` of HSD (emitted tokens per block minus one).

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target and draft models.
    gamma : int
        Draft length.

    Returns
    -------
    float

    Raises
    ------
    NotAnIntegerError
        If ``gamma`` is not an integer ``>= 1``.
    InvalidDistributionError, ShapeMismatchError
        If a model is invalid or the vocabularies differ.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import hsd
    >>> p = models.context_free([0.5, 0.5])
    >>> hsd.expected_accepted(p, p, 2)
    2.0
    """
    return float(sum(w * (len(o) - 1) for o, w in block_law(p_model, q_model, gamma).items()))


def sample(p_model: Any, q_model: Any, x: Any, *, rng: np.random.Generator) -> tuple:
    r"""One emitted block for the drafted chain ``x``, by the rule's own coins.

    The whole-block coin and the step-back coins come from ``rng`` (one uniform each, as the
    authors' code draws them), the correction or bonus token from a child stream; the stop position
    is found as the code finds it (the last position whose coin does not step back, the last
    position when every coin steps back). Its law is :func:`path_law` (tested by chi-square).

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target and draft models.
    x : sequence of int, length gamma
        The drafted chain.
    rng : numpy.random.Generator
        The caller's generator.

    Returns
    -------
    tuple of int
        The emitted block.

    Raises
    ------
    InvalidDistributionError, ShapeMismatchError
        If a model is invalid or the vocabularies differ.
    OtspecTypeError
        If ``rng`` is not a ``numpy.random.Generator``.

    Examples
    --------
    >>> import numpy as np
    >>> from otspec import models
    >>> from otspec.verifiers import hsd
    >>> p = models.context_free([0.5, 0.5])
    >>> len(hsd.sample(p, p, (0, 1), rng=np.random.default_rng(0)))  # p == q: all kept + bonus
    3
    """
    p_model = _models.as_model(p_model, name="p_model")
    q_model = _models.as_model(q_model, V=p_model.V, name="q_model")
    coins, draws = spawn_streams(as_generator(rng), 2, parent_first=True)
    x = tuple(int(v) for v in x)
    gamma = len(x)
    terms = [_position_terms(p_model, q_model, x, i) for i in range(gamma)]
    back = coins.random(gamma) < np.array([t[1] for t in terms])
    R = float(np.prod([p_model(x[:j])[x[j]] / q_model(x[:j])[x[j]] for j in range(gamma)]))
    if coins.random() <= R:
        bonus = p_model(x)
        return x + (int(draws.choice(bonus.size, p=bonus / bonus.sum())),)
    keep = np.flatnonzero(~back)
    s = int(keep[-1]) if keep.size else gamma - 1
    pp = terms[s][0]
    if pp.sum() <= 0.0:
        return x[: s + 1]
    return x[:s] + (int(draws.choice(pp.size, p=pp / pp.sum())),)
