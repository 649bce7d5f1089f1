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
It is the law's :attr:`~otspec.laws.DraftLaw.q`, the distribution the drafts are *drawn* from: for a
deterministic top-1 draft (:func:`otspec.laws.top_k` with ``k = 1``) the point mass of the drafted
token, never the q it was chosen from (a ratio :math:`p/q` against that q is not lossless); a rule
given ``q`` does not apply to deterministic drafts of two or more tokens.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from otspec._docs import fill_doc
from otspec.errors import InvalidVerifierError, OtspecInputError, UnsupportedMethodError
from otspec.laws import KINDS, DraftLaw
from otspec.verifiers import Verifier
from otspec.verifiers.kernel import AcceptanceEstimate

__all__ = ["ConditionalVerifier", "SamplerVerifier", "VerifierOutputError"]


#: Two-sided 99% normal quantile for the Monte Carlo acceptance interval of a sampler.
_Z99 = 2.5758293035489004  # scipy.stats.norm.isf(0.005)

#: A conditional law row must sum to 1 within this before it is sampled from (a looser check than
#: the exact losslessness test, which reports the row sum itself).
_ROW_SUM_ATOL = 1e-9


class VerifierOutputError(AssertionError):
    """A user verifier returned something that is not an output law / token of the right shape."""


def _law_kinds(kinds: Iterable[str] | str | None) -> tuple[str, ...] | None:
    if kinds is None:
        return None
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    known = set(KINDS)
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

    @fill_doc
    def acceptance(
        self, p: Any, law: DraftLaw, *, method: str = "auto", n_samples: int = 20_000, rng: np.random.Generator | None = None
    ) -> AcceptanceEstimate:
        r"""Monte Carlo estimate of :math:`P(Y \in \{X_1..X_k\})` from ``n_samples`` runs of the sampler.

        Draft tuples are drawn from ``law`` and the sampler from the same generator (default
        ``numpy.random.default_rng(0)``); the interval is the 99% normal interval of a proportion.

        Parameters
        ----------
        {p_law_args}
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
