r"""Hypothesis strategies for verifier tests: distributions, (p, q) pairs, draft laws of every kind.

Everything is built from small integer weights (a distribution is ``w / w.sum()`` with
``w_i`` in ``0..max_weight``), so examples shrink towards few tokens, small ``k``, the i.i.d. law
and round numbers such as ``[0.5, 0.5]``; the default sizes keep ``V**k <= 125`` so that exact
kernels stay cheap. :func:`problems` draws a target and a law together as a :class:`Problem`,
whose repr is the code that rebuilds it (a falsifying example can be pasted and re-run).

This module imports hypothesis; ``import otspec.testing`` does not.

Examples
--------
>>> from hypothesis import given, settings
>>> import otspec
>>> from otspec.testing import assert_lossless, strategies as ots
>>> @settings(max_examples=20, database=None)
... @given(ots.problems(kinds=["iid"]))
... def test_kseq(problem):
...     assert_lossless(otspec.verifiers.kseq, problem.p, problem.law)
>>> test_kseq()
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from otspec.laws import KINDS, IIDLaw, by_kind
from otspec.testing._code import array_code, law_code

__all__ = ["LAW_KINDS", "Problem", "distributions", "laws", "pairs", "problems"]

#: Every kind of draft law otspec has, in the order shrinking prefers (simplest first).
LAW_KINDS = KINDS


def _sizes(V: Any, lo: int, hi: int) -> st.SearchStrategy:
    if V is None:
        return st.integers(lo, hi)
    if isinstance(V, st.SearchStrategy):
        return V
    return st.just(int(V))


def _from_weights(w: Sequence[int]) -> np.ndarray:
    w = np.asarray(w, dtype=np.float64)
    if w.sum() == 0:  # all weights shrank to zero: the uniform distribution
        w = np.ones_like(w)
    return w / w.sum()


def distributions(V: Any = None, *, zeros: bool = True, peaky: bool = True, max_weight: int = 6) -> st.SearchStrategy:
    r"""Float64 distributions of length ``V`` (an int, a strategy, or ``None`` for 2..5).

    Integer weights, normalised, so examples are exact and shrink to readable laws.

    Parameters
    ----------
    V : int, SearchStrategy of int, or None
        Vocabulary size, or a strategy for it; ``None`` draws 2..5.
    zeros : bool
        Allow exact zeros (tokens a model never proposes): where the rules divide by q or p.
    peaky : bool
        Sometimes multiply one weight by 50 or 1000, giving near-one-hot laws.
    max_weight : int
        Largest integer weight before normalisation.

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Of float64 ``(V,)`` arrays summing to 1 (all-zero weights become uniform).

    Examples
    --------
    >>> from hypothesis import given, settings
    >>> @settings(max_examples=10, database=None)
    ... @given(distributions(3))
    ... def check(p):
    ...     assert p.shape == (3,) and abs(p.sum() - 1) < 1e-12 and (p >= 0).all()
    >>> check()
    """
    low = 0 if zeros else 1

    @st.composite
    def build(draw):
        n = draw(_sizes(V, 2, 5))
        w = draw(st.lists(st.integers(low, max_weight), min_size=n, max_size=n))
        if peaky:
            factor = draw(st.sampled_from([1, 50, 1000]))
            i = draw(st.integers(0, n - 1))
            w[i] = max(w[i], 1) * factor if factor > 1 else w[i]
        return _from_weights(w)

    return build()


def pairs(V: Any = None, *, zeros: bool = True, peaky: bool = True, max_weight: int = 6) -> st.SearchStrategy:
    """``(p, q)``: a target and a draft distribution over the same vocabulary (``V`` as in
    :func:`distributions`).

    Parameters
    ----------
    V : int, SearchStrategy of int, or None
        Vocabulary size (``None``: 2..5).
    zeros, peaky : bool
        As in :func:`distributions`.
    max_weight : int
        Largest integer weight before normalisation.

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Of tuples ``(p, q)`` of float64 ``(V,)`` distributions, drawn independently.
    """

    @st.composite
    def build(draw):
        n = draw(_sizes(V, 2, 5))
        return (
            draw(distributions(n, zeros=zeros, peaky=peaky, max_weight=max_weight)),
            draw(distributions(n, zeros=zeros, peaky=peaky, max_weight=max_weight)),
        )

    return build()


def laws(
    V: Any = None,
    k: Any = None,
    *,
    kinds: Sequence[str] = LAW_KINDS,
    q: Any = None,
    zeros: bool = True,
    peaky: bool = True,
    max_tuples: int = 125,
) -> st.SearchStrategy:
    r"""Draft laws of the given ``kinds`` (default: every kind), over ``V`` tokens with ``k`` drafts.

    ``V`` and ``k`` may be ints, strategies or ``None`` (2..5 tokens, 1..3 drafts); sizes with more
    than ``max_tuples`` ordered tuples are avoided. ``q`` fixes the draft distribution (for the
    kinds built from one ``q``; ``product`` uses it as the first drafter). Kinds that the support
    cannot carry (without replacement / greedy with k larger than the support of q) fall back to
    i.i.d.

    Parameters
    ----------
    V : int, SearchStrategy of int, or None
        Vocabulary size (``None``: 2..5; ignored when ``q`` is given).
    k : int, SearchStrategy of int, or None
        Number of drafts (``None``: 1..3).
    kinds : sequence of str
        Law kinds to draw from (:data:`LAW_KINDS`).
    q : array_like, optional
        A fixed draft distribution.
    zeros, peaky : bool
        As in :func:`distributions`.
    max_tuples : int
        ``k`` is lowered until ``V**k`` is at most this (keeps enumeration cheap).

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Of :class:`otspec.laws.DraftLaw`.

    Raises
    ------
    ValueError
        If ``kinds`` is empty or names an unknown kind.

    Examples
    --------
    >>> from hypothesis import given, settings
    >>> @settings(max_examples=10, database=None)
    ... @given(laws(3, 2))
    ... def check(law):
    ...     assert law.V == 3 and law.k == 2
    >>> check()
    """
    kinds = tuple(kinds)
    unknown = [kd for kd in kinds if kd not in LAW_KINDS]
    if unknown or not kinds:
        raise ValueError(f"kinds must be among {LAW_KINDS} (got {list(kinds)}); pass e.g. kinds=['iid']")

    @st.composite
    def build(draw):
        n = len(q) if q is not None else draw(_sizes(V, 2, 5))
        kk = draw(_sizes(k, 1, 3))
        while kk > 1 and n**kk > max_tuples:
            kk -= 1
        kind = draw(st.sampled_from(kinds))
        dist = distributions(n, zeros=zeros, peaky=peaky)
        qq = np.asarray(q, dtype=np.float64) if q is not None else draw(dist)
        law_class = by_kind(kind)
        if law_class.k_within_support and kk > np.count_nonzero(qq):
            law_class = IIDLaw  # too few tokens for distinct drafts: fall back to i.i.d.
        if law_class.parameters == "qs":
            return law_class.constructor([qq] + [draw(dist) for _ in range(kk - 1)])
        if law_class.parameters == "tuples":
            m = draw(st.integers(1, 4))
            tuples = draw(st.lists(st.lists(st.integers(0, n - 1), min_size=kk, max_size=kk), min_size=m, max_size=m))
            w = draw(st.lists(st.integers(1, 6), min_size=m, max_size=m))
            return law_class.constructor(tuples, np.asarray(w, dtype=np.float64) / sum(w), vocab_size=n)
        return law_class.constructor(qq, kk)

    return build()


@dataclass(frozen=True, eq=False)
class Problem:
    """A target ``p`` and a draft ``law`` over the same vocabulary; unpacks as ``p, law = problem``.

    Its repr is Python code that rebuilds it, so falsifying examples are reproducible.

    Attributes
    ----------
    p : ndarray, shape (V,)
        Target distribution.
    law : DraftLaw
        Draft law over the same ``V`` tokens.
    """

    p: np.ndarray
    law: Any

    def __iter__(self):
        return iter((self.p, self.law))

    def __repr__(self) -> str:
        return f"Problem(p={array_code(self.p)}, law={law_code(self.law)})"


def problems(
    V: Any = None, k: Any = None, *, kinds: Sequence[str] = LAW_KINDS, zeros: bool = True, peaky: bool = True, max_tuples: int = 125
) -> st.SearchStrategy:
    """A :class:`Problem`: a target from :func:`distributions` and a law from :func:`laws`.

    Parameters
    ----------
    V : int, SearchStrategy of int, or None
        Vocabulary size (``None``: 2..5).
    k : int, SearchStrategy of int, or None
        Number of drafts (``None``: 1..3).
    kinds : sequence of str
        Law kinds to draw from.
    zeros, peaky : bool
        As in :func:`distributions`.
    max_tuples : int
        Cap on ``V**k`` (see :func:`laws`).

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Of :class:`Problem`.

    Examples
    --------
    >>> from hypothesis import find
    >>> find(problems(kinds=["iid"]), lambda pr: pr.law.k == 2)
    Problem(p=np.array([1, 1]) / 2, law=otspec.iid(np.array([1, 1]) / 2, 2))
    """

    @st.composite
    def build(draw):
        n = draw(_sizes(V, 2, 5))
        law = draw(laws(n, k, kinds=kinds, zeros=zeros, peaky=peaky, max_tuples=max_tuples))
        return Problem(draw(distributions(n, zeros=zeros, peaky=peaky)), law)

    return build()
