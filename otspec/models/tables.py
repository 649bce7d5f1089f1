"""Models given explicitly: the same conditional at every prefix (:func:`context_free`) and a
``{prefix: distribution}`` table (:func:`tabulated`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec._validation import as_distribution, check_same_vocab
from otspec.errors import InvalidDistributionError, InvalidDraftsError
from otspec.models.base import Model, as_prefix

__all__ = ["ContextFreeModel", "TabulatedModel", "context_free", "tabulated"]


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
