r"""Draft laws: the joint law :math:`Q` of the :math:`k` tokens a drafter proposes.

Every law offers the same small interface (:doc:`verifiers`, the verifier contract):

* ``k``, ``V``, ``kind`` and, when the law is built from one draft distribution, ``q``;
* ``prob_all_in(H)`` -- :math:`Q(H^k) = P(\text{every draft lies in } H)`;
* ``prefix_prob_all_in(order)`` -- :math:`Q(H_i^k)` for every prefix :math:`H_i` of a token order,
  in one pass, together with a bound on its numerical error (what the dual of the optimum needs);
* ``enumerate()`` -- every ordered draft tuple of positive probability and its probability;
* ``enumerate_sets()`` -- the same mass grouped by the *set* of distinct drafted tokens (all that
  membership acceptance depends on);
* ``sample(rng, size)`` -- i.i.d. draft tuples, with an explicit ``numpy.random.Generator``;
* ``validate_drafts(drafts)`` -- raise unless ``drafts`` is a tuple the law can produce.

Laws are immutable. Token ids are ``0..V-1``; tuples are int64 arrays of shape ``(M, k)``.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from otspec import _race
from otspec._tolerances import ROUNDING_PER_TERM
from otspec._validation import (
    as_distribution,
    as_generator,
    as_int_in_range,
    as_supported_drafts,
    as_token_tuples,
    as_weights,
    check_memory,
    check_same_vocab,
)
from otspec.errors import InvalidDraftCountError, InvalidDraftsError, ShapeMismatchError

__all__ = [
    "DraftLaw",
    "IIDLaw",
    "WithoutReplacementLaw",
    "GreedyLaw",
    "ProductLaw",
    "ExplicitLaw",
    "iid",
    "without_replacement",
    "greedy",
    "product",
    "explicit",
    "as_token_mask",
    "ratio_order",
    "successive_denominators",
]

#: Bytes per enumerated tuple entry we budget for (int64 ids + float64 weight + temporaries).
_BYTES_PER_TUPLE_ENTRY = 24


def as_token_mask(H: Any, V: int) -> np.ndarray:
    """Boolean ``(V,)`` mask of a token set given as a mask or as an iterable of token ids.

    Parameters
    ----------
    H : array_like of bool, shape (V,), or iterable of int
        The token set: one flag per token, or the ids of its members (repeats allowed).
    V : int
        Vocabulary size.

    Returns
    -------
    ndarray of bool, shape (V,)
        ``mask[y]`` is True iff token ``y`` is in ``H`` (the input itself when it already is a mask).

    Raises
    ------
    ShapeMismatchError
        If ``H`` is a boolean array of a shape other than ``(V,)``.
    InvalidDraftsError
        If an id is not an integer in ``[0, V)``.

    Examples
    --------
    >>> as_token_mask([2, 0], 4).tolist()
    [True, False, True, False]
    """
    arr = np.asarray(H)
    if arr.dtype == bool:
        if arr.shape != (V,):
            raise ShapeMismatchError(f"H as a boolean mask must have shape ({V},) (got {arr.shape}); pass one flag per token")
        return arr
    ids = as_token_tuples(arr.reshape(-1, 1), V, name="H") if arr.size else np.zeros((0, 1), np.int64)
    mask = np.zeros(V, dtype=bool)
    mask[ids[:, 0]] = True
    return mask


def ratio_order(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Token order by :math:`p/q` ascending; q = 0 < p goes last (ratio +inf), p = q = 0 first.

    Ties keep token-id order (stable sort), which is harmless: a tied block is optimally taken
    all-or-nothing and every block boundary is a prefix (:doc:`math`, the sorted-prefix dual).

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Target and draft distributions (validated by the caller).

    Returns
    -------
    ndarray of int64, shape (V,)
        A permutation of ``0..V-1``: ``order[0]`` has the smallest ratio :math:`p/q`.

    Examples
    --------
    >>> import numpy as np
    >>> ratio_order(np.array([0.2, 0.5, 0.3]), np.array([0.4, 0.1, 0.5])).tolist()
    [0, 2, 1]
    """
    # over: a denormal q (e.g. 5e-324) overflows p/q to +inf, which is the right order key
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        key = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.where(p > 0, np.inf, 0.0))
    return stable_argsort(key)


def stable_argsort(key: np.ndarray) -> np.ndarray:
    """``np.argsort(key, kind="stable")``, computed as the default (unstable, ~3x faster) argsort
    followed by re-sorting only the runs of tied keys by index: the same permutation exactly.

    >>> stable_argsort(np.array([2.0, 1.0, 2.0, 1.0, 0.5])).tolist()
    [4, 1, 3, 0, 2]
    """
    order = np.argsort(key)
    ks = key[order]
    tie = ks[1:] == ks[:-1]
    if tie.any():
        involved = np.zeros(ks.size, dtype=bool)
        involved[1:] |= tie
        involved[:-1] |= tie
        pos = np.flatnonzero(involved)
        sub = order[pos]
        order[pos] = sub[np.lexsort((sub, ks[pos]))]
    return order


def _prefix_by_max_rank(tuples: np.ndarray, weights: np.ndarray, order: np.ndarray, V: int) -> np.ndarray:
    """Q(H_i^k) for every prefix of ``order`` from an enumeration: a tuple lies in H_i iff the
    largest rank of its tokens is < i."""
    rank = np.empty(V, dtype=np.int64)
    rank[order] = np.arange(V)
    max_rank = rank[tuples].max(axis=1)
    hist = np.bincount(max_rank + 1, weights=weights, minlength=V + 1)
    return np.cumsum(hist)


