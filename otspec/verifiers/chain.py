r"""What every chain verifier (token, block) shares: the exact kernel type, path-input checks,
the kernel built from a prefix table, and the losslessness criterion (:doc:`block`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec import models as _models
from otspec import prefixes
from otspec._docs import fill_doc
from otspec._tolerances import PATH_ROW_SUM_ATOL
from otspec._validation import as_generator, as_int_in_range, as_supported_drafts, as_token_tuples
from otspec.errors import InvalidDistributionError, InvalidDraftsError, ShapeMismatchError, UnsupportedMethodError

__all__ = [
    "ChainKernel",
    "output_law",
    "lossless_violation",
    "check_path_row",
    "check_drafted",
    "check_path_arrays",
    "check_sample_inputs",
    "path_conditionals",
    "kernel_table",
    "kernel_from_table",
    "prefix_expected_accepted",
    "drafted_targets",
]

#: Bytes budgeted per entry of a chain kernel ``(N, gamma + 1, V)`` (float64 and temporaries).
KERNEL_BYTES_PER_ENTRY = 32


@dataclass(frozen=True, eq=False)
class ChainKernel:
    r"""Exact law of :math:`(\tau, Y)` given each drafted path, for one chain verifier.

    Attributes
    ----------
    paths : ndarray, shape (N, gamma)
        Every drafted path of positive draft probability (lexicographic).
    weights : ndarray, shape (N,)
        Their draft probabilities :math:`M_s(x^\gamma)` (summing to 1).
    law : ndarray, shape (N, gamma + 1, V)
        ``law[n, t, y]`` :math:`= P(\tau = t, Y = y \mid X^\gamma = \text{paths}[n])`.
    verifier : str
        ``"token"`` or ``"block"``.
    """

    paths: np.ndarray
    weights: np.ndarray
    law: np.ndarray
    verifier: str

    @property
    def gamma(self) -> int:
        """Draft block length (path length)."""
        return int(self.paths.shape[1])

    @property
    def V(self) -> int:
        """Vocabulary size."""
        return int(self.law.shape[2])

    def tau_law(self) -> np.ndarray:
        """``(N, gamma + 1)``: :math:`P(\\tau = t \\mid \\text{path})`.

        Returns
        -------
        ndarray, shape (N, gamma + 1)
            Law of the number of accepted drafts given each path (rows sum to 1).
        """
        return self.law.sum(axis=2)

    def expected_accepted(self) -> float:
        r""":math:`E[\tau] = \sum_x M_s(x) \sum_t t\, P(\tau = t \mid x)`.

        Returns
        -------
        float
            Expected number of accepted draft tokens per block, in ``[0, gamma]``.
        """
        return float(self.weights @ (self.tau_law() @ np.arange(self.gamma + 1)))

    def output_law(self) -> dict:
        """Law of the emitted block :math:`O = (X^\\tau, Y)` as ``{tuple: probability}``.

        Returns
        -------
        dict of tuple of int to float
            ``{(x_1, ..., x_tau, y): probability}``; the input of :func:`lossless_violation`.
        """
        out: dict = {}
        for path, w, lw in zip(self.paths, self.weights, self.law, strict=False):
            for t in range(self.gamma + 1):
                head = tuple(int(v) for v in path[:t])
                for y in np.flatnonzero(lw[t] > 0):
                    key = head + (int(y),)
                    out[key] = out.get(key, 0.0) + float(w * lw[t, y])
        return out

    def __repr__(self) -> str:
        return f"ChainKernel(verifier={self.verifier!r}, V={self.V}, gamma={self.gamma}, paths={self.paths.shape[0]}, E[tau]={self.expected_accepted():.12g})"


def output_law(kernel_or_law: Any) -> dict:
    """The emitted-block law ``{O: P(O)}`` of a :class:`ChainKernel` (a dict is returned as is).

    Parameters
    ----------
    kernel_or_law : ChainKernel or mapping
        A kernel, or a block law already.

    Returns
    -------
    dict of tuple of int to float
        The law of the emitted block (a copy when a mapping is given).
    """
    if isinstance(kernel_or_law, Mapping):
        return dict(kernel_or_law)
    return kernel_or_law.output_law()


def lossless_violation(block_law: Mapping, p_model: Any) -> float:
    r"""Largest violation of the losslessness criterion (:doc:`math`, the losslessness criterion) by a block law.

    With :math:`Q(x^i) = P(|O| \ge i, O^i = x^i)` and :math:`C(x^i) = P(|O| > i, O^i = x^i)`, the
    decoded stream has the target law iff :math:`Q(x^i y) = C(x^i)\, M_b(y \mid x^i)` for every
    :math:`i \ge 0`, :math:`x^i` and :math:`y` (with :math:`C(\emptyset) = 1`). Returns
    :math:`\max |Q(x^i y) - C(x^i) M_b(y \mid x^i)|` (0 for a lossless verifier, up to rounding),
    also counting :math:`|1 - \sum_O P(O)|`.

    Parameters
    ----------
    block_law : mapping of tuple of int to float
        ``{O: P(O)}``, e.g. :meth:`ChainKernel.output_law`.
    p_model : Model or callable
        The target :math:`M_b`.

    Returns
    -------
    float
        The largest absolute violation.

    Raises
    ------
    InvalidDistributionError
        If ``p_model`` is not a model.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import chain
    >>> p = models.context_free([0.5, 0.5])
    >>> chain.lossless_violation({(0,): 0.5, (1,): 0.5}, p)
    0.0
    """
    p_model = _models.as_model(p_model, name="p_model")
    Q: dict = {}
    C: dict = {}
    total = 0.0
    for o, w in block_law.items():
        total += w
        for i in range(1, len(o) + 1):
            Q[o[:i]] = Q.get(o[:i], 0.0) + w
        for i in range(0, len(o)):
            C[o[:i]] = C.get(o[:i], 0.0) + w
    worst = abs(1.0 - total)
    for head, c in C.items():
        target = p_model(head)
        got = np.array([Q.get(head + (y,), 0.0) for y in range(p_model.V)])
        worst = max(worst, float(np.abs(got - c * target).max()))
    # Q mass on x^i y whose head x^i never continues (C = 0) must be zero as well.
    for key, q in Q.items():
        if key[:-1] not in C and len(key) > 0:
            worst = max(worst, q)
    return worst


def check_path_row(row: np.ndarray, name: str, i: int) -> None:
    """Raise unless one conditional along a path: finite, non-negative, sums to 1 (a cache-sized pass each).

    The sum tolerance :data:`~otspec._tolerances.PATH_ROW_SUM_ATOL` grows with V above 1e5 (float32
    softmaxes of large vocabularies round further from 1).

    Parameters
    ----------
    row : ndarray, shape (V,)
        The conditional :math:`M(\\cdot \\mid x^i)`.
    name : str
        Argument name for the message (``"p_conds"`` or ``"q_conds"``).
    i : int
        Row index (position along the path).

    Raises
    ------
    InvalidDistributionError
        If the row is not finite, does not sum to 1, or has a negative entry.
    """
    total = np.einsum("i->", row)  # ~2x faster than row.sum() at V = 262 144
    V = row.shape[0]
    if not np.isfinite(total) or abs(total - 1.0) > PATH_ROW_SUM_ATOL * max(1.0, V / 1e5):
        raise InvalidDistributionError(
            f"{name}[{i}] must be a finite distribution summing to 1 (got sum {total:.12g}); normalise in float64"
        )
    low = row.min()
    if low < 0:
        raise InvalidDistributionError(f"{name}[{i}] must be non-negative (got {low:.3g}); clip rounding noise yourself if intended")


def check_drafted(Qc: np.ndarray, x: np.ndarray) -> None:
    """Raise unless every drafted token had positive draft probability at its position.

    Parameters
    ----------
    Qc : ndarray, shape (gamma, V)
        Draft conditionals along the path.
    x : ndarray of int, shape (gamma,)
        The drafted path.

    Raises
    ------
    InvalidDraftsError
        If some ``Qc[i, x[i]] == 0`` (the drafter could not have proposed ``x[i]``).
    """
    as_supported_drafts(x, Qc, q_name="q_conds")


def check_path_arrays(p_conds: Any, q_conds: Any, drafts: Any, *, validate: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Check the inputs of a per-path estimator. Shapes: drafts (gamma,), q_conds (gamma, V), p_conds (gamma, V) or (gamma + 1, V).

    Parameters
    ----------
    p_conds : array_like, shape (gamma, V) or (gamma + 1, V)
        Target conditionals :math:`M_b(\\cdot \\mid x^i)` along the drafted path.
    q_conds : array_like, shape (gamma, V)
        Draft conditionals :math:`M_s(\\cdot \\mid x^i)`.
    drafts : array_like of int, shape (gamma,)
        The drafted path.
    validate : bool
        Also check that every row is a distribution and every draft was possible (O(gamma V));
        shapes are always checked.

    Returns
    -------
    P : ndarray, shape (gamma, V) or (gamma + 1, V)
        ``p_conds`` as float64.
    Qc : ndarray, shape (gamma, V)
        ``q_conds`` as float64.
    x : ndarray of int64, shape (gamma,)
        The drafts.

    Raises
    ------
    ShapeMismatchError
        If the shapes do not agree.
    InvalidDraftsError
        If a draft is not a token id in ``[0, V)``, or (``validate``) had draft probability 0.
    InvalidDistributionError
        If (``validate``) a row is not a distribution.
    """
    P = np.asarray(p_conds, dtype=np.float64)
    Qc = np.asarray(q_conds, dtype=np.float64)
    if Qc.ndim != 2 or Qc.shape[0] < 1:
        raise ShapeMismatchError(f"q_conds must have shape (gamma, V) with gamma >= 1 (got {Qc.shape}); row i is M_s(. | x^i)")
    g, V = Qc.shape
    if P.ndim != 2 or P.shape[1] != V or P.shape[0] not in (g, g + 1):
        raise ShapeMismatchError(
            f"p_conds must have shape ({g}, {V}) or ({g + 1}, {V}) to match q_conds (got {P.shape}); row i is M_b(. | x^i)"
        )
    x = as_token_tuples(np.asarray(drafts).reshape(1, -1), V, name="drafts")[0]
    if x.shape[0] != g:
        raise ShapeMismatchError(f"drafts must hold gamma = {g} tokens to match q_conds (got {x.shape[0]}); pass the drafted path")
    if validate:
        for i in range(g):  # the bonus row of p_conds is not used by the estimators
            check_path_row(P[i], "p_conds", i)
            check_path_row(Qc[i], "q_conds", i)
        check_drafted(Qc, x)
    return P, Qc, x


