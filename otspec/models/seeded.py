"""Seeded random models: an independent Dirichlet conditional per prefix (:func:`dirichlet`), per
context of a Markov order (:func:`markov`), and a draft made from a target by tempering and seeded
noise (:func:`close_draft`). Each conditional is a deterministic function of ``(seed, context)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec._validation import as_int_in_range, check_memory
from otspec.errors import InvalidDistributionError
from otspec.models.base import Model, as_model

__all__ = ["DirichletModel", "CloseDraftModel", "dirichlet", "markov", "close_draft"]

#: Salts that keep the random streams of different model kinds apart for the same seed.
_SALT_DIRICHLET = 0x5EED_D1C7
_SALT_NOISE = 0x5EED_0153


def _seeded_dirichlet(seed: int, salt: int, context: tuple[int, ...], V: int, concentration: float, zero_prob: float) -> np.ndarray:
    # One independent stream per (seed, salt, context): SeedSequence mixes the whole entropy list,
    # and the length is included so that (1,) and (1, 0)-style contexts never collide.
    rng = np.random.default_rng([seed, salt, len(context), *context])
    x = rng.dirichlet(np.full(V, concentration))
    if zero_prob > 0:
        kill = rng.random(V) < zero_prob
        if kill.all():
            kill[int(rng.integers(V))] = False
        x = np.where(kill, 0.0, x)
    total = x.sum()
    if not total > 0:  # all surviving entries underflowed (tiny concentration): keep the largest
        x = np.zeros(V)
        x[int(rng.integers(V))] = 1.0
        total = 1.0
    return x / total


@dataclass(frozen=True, eq=False, repr=False)
class DirichletModel(Model):
    r"""Seeded random model: :math:`M(\cdot \mid x^i) \sim \mathrm{Dirichlet}(a \mathbf 1_V)`,
    independently for every context (the last ``order`` tokens, or the whole prefix).

    Build it with :func:`dirichlet` or :func:`markov`.

    Attributes
    ----------
    concentration : float
        The Dirichlet parameter :math:`a > 0`.
    seed : int
        Non-negative seed; with the context it determines every conditional.
    order : int or None
        Context length (a Markov model of that order), or ``None`` for the whole prefix.
    zero_prob : float
        Chance, per token and context, that the token gets probability exactly 0.
    """

    concentration: float = 1.0
    seed: int = 0
    order: int | None = None
    zero_prob: float = 0.0

    def _conditional(self, prefix):
        context = prefix if self.order is None else prefix[max(0, len(prefix) - self.order) :]
        if self.order is not None and self.order == 0:
            context = ()
        return _seeded_dirichlet(self.seed, _SALT_DIRICHLET, context, self.V, self.concentration, self.zero_prob)

    def __repr__(self) -> str:
        kind = "dirichlet" if self.order is None else f"markov(order={self.order})"
        return f"{kind}(V={self.V}, concentration={self.concentration:g}, seed={self.seed}, zero_prob={self.zero_prob:g})"


@dataclass(frozen=True, eq=False, repr=False)
class CloseDraftModel(Model):
    r""":math:`q(\cdot \mid x^i) = (1-\lambda)\,\mathrm{norm}(p(\cdot \mid x^i)^{1/T}) + \lambda\, n(\cdot \mid x^i)`
    with :math:`n` seeded Dirichlet noise.

    Build it with :func:`close_draft`.

    Attributes
    ----------
    target : Model
        The target model :math:`p`.
    temperature : float
        :math:`T > 0` applied to the target's conditionals.
    noise : float
        Mixing weight :math:`\lambda \in [0, 1]` of the noise.
    seed : int
        Seed of the noise :math:`n(\cdot \mid x^i)`.
    concentration : float
        Dirichlet parameter of the noise.
    """

    target: Any = None
    temperature: float = 1.0
    noise: float = 0.0
    seed: int = 0
    concentration: float = 1.0

    def _conditional(self, prefix):
        p = self.target(prefix)
        if self.temperature == 1.0:
            t = p
        else:
            with np.errstate(divide="ignore"):
                logp = np.log(p) / self.temperature
            logp -= logp.max()
            t = np.exp(logp)
            t /= t.sum()
        if self.noise == 0.0:
            return np.array(t, dtype=np.float64)
        n = _seeded_dirichlet(self.seed, _SALT_NOISE, prefix, self.V, self.concentration, 0.0)
        out = (1.0 - self.noise) * t + self.noise * n
        return out / out.sum()

    def __repr__(self) -> str:
        return f"close_draft({self.target!r}, temperature={self.temperature:g}, noise={self.noise:g}, seed={self.seed})"


def _as_positive(a: Any, name: str, type_fix: str, value_fix: str) -> float:
    """``a`` as a finite float > 0, else ``InvalidDistributionError`` (``type_fix`` / ``value_fix`` end
    the message when ``a`` is not a number / not finite and > 0)."""
    try:
        a = float(a)
    except (TypeError, ValueError):
        raise InvalidDistributionError(f"{name} must be a positive number (got {a!r}){type_fix}") from None
    if not np.isfinite(a) or a <= 0:
        raise InvalidDistributionError(f"{name} must be finite and > 0 (got {a}){value_fix}")
    return a


def _as_concentration(a: Any, name: str = "concentration") -> float:
    return _as_positive(a, name, "; pass e.g. 1.0", "; smaller values give peakier conditionals")


def _as_unit(x: Any, name: str, *, closed_right: bool = True) -> float:
    try:
        x = float(x)
    except (TypeError, ValueError):
        raise InvalidDistributionError(f"{name} must be a number in [0, 1] (got {x!r})") from None
    ok = np.isfinite(x) and x >= 0 and (x <= 1 if closed_right else x < 1)
    if not ok:
        rule = "[0, 1]" if closed_right else "[0, 1)"
        raise InvalidDistributionError(f"{name} must lie in {rule} (got {x}); pass a probability")
    return x


def _as_seed(seed: Any) -> int:
    return as_int_in_range(seed, "seed", minimum=0)


#: Bytes budgeted per token for one conditional of a random model (the Dirichlet draw, its
#: normalisation, the cached row and temporaries).
_MODEL_BYTES_PER_TOKEN = 40


def dirichlet(
    V: int, *, concentration: float = 1.0, seed: int = 0, zero_prob: float = 0.0, memory_cap: float | None = None
) -> DirichletModel:
    r"""A seeded random model with an independent Dirichlet conditional for every prefix.

    .. math:: M(\cdot \mid x^i) \sim \mathrm{Dirichlet}(a, \dots, a) \quad \text{independently per } x^i,

    drawn from ``numpy.random.default_rng([seed, salt, i, x_1, ..., x_i])``: a deterministic function
    of ``(seed, prefix)``, cached per prefix.

    Parameters
    ----------
    V : int
        Vocabulary size.
    concentration : float
        Dirichlet parameter :math:`a > 0`; small values give peaky conditionals.
    seed : int
        Non-negative seed.
    zero_prob : float in [0, 1)
        Each token is given probability exactly 0 with this chance (independently per prefix; at
        least one token is kept). Use it to exercise zero-probability tokens.
    memory_cap : float, optional
        Bytes (default 4 GiB); a V whose single conditional would exceed it raises
        :class:`~otspec.errors.ProblemTooLargeError` here, before anything is drawn.

    Returns
    -------
    DirichletModel
        The model; conditionals are drawn lazily, on first call per prefix.

    Raises
    ------
    NotAnIntegerError, InvalidDraftCountError
        If ``V`` or ``seed`` is not an integer in range.
    InvalidDistributionError
        If ``concentration`` is not finite and positive, or ``zero_prob`` is not in ``[0, 1)``.
    ProblemTooLargeError
        If one conditional over ``V`` tokens would exceed ``memory_cap``.

    Examples
    --------
    >>> from otspec import models
    >>> m = models.dirichlet(3, seed=1)
    >>> bool((m((0, 2)) == m((0, 2))).all()), m(()).shape
    (True, (3,))
    """
    V = as_int_in_range(V, "V")
    check_memory(
        _MODEL_BYTES_PER_TOKEN * V,
        memory_cap,
        f"one conditional of a random model over V = {V:,} tokens",
        "use a smaller V (or raise memory_cap)",
    )
    return DirichletModel(
        V=V,
        concentration=_as_concentration(concentration),
        seed=_as_seed(seed),
        zero_prob=_as_unit(zero_prob, "zero_prob", closed_right=False),
    )


def markov(V: int, *, order: int = 1, concentration: float = 1.0, seed: int = 0, zero_prob: float = 0.0) -> DirichletModel:
    r"""A seeded random Markov model: the conditional depends only on the last ``order`` tokens.

    .. math:: M(\cdot \mid x^i) = T(\cdot \mid x_{i-o+1..i}), \qquad
              T(\cdot \mid c) \sim \mathrm{Dirichlet}(a \mathbf 1_V) \text{ independently per context } c.

    ``order = 1`` is a random bigram model (the empty prefix has its own start distribution),
    ``order = 0`` is context-free.

    Parameters
    ----------
    V : int
        Vocabulary size.
    order : int
        Context length :math:`o \ge 0`.
    concentration : float
        Dirichlet parameter :math:`a > 0`.
    seed : int
        Non-negative seed.
    zero_prob : float in [0, 1)
        Chance that a token gets probability exactly 0 in a context (at least one is kept).

    Returns
    -------
    DirichletModel
        The model, with ``order`` set.

    Raises
    ------
    NotAnIntegerError, InvalidDraftCountError
        If ``V``, ``order`` or ``seed`` is not an integer in range.
    InvalidDistributionError
        If ``concentration`` is not finite and positive, or ``zero_prob`` is not in ``[0, 1)``.

    Examples
    --------
    >>> from otspec import models
    >>> m = models.markov(4, seed=3)
    >>> bool((m((1, 2)) == m((0, 2))).all())
    True
    """
    V = as_int_in_range(V, "V")
    order = as_int_in_range(order, "order", minimum=0)
    return DirichletModel(
        V=V,
        concentration=_as_concentration(concentration),
        seed=_as_seed(seed),
        order=order,
        zero_prob=_as_unit(zero_prob, "zero_prob", closed_right=False),
    )


def close_draft(target: Any, *, temperature: float = 1.0, noise: float = 0.3, seed: int = 0, concentration: float = 1.0) -> CloseDraftModel:
    r"""A draft model close to ``target``: tempered, then mixed with seeded Dirichlet noise.

    .. math:: q(\cdot \mid x^i) = (1-\lambda)\,\frac{p(\cdot \mid x^i)^{1/T}}{\sum_v p(v \mid x^i)^{1/T}}
              + \lambda\, n(\cdot \mid x^i), \qquad n(\cdot \mid x^i) \sim \mathrm{Dirichlet}(a \mathbf 1_V).

    ``noise = 0, temperature = 1`` gives the target itself (acceptance 1); ``noise = 1`` an
    unrelated model. The noise has full support, so ``noise > 0`` drafts every token.

    Parameters
    ----------
    target : Model or callable
        The target model :math:`p` (validated with :func:`as_model`).
    temperature : float
        :math:`T > 0`; values above 1 flatten the target, below 1 sharpen it.
    noise : float in [0, 1]
        Mixing weight :math:`\lambda` of the Dirichlet noise.
    seed : int
        Non-negative seed of the noise.
    concentration : float
        Dirichlet parameter :math:`a > 0` of the noise.

    Returns
    -------
    CloseDraftModel
        The draft model, over the target's vocabulary.

    Raises
    ------
    InvalidDistributionError
        If ``target`` is not a model, ``temperature`` or ``concentration`` is not finite and
        positive, or ``noise`` is not in ``[0, 1]``.
    NotAnIntegerError, InvalidDraftCountError
        If ``seed`` is not a non-negative integer.

    Examples
    --------
    >>> from otspec import models
    >>> p = models.dirichlet(3, seed=0)
    >>> q = models.close_draft(p, noise=0.0)
    >>> bool(abs(q(()) - p(())).max() < 1e-15)
    True
    """
    target = as_model(target, name="target")
    temperature = _as_positive(temperature, "temperature", "", "; 1 leaves the target unchanged")
    return CloseDraftModel(
        V=target.V,
        target=target,
        temperature=temperature,
        noise=_as_unit(noise, "noise"),
        seed=_as_seed(seed),
        concentration=_as_concentration(concentration),
    )