def _sets_from_tuples(tuples: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group tuples by their set of distinct tokens: sorted rows, repeated ids replaced by -1."""
    t = np.asarray(tuples, dtype=np.int64)
    M, k = t.shape
    if k == 2:  # a two-column sort is a min and a max
        s = np.empty_like(t)
        np.minimum(t[:, 0], t[:, 1], out=s[:, 0])
        np.maximum(t[:, 0], t[:, 1], out=s[:, 1])
    else:
        s = np.sort(t, axis=1)
    base = int(s[:, -1].max(initial=-1)) + 2  # digits s + 1 in [0, base)
    if k * math.log2(max(base, 2)) < 62.5:
        # One int64 key per row: the base-`base` number whose digits are the row's distinct ids + 1
        # in descending order, then zeros (the canonical row: distinct ids descending, -1 padding).
        # It is read off the ascending row directly: an id that differs from its right neighbour is
        # distinct, and its digit position is the number of distinct ids to its right. The map is
        # monotone in the lexicographic order of the canonical rows, so the sets come out in the
        # same order as np.unique(axis=0) would give them, ~10x faster (one 1-D sort, or a count
        # when the key space is small).
        powers = np.array([base ** (k - 1 - c) for c in range(k)] + [0], dtype=np.int64)
        key = (s[:, k - 1] + 1) * powers[0]
        if k > 1:
            distinct_right = np.ones(M, dtype=np.int64)
            for j in range(k - 2, -1, -1):
                new = s[:, j] != s[:, j + 1]
                key += np.where(new, (s[:, j] + 1) * powers[distinct_right], 0)
                distinct_right += new
        del s
        if base**k <= 4 * M + 1024:
            present = np.zeros(base**k, dtype=bool)
            present[key] = True
            ukey = np.flatnonzero(present)
            del present
            remap = np.zeros(base**k, dtype=np.int64)
            remap[ukey] = np.arange(ukey.size)
            inverse = remap[key]
            del remap
        else:
            ukey, inverse = np.unique(key, return_inverse=True)
        uniq = np.empty((ukey.size, k), dtype=np.int64)
        rest = ukey.astype(np.int64)
        for j in range(k - 1, -1, -1):
            rest, digit = np.divmod(rest, base)
            uniq[:, j] = digit - 1
    else:  # the key would not fit in int64 (huge V ** k): group canonical rows directly
        if k > 1:
            dup = np.zeros_like(s, dtype=bool)
            dup[:, 1:] = s[:, 1:] == s[:, :-1]
            s = np.where(dup, -1, s)
            s = np.ascontiguousarray(np.sort(s, axis=1)[:, ::-1])  # distinct ids first (descending), -1 last
        uniq, inverse = np.unique(s, axis=0, return_inverse=True)
    w = np.bincount(inverse.ravel(), weights=weights, minlength=uniq.shape[0])
    return uniq, w


@dataclass(frozen=True, eq=False, repr=False)
class DraftLaw:
    """Base class of draft laws; use the constructors :func:`iid`, :func:`without_replacement`,
    :func:`greedy`, :func:`product` and :func:`explicit`.

    Attributes
    ----------
    k : int
        Number of drafts per tuple.
    V : int
        Vocabulary size; token ids are ``0..V-1``.
    kind : str
        The law's family (``"iid"``, ``"without_replacement"``, ``"greedy"``, ``"product"``,
        ``"explicit"``), set by the subclass.
    """

    k: int
    V: int
    kind: str = field(init=False, default="law")
    #: Per-law cache of derived quantities (see :meth:`cached`); not part of the law's value.
    _cache: dict = field(init=False, default_factory=dict, repr=False, compare=False)

    #: Most entries :meth:`cached` keeps per law (oldest dropped first).
    CACHE_SIZE: ClassVar[int] = 32

    # -- to be provided by subclasses -------------------------------------------------------
    def num_tuples(self) -> int:
        """Number of ordered tuples :meth:`enumerate` would return (for memory estimates).

        Returns
        -------
        int
            The count of ordered draft tuples of positive probability, computed without
            enumerating them (e.g. :math:`|\\mathrm{supp}\\, q|^k` for i.i.d. drafts).
        """
        raise NotImplementedError

    def _enumerate(self) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def prob_all_in(self, H: Any) -> float:
        r""":math:`Q(H^k)`: probability that every drafted token lies in the token set ``H``.

        This is the quantity the dual of the optimal acceptance needs:
        :math:`\alpha^* = \min_H \, p(H) + 1 - Q(H^k)` (:doc:`math`).

        Parameters
        ----------
        H : array_like of bool, shape (V,), or iterable of int
            The token set, as a mask or as token ids.

        Returns
        -------
        float
            :math:`Q(H^k) = P(X_1 \in H, \dots, X_k \in H)`, in ``[0, 1]``.

        Raises
        ------
        ShapeMismatchError, InvalidDraftsError
            If ``H`` is not a valid token set over ``V`` tokens (see :func:`as_token_mask`).
        """
        raise NotImplementedError

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Draw ``size`` independent draft tuples, shape ``(size, k)``.

        Parameters
        ----------
        rng : numpy.random.Generator
            The caller's generator (never a seed).
        size : int
            Number of tuples to draw.

        Returns
        -------
        ndarray of int64, shape (size, k)
            Row ``i`` is one draft tuple :math:`(x_1, \\dots, x_k) \\sim Q`, in draft order.

        Raises
        ------
        OtspecTypeError
            If ``rng`` is not a ``numpy.random.Generator``.
        """
        raise NotImplementedError

    # -- shared ----------------------------------------------------------------------------
    @property
    def q(self) -> np.ndarray | None:
        """The draft distribution the law is built from (``None`` for product/explicit laws)."""
        return None

    def prefix_prob_all_in(self, order: Any) -> tuple[np.ndarray, float]:
        r""":math:`Q(H_i^k)` for every prefix :math:`H_i` of a token order, in one pass.

        :math:`H_i` is the set of the first ``i`` tokens of ``order`` (``i = 0..V``); the
        sorted-prefix dual minimises :math:`p(H_i) + 1 - Q(H_i^k)` over these. The generic
        implementation enumerates the law (small laws only); subclasses use closed forms.

        Parameters
        ----------
        order : array_like of int, shape (V,)
            A permutation of the token ids ``0..V-1``.

        Returns
        -------
        values : ndarray, shape (V + 1,)
            ``values[i]`` :math:`= Q(H_i^k)`; ``values[0] = 0`` and ``values[V] = 1`` up to rounding.
        error_bound : float
            A bound on the absolute numerical error of every entry of ``values``.

        Raises
        ------
        ShapeMismatchError
            If ``order`` is not a permutation of ``0..V-1``.
        """
        order = self._as_order(order)
        tuples, weights = self.enumerate()
        vals = _prefix_by_max_rank(tuples, weights, order, self.V)
        return vals, ROUNDING_PER_TERM * max(len(weights), 1)

    @property
    def prefix_exact(self) -> bool:
        """Whether the sorted-prefix dual (``optimal_acceptance(method="prefix")``) is exact for
        this law, i.e. whether it has a :meth:`prefix_cut_order` (i.i.d., without replacement,
        greedy; not product or explicit laws)."""
        return type(self).prefix_cut_order is not DraftLaw.prefix_cut_order

    def prefix_cut_order(self, p: np.ndarray) -> np.ndarray | None:
        """The token order whose prefixes contain an optimal cut of the dual, or ``None`` when the
        sorted-prefix method is not exact for this law (then the optimum needs an LP or a flow).

        Parameters
        ----------
        p : ndarray, shape (V,)
            Target distribution (validated by the caller).

        Returns
        -------
        ndarray of int64, shape (V,), or None
            A permutation of the token ids (e.g. :func:`ratio_order` of ``p`` and ``q`` for i.i.d.
            and without-replacement drafts), or ``None`` for laws without a sorted-prefix theorem.
        """
        return None

    def first_draft_marginal(self) -> np.ndarray:
        """The marginal law of the first draft :math:`X_1`, shape ``(V,)`` (generic: by enumeration).

        Returns
        -------
        ndarray, shape (V,)
            :math:`P(X_1 = y)` for every token ``y``; sums to 1.
        """
        tuples, weights = self.enumerate()
        return np.bincount(tuples[:, 0], weights=weights, minlength=self.V)

    def cached(self, tag: str, p: np.ndarray | None, build: Callable[[], Any]) -> Any:
        """``build()``, computed once per ``(tag, p)`` for this law and kept on the law object.

        Verifiers store their per-(law, target) precomputations here (K-SEQ's division factor,
        residual sequences, LP solutions), so repeated ``sample`` calls and chunked
        ``sample_batch`` do the O(V) (or LP) work once. Laws are immutable, so the cache lives and
        dies with the law; ``p`` is keyed by a 128-bit hash of its bytes; at most
        :attr:`CACHE_SIZE` entries are kept per law.

        Parameters
        ----------
        tag : str
            What is cached (one tag per kind of precomputation, e.g. the verifier's name).
        p : ndarray or None
            The target the value depends on, or ``None`` when it depends on the law alone.
        build : callable
            Zero-argument function computing the value on a cache miss.

        Returns
        -------
        object
            The cached (or freshly built) value; treat it as read-only.
        """
        key = (tag, None if p is None else hashlib.blake2b(np.ascontiguousarray(p).view(np.uint8), digest_size=16).digest())
        if key in self._cache:
            return self._cache[key]
        value = build()
        if len(self._cache) >= self.CACHE_SIZE:
            self._cache.pop(next(iter(self._cache)))
        self._cache[key] = value
        return value

    def enumerate(self, *, memory_cap: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Every ordered draft tuple with positive probability, and its probability.

        Refuses, before allocating, laws whose enumeration would exceed ``memory_cap`` bytes.

        Parameters
        ----------
        memory_cap : float, optional
            Most bytes the enumeration may use; ``None`` applies the library default.

        Returns
        -------
        tuples : ndarray of int64, shape (M, k)
            Every ordered draft tuple with :math:`Q(x) > 0`.
        weights : ndarray, shape (M,)
            :math:`Q(x)` of each row; sums to 1.

        Raises
        ------
        ProblemTooLargeError
            If ``M * k`` entries would exceed ``memory_cap``.
        """
        n = self.num_tuples()
        check_memory(
            n * self.k * _BYTES_PER_TUPLE_ENTRY,
            memory_cap,
            f"enumerating {self!r} ({n:,} tuples)",
            "use a closed-form method (method='prefix') or a smaller V/k",
        )
        return self._enumerate()

    def enumerate_sets(self, *, memory_cap: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Draft mass grouped by the set of distinct drafted tokens.

        Membership acceptance :math:`P(Y \\in \\bar X)` depends on a tuple only through its set of
        distinct tokens, so the LPs work on sets (far fewer than ordered tuples).

        Parameters
        ----------
        memory_cap : float, optional
            Most bytes the underlying :meth:`enumerate` may use; ``None``: the library default.

        Returns
        -------
        sets : ndarray of int64, shape (S, k)
            Each row the distinct token ids of one set (descending) followed by ``-1`` padding.
        weights : ndarray, shape (S,)
            Probability of drafting exactly that set; sums to 1.

        Raises
        ------
        ProblemTooLargeError
            If enumerating the tuples would exceed ``memory_cap``.
        """
        tuples, weights = self.enumerate(memory_cap=memory_cap)
        return _sets_from_tuples(tuples, weights)

    def validate_drafts(self, drafts: Any) -> np.ndarray:
        """Return ``drafts`` as an int64 ``(k,)`` array, or raise :class:`InvalidDraftsError`
        if the law cannot produce it.

        Parameters
        ----------
        drafts : array_like of int, shape (k,)
            One draft tuple, in draft order.

        Returns
        -------
        ndarray of int64, shape (k,)
            The same tuple, validated.

        Raises
        ------
        InvalidDraftsError
            If ``drafts`` does not hold exactly ``k`` token ids in ``[0, V)``, or has probability 0
            under the law (e.g. a token ``q`` never proposes, or a repeat without replacement).
        """
        arr = as_token_tuples(np.asarray(drafts).reshape(1, -1) if np.ndim(drafts) <= 1 else drafts, self.V, name="drafts")
        if arr.shape != (1, self.k):
            raise InvalidDraftsError(
                f"drafts must hold exactly k = {self.k} token ids for {self!r} (got shape {np.shape(drafts)}); pass one tuple of k drafts"
            )
        d = arr[0]
        if self.tuple_probability(d) <= 0:
            raise InvalidDraftsError(f"drafts {d.tolist()} have probability 0 under {self!r}; pass drafts sampled from this law")
        return d

    def validate_draft_batch(self, drafts: Any) -> np.ndarray:
        """Vectorised :meth:`validate_drafts`: ``drafts`` ``(N, k)`` (or one ``(k,)`` tuple) as an
        int64 ``(N, k)`` array, or raise :class:`~otspec.errors.InvalidDraftsError` naming the
        first tuple the law cannot produce.

        Parameters
        ----------
        drafts : array_like of int, shape (N, k) or (k,)
            Draft tuples, one per row.

        Returns
        -------
        ndarray of int64, shape (N, k)
            The tuples, validated (a single tuple becomes one row).

        Raises
        ------
        InvalidDraftsError
            If a row does not hold ``k`` token ids in ``[0, V)`` or has probability 0 under the law.
        """
        arr = np.asarray(drafts)
        if arr.ndim == 1:
            arr = arr[None, :]
        d = as_token_tuples(arr, self.V, name="drafts")
        if d.shape[1] != self.k:
            raise InvalidDraftsError(
                f"drafts must hold exactly k = {self.k} token ids per tuple for {self!r} (got {d.shape[1]}); pass tuples of k drafts"
            )
        return self._check_possible(d)

    def _check_possible(self, d: np.ndarray) -> np.ndarray:
        """Return ``d`` (validated, in-vocabulary tuples) or raise if one has probability 0."""
        ok = np.array([self.tuple_probability(row) > 0 for row in d], dtype=bool)
        if not np.all(ok):
            bad = d[int(np.flatnonzero(~ok)[0])]
            raise InvalidDraftsError(f"drafts {bad.tolist()} have probability 0 under {self!r}; pass drafts sampled from this law")
        return d

    def tuple_probability(self, drafts: Any) -> float:
        """Probability of one ordered draft tuple (generic: by enumeration).

        Parameters
        ----------
        drafts : array_like of int, shape (k,)
            The tuple, in draft order (ids assumed in ``[0, V)``).

        Returns
        -------
        float
            :math:`Q(x_1, \\dots, x_k)`; 0 for a tuple the law never produces.
        """
        d = np.asarray(drafts, dtype=np.int64).reshape(-1)
        tuples, weights = self.enumerate()
        hit = np.all(tuples == d[None, :], axis=1)
        return float(weights[hit].sum())

    def check_compatible(self, p: np.ndarray, name: str = "p") -> None:
        """Raise unless the law drafts from the same vocabulary as ``p``.

        Parameters
        ----------
        p : ndarray, shape (V,)
            A target distribution (already validated).
        name : str
            The argument's name, for the error message.

        Raises
        ------
        ShapeMismatchError
            If ``p`` has a different number of tokens than the law's ``V``.
        """
        if p.shape[0] != self.V:
            raise ShapeMismatchError(
                f"{name} has V = {p.shape[0]} tokens but the draft law {self!r} has V = {self.V}; "
                "build the law from a draft distribution over the same vocabulary"
            )

    def _as_order(self, order: Any) -> np.ndarray:
        o = np.asarray(order, dtype=np.int64)
        # a permutation: every id in range and each counted once (O(V), no sort)
        if o.shape != (self.V,) or (o.size and (o.min() < 0 or o.max() >= self.V or not np.all(np.bincount(o, minlength=self.V) == 1))):
            raise ShapeMismatchError(f"order must be a permutation of 0..{self.V - 1} (got shape {o.shape}); pass np.argsort of a key")
        return o

    def __repr__(self) -> str:
        return f"{self.kind}(V={self.V}, k={self.k})"


def successive_denominators(q: np.ndarray, tuples: np.ndarray) -> np.ndarray:
    r"""The normalisers of successive sampling without replacement, one per draft.

    .. math:: \text{out}[m, j] = \sum_{y \notin \{x_{m,1}, \dots, x_{m,j-1}\}} q(y)
              = q(\Omega) - \sum_{l < j} q(x_{m,l}),

    so that :math:`Q(x_m) = \prod_j q(x_{m,j}) / \text{out}[m, j]`. ``total - chosen`` cancels
    catastrophically when the chosen tokens carry almost all the mass (e.g.
    q = (1 - 1e-10, 1e-10)); those rows are recomputed as a direct sum over the complement.

    Parameters
    ----------
    q : ndarray, shape (V,)
        Draft distribution.
    tuples : ndarray of int, shape (M, k)
        Draft tuples of distinct token ids.

    Returns
    -------
    ndarray, shape (M, k)
        ``out[m, j]``: the mass of q left when draft ``j`` of tuple ``m`` is taken.

    Examples
    --------
    >>> import numpy as np
    >>> successive_denominators(np.array([0.5, 0.25, 0.25]), np.array([[0, 1]])).tolist()
    [[1.0, 0.5]]
    """
    qs = q[tuples]
    chosen = np.cumsum(qs, axis=1) - qs
    total = float(np.sum(q))
    out = total - chosen
    bad_rows = np.flatnonzero(np.any(out < 1e-3 * total, axis=1))
    for start in range(0, bad_rows.size, 4096):
        rows = bad_rows[start : start + 4096]
        taken = np.zeros((rows.size, q.size), dtype=bool)
        for j in range(tuples.shape[1]):
            out[rows, j] = np.where(taken, 0.0, q[None, :]).sum(axis=1)
            taken[np.arange(rows.size), tuples[rows, j]] = True
    return out


def _all_tuples(support: np.ndarray, k: int) -> np.ndarray:
    """Every k-tuple over ``support`` in lexicographic (row-major) order, shape ``(n^k, k)``."""
    n = support.size
    out = np.empty((n**k, k), dtype=support.dtype)
    grid = out.reshape((n,) * k + (k,))
    for j in range(k):  # column j is support broadcast along axis j
        grid[..., j] = support.reshape((1,) * j + (n,) + (1,) * (k - 1 - j))
    return out


# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False, repr=False)
class IIDLaw(DraftLaw):
    r"""k independent drafts from one distribution q (with replacement): :math:`Q(x) = \prod_j q(x_j)`."""

    _q: np.ndarray = field(default=None)  # type: ignore[assignment]
    kind: str = field(init=False, default="iid")

    @property
    def q(self) -> np.ndarray:
        """The draft distribution ``q``, shape ``(V,)``."""
        return self._q

    def num_tuples(self) -> int:
        return int(np.count_nonzero(self._q)) ** self.k

    def _enumerate(self):
        supp = np.flatnonzero(self._q)
        tuples = _all_tuples(supp, self.k)
        # prod_j q(x_j) in the same order as np.prod(q[tuples], axis=1): ((q_1 q_2) q_3)..., as
        # outer products over the support (the tuples are in row-major order).
        qs = self._q[supp]
        weights = qs
        for _ in range(self.k - 1):
            weights = np.multiply.outer(weights, qs).ravel()
        return tuples, weights

    def prob_all_in(self, H):
        return float(self._q[as_token_mask(H, self.V)].sum() ** self.k)

    def prefix_prob_all_in(self, order):
        order = self._as_order(order)
        cq = np.concatenate([[0.0], np.cumsum(self._q[order])])
        return np.minimum(cq, 1.0) ** self.k, ROUNDING_PER_TERM * self.V * self.k

    def tuple_probability(self, drafts):
        d = np.asarray(drafts, dtype=np.int64).reshape(-1)
        return float(np.prod(self._q[d]))

    def _check_possible(self, d):
        return as_supported_drafts(d, self._q)

    def prefix_cut_order(self, p):
        return ratio_order(p, self._q)

    def first_draft_marginal(self):
        return np.asarray(self._q)

    def sample(self, rng, size):
        rng = as_generator(rng)
        return rng.choice(self.V, size=(int(size), self.k), p=self._q)


@dataclass(frozen=True, eq=False, repr=False)
class WithoutReplacementLaw(DraftLaw):
    r"""k drafts by successive sampling proportional to q without replacement:
    :math:`Q(x_1..x_k) = \prod_j q(x_j) / (1 - \sum_{l<j} q(x_l))` on distinct tokens."""

    _q: np.ndarray = field(default=None)  # type: ignore[assignment]
    kind: str = field(init=False, default="without_replacement")

    @property
    def q(self) -> np.ndarray:
        """The draft distribution ``q`` sampled without replacement, shape ``(V,)``."""
        return self._q

    def num_tuples(self) -> int:
        s = int(np.count_nonzero(self._q))
        return math.perm(s, self.k)

    def _enumerate(self):
        supp = np.flatnonzero(self._q)
        tuples = np.array(list(itertools.permutations(supp.tolist(), self.k)), dtype=np.int64).reshape(-1, self.k)
        weights = np.prod(self._q[tuples] / successive_denominators(self._q, tuples), axis=1)
        return tuples, weights

    def tuple_probability(self, drafts):
        d = np.asarray(drafts, dtype=np.int64).reshape(-1)
        if len(set(d.tolist())) < d.size:
            return 0.0
        return float(np.prod(self._q[d] / successive_denominators(self._q, d[None, :])[0]))

    def validate_drafts(self, drafts):
        arr = np.asarray(drafts)
        if arr.ndim == 1 and arr.size == self.k and arr.dtype.kind in "iu" and len(set(arr.tolist())) < arr.size:
            raise InvalidDraftsError(
                f"drafts {arr.tolist()} repeat a token, which a without-replacement law never does; pass distinct tokens"
            )
        return super().validate_drafts(drafts)

    def _check_possible(self, d):
        return as_supported_drafts(d, self._q, distinct=True)

    def prefix_cut_order(self, p):
        return ratio_order(p, self._q)

    def first_draft_marginal(self):
        return np.asarray(self._q)

    def prob_all_in(self, H):
        mask = as_token_mask(H, self.V)
        order = np.concatenate([np.flatnonzero(mask), np.flatnonzero(~mask)])
        vals, _ = _race.wor_prefix_at(self._q[order], self.k, [int(mask.sum())])
        return float(vals[0])

    def prefix_prob_all_in(self, order):
        order = self._as_order(order)
        return _race.wor_prefix_all_in(self._q[order], self.k)

    def sample(self, rng, size):
        rng = as_generator(rng)
        # Successive sampling by inverse CDF: draw j is u ~ U[0, remaining mass) mapped through the
        # cumulative q with the intervals of the drafts already taken skipped (in ascending id
        # order). O(size * k * (k + log V)) instead of Gumbel-top-k's O(size * V) (2000
        # draws at V = 262 144 took ~100 s that way).
        n, k, q = int(size), self.k, self._q
        cum = np.concatenate([[0.0], np.cumsum(q)])
        positive = np.flatnonzero(q > 0)
        out = np.empty((n, k), dtype=np.int64)
        taken = np.full((n, k), np.iinfo(np.int64).max, dtype=np.int64)  # ascending per row
        mass = np.zeros(n)
        for j in range(k):
            todo = np.arange(n)
            while todo.size:
                u = rng.random(todo.size) * (cum[-1] - mass[todo])
                for col in range(j):
                    e = taken[todo, col]
                    u = u + np.where(cum[e] <= u, q[e], 0.0)
                x = np.clip(np.searchsorted(cum, u, side="right") - 1, positive[0], positive[-1])
                # rounding can land u on an edge of a taken or zero-probability interval: redraw
                bad = (q[x] <= 0) | np.any(taken[todo, :j] == x[:, None], axis=1)
                good = todo[~bad]
                out[good, j] = x[~bad]
                todo = todo[bad]
            mass += q[out[:, j]]
            taken[:, j] = out[:, j]
            taken[:, : j + 1] = np.sort(taken[:, : j + 1], axis=1)
        return out


@dataclass(frozen=True, eq=False, repr=False)
class GreedyLaw(DraftLaw):
    r"""Hu et al.'s greedy drafts: the top-(k-1) tokens of q (ties: lower id first) followed by one
    token drawn from :math:`\tilde q = q / q(\Omega \setminus G)` on the remaining tokens."""

    _q: np.ndarray = field(default=None)  # type: ignore[assignment]
    kind: str = field(init=False, default="greedy")

    @property
    def q(self) -> np.ndarray:
        """The draft distribution ``q`` whose top tokens and rest the drafts come from, shape ``(V,)``."""
        return self._q

    @functools.cached_property
    def top(self) -> np.ndarray:
        """The k-1 deterministic drafts G, in draft order (larger q first, then lower id; computed
        once with a partial sort; read-only)."""
        q, m = self._q, self.k - 1
        if m == 0:
            g = np.zeros(0, dtype=np.int64)
        else:
            part = np.argpartition(-q, m - 1)[:m]
            cand = np.flatnonzero(q >= q[part].min())  # every token tied with the m-th largest
            g = cand[np.argsort(-q[cand], kind="stable")][:m].astype(np.int64)
        g.setflags(write=False)
        return g

    @functools.cached_property
    def q_rest(self) -> np.ndarray:
        r""":math:`\tilde q`: the law of the last (random) draft, zero on G (computed once)."""
        qt = self._q.copy()
        qt[self.top] = 0.0
        qt = qt / qt.sum()
        qt.setflags(write=False)
        return qt

    def optimum(self, p: np.ndarray) -> float:
        r"""The optimal acceptance in closed form (Hu et al.; :doc:`math`, greedy drafts):
        :math:`\alpha^* = P(G) + \sum_{x \notin G} \min(p(x), \tilde q(x))`.

        Parameters
        ----------
        p : ndarray, shape (V,)
            Validated target distribution.

        Returns
        -------
        float
            The value, unclamped (it exceeds 1 only by rounding).
        """
        # q_rest vanishes on G, so the second sum may run over every token.
        return float(p[self.top].sum() + np.minimum(p, self.q_rest).sum())

    def num_tuples(self) -> int:
        return int(np.count_nonzero(self.q_rest))

    def _enumerate(self):
        qt = self.q_rest
        last = np.flatnonzero(qt)
        tuples = np.concatenate([np.broadcast_to(self.top, (last.size, self.k - 1)), last[:, None]], axis=1)
        return tuples.astype(np.int64), qt[last]

    def tuple_probability(self, drafts):
        d = np.asarray(drafts, dtype=np.int64).reshape(-1)
        if not np.array_equal(d[:-1], self.top):
            return 0.0
        return float(self.q_rest[d[-1]])

    def _check_possible(self, d):
        ok = np.all(d[:, :-1] == self.top[None, :], axis=1) & (self.q_rest[d[:, -1]] > 0)
        if not np.all(ok):
            bad = d[int(np.flatnonzero(~ok)[0])]
            raise InvalidDraftsError(f"drafts {bad.tolist()} have probability 0 under {self!r}; pass drafts sampled from this law")
        return d

    def prefix_cut_order(self, p):
        # G is in every tuple, so a useful cut contains G: put it first, then the rest by p / q~.
        order_rest = ratio_order(p, self.q_rest)
        in_top = np.zeros(self.V, dtype=bool)
        in_top[self.top] = True
        return np.concatenate([self.top, order_rest[~in_top[order_rest]]])

    def first_draft_marginal(self):
        if self.k == 1:
            return self.q_rest
        m = np.zeros(self.V)
        m[int(self.top[0])] = 1.0
        return m

    def prob_all_in(self, H):
        mask = as_token_mask(H, self.V)
        if not np.all(mask[self.top]):
            return 0.0
        return float(self.q_rest[mask].sum())

    def prefix_prob_all_in(self, order):
        order = self._as_order(order)
        rank = np.empty(self.V, dtype=np.int64)
        rank[order] = np.arange(self.V)
        need = int(rank[self.top].max()) + 1 if self.k > 1 else 0
        vals = np.concatenate([[0.0], np.cumsum(self.q_rest[order])])
        vals[:need] = 0.0
        return np.minimum(vals, 1.0), ROUNDING_PER_TERM * self.V

    def sample(self, rng, size):
        rng = as_generator(rng)
        last = rng.choice(self.V, size=int(size), p=self.q_rest)
        return np.concatenate([np.broadcast_to(self.top, (int(size), self.k - 1)), last[:, None]], axis=1).astype(np.int64)


@dataclass(frozen=True, eq=False, repr=False)
class ProductLaw(DraftLaw):
    r"""Independent drafts from different drafters: :math:`Q(x) = \prod_j q_j(x_j)`.

    Attributes
    ----------
    qs : tuple of ndarray, each shape (V,)
        The drafters' distributions :math:`q_1, \dots, q_k`, in draft order.
    """

    qs: tuple = field(default=())
    kind: str = field(init=False, default="product")

    def num_tuples(self) -> int:
        return int(np.prod([np.count_nonzero(qj) for qj in self.qs], dtype=object))

    def _enumerate(self):
        supports = [np.flatnonzero(qj) for qj in self.qs]
        grids = np.indices(tuple(s.size for s in supports)).reshape(self.k, -1)
        tuples = np.stack([supports[j][grids[j]] for j in range(self.k)], axis=1)
        weights = np.ones(tuples.shape[0])
        for j, qj in enumerate(self.qs):
            weights = weights * qj[tuples[:, j]]
        return tuples.astype(np.int64), weights

    def tuple_probability(self, drafts):
        d = np.asarray(drafts, dtype=np.int64).reshape(-1)
        return float(np.prod([qj[x] for qj, x in zip(self.qs, d, strict=False)]))

    def _check_possible(self, d):
        return as_supported_drafts(d, np.stack(self.qs), q_name="qs")

    def first_draft_marginal(self):
        return np.asarray(self.qs[0])

    def prob_all_in(self, H):
        mask = as_token_mask(H, self.V)
        return float(np.prod([qj[mask].sum() for qj in self.qs]))

    def prefix_prob_all_in(self, order):
        order = self._as_order(order)
        vals = np.ones(self.V + 1)
        for qj in self.qs:
            vals = vals * np.minimum(np.concatenate([[0.0], np.cumsum(qj[order])]), 1.0)
        return vals, ROUNDING_PER_TERM * self.V * self.k

    def sample(self, rng, size):
        rng = as_generator(rng)
        return np.stack([rng.choice(self.V, size=int(size), p=qj) for qj in self.qs], axis=1).astype(np.int64)


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
        return _prefix_by_max_rank(self.tuples, self.weights, order, self.V), ROUNDING_PER_TERM * self.weights.size

    def sample(self, rng, size):
        rng = as_generator(rng)
        idx = rng.choice(self.weights.size, size=int(size), p=self.weights)
        return self.tuples[idx]


# ------------------------------------------------------------------------------------------------
# Constructors (the public API).


def iid(q: Any, k: int) -> IIDLaw:
    r"""k i.i.d. drafts from ``q`` (sampling with replacement; SpecTr, SpecInfer).

    .. math:: Q(x_1, \dots, x_k) = \prod_{j=1}^k q(x_j), \qquad Q(H^k) = q(H)^k.

    Parameters
    ----------
    q : array_like, shape (V,)
        Draft distribution (float64, sums to 1).
    k : int
        Number of drafts, ``k >= 1``.

    Returns
    -------
    IIDLaw

    Raises
    ------
    InvalidDistributionError
        If ``q`` is not a distribution.
    InvalidDraftCountError
        If ``k`` is not an integer >= 1.

    Examples
    --------
    >>> import otspec
    >>> law = otspec.iid([0.5, 0.5], 2)
    >>> law.prob_all_in([0])
    0.25
    """
    q = as_distribution(q, "q")
    k = as_int_in_range(k, "k")
    return IIDLaw(k=k, V=q.shape[0], _q=q)


def _q_and_k_in_support(q: Any, k: Any, drafting: str, fix: str) -> tuple[np.ndarray, int]:
    """``q`` as a distribution and ``k`` as an int no larger than q's support (distinct drafts)."""
    q = as_distribution(q, "q")
    k = as_int_in_range(k, "k")
    support = int(np.count_nonzero(q))
    if k > support:
        raise InvalidDraftCountError(
            f"k must be <= the support size of q for {drafting} (got k = {k}, q has {support} tokens with positive probability); {fix}"
        )
    return q, k


def without_replacement(q: Any, k: int) -> WithoutReplacementLaw:
    r"""k distinct drafts by successive sampling proportional to ``q`` (RSD, EAGLE-style trees).

    .. math:: Q(x_1, \dots, x_k) = \prod_{j=1}^k \frac{q(x_j)}{1 - \sum_{l<j} q(x_l)}
              \quad (x_j \text{ distinct}).

    ``k`` must not exceed the number of tokens with ``q > 0``.

    Parameters
    ----------
    q : array_like, shape (V,)
        Draft distribution.
    k : int
        Number of drafts, at most the support size of ``q``.

    Returns
    -------
    WithoutReplacementLaw

    Raises
    ------
    InvalidDistributionError
        If ``q`` is not a distribution.
    InvalidDraftCountError
        If ``k`` is not an integer in ``[1, support size]``.

    Examples
    --------
    >>> import otspec
    >>> law = otspec.without_replacement([0.5, 0.25, 0.25], 2)
    >>> round(law.tuple_probability([0, 1]), 12)
    0.25
    """
    q, k = _q_and_k_in_support(q, k, "drafting without replacement", "lower k or use otspec.iid")
    return WithoutReplacementLaw(k=k, V=q.shape[0], _q=q)


def greedy(q: Any, k: int) -> GreedyLaw:
    r"""Hu et al.'s greedy drafts: top-(k-1) tokens of ``q`` plus one drawn from the rest.

    With :math:`G` the top-(k-1) tokens and :math:`\tilde q = q\,1_{G^c} / q(G^c)`:
    :math:`Q(G, x) = \tilde q(x)`. ``k = 2`` is SpecHub's draft law. Ties in q are broken by the
    lower token id. Requires at least k tokens with ``q > 0`` so that the last draft has mass.

    Parameters
    ----------
    q : array_like, shape (V,)
        Draft distribution.
    k : int
        Number of drafts (``k - 1`` deterministic, one random), at most the support size of ``q``.

    Returns
    -------
    GreedyLaw

    Raises
    ------
    InvalidDistributionError
        If ``q`` is not a distribution.
    InvalidDraftCountError
        If ``k`` is not an integer in ``[1, support size]``.

    Examples
    --------
    >>> import otspec
    >>> otspec.greedy([0.1, 0.6, 0.3], 2).top.tolist()
    [1]
    """
    q, k = _q_and_k_in_support(q, k, "greedy drafting", "lower k")
    return GreedyLaw(k=k, V=q.shape[0], _q=q)


def product(qs: Sequence[Any]) -> ProductLaw:
    r"""Independent drafts from different drafters ``qs = [q_1, ..., q_k]`` (with replacement).

    .. math:: Q(x_1, \dots, x_k) = \prod_{j=1}^k q_j(x_j).

    Parameters
    ----------
    qs : sequence of array_like, each shape (V,)
        One draft distribution per drafter (``k = len(qs)``).

    Returns
    -------
    ProductLaw

    Raises
    ------
    InvalidDistributionError
        If some ``qs[j]`` is not a distribution.
    ShapeMismatchError
        If the drafters do not share the vocabulary.
    InvalidDraftCountError
        If ``qs`` is empty or not a sequence.

    Examples
    --------
    >>> import otspec
    >>> otspec.product([[1.0, 0.0], [0.5, 0.5]]).prob_all_in([0])
    0.5
    """
    if isinstance(qs, np.ndarray) and qs.ndim == 2:
        qs = list(qs)
    if not isinstance(qs, (list, tuple)) or len(qs) == 0:
        raise InvalidDraftCountError(f"qs must be a non-empty list of draft distributions (got {type(qs).__name__}); pass [q1, ..., qk]")
    arrs = tuple(as_distribution(qj, f"qs[{j}]") for j, qj in enumerate(qs))
    for j, a in enumerate(arrs[1:], start=1):
        check_same_vocab(arrs[0], a, ("qs[0]", f"qs[{j}]"))
    return ProductLaw(k=len(arrs), V=arrs[0].shape[0], qs=arrs)


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
