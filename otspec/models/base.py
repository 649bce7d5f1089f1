"""The model protocol: the :class:`Model` base class (a per-prefix cache), prefix validation
(:func:`as_prefix`) and the wrapper of any user callable (:func:`as_model`, :class:`CallableModel`).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otspec._validation import as_distribution, as_int_in_range
from otspec.errors import InvalidDistributionError, InvalidDraftsError, OtspecInputError, ShapeMismatchError

__all__ = ["Model", "CallableModel", "as_model", "as_prefix"]


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
