r"""Enumerable context-dependent models for block and tree verification problems.

A *model* is any callable ``prefix -> (V,) distribution``: given the tokens generated so far
(a tuple of ints, possibly empty) it returns the next-token conditional
:math:`M(\cdot \mid x^{i})`. Block and tree verifiers only ever call a model on the prefixes they
enumerate, so a model may be a lookup table, a seeded random function or a wrapper around a real
network's cached outputs.

The constructors here return immutable, deterministic models:

* :func:`dirichlet` -- an independent Dirichlet(:math:`a`) conditional for every prefix, drawn from a
  generator seeded by ``(seed, prefix)`` (so the same prefix always gives the same conditional,
  whatever order the prefixes are visited in);
* :func:`markov` -- the same, but the conditional depends only on the last ``order`` tokens
  (bigram-like for ``order = 1``);
* :func:`close_draft` -- a draft model made from a target: tempered and mixed with seeded
  Dirichlet noise, for realistic acceptance rates;
* :func:`context_free` -- the same conditional at every prefix (the toy of Sun et al.);
* :func:`tabulated` -- an explicit ``{prefix: distribution}`` table;
* :func:`as_model` -- validate any callable: every returned conditional is checked with
  :func:`otspec._validation.as_distribution` and cached.

Every model has a ``V`` attribute and caches its conditionals per prefix.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otspec._validation import as_distribution, as_generator, as_int_in_range, check_memory, check_same_vocab
from otspec.errors import InvalidDistributionError, InvalidDraftsError, OtspecInputError, ShapeMismatchError

__all__ = [
    "Model",
    "DirichletModel",
    "CloseDraftModel",
    "ContextFreeModel",
    "TabulatedModel",
    "CallableModel",
    "dirichlet",
    "markov",
    "close_draft",
    "context_free",
    "tabulated",
    "as_model",
    "as_prefix",
    "conditionals_along",
    "sample_path",
]

#: Salts that keep the random streams of different model kinds apart for the same seed.
_SALT_DIRICHLET = 0x5EED_D1C7
_SALT_NOISE = 0x5EED_0153


def as_prefix(prefix: Any, V: int, name: str = "prefix") -> tuple[int, ...]:
    """Return ``prefix`` as a tuple of Python ints in ``[0, V)``, or raise :class:`InvalidDraftsError`
    (whose message calls the argument ``name``).

    Parameters
    ----------
    prefix : sequence of int
        Token ids generated so far (possibly empty).
    V : int
        Vocabulary size.
    name : str
        The argument's name, for the error message.

    Returns
    -------
    tuple of int
        The same tokens as plain Python ints (hashable: a model's cache key).

    Raises
    ------
    InvalidDraftsError
        If ``prefix`` is not a sequence, holds a non-integer (``bool`` included) or an id outside
        ``[0, V)``.

    Examples
    --------
    >>> import numpy as np
    >>> as_prefix(np.array([2, 0]), 3)
    (2, 0)
    """
    try:
        items = tuple(prefix)
    except TypeError:
        raise InvalidDraftsError(f"{name} must be a sequence of token ids (got {prefix!r}); pass a tuple such as (0, 2)") from None
    out = []
    for x in items:
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (numbers.Integral, np.integer)):
            raise InvalidDraftsError(f"{name} must hold integer token ids (got {x!r} in {items!r}); cast them to int")
        xi = int(x)
        if not 0 <= xi < V:
            raise InvalidDraftsError(
                f"{name} token ids must lie in [0, {V}) (got {xi} in {items!r}); every token must be in the vocabulary"
            )
        out.append(xi)
    return tuple(out)


@dataclass(frozen=True, eq=False, repr=False)
class Model:
    """Base class: a deterministic next-token model over ``V`` tokens with a per-prefix cache.

    Subclasses implement ``_conditional(prefix)``; :meth:`__call__` validates the prefix, caches
    and returns a read-only float64 ``(V,)`` array.

    Attributes
    ----------
    V : int
        Vocabulary size: every conditional has ``V`` entries.
    """

    V: int
    _cache: dict = field(default_factory=dict, init=False, compare=False)

    def _conditional(self, prefix: tuple[int, ...]) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, prefix: Any = ()) -> np.ndarray:
        key = prefix if type(prefix) is tuple and all(type(x) is int for x in prefix) else as_prefix(prefix, self.V)
        hit = self._cache.get(key)
        if hit is None:
            if any(not 0 <= x < self.V for x in key):
                key = as_prefix(key, self.V)
            hit = self._conditional(key)
            hit.setflags(write=False)
            self._cache[key] = hit
        return hit

    def __repr__(self) -> str:
        return f"{type(self).__name__}(V={self.V})"


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


@dataclass(frozen=True, eq=False, repr=False)
class ContextFreeModel(Model):
    """The same conditional at every prefix.

    Attributes
    ----------
    p : ndarray, shape (V,)
        The conditional returned after every prefix.
    """

    p: np.ndarray = None  # type: ignore[assignment]

    def _conditional(self, prefix):
        return self.p

    def __repr__(self) -> str:
        return f"context_free({np.array2string(self.p, precision=4, threshold=6)})"


@dataclass(frozen=True, eq=False, repr=False)
class TabulatedModel(Model):
    """An explicit table ``{prefix: distribution}``; unknown prefixes raise, or use ``default``.

    Attributes
    ----------
    table : mapping of tuple of int to ndarray
        Validated conditionals, shape ``(V,)`` each, keyed by prefix.
    default : ndarray or None
        The conditional of every prefix missing from ``table`` (``None``: such a prefix raises
        :class:`~otspec.errors.InvalidDraftsError`).
    """

    table: Mapping = None  # type: ignore[assignment]
    default: np.ndarray | None = None

    def _conditional(self, prefix):
        hit = self.table.get(prefix)
        if hit is None:
            if self.default is None:
                raise InvalidDraftsError(
                    f"prefix {prefix} is not in the model's table ({len(self.table)} prefixes); add it, or pass default= to tabulated()"
                )
            return self.default
        return hit

    def __repr__(self) -> str:
        return f"tabulated(V={self.V}, prefixes={len(self.table)}, default={'yes' if self.default is not None else 'no'})"


@dataclass(frozen=True, eq=False, repr=False)
class CallableModel(Model):
    """Any user callable, with every conditional validated (finite, non-negative, sums to 1, V entries).

    Attributes
    ----------
    fn : callable
        The wrapped function ``prefix tuple -> (V,) distribution``.
    name : str
        Its name in error messages.
    """

    fn: Callable = None  # type: ignore[assignment]
    name: str = "model"

    def _conditional(self, prefix):
        try:
            raw = self.fn(prefix)
        except OtspecInputError:
            raise
        out = as_distribution(raw, f"{self.name}({prefix})")
        if out.shape[0] != self.V:
            raise InvalidDistributionError(
                f"{self.name}({prefix}) has {out.shape[0]} entries but the model has V = {self.V}; "
                "every conditional must cover the same vocabulary"
            )
        return np.array(out)

    def __repr__(self) -> str:
        return f"as_model({getattr(self.fn, '__name__', type(self.fn).__name__)}, V={self.V})"


# ------------------------------------------------------------------------------------------------
def _as_concentration(a: Any, name: str = "concentration") -> float:
    try:
        a = float(a)
    except (TypeError, ValueError):
        raise InvalidDistributionError(f"{name} must be a positive number (got {a!r}); pass e.g. 1.0") from None
    if not np.isfinite(a) or a <= 0:
        raise InvalidDistributionError(f"{name} must be finite and > 0 (got {a}); smaller values give peakier conditionals")
    return a


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
    try:
        temperature = float(temperature)
    except (TypeError, ValueError):
        raise InvalidDistributionError(f"temperature must be a positive number (got {temperature!r})") from None
    if not np.isfinite(temperature) or temperature <= 0:
        raise InvalidDistributionError(f"temperature must be finite and > 0 (got {temperature}); 1 leaves the target unchanged")
    return CloseDraftModel(
        V=target.V,
        target=target,
        temperature=temperature,
        noise=_as_unit(noise, "noise"),
        seed=_as_seed(seed),
        concentration=_as_concentration(concentration),
    )


def context_free(p: Any) -> ContextFreeModel:
    r"""The model that returns the same distribution ``p`` after every prefix.

    Parameters
    ----------
    p : array_like, shape (V,)
        The conditional at every prefix.

    Returns
    -------
    ContextFreeModel
        :math:`M(\cdot \mid x^i) = p` for all :math:`x^i`.

    Raises
    ------
    InvalidDistributionError
        If ``p`` is not a distribution.

    Examples
    --------
    >>> from otspec import models
    >>> models.context_free([0.25, 0.75])((1, 0, 1)).tolist()
    [0.25, 0.75]
    """
    p = as_distribution(p, "p")
    return ContextFreeModel(V=p.shape[0], p=p)


def tabulated(table: Mapping, *, default: Any = None) -> TabulatedModel:
    r"""A model given by an explicit table ``{prefix tuple: (V,) distribution}``.

    Every entry is validated; prefixes missing from the table raise
    :class:`~otspec.errors.InvalidDraftsError` unless ``default`` (a distribution) is given.

    Parameters
    ----------
    table : mapping
        ``{prefix: distribution}``: keys are sequences of token ids, values ``(V,)`` distributions
        over one shared vocabulary.
    default : array_like, shape (V,), optional
        Conditional of every prefix not in ``table``.

    Returns
    -------
    TabulatedModel
        The model, with ``V`` taken from the first entry.

    Raises
    ------
    InvalidDistributionError
        If ``table`` is not a non-empty mapping, or an entry or ``default`` is not a distribution.
    ShapeMismatchError
        If the entries (or ``default``) disagree on ``V``.
    InvalidDraftsError
        If a key is not a sequence of token ids in ``[0, V)``.

    Examples
    --------
    >>> from otspec import models
    >>> m = models.tabulated({(): [0.5, 0.5], (0,): [1.0, 0.0]}, default=[0.0, 1.0])
    >>> m((0,)).tolist(), m((1, 1)).tolist()
    ([1.0, 0.0], [0.0, 1.0])
    """
    if not isinstance(table, Mapping) or len(table) == 0:
        raise InvalidDistributionError(
            f"table must be a non-empty mapping prefix -> distribution (got {type(table).__name__}); pass a dict"
        )
    items = {}
    V = None
    first_name = None
    for key, value in table.items():
        arr = as_distribution(value, f"table[{key!r}]")
        if V is None:
            V, first_name = arr.shape[0], f"table[{key!r}]"
        else:
            check_same_vocab(np.empty(V), arr, (first_name, f"table[{key!r}]"))
        items[key] = arr
    fixed = {as_prefix(k, V): v for k, v in items.items()}
    d = None
    if default is not None:
        d = as_distribution(default, "default")
        check_same_vocab(np.empty(V), d, (first_name, "default"))
    return TabulatedModel(V=V, table=fixed, default=d)


def as_model(model: Any, *, V: int | None = None, name: str = "model") -> Model:
    """Return ``model`` as a validated :class:`Model`.

    Instances of :class:`Model` are returned as they are (after checking ``V``). Any other callable
    ``prefix -> distribution`` is wrapped: its conditionals are validated with
    :func:`~otspec._validation.as_distribution` and cached per prefix. ``V`` defaults to the length
    of the conditional at the empty prefix.

    Parameters
    ----------
    model : Model or callable
        A model, or a function ``prefix tuple -> (V,) distribution``.
    V : int, optional
        The vocabulary size the model must have; ``None`` accepts the model's own.
    name : str
        The argument's name, for error messages.

    Returns
    -------
    Model
        ``model`` itself, or a :class:`CallableModel` wrapping it; its root conditional
        ``model(())`` has been validated.

    Raises
    ------
    InvalidDistributionError
        If ``model`` is not callable, or its root conditional is not a distribution.
    ShapeMismatchError
        If the model's vocabulary size is not ``V``.

    Examples
    --------
    >>> from otspec import models
    >>> m = models.as_model(lambda prefix: [0.5, 0.5])
    >>> m.V
    2
    """
    if isinstance(model, Model):
        out = model
    elif callable(model):
        if V is None:
            V = as_distribution(model(()), f"{name}(())").shape[0]
        out = CallableModel(V=as_int_in_range(V, "V"), fn=model, name=name)
    else:
        raise InvalidDistributionError(
            f"{name} must be a callable prefix -> (V,) distribution or an otspec.models.Model (got {type(model).__name__}); "
            "use otspec.models.context_free(p) for a fixed distribution"
        )
    if V is not None and out.V != V:
        raise ShapeMismatchError(f"{name} has V = {out.V} but V = {V} was expected; models must share the vocabulary")
    out(())  # validate the root conditional now rather than deep inside a solver
    return out


def conditionals_along(model: Any, path: Any, *, include_last: bool = True) -> np.ndarray:
    r"""The conditionals of ``model`` along ``path``: row ``i`` is :math:`M(\cdot \mid x^{i})`.

    This is the input format of the per-path estimators ``expected_accepted_given_path``.

    Parameters
    ----------
    model : Model or callable
        The model (validated with :func:`as_model`).
    path : sequence of int
        Tokens :math:`x_1, \dots, x_n`.
    include_last : bool
        Also return the conditional after the whole path, :math:`M(\cdot \mid x^n)`.

    Returns
    -------
    ndarray, shape (n + 1, V) or (n, V)
        Row ``i`` is :math:`M(\cdot \mid x^i)`, ``i = 0..n`` (or ``0..n-1``).

    Raises
    ------
    InvalidDistributionError
        If ``model`` is not a model.
    InvalidDraftsError
        If ``path`` holds an id outside ``[0, V)``.

    Examples
    --------
    >>> from otspec import models
    >>> models.conditionals_along(models.context_free([0.5, 0.5]), (1, 0)).shape
    (3, 2)
    """
    model = as_model(model)
    path = as_prefix(path, model.V)
    n = len(path) + (1 if include_last else 0)
    return np.stack([model(path[:i]) for i in range(n)]) if n else np.zeros((0, model.V))


def sample_path(model: Any, length: int, *, rng: np.random.Generator, prefix: Any = ()) -> tuple[int, ...]:
    """Draw ``length`` tokens autoregressively from ``model`` after ``prefix`` (explicit generator).

    Parameters
    ----------
    model : Model or callable
        The model to sample from.
    length : int
        Number of tokens to draw, ``>= 0``.
    rng : numpy.random.Generator
        The caller's generator.
    prefix : sequence of int
        Tokens to condition on (not returned).

    Returns
    -------
    tuple of int
        The ``length`` new tokens, :math:`x_{i+1} \\sim M(\\cdot \\mid \\text{prefix}, x_1..x_i)`.

    Raises
    ------
    OtspecTypeError
        If ``rng`` is not a ``numpy.random.Generator``.
    InvalidDraftCountError
        If ``length`` is negative or not an integer.
    InvalidDraftsError
        If ``prefix`` holds an id outside ``[0, V)``.

    Examples
    --------
    >>> import numpy as np
    >>> from otspec import models
    >>> len(models.sample_path(models.dirichlet(3), 4, rng=np.random.default_rng(0)))
    4
    """
    model = as_model(model)
    rng = as_generator(rng)
    length = as_int_in_range(length, "length", minimum=0)
    out = list(as_prefix(prefix, model.V))
    start = len(out)
    for _ in range(length):
        out.append(int(rng.choice(model.V, p=model(tuple(out)))))
    return tuple(out[start:])
