"""An arbitrary joint draft law given by its tuples and their probabilities (any law you can
enumerate); every quantity comes from the list."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from otspec._tolerances import ROUNDING_PER_TERM
from otspec._validation import as_generator, as_int_in_range, as_token_tuples, as_weights
from otspec.errors import InvalidDraftsError
from otspec.laws.base import DraftLaw
from otspec.laws.enumeration import prefix_by_max_rank
from otspec.laws.tokens import as_token_mask

__all__ = ["ExplicitLaw", "explicit"]


def explicit(tuples: Any, weights: Any, *, vocab_size: int | None = None) -> ExplicitLaw:
    """An arbitrary joint draft law given by its tuples and their probabilities.

    ``tuples`` is ``(M, k)`` of token ids, ``weights`` is ``(M,)`` on the simplex. Repeated rows
    are merged and zero-weight rows dropped. ``vocab_size`` defaults to the largest id + 1 and must
    equal the target's V when the law is used with a target.

    Parameters
    ----------
    tuples : array_like of int, shape (M, k)
        Draft tuples.
    weights : array_like, shape (M,)
        Their probabilities (sum to 1).
    vocab_size : int, optional
        Vocabulary size V.

    Returns
    -------
    ExplicitLaw

    Raises
    ------
    InvalidDraftsError
        If ``tuples`` is not a rectangular array of token ids below ``vocab_size``.
    InvalidDistributionError, ShapeMismatchError
        If ``weights`` is not a distribution with one entry per tuple.

    Examples
    --------
    >>> import otspec
    >>> law = otspec.explicit([[0, 1], [1, 1]], [0.5, 0.5], vocab_size=3)
    >>> law.prob_all_in([1])
    0.5
    """
    t = as_token_tuples(tuples, None, name="tuples")
    w = as_weights(weights, t.shape[0])
    V = int(t.max()) + 1
    if vocab_size is not None:
        vocab_size = as_int_in_range(vocab_size, "vocab_size")
        if vocab_size < V:
            raise InvalidDraftsError(f"tuples hold token id {V - 1} but vocab_size = {vocab_size}; ids must be < vocab_size")
        V = vocab_size
    keep = w > 0
    uniq, inverse = np.unique(t[keep], axis=0, return_inverse=True)
    merged = np.bincount(inverse.ravel(), weights=w[keep], minlength=uniq.shape[0])
    uniq.setflags(write=False)
    merged.setflags(write=False)
    return ExplicitLaw(k=t.shape[1], V=V, tuples=uniq, weights=merged)


@dataclass(frozen=True, eq=False, repr=False)
class ExplicitLaw(DraftLaw):
    """A finite list of draft tuples with their probabilities (any joint law you can enumerate).

    Attributes
    ----------
    tuples : ndarray of int64, shape (M, k)
        The distinct draft tuples (sorted rows of :func:`numpy.unique`; read-only).
    weights : ndarray, shape (M,)
        Their probabilities, all positive, summing to 1 (read-only).
    """

    tuples: np.ndarray = field(default=None)  # type: ignore[assignment]
    weights: np.ndarray = field(default=None)  # type: ignore[assignment]
    kind: str = field(init=False, default="explicit")

    parameters: ClassVar[str] = "tuples"
    constructor: ClassVar[Callable[..., DraftLaw]] = staticmethod(explicit)

    def num_tuples(self) -> int:
        return int(self.weights.size)

    def _enumerate(self):
        return self.tuples, self.weights

    def tuple_probability(self, drafts):
        d = np.asarray(drafts, dtype=np.int64).reshape(-1)
        if d.size != self.k:
            return 0.0
        return float(self.weights[np.all(self.tuples == d[None, :], axis=1)].sum())

    def prob_all_in(self, H):
        mask = as_token_mask(H, self.V)
        return float(self.weights[np.all(mask[self.tuples], axis=1)].sum())

    def prefix_prob_all_in(self, order):
        order = self._as_order(order)
        return prefix_by_max_rank(self.tuples, self.weights, order, self.V), ROUNDING_PER_TERM * self.weights.size

    def sample(self, rng, size):
        rng = as_generator(rng)
        idx = rng.choice(self.weights.size, size=int(size), p=self.weights)
        return self.tuples[idx]
