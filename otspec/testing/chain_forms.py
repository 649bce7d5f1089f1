r"""Chain (block) verifiers given by their per-path law ``conditional_law(p_model, q_model, drafts)
-> (gamma + 1, V)``, :math:`P(\tau = t, Y = y \mid X^\gamma = \text{drafts})` (the signature of
:func:`otspec.verifiers.block.conditional_law`), and the exact law they induce."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec._docs import fill_doc
from otspec.errors import InvalidVerifierError
from otspec.testing.forms import VerifierOutputError
from otspec.verifiers.chain import ChainKernel

__all__ = ["ChainLaw", "ChainVerifier"]


@dataclass(frozen=True, eq=False)
class ChainLaw(ChainKernel):
    r"""Exact law of :math:`(\tau, Y)` given every drafted path of a chain verifier given as a function:
    the core's :class:`~otspec.verifiers.chain.ChainKernel` (``gamma``, ``tau_law``,
    ``expected_accepted``, ...) of a law that is not trusted yet, so :meth:`block_law` keeps every
    nonzero entry, negative ones included.

    Attributes
    ----------
    paths : ndarray of int64, shape (N, gamma)
        Every drafted path of positive draft probability (lexicographic).
    weights : ndarray, shape (N,)
        Their draft probabilities :math:`M_s(x^\gamma)`.
    law : ndarray, shape (N, gamma + 1, V)
        ``law[n, t, y]`` :math:`= P(\tau = t, Y = y \mid X^\gamma = \text{paths}[n])`.
    verifier : str
        Name of the verifier that produced the law.
    """

    paths: np.ndarray
    weights: np.ndarray
    law: np.ndarray
    verifier: str = ""

    def block_law(self) -> dict:
        """Law of the emitted block :math:`O = (X^\\tau, Y)` as ``{tuple: probability}``.

        A lossless chain verifier emits blocks distributed as the target's own sequences of the
        same lengths; the assertions compare this law with the target's.

        Returns
        -------
        dict of tuple of int to float
            ``{(x_1, ..., x_tau, y): probability}`` over every emitted block with nonzero mass.
        """
        out: dict = {}
        g = self.paths.shape[1]
        for path, w, lw in zip(self.paths, self.weights, self.law, strict=False):
            for t in range(g + 1):
                head = tuple(int(v) for v in path[:t])
                for y in np.flatnonzero(lw[t] != 0):
                    key = head + (int(y),)
                    out[key] = out.get(key, 0.0) + float(w * lw[t, y])
        return out


class ChainVerifier:
    r"""A chain (block) verifier given by ``conditional_law(p_model, q_model, drafts) -> (gamma + 1, V)``.

    ``conditional_law`` returns :math:`P(\tau = t, Y = y \mid X^\gamma = \text{drafts})` for one
    drafted path: ``t`` accepted drafts, then the token ``y``. :meth:`kernel` enumerates every
    drafted path of positive draft probability.

    Parameters
    ----------
    conditional_law : callable
        ``conditional_law(p_model, q_model, drafts) -> (gamma + 1, V)`` with ``drafts`` an int64
        ``(gamma,)`` path.
    name : str, optional
        Name in reports (default: the function's name).
    lossless : bool
        Whether the rule is claimed lossless.

    Raises
    ------
    InvalidVerifierError
        If ``conditional_law`` is not callable.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import block
    >>> v = ChainVerifier(block.conditional_law, name="block")
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> round(v.kernel(p, q, 2).expected_accepted() * 9, 9)   # block verification's 11/9
    11.0
    """

    def __init__(self, conditional_law: Callable, *, name: str | None = None, lossless: bool = True):
        if not callable(conditional_law):
            raise InvalidVerifierError(f"conditional_law must be callable (got {type(conditional_law).__name__})")
        self.fn = conditional_law
        self.name = str(name or getattr(conditional_law, "__name__", "chain_verifier"))
        self.lossless = bool(lossless)

    def kernel(self, p_model: Any, q_model: Any, gamma: int) -> ChainLaw:
        """Enumerate the drafted paths of ``q_model`` of length ``gamma`` and call the law on each.

        Parameters
        ----------
        p_model, q_model : Model or callable
            Target and draft models over one vocabulary (:mod:`otspec.models`).
        gamma : int
            Draft block length.

        Returns
        -------
        ChainLaw
            The law of :math:`(\\tau, Y)` for every drafted path of positive draft probability.

        Raises
        ------
        VerifierOutputError
            If the law returned for a path does not have shape ``(gamma + 1, V)``.
        """
        from otspec import models

        p_model = models.as_model(p_model, name="p_model")
        q_model = models.as_model(q_model, V=p_model.V, name="q_model")
        V, g = p_model.V, int(gamma)
        paths, weights, laws = [], [], []
        for path in itertools.product(range(V), repeat=g):
            w = 1.0
            for i in range(g):
                w *= float(q_model(path[:i])[path[i]])
                if w == 0.0:
                    break
            if w == 0.0:
                continue
            law = np.asarray(self.fn(p_model, q_model, np.array(path, dtype=np.int64)), dtype=np.float64)
            if law.shape != (g + 1, V):
                raise VerifierOutputError(
                    f"{self.name} must return shape ({g + 1}, {V}) (tau = 0..gamma by token) for path {list(path)} (got {law.shape})"
                )
            paths.append(path)
            weights.append(w)
            laws.append(law)
        return ChainLaw(np.array(paths, dtype=np.int64).reshape(-1, g), np.array(weights), np.array(laws).reshape(-1, g + 1, V), self.name)

    @fill_doc
    def expected_accepted(self, p_model: Any, q_model: Any, gamma: int) -> float:
        r"""Exact :math:`E[\tau]` by enumeration.

        Parameters
        ----------
        {chain_pq_gamma_args}

        Returns
        -------
        float
            :meth:`ChainLaw.expected_accepted` of :meth:`kernel`.
        """
        return self.kernel(p_model, q_model, gamma).expected_accepted()

    def __repr__(self) -> str:
        return f"<ChainVerifier {self.name!r} ({'lossless' if self.lossless else 'lossy'} claim)>"
