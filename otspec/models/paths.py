"""Walking a model along a path: its conditionals (:func:`conditionals_along`) and autoregressive
samples (:func:`sample_path`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec._validation import as_generator, as_int_in_range
from otspec.models.base import as_model, as_prefix

__all__ = ["conditionals_along", "sample_path"]


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