def check_sample_inputs(p_model: Any, q_model: Any, drafts: Any, rng: Any) -> tuple[Any, Any, tuple[int, ...], Any]:
    """Check the inputs of a chain verifier's ``sample``: the two models, the drafted path, the generator.

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target and draft models over one vocabulary.
    drafts : array_like of int, shape (gamma,)
        The drafted path (``gamma = len(drafts) >= 1``).
    rng : numpy.random.Generator
        The caller's generator.

    Returns
    -------
    p_model, q_model : Model
        The validated models.
    x : tuple of int
        The drafts.
    rng : numpy.random.Generator
        The generator (the caller spawns its streams from it).

    Raises
    ------
    OtspecTypeError
        If ``rng`` is not a ``numpy.random.Generator``.
    InvalidDraftsError
        If a draft is out of the vocabulary.
    InvalidDraftCountError
        If ``drafts`` is empty.
    InvalidDistributionError, ShapeMismatchError
        If a model is invalid or the vocabularies differ.
    """
    p_model = _models.as_model(p_model, name="p_model")
    q_model = _models.as_model(q_model, V=p_model.V, name="q_model")
    rng = as_generator(rng)
    x = _models.as_prefix(np.asarray(drafts).reshape(-1).tolist(), p_model.V, name="drafts")
    as_int_in_range(len(x), "gamma (len(drafts))")
    return p_model, q_model, x, rng


