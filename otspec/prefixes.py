r"""Enumeration of every prefix up to a depth: the work-horse of exact block and tree computations.

:func:`enumerate_prefixes` evaluates a target and a draft model (:mod:`otspec.models`) on every
prefix of length at most ``gamma`` and returns a :class:`PrefixTable` of their conditionals and
joint path probabilities; :func:`prefix_weights` turns it into the per-prefix weights of block
verification. :func:`check_prefix_enumeration` refuses, before any call of a model, an
enumeration above :data:`MAX_ENUMERATED_PREFIXES` prefixes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec._validation import as_int_in_range, check_memory
from otspec.errors import ProblemTooLargeError
from otspec.models import as_model

__all__ = ["MAX_ENUMERATED_PREFIXES", "PrefixTable", "check_prefix_enumeration", "enumerate_prefixes", "enumeration_size", "prefix_weights"]

#: Most prefixes an exact enumeration may visit: each costs a Python call of the model (a seeded
#: Dirichlet draw is ~10 us), so 2e6 prefixes is already ~30 s.
MAX_ENUMERATED_PREFIXES = 2_000_000


def enumeration_size(V: int, gamma: int) -> int:
    """Number of prefixes :math:`\\sum_{i=0}^{\\gamma} V^i` an exact block computation visits.

    Parameters
    ----------
    V : int
        Vocabulary size.
    gamma : int
        Draft block length (depth of the prefix tree).

    Returns
    -------
    int
        :math:`\\sum_{i=0}^{\\gamma} V^i`, the prefixes of length ``0..gamma``.

    Examples
    --------
    >>> enumeration_size(3, 2)
    13
    """
    return sum(V**i for i in range(gamma + 1))


def check_prefix_enumeration(
    V: int, gamma: int, *, hint: str = "use a smaller V or gamma (or the per-path estimator expected_accepted_given_path)"
) -> int:
    """Return the number of prefixes an exact enumeration over ``V`` tokens and depth ``gamma``
    visits, or raise :class:`~otspec.errors.ProblemTooLargeError` (ending with ``hint``) above
    :data:`MAX_ENUMERATED_PREFIXES`.

    Parameters
    ----------
    V : int
        Vocabulary size.
    gamma : int
        Depth (draft block length).
    hint : str
        The fix the error message suggests.

    Returns
    -------
    int
        :func:`enumeration_size` ``(V, gamma)``.

    Raises
    ------
    ProblemTooLargeError
        If that number exceeds :data:`MAX_ENUMERATED_PREFIXES`.
    """
    n_prefixes = enumeration_size(V, gamma)
    if n_prefixes > MAX_ENUMERATED_PREFIXES:
        raise ProblemTooLargeError(
            f"exact enumeration over V = {V}, gamma = {gamma} visits {n_prefixes:,} prefixes, above the cap of "
            f"{MAX_ENUMERATED_PREFIXES:,}; {hint}"
        )
    return n_prefixes


@dataclass(frozen=True, eq=False, repr=False)
class PrefixTable:
    r"""Every prefix :math:`x^i` (``i = 0..gamma``) of a target/draft pair, in lexicographic order.

    The node of prefix :math:`x^i` at depth ``i`` has index :math:`\sum_j x_j V^{i-j}`, so its
    child by token ``y`` is ``n * V + y``. Arrays per depth ``i``:

    * ``p_cond[i]``, ``q_cond[i]`` -- ``(V**i, V)`` conditionals :math:`M(\cdot \mid x^i)` (the
      draft only for ``i < gamma``);
    * ``p_joint[i]``, ``q_joint[i]`` -- ``(V**i,)`` joints :math:`M(x^i)`.

    Attributes
    ----------
    V : int
        Vocabulary size.
    gamma : int
        Deepest prefix length.
    p_cond, q_cond : tuple of ndarray
        Target (``gamma + 1`` arrays) and draft (``gamma`` arrays) conditionals per depth.
    p_joint, q_joint : tuple of ndarray
        Target and draft joint probabilities of every prefix, per depth ``0..gamma``.
    """

    V: int
    gamma: int
    p_cond: tuple
    q_cond: tuple
    p_joint: tuple
    q_joint: tuple

    def paths(self, i: int) -> np.ndarray:
        """All prefixes of length ``i`` as an int64 ``(V**i, i)`` array (lexicographic).

        Parameters
        ----------
        i : int
            Depth, ``0..gamma``.

        Returns
        -------
        ndarray of int64, shape (V**i, i)
            Row ``n`` is the prefix of node ``n`` at depth ``i``.
        """
        if i == 0:
            return np.zeros((1, 0), dtype=np.int64)
        return np.indices((self.V,) * i).reshape(i, -1).T.astype(np.int64)

    def ancestors(self, i: int) -> np.ndarray:
        """``(V**i, i + 1)``: column ``j`` holds the index of the depth-``j`` ancestor of each node.

        Parameters
        ----------
        i : int
            Depth, ``0..gamma``.

        Returns
        -------
        ndarray of int64, shape (V**i, i + 1)
            ``out[n, j] = n // V**(i - j)``: the node index of the length-``j`` prefix of node
            ``n`` (column ``i`` is ``n`` itself).
        """
        n = np.arange(self.V**i, dtype=np.int64)
        return np.stack([n // self.V ** (i - j) for j in range(i + 1)], axis=1)

    def __repr__(self) -> str:
        return f"PrefixTable(V={self.V}, gamma={self.gamma}, prefixes={enumeration_size(self.V, self.gamma)})"


def enumerate_prefixes(p_model: Any, q_model: Any, gamma: int, *, memory_cap: float | None = None, extra_bytes: float = 0.0) -> PrefixTable:
    r"""Evaluate both models on every prefix of length ``<= gamma`` (``< gamma`` for the draft).

    The size is estimated first: more than :data:`MAX_ENUMERATED_PREFIXES` prefixes, or more than
    ``memory_cap`` bytes (with ``extra_bytes`` for what the caller will allocate on top), raises
    :class:`~otspec.errors.ProblemTooLargeError` with the size and a hint.

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target and draft models over the same vocabulary.
    gamma : int
        Draft block length, ``>= 1``.
    memory_cap : float, optional
        Most bytes the table (plus ``extra_bytes``) may take; ``None``: the library default.
    extra_bytes : float
        Bytes the caller will allocate per the same enumeration, counted against ``memory_cap``.

    Returns
    -------
    PrefixTable
        Conditionals and joints of both models at every prefix (read-only arrays).

    Raises
    ------
    InvalidDistributionError
        If a model is not a model or returns a non-distribution.
    ShapeMismatchError
        If the models' vocabularies differ.
    NotAnIntegerError, InvalidDraftCountError
        If ``gamma`` is not an integer ``>= 1``.
    ProblemTooLargeError
        If the enumeration exceeds :data:`MAX_ENUMERATED_PREFIXES` or ``memory_cap``.

    Examples
    --------
    >>> from otspec import models, prefixes
    >>> t = prefixes.enumerate_prefixes(models.dirichlet(3, seed=0), models.dirichlet(3, seed=1), 2)
    >>> t.p_cond[2].shape, round(float(t.q_joint[2].sum()), 12)
    ((9, 3), 1.0)
    """
    p_model = as_model(p_model, name="p_model")
    q_model = as_model(q_model, V=p_model.V, name="q_model")
    gamma = as_int_in_range(gamma, "gamma")
    V = p_model.V
    n_prefixes = check_prefix_enumeration(V, gamma)
    check_memory(
        2.0 * 8 * V * n_prefixes + extra_bytes,
        memory_cap,
        f"exact enumeration over V = {V}, gamma = {gamma} ({n_prefixes:,} prefixes)",
        "use a smaller V or gamma (or the per-path estimator expected_accepted_given_path)",
    )
    p_cond, q_cond = [], []
    for i in range(gamma + 1):
        prefixes = [tuple(int(v) for v in row) for row in np.indices((V,) * i).reshape(i, -1).T] if i else [()]
        p_cond.append(np.stack([p_model(x) for x in prefixes]))
        if i < gamma:
            q_cond.append(np.stack([q_model(x) for x in prefixes]))
    p_joint, q_joint = [np.ones(1)], [np.ones(1)]
    for i in range(1, gamma + 1):
        p_joint.append((p_joint[-1][:, None] * p_cond[i - 1]).ravel())
        q_joint.append((q_joint[-1][:, None] * q_cond[i - 1]).ravel())
    for arr in (*p_cond, *q_cond, *p_joint, *q_joint):
        arr.setflags(write=False)
    return PrefixTable(V=V, gamma=gamma, p_cond=tuple(p_cond), q_cond=tuple(q_cond), p_joint=tuple(p_joint), q_joint=tuple(q_joint))


def prefix_weights(table: PrefixTable) -> list:
    r"""``[W_0, ..., W_gamma]``, :math:`W(x^i) = \min\{W(x^{i-1}) M_b(x_i \mid x^{i-1}), M_s(x^i)\} = M_s(x^i) p_i(x^i)`.

    :math:`W(x^i) = P(\tau \ge i, X^i = x^i)` under block verification (:doc:`block`); works on
    float arrays and on object arrays of :class:`fractions.Fraction` alike. Here :math:`M_b` is
    the target and :math:`M_s` the draft.

    Parameters
    ----------
    table : PrefixTable
        The enumerated target/draft pair (:func:`enumerate_prefixes`).

    Returns
    -------
    list of ndarray
        ``gamma + 1`` arrays; ``W[i]`` has shape ``(V**i,)`` in the table's node order, ``W[0] = [1]``.
    """
    out = [np.ones(1, dtype=table.q_joint[0].dtype)]
    for i in range(1, table.gamma + 1):
        out.append(np.minimum(out[-1][:, None] * table.p_cond[i - 1], table.q_joint[i].reshape(-1, table.V)).ravel())
    return out
