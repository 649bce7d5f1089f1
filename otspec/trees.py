r"""Draft laws over trees: ``k`` drafted sequences of length :math:`\gamma` from a draft model.

* ``replacement=True`` -- the k sequences are i.i.d. :math:`\sim M_s` (SpecTr, SpecInfer);
* ``replacement=False`` -- the k *first* tokens are drawn without replacement (successive sampling
  proportional to :math:`M_s(\cdot)`), then each draft continues as its own chain
  :math:`\sim M_s(\cdot \mid x_1)`.

This module sits with :mod:`otspec.laws` and :mod:`otspec.models`, below both the tree verifiers
(:mod:`otspec.verifiers.tree`) and the tree optimum (:mod:`otspec.bounds.tree`).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from otspec import models as _models
from otspec import prefixes
from otspec._docs import fill_doc
from otspec._validation import as_generator, as_int_in_range
from otspec.errors import InvalidDraftCountError, ProblemTooLargeError
from otspec.laws import successive_denominators

__all__ = ["draft_trees", "num_draft_trees", "check_tree_enumeration", "sample_tree", "MAX_ENUMERATED_TREES"]

#: Most drafted trees an exact enumeration visits (each is walked in Python: ~0.1-1 ms).
MAX_ENUMERATED_TREES = 300_000


@fill_doc
def num_draft_trees(V: int, k: int, gamma: int) -> int:
    """Upper bound on the number of ordered draft tuples an exact enumeration visits: :math:`V^{k\\gamma}`.

    Parameters
    ----------
    {tree_vkg_args}

    Returns
    -------
    int
        :math:`V^{k\\gamma}` (a Python int: no overflow).

    Examples
    --------
    >>> num_draft_trees(3, 2, 2)
    81
    """
    return int(V) ** (int(k) * int(gamma))


@fill_doc
def check_tree_enumeration(V: int, k: int, gamma: int) -> None:
    """Raise :class:`~otspec.errors.ProblemTooLargeError` before an exact enumeration of more than
    :data:`MAX_ENUMERATED_TREES` draft trees.

    Parameters
    ----------
    {tree_vkg_args}

    Raises
    ------
    ProblemTooLargeError
        If :func:`num_draft_trees` ``(V, k, gamma)`` exceeds :data:`MAX_ENUMERATED_TREES`.
    """
    n = num_draft_trees(V, k, gamma)
    if n > MAX_ENUMERATED_TREES:
        raise ProblemTooLargeError(
            f"exact enumeration of k = {k} drafts of length gamma = {gamma} over V = {V} visits up to {n:,} draft trees, "
            f"above the cap of {MAX_ENUMERATED_TREES:,}; use a smaller V, k or gamma (or sample())"
        )


def draft_trees(q_model: Any, k: int, gamma: int, *, replacement: bool = True) -> tuple[np.ndarray, np.ndarray]:
    r"""Every drafted tree of positive probability: ``(trees, weights)``, ``trees`` of shape ``(M, k, gamma)``.

    With replacement: :math:`Q(x^{(1)}, \dots, x^{(k)}) = \prod_j M_s(x^{(j)})`. Without replacement
    (distinct first tokens by successive sampling, then independent chains):

    .. math:: Q = \prod_{j=1}^{k} \frac{M_s(x^{(j)})}{1 - \sum_{l<j} M_s(x^{(l)}_1)}.

    Parameters
    ----------
    q_model : Model or callable
        The draft model :math:`M_s` (:mod:`otspec.models`).
    k : int
        Number of drafted sequences, ``>= 1``.
    gamma : int
        Length of each sequence, ``>= 1``.
    replacement : bool
        i.i.d. sequences (``True``) or distinct first tokens by successive sampling (``False``).

    Returns
    -------
    trees : ndarray of int64, shape (M, k, gamma)
        Every ordered tuple of ``k`` drafted paths with positive probability (read-only).
    weights : ndarray, shape (M,)
        Their probabilities :math:`Q`, summing to 1 (read-only).

    Raises
    ------
    NotAnIntegerError, InvalidDraftCountError
        If ``k`` or ``gamma`` is not an integer ``>= 1``, or (without replacement) ``k`` exceeds
        the number of first tokens with positive draft probability.
    InvalidDistributionError
        If ``q_model`` is not a model.
    ProblemTooLargeError
        If more than :data:`MAX_ENUMERATED_TREES` trees would be enumerated.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.trees import draft_trees
    >>> trees, w = draft_trees(models.context_free([0.5, 0.5]), 2, 1)
    >>> trees.shape, float(w.sum())
    ((4, 2, 1), 1.0)
    """
    q_model = _models.as_model(q_model, name="q_model")
    k = as_int_in_range(k, "k")
    gamma = as_int_in_range(gamma, "gamma")
    V = q_model.V
    check_tree_enumeration(V, k, gamma)
    table = prefixes.enumerate_prefixes(q_model, q_model, gamma)
    paths = table.paths(gamma)
    pw = table.q_joint[gamma]
    keep = np.flatnonzero(pw > 0)
    if not replacement:
        support = int(np.count_nonzero(table.q_cond[0][0]))
        if k > support:
            raise InvalidDraftCountError(
                f"k must be <= the number of first tokens with positive draft probability ({support}) to draft without replacement (got k = {k}); lower k"
            )
    combos = np.array(list(itertools.product(keep.tolist(), repeat=k)), dtype=np.int64).reshape(-1, k)
    w = np.prod(pw[combos], axis=1)
    if not replacement:
        first = paths[combos][:, :, 0]  # (M, k)
        distinct = np.ones(combos.shape[0], dtype=bool)
        for a in range(k):
            for b in range(a + 1, k):
                distinct &= first[:, a] != first[:, b]
        combos, w, first = combos[distinct], w[distinct], first[distinct]
        q0 = table.q_cond[0][0]
        # Successive-sampling denominators sum_{x not in first[:j]} q0(x), computed stably by the
        # laws module (1 - cumsum cancels when one first token carries almost all the mass).
        w = w / np.prod(successive_denominators(q0, first), axis=1)
    trees = paths[combos]
    trees.setflags(write=False)
    w.setflags(write=False)
    return trees, w


def sample_tree(q_model: Any, k: int, gamma: int, *, replacement: bool = True, rng: np.random.Generator) -> np.ndarray:
    """Draw one draft tree ``(k, gamma)`` (first tokens without replacement when ``replacement=False``).

    Parameters
    ----------
    q_model : Model or callable
        The draft model.
    k : int
        Number of drafted sequences, ``>= 1``.
    gamma : int
        Length of each sequence, ``>= 1``.
    replacement : bool
        i.i.d. sequences (``True``) or distinct first tokens by successive sampling (``False``).
    rng : numpy.random.Generator
        The caller's generator.

    Returns
    -------
    ndarray of int64, shape (k, gamma)
        Row ``j`` is the ``j``-th drafted path, in draft order.

    Raises
    ------
    OtspecTypeError
        If ``rng`` is not a ``numpy.random.Generator``.
    NotAnIntegerError, InvalidDraftCountError
        If ``k`` or ``gamma`` is invalid, or (without replacement) ``k`` exceeds the number of
        first tokens with positive draft probability.
    InvalidDistributionError
        If ``q_model`` is not a model.

    Examples
    --------
    >>> import numpy as np
    >>> from otspec import models
    >>> from otspec.trees import sample_tree
    >>> sample_tree(models.dirichlet(4), 3, 2, replacement=False, rng=np.random.default_rng(0)).shape
    (3, 2)
    """
    q_model = _models.as_model(q_model, name="q_model")
    rng = as_generator(rng)
    k = as_int_in_range(k, "k")
    gamma = as_int_in_range(gamma, "gamma")
    out = np.empty((k, gamma), dtype=np.int64)
    if replacement:
        for j in range(k):
            out[j] = _models.sample_path(q_model, gamma, rng=rng)
        return out
    q0 = q_model(())
    if k > np.count_nonzero(q0):
        raise InvalidDraftCountError(f"k must be <= the number of first tokens with positive draft probability (got k = {k}); lower k")
    cur = q0.copy()
    for j in range(k):
        x = int(rng.choice(q_model.V, p=cur / cur.sum()))
        cur[x] = 0.0
        out[j, 0] = x
        out[j, 1:] = _models.sample_path(q_model, gamma - 1, rng=rng, prefix=(x,))
    return out