def path_conditionals(p_model: Any, q_model: Any, drafts: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The conditionals of both models along a drafted path, checked (:func:`check_path_arrays`).

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target and draft models over one vocabulary.
    drafts : array_like of int, shape (gamma,)
        The drafted path.

    Returns
    -------
    P : ndarray, shape (gamma + 1, V)
        Target conditionals :math:`M_b(\\cdot \\mid x^i)`, ``i = 0..gamma``.
    Qc : ndarray, shape (gamma, V)
        Draft conditionals :math:`M_s(\\cdot \\mid x^i)`, ``i = 0..gamma - 1``.
    x : ndarray of int64, shape (gamma,)
        The drafts.

    Raises
    ------
    InvalidDraftsError
        If a draft is out of the vocabulary or had draft probability 0 after its prefix.
    InvalidDistributionError, ShapeMismatchError
        If a model is invalid, returns a non-distribution, or the vocabularies differ.
    """
    p_model = _models.as_model(p_model, name="p_model")
    path = np.asarray(drafts).reshape(-1).tolist()
    P = _models.conditionals_along(p_model, path)
    Qc = _models.conditionals_along(_models.as_model(q_model, V=p_model.V, name="q_model"), path, include_last=False)
    return check_path_arrays(P, Qc, drafts, validate=True)


@fill_doc
def kernel_table(p_model: Any, q_model: Any, gamma: int, memory_cap: float | None) -> prefixes.PrefixTable:
    """Enumerate the prefixes, budgeting for the (N, gamma + 1, V) kernel on top.

    Parameters
    ----------
    {chain_pq_gamma_args}
    memory_cap : float or None
        Bytes for the table plus the kernel; ``None``: the library default.

    Returns
    -------
    PrefixTable
        :func:`otspec.prefixes.enumerate_prefixes` of the pair.

    Raises
    ------
    NotAnIntegerError, InvalidDraftCountError
        If ``gamma`` is not an integer ``>= 1``.
    ProblemTooLargeError
        If the enumeration and kernel exceed their caps.
    InvalidDistributionError, ShapeMismatchError
        If a model is invalid or the vocabularies differ.
    """
    V = _models.as_model(p_model, name="p_model").V
    gamma = as_int_in_range(gamma, "gamma")
    extra = KERNEL_BYTES_PER_ENTRY * float(V) ** (gamma + 1) * (gamma + 1)
    return prefixes.enumerate_prefixes(p_model, q_model, gamma, memory_cap=memory_cap, extra_bytes=extra)


def kernel_from_table(table: prefixes.PrefixTable, path_law: Callable, name: str) -> ChainKernel:
    """A :class:`ChainKernel` from a prefix table and a per-path law ``path_law(P, Qc, x) -> (gamma + 1, V)``.

    Parameters
    ----------
    table : PrefixTable
        The enumerated target/draft pair.
    path_law : callable
        ``path_law(P, Qc, x)`` with ``P`` ``(gamma + 1, V)`` target and ``Qc`` ``(gamma, V)``
        draft conditionals along path ``x``; returns :math:`P(\\tau = t, Y = y \\mid x)`.
    name : str
        The verifier's name, stored in the kernel.

    Returns
    -------
    ChainKernel
        The law for every path of positive draft probability (read-only arrays).
    """
    g, V = table.gamma, table.V
    paths = table.paths(g)
    keep = table.q_joint[g] > 0
    anc = table.ancestors(g)[keep]
    paths, weights = paths[keep], table.q_joint[g][keep]
    law = np.empty((paths.shape[0], g + 1, V))
    for n in range(paths.shape[0]):
        P = np.stack([table.p_cond[i][anc[n, i]] for i in range(g + 1)])
        Qc = np.stack([table.q_cond[i][anc[n, i]] for i in range(g)])
        law[n] = path_law(P, Qc, paths[n])
    for arr in (paths, weights, law):
        arr.setflags(write=False)
    return ChainKernel(paths=paths, weights=weights, law=law, verifier=name)


def prefix_expected_accepted(
    p_model: Any, q_model: Any, gamma: int, *, method: str, memory_cap: float | None, kernel: Callable, step: Callable
) -> float:
    r""":math:`E[\tau] = \sum_{i=1}^{\gamma} \sum_{x^i} R_i(x^i)` of a chain rule whose reach mass
    :math:`R_i = P(\tau \ge i, X^i = x^i)` grows one position at a time, or from its kernel.

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target and draft models over one vocabulary.
    gamma : int
        Draft length.
    method : {"closed_form", "kernel"}
        The sum over all prefixes, or ``kernel().expected_accepted()`` (a cross-check).
    memory_cap : float or None
        Bytes for the enumeration; ``None``: the library default.
    kernel : callable
        ``kernel()`` returns the rule's :class:`ChainKernel` (read only for ``method="kernel"``).
    step : callable
        ``step(R, P, Qc)`` with ``R`` ``(N, 1)`` the reach mass of the depth's ``N`` prefixes and
        ``P``, ``Qc`` their ``(N, V)`` conditionals; returns the ``(N, V)`` reach mass one deeper.

    Returns
    -------
    float
        In ``[0, gamma]``.

    Raises
    ------
    UnsupportedMethodError
        If ``method`` is not one of the two.
    ProblemTooLargeError
        If the prefixes cannot be enumerated.
    """
    if method == "kernel":
        return kernel().expected_accepted()
    if method != "closed_form":
        raise UnsupportedMethodError(f"method must be 'closed_form' or 'kernel' (got {method!r}); pick one of those")
    table = prefixes.enumerate_prefixes(p_model, q_model, gamma, memory_cap=memory_cap)
    reach, total = np.ones(1), 0.0
    for i in range(1, gamma + 1):
        reach = step(reach[:, None], table.p_cond[i - 1], table.q_cond[i - 1]).ravel()
        total += float(reach.sum())
    return total


def drafted_targets(p_model: Any, q_model: Any, x: tuple) -> Iterator[tuple[int, np.ndarray]]:
    """``(i, M_b(. | x^i))`` along a drafted path, each after checking the draft could produce ``x_i``.

    Parameters
    ----------
    p_model, q_model : Model
        Validated target and draft models (:func:`check_sample_inputs`).
    x : tuple of int
        The drafted path.

    Yields
    ------
    i : int
        The position, ``0..gamma - 1``.
    p : ndarray, shape (V,)
        The target conditional there.

    Raises
    ------
    InvalidDraftsError
        If ``x_i`` has draft probability 0 after ``x^i``.
    """
    for i in range(len(x)):
        if q_model(x[:i])[x[i]] <= 0:
            raise InvalidDraftsError(f"drafts[{i}] = {x[i]} has draft probability 0 after {x[:i]}; pass a path the draft can produce")
        yield i, p_model(x[:i])
