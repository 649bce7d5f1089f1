r"""Turn a user's verifier -- a conditional law, a sampler or a class -- into something otspec can test.

A single-step verifier maps the drafts :math:`\bar x = (x_1, \dots, x_k)` to one output token.
otspec accepts it in any of three forms (see :doc:`testing`):

* a **conditional law** ``pi(p, q, drafts) -> (V,)`` (or ``pi(p, law, drafts)``): the exact
  output distribution :math:`\pi(\cdot \mid \bar x)` given one draft tuple. The exact kernel, the
  acceptance and a sampler follow from it;
* a **sampler** ``sample(p, law, drafts, rng) -> token`` (or ``sample(p, q, drafts, rng)``): one
  output token, drawn with the ``numpy.random.Generator`` it is given. Only statistical checks
  and a Monte Carlo acceptance are possible then;
* a subclass (or an instance) of otspec's verifier base class
  :class:`otspec.verifiers.Verifier`, used as it is.

Chain (block) verifiers are given by their per-path law ``conditional_law(p_model, q_model, drafts)
-> (gamma + 1, V)``, :math:`P(\tau = t, Y = y \mid X^\gamma = \text{drafts})`, the signature of
:func:`otspec.verifiers.block.conditional_law`.

The second argument is the draft distribution ``q`` when the parameter is named ``q`` (the law must
then be built from one ``q``: i.i.d., without replacement or greedy), and the draft law otherwise.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import itertools
import sys
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from otspec.laws import DraftLaw
from otspec.testing._base import (
    AcceptanceEstimate,
    OtspecInputError,
    UnsupportedMethodError,
    Verifier,
)

__all__ = [
    "ChainLaw",
    "ChainVerifier",
    "ConditionalVerifier",
    "InvalidVerifierError",
    "SamplerVerifier",
    "VerifierOutputError",
    "as_verifier",
    "chain_verifier",
    "conditional_verifier",
    "load_object",
    "object_spec",
    "sampler_verifier",
]

#: Two-sided 99% normal quantile for the Monte Carlo acceptance interval of a sampler.
_Z99 = 2.5758293035489004  # scipy.stats.norm.isf(0.005)

#: A conditional law row must sum to 1 within this before it is sampled from (a looser check than
#: the exact losslessness test, which reports the row sum itself).
_ROW_SUM_ATOL = 1e-9


class InvalidVerifierError(OtspecInputError):
    """An object given as a verifier is none of the supported forms (or cannot be imported)."""


class VerifierOutputError(AssertionError):
    """A user verifier returned something that is not an output law / token of the right shape."""


def _law_kinds(kinds: Iterable[str] | str | None) -> tuple[str, ...] | None:
    if kinds is None:
        return None
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    known = {"iid", "without_replacement", "greedy", "product", "explicit"}
    bad = [k for k in kinds if k not in known]
    if bad or not kinds:
        raise InvalidVerifierError(f"kinds must name draft-law kinds among {sorted(known)} (got {list(kinds)}); e.g. kinds=('iid',)")
    return kinds


def _draft_counts(k: Iterable[int] | int | None) -> tuple[int, ...] | None:
    if k is None:
        return None
    ks = (k,) if isinstance(k, (int, np.integer)) else tuple(k)
    if not ks or any(int(x) < 1 for x in ks):
        raise InvalidVerifierError(f"k must be a draft count >= 1 or a list of them (got {k!r}); e.g. k=1 or k=(2, 3)")
    return tuple(int(x) for x in ks)


def _second_argument(fn: Callable, second: str | None) -> str:
    if second is not None:
        if second not in ("q", "law"):
            raise InvalidVerifierError(f"second must be 'q' or 'law' (got {second!r}); it says what the second argument of the function is")
        return second
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return "law"
    return "q" if len(params) > 1 and params[1] in ("q", "q_draft", "draft") else "law"


class _FunctionVerifier(Verifier):
    """Shared part of the function adapters: name, claims, the law kinds they apply to."""

    def __init__(self, fn: Callable, *, name: str | None, lossless: bool, kinds, k, second: str | None):
        if not callable(fn):
            raise InvalidVerifierError(f"a verifier function must be callable (got {type(fn).__name__}); pass the function itself")
        self.fn = fn
        self.name = str(name or getattr(fn, "__name__", type(fn).__name__))
        self.lossless = bool(lossless)
        self.kinds = _law_kinds(kinds)
        self.ks = _draft_counts(k)
        self.second = _second_argument(fn, second)
        parts = []
        if self.kinds is not None:
            parts.append(f"draft laws of kind {' / '.join(self.kinds)}")
        if self.ks is not None:
            parts.append(f"k in {list(self.ks)}")
        if self.second == "q":
            parts.append("a law built from one draft distribution q (its second argument is q)")
        self.rule = f"{self.name!r} is declared for " + (", ".join(parts) if parts else "every draft law")
        self.fix = "pass a law it is declared for, or widen kinds= / k= where it is built"
        self.reference = getattr(fn, "__module__", "") or ""

    def applies_to(self, law: DraftLaw) -> bool:
        if self.kinds is not None and law.kind not in self.kinds:
            return False
        if self.ks is not None and law.k not in self.ks:
            return False
        return not (self.second == "q" and law.q is None)

    def _arg(self, law: DraftLaw) -> Any:
        return law.q if self.second == "q" else law

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} ({'lossless' if self.lossless else 'lossy'} claim)>"


class ConditionalVerifier(_FunctionVerifier):
    r"""A verifier given by its conditional output law ``pi(p, q_or_law, drafts) -> (V,)``.

    ``kernel`` calls ``pi`` once per draft tuple of the law, ``acceptance`` is exact from the
    kernel, and ``sample`` draws from the returned row (so the sampler agrees with the kernel by
    construction; what is tested is the law itself).

    Parameters
    ----------
    pi : callable
        ``pi(p, q, drafts)`` or ``pi(p, law, drafts)``; ``p`` is a read-only float64 ``(V,)``
        array, ``drafts`` an int64 ``(k,)`` array; returns an array_like of shape ``(V,)``.
    name : str, optional
        Name in reports (default: the function's name).
    lossless : bool
        Whether the rule is claimed lossless (``False`` for approximate rules).
    kinds : str or sequence of str, optional
        Draft-law kinds it is defined for (``"iid"``, ``"without_replacement"``, ``"greedy"``,
        ``"product"``, ``"explicit"``); default every kind.
    k : int or sequence of int, optional
        Draft counts it is defined for; default every k.
    second : {"q", "law"}, optional
        What the second argument is; default: ``"q"`` when that parameter is named ``q``.

    Examples
    --------
    >>> import numpy as np, otspec
    >>> def keep_or_resample(p, q, drafts):      # single-draft speculative sampling
    ...     x = drafts[0]
    ...     a = min(1.0, p[x] / q[x])
    ...     r = np.maximum(p - q, 0)
    ...     out = (1 - a) * (r / r.sum() if r.sum() > 0 else p)
    ...     out[x] += a
    ...     return out
    >>> v = ConditionalVerifier(keep_or_resample, k=1)
    >>> K = v.kernel([0.5, 0.5], otspec.iid([0.75, 0.25], 1))
    >>> K.output_law().tolist(), K.acceptance()
    ([0.5, 0.5], 0.75)
    """

    def __init__(self, pi: Callable, *, name: str | None = None, lossless: bool = True, kinds=None, k=None, second: str | None = None):
        super().__init__(pi, name=name, lossless=lossless, kinds=kinds, k=k, second=second)

    def _rows(self, p: np.ndarray, law: DraftLaw, tuples: np.ndarray) -> np.ndarray:
        arg = self._arg(law)
        V = law.V
        out = np.empty((tuples.shape[0], V))
        for m, t in enumerate(tuples):
            d = np.array(t, dtype=np.int64)
            d.setflags(write=False)
            try:
                row = np.asarray(self.fn(p, arg, d), dtype=np.float64)
            except (TypeError, ValueError) as exc:
                if isinstance(exc, OtspecInputError):
                    raise
                raise VerifierOutputError(
                    f"{self.name}(p, {'q' if self.second == 'q' else 'law'}, drafts={d.tolist()}) raised {type(exc).__name__}: {exc}"
                ) from exc
            if row.shape != (V,):
                raise VerifierOutputError(
                    f"{self.name} must return an output law of shape ({V},) for drafts {d.tolist()} (got shape {row.shape}); "
                    "return pi(. | drafts) over the whole vocabulary"
                )
            out[m] = row
        return out

    def _sample_rows(self, p, law, tuples, coin_rng, res_rng) -> np.ndarray:
        uniq, inverse = np.unique(tuples, axis=0, return_inverse=True)
        rows = self._rows(p, law, uniq)
        sums = rows.sum(axis=1)
        bad = np.flatnonzero(~np.isfinite(sums) | (np.abs(sums - 1.0) > _ROW_SUM_ATOL) | np.any(rows < 0, axis=1))
        if bad.size:
            b = int(bad[0])
            raise VerifierOutputError(
                f"{self.name} returned an output law that is not a distribution for drafts {uniq[b].tolist()} "
                f"(sum {sums[b]:.12g}, min {rows[b].min():.3g}); it cannot be sampled"
            )
        return _categorical_rows(coin_rng, rows[inverse.ravel()])


class SamplerVerifier(_FunctionVerifier):
    r"""A verifier given only by its sampler ``sample(p, q_or_law, drafts, rng) -> token``.

    It has no exact kernel: :meth:`kernel` raises, :meth:`acceptance` is a Monte Carlo estimate
    (fraction of sampled outputs that are among the drafts, 99% normal interval), and losslessness
    can only be tested statistically (:func:`otspec.testing.assert_sampler_lossless`).

    The function receives the ``numpy.random.Generator`` it must draw from (one stream: split it
    yourself, e.g. with ``rng.spawn(2)``, to keep the accept coin and the residual draw independent).

    Parameters
    ----------
    sample : callable
        ``sample(p, q, drafts, rng)`` or ``sample(p, law, drafts, rng)``, returning one token id
        (an int in ``[0, V)``).
    name : str, optional
        Name in reports (default: the function's name).
    lossless : bool
        Whether the rule is claimed lossless.
    kinds : str or sequence of str, optional
        Draft-law kinds it is defined for; default every kind.
    k : int or sequence of int, optional
        Draft counts it is defined for; default every k.
    second : {"q", "law"}, optional
        What the second argument is; default: ``"q"`` when that parameter is named ``q``.

    Raises
    ------
    InvalidVerifierError
        If ``sample`` is not callable or an option is invalid.

    Examples
    --------
    >>> import numpy as np, otspec
    >>> def draft_always(p, q, drafts, rng):   # keeps every draft: lossy unless p == q
    ...     return int(drafts[0])
    >>> v = SamplerVerifier(draft_always, k=1)
    >>> v.acceptance([0.5, 0.5], otspec.iid([0.75, 0.25], 1), n_samples=100).value
    1.0
    """

    def __init__(self, sample: Callable, *, name: str | None = None, lossless: bool = True, kinds=None, k=None, second: str | None = None):
        super().__init__(sample, name=name, lossless=lossless, kinds=kinds, k=k, second=second)

    def _rows(self, p, law, tuples):
        raise UnsupportedMethodError(
            f"verifier {self.name!r} is given only as a sampler, so it has no exact kernel; "
            "test it with otspec.testing.assert_sampler_lossless, or give its conditional law (otspec.testing.conditional_verifier)"
        )

    def _sample_rows(self, p, law, tuples, coin_rng, res_rng) -> np.ndarray:
        arg = self._arg(law)
        out = np.empty(tuples.shape[0], dtype=np.int64)
        for m, t in enumerate(tuples):
            d = np.array(t, dtype=np.int64)
            d.setflags(write=False)
            y = self.fn(p, arg, d, coin_rng)
            if isinstance(y, (bool, np.bool_)) or not isinstance(y, (int, np.integer)) or not 0 <= int(y) < law.V:
                raise VerifierOutputError(
                    f"{self.name} must return one token id in [0, {law.V}) for drafts {d.tolist()} (got {y!r}); return an int"
                )
            out[m] = int(y)
        return out

    def acceptance(
        self, p: Any, law: DraftLaw, *, method: str = "auto", n_samples: int = 20_000, rng: np.random.Generator | None = None
    ) -> AcceptanceEstimate:
        r"""Monte Carlo estimate of :math:`P(Y \in \{X_1..X_k\})` from ``n_samples`` runs of the sampler.

        Draft tuples are drawn from ``law`` and the sampler from the same generator (default
        ``numpy.random.default_rng(0)``); the interval is the 99% normal interval of a proportion.

        Parameters
        ----------
        p : array_like, shape (V,)
            Target distribution.
        law : DraftLaw
            The draft law.
        method : {"auto", "monte_carlo"}
            Only Monte Carlo exists for a sampler.
        n_samples : int
            Number of draft tuples (and sampler runs), ``>= 2``.
        rng : numpy.random.Generator, optional
            Generator for drafts and sampler (default ``numpy.random.default_rng(0)``).

        Returns
        -------
        AcceptanceEstimate
            ``how="monte_carlo"``, the estimate, its 99% interval and ``n_samples``.

        Raises
        ------
        UnsupportedMethodError
            If ``method`` asks for an exact answer, or ``n_samples < 2``.
        VerifierOutputError
            If the sampler returns something other than a token id.
        """
        if method not in ("auto", "monte_carlo"):
            raise UnsupportedMethodError(
                f"verifier {self.name!r} is a sampler: its acceptance can only be estimated (method='monte_carlo', got {method!r})"
            )
        n = int(n_samples)
        if n < 2:
            raise UnsupportedMethodError(f"n_samples must be >= 2 for Monte Carlo (got {n}); pass more samples")
        rng = np.random.default_rng(0) if rng is None else rng
        p = self._check(p, law)
        drafts = law.sample(rng, n)
        ys = self.sample_batch(p, law, drafts, rng=rng)
        hit = np.any(drafts == ys[:, None], axis=1)
        v = float(hit.mean())
        half = _Z99 * np.sqrt(max(v * (1.0 - v), 0.25 / n) / n)
        return AcceptanceEstimate(
            v,
            "monte_carlo",
            max(0.0, v - half),
            min(1.0, v + half),
            n,
            {"confidence": 0.99, "estimator": "fraction of sampled outputs among the drafts"},
        )


def _categorical_rows(rng: np.random.Generator, W: np.ndarray) -> np.ndarray:
    """One inverse-CDF draw from each row of the (non-negative) weights ``W`` ``(n, V)``."""
    if W.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    cdf = np.cumsum(W, axis=1)
    u = rng.random(W.shape[0]) * cdf[:, -1]
    idx = np.sum(cdf <= u[:, None], axis=1)
    last = W.shape[1] - 1 - np.argmax((W > 0)[:, ::-1], axis=1)  # never step onto a trailing zero
    return np.minimum(idx, last).astype(np.int64)


# ------------------------------------------------------------------------------------------------
# Chain (block) verifiers


@dataclass(frozen=True, eq=False)
class ChainLaw:
    r"""Exact law of :math:`(\tau, Y)` given every drafted path of a chain verifier.

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

    def expected_accepted(self) -> float:
        r""":math:`E[\tau] = \sum_x M_s(x) \sum_t t\, P(\tau = t \mid x)`.

        Returns
        -------
        float
            Expected number of accepted draft tokens per block, in ``[0, gamma]``.
        """
        tau = self.law.sum(axis=2)
        return float(self.weights @ (tau @ np.arange(tau.shape[1])))

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

    def expected_accepted(self, p_model: Any, q_model: Any, gamma: int) -> float:
        r"""Exact :math:`E[\tau]` by enumeration.

        Parameters
        ----------
        p_model, q_model : Model or callable
            Target and draft models.
        gamma : int
            Draft block length.

        Returns
        -------
        float
            :meth:`ChainLaw.expected_accepted` of :meth:`kernel`.
        """
        return self.kernel(p_model, q_model, gamma).expected_accepted()

    def __repr__(self) -> str:
        return f"<ChainVerifier {self.name!r} ({'lossless' if self.lossless else 'lossy'} claim)>"


# ------------------------------------------------------------------------------------------------
# Decorators and detection


def _decorator(cls, fn, kwargs):
    if fn is None:
        return lambda f: cls(f, **kwargs)
    return cls(fn, **kwargs)


def conditional_verifier(pi: Callable | None = None, **kwargs: Any) -> Any:
    """Decorator form of :class:`ConditionalVerifier` (``@conditional_verifier`` or
    ``@conditional_verifier(kinds="iid", k=(2, 3))``).

    Parameters
    ----------
    pi : callable, optional
        The conditional law; omitted when the decorator is called with options.
    **kwargs
        Options of :class:`ConditionalVerifier` (``name``, ``lossless``, ``kinds``, ``k``, ``second``).

    Returns
    -------
    ConditionalVerifier or callable
        The adapter, or (called with options only) a decorator that builds it.

    Examples
    --------
    >>> @conditional_verifier(k=1)
    ... def ignore_drafts(p, q, drafts):
    ...     return p
    >>> ignore_drafts.name, ignore_drafts.lossless
    ('ignore_drafts', True)
    """
    return _decorator(ConditionalVerifier, pi, kwargs)


def sampler_verifier(sample: Callable | None = None, **kwargs: Any) -> Any:
    """Decorator form of :class:`SamplerVerifier`.

    Parameters
    ----------
    sample : callable, optional
        The sampler; omitted when the decorator is called with options.
    **kwargs
        Options of :class:`SamplerVerifier`.

    Returns
    -------
    SamplerVerifier or callable
        The adapter, or a decorator that builds it.
    """
    return _decorator(SamplerVerifier, sample, kwargs)


def chain_verifier(conditional_law: Callable | None = None, **kwargs: Any) -> Any:
    """Decorator form of :class:`ChainVerifier`.

    Parameters
    ----------
    conditional_law : callable, optional
        The per-path law; omitted when the decorator is called with options.
    **kwargs
        Options of :class:`ChainVerifier` (``name``, ``lossless``).

    Returns
    -------
    ChainVerifier or callable
        The adapter, or a decorator that builds it.
    """
    return _decorator(ChainVerifier, conditional_law, kwargs)


def as_verifier(obj: Any, **kwargs: Any) -> Any:
    """Return ``obj`` as a testable verifier.

    * instances of :class:`otspec.verifiers.Verifier` (including the adapters) and of
      :class:`ChainVerifier` are returned as they are;
    * a subclass of :class:`otspec.verifiers.Verifier` is instantiated without arguments;
    * a module with a ``conditional_law(p_model, q_model, drafts)`` function (such as
      :mod:`otspec.verifiers.block`) becomes a :class:`ChainVerifier`;
    * a function is recognised by its parameters: ``(p_model, q_model, drafts)`` -> chain,
      four parameters or one named ``rng`` -> sampler, three -> conditional law.

    Keyword arguments go to the adapter's constructor (``name``, ``lossless``, ``kinds``, ``k``,
    ``second``); they are refused for objects that are already verifiers.

    Parameters
    ----------
    obj : object
        A verifier instance or class, a chain-verifier module, or a function.
    **kwargs
        Adapter options (functions and modules only).

    Returns
    -------
    Verifier or ChainVerifier
        ``obj`` itself, an instance of it, or an adapter around it.

    Raises
    ------
    InvalidVerifierError
        If ``obj`` is none of the supported forms, its signature cannot be read, or options are
        given for an object that is already a verifier.

    Examples
    --------
    >>> from otspec.verifiers import kseq
    >>> as_verifier(kseq) is kseq
    True
    >>> as_verifier(lambda p, q, drafts: p, k=1)
    <ConditionalVerifier '<lambda>' (lossless claim)>
    """
    if isinstance(obj, (Verifier, ChainVerifier)):
        if kwargs:
            raise InvalidVerifierError(f"{obj!r} is already a verifier; options {sorted(kwargs)} only apply to functions")
        return obj
    if isinstance(obj, type) and issubclass(obj, Verifier):
        if kwargs:
            raise InvalidVerifierError(f"options {sorted(kwargs)} only apply to functions; set them as class attributes")
        return obj()
    if isinstance(obj, types.ModuleType):
        fn = getattr(obj, "conditional_law", None)
        if callable(fn):
            return ChainVerifier(fn, name=kwargs.pop("name", obj.__name__.rsplit(".", 1)[-1]), **kwargs)
        raise InvalidVerifierError(
            f"module {obj.__name__} is not a verifier (it has no conditional_law(p_model, q_model, drafts)); "
            "point at a function, a Verifier subclass or an instance instead (MODULE:OBJECT)"
        )
    if not callable(obj):
        raise InvalidVerifierError(
            f"{type(obj).__name__} object is not a verifier; pass a conditional law pi(p, q, drafts), a sampler "
            "sample(p, law, drafts, rng), or an otspec.verifiers.Verifier"
        )
    try:
        params = [prm for prm in inspect.signature(obj).parameters.values() if prm.kind in (prm.POSITIONAL_ONLY, prm.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        raise InvalidVerifierError(f"cannot read the signature of {obj!r}; wrap it with conditional_verifier or sampler_verifier") from None
    names = [prm.name for prm in params]
    if names[:1] == ["p_model"]:
        return ChainVerifier(obj, **kwargs)
    if len(names) >= 4 or "rng" in names:
        return SamplerVerifier(obj, **kwargs)
    if len(names) == 3:
        return ConditionalVerifier(obj, **kwargs)
    raise InvalidVerifierError(
        f"{getattr(obj, '__name__', obj)!r} takes parameters {names}: expected pi(p, q_or_law, drafts) (3), "
        "sample(p, q_or_law, drafts, rng) (4) or conditional_law(p_model, q_model, drafts); wrap it explicitly"
    )


def load_object(spec: str) -> Any:
    """Import ``"MODULE:OBJECT"`` (``OBJECT`` may be dotted; ``MODULE`` may be a ``.py`` file path).

    Without ``:OBJECT`` the module itself is returned.

    Parameters
    ----------
    spec : str
        ``"package.module:name"`` or ``"path/to/file.py:name"`` (Windows drive letters allowed).

    Returns
    -------
    object
        The named object (or the module).

    Raises
    ------
    InvalidVerifierError
        If ``spec`` is malformed, the file or module does not exist or fails to import, or the
        attribute is missing.

    Examples
    --------
    >>> load_object("otspec.verifiers:kseq").name
    'kseq'
    """
    if not isinstance(spec, str) or not spec or spec.startswith(":"):
        raise InvalidVerifierError(
            f"expected MODULE:OBJECT (got {spec!r}); e.g. mypackage.rules:my_verifier or path/to/file.py:my_verifier"
        )
    mod_name, _, attr = spec.partition(":") if not _looks_like_windows_path(spec) else _split_windows(spec)
    if mod_name.endswith(".py") or "/" in mod_name or "\\" in mod_name:
        path = Path(mod_name)
        if not path.is_file():
            raise InvalidVerifierError(f"no such file {mod_name!r} (from {spec!r}); pass an existing .py file or an importable module name")
        name = "_otspec_audit_" + path.stem
        sspec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(sspec)
        sys.modules[name] = module
        try:
            sspec.loader.exec_module(module)
        except Exception as exc:  # user code: report any import-time failure as bad input
            sys.modules.pop(name, None)
            raise InvalidVerifierError(f"importing {mod_name} failed: {type(exc).__name__}: {exc}") from exc
    else:
        try:
            module = importlib.import_module(mod_name)
        except ImportError as exc:
            raise InvalidVerifierError(f"cannot import module {mod_name!r} ({exc}); check the name and that it is on sys.path") from None
        except Exception as exc:  # user code
            raise InvalidVerifierError(f"importing {mod_name} failed: {type(exc).__name__}: {exc}") from exc
    obj: Any = module
    for part in filter(None, attr.split(".")):
        if not hasattr(obj, part):
            raise InvalidVerifierError(
                f"{mod_name} has no attribute {attr!r}; available: {[n for n in dir(module) if not n.startswith('_')][:20]}"
            )
        obj = getattr(obj, part)
    return obj


def _looks_like_windows_path(spec: str) -> bool:
    return len(spec) > 2 and spec[1] == ":" and spec[2] in "\\/"


def _split_windows(spec: str) -> tuple[str, str, str]:
    head, sep, tail = spec[2:].partition(":")
    return spec[:2] + head, sep, tail


def object_spec(obj: Any) -> str | None:
    """A ``MODULE:OBJECT`` string that :func:`load_object` resolves to ``obj``, when one is found.

    The shortest importing package that exposes ``obj`` under a public name is preferred; adapters
    are looked up by their wrapped function.

    Parameters
    ----------
    obj : object
        A verifier, adapter or function.

    Returns
    -------
    str or None
        The spec, or ``None`` when ``obj`` is not reachable by name (e.g. a lambda).

    Examples
    --------
    >>> from otspec.verifiers import kseq
    >>> object_spec(kseq)
    'otspec.verifiers:kseq'
    """
    targets = [obj]
    modules = [getattr(obj, "__module__", None), getattr(type(obj), "__module__", None)]
    if isinstance(obj, (ConditionalVerifier, SamplerVerifier, ChainVerifier)):
        targets.append(obj.fn)  # a decorated function is stored under its own name
        modules = [getattr(obj.fn, "__module__", None)]
    for cand in modules:
        if not cand or cand.startswith("_otspec_audit_"):
            continue
        parts = cand.split(".")
        for i in range(1, len(parts) + 1):  # the package that re-exports it reads best: shortest first
            module = sys.modules.get(".".join(parts[:i]))
            for attr, value in vars(module).items() if module is not None else ():
                if any(value is t for t in targets) and not attr.startswith("_"):
                    return f"{'.'.join(parts[:i])}:{attr}"
    return None
