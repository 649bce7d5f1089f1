r"""The draft-law protocol: :class:`DraftLaw`, the base class every law module subclasses.

A draft law is the joint law :math:`Q` of the :math:`k` tokens a drafter proposes. Each law lives in
its own module of :mod:`otspec.laws` and carries its behaviour -- enumeration, :math:`Q(H^k)`,
sampling, its cut function and closed forms, its sizing -- so that solvers, verifiers, test
generators and the CLI ask the law instead of comparing its name. Adding a law is one module plus
one line in the registry :data:`otspec.laws.ALL` (:doc:`api`, "How to add a draft law").

**Required** (a subclass that misses one fails ``tests/contracts/test_law_contract.py``):

* ``kind`` -- a dataclass field with ``init=False`` and the law's name as default (the registry key,
  the name of its public constructor, what reprs and JSON show);
* :attr:`~DraftLaw.constructor` -- the public constructor, validating its input and returning the law;
  :attr:`~DraftLaw.parameters` says how it is called;
* :meth:`~DraftLaw.num_tuples`, ``_enumerate()`` (every ordered tuple of positive probability and
  its probability; :meth:`~DraftLaw.enumerate` wraps it with the memory check),
  :meth:`~DraftLaw.prob_all_in` and :meth:`~DraftLaw.sample`.

**Optional**, with the default in brackets:

* :attr:`~DraftLaw.q` -- the one distribution the drafts are *drawn* from under the law's scheme
  (i.i.d., successive sampling, top and rest): the proposal a verifier written as
  ``f(p, q, drafts)`` must be given [``None``: no single sampled distribution describes the drafts];
* :attr:`~DraftLaw.source_q` -- the draft distribution the law was *built* from (the constructor's
  ``q``) [:attr:`~DraftLaw.q`]. The two differ for deterministic drafts (:func:`~otspec.laws.top_k`
  and the trees): they are the top tokens of ``source_q``, chosen and not sampled, so ``q`` is the
  point mass of the one draft (``k = 1``) or ``None``; handing ``source_q`` to a rule such as
  :math:`\min(1, p/q)` as if the drafts were sampled from it loses losslessness;
* :attr:`~DraftLaw.deterministic` -- whether the law proposes one fixed tuple by construction [False];
  :attr:`~DraftLaw.draft_tree` -- whether it describes a draft tree whose root set is its single step [False];
* :meth:`~DraftLaw.prefix_prob_all_in` [from the enumeration], :meth:`~DraftLaw.prefix_cut_order`
  [``None``: no sorted-prefix theorem, so :attr:`~DraftLaw.prefix_exact` is False and the optimum
  takes an LP or a flow], :meth:`~DraftLaw.prefix_minimum` [a scan of ``prefix_prob_all_in``];
* :meth:`~DraftLaw.subset_prob_all_in` [zeta transform of the enumerated sets] with
  :attr:`~DraftLaw.cut_function_enumerates` [True];
* :meth:`~DraftLaw.first_draft_marginal`, :meth:`~DraftLaw.tuple_probability` [from the
  enumeration], ``_check_possible(drafts)`` [``tuple_probability`` row by row];
* closed forms :meth:`~DraftLaw.inclusion_probabilities`, :meth:`~DraftLaw.closed_form_optimum`,
  :meth:`~DraftLaw.closed_form_lower` [``None``: none; callers enumerate or solve];
* structure the specialised verifiers need: :attr:`~DraftLaw.iid_q`,
  :attr:`~DraftLaw.independent_qs`, :attr:`~DraftLaw.without_replacement_q`,
  :attr:`~DraftLaw.top_and_rest` [``None``: not of that form, so those verifiers do not apply];
* :attr:`~DraftLaw.k_within_support`, :attr:`~DraftLaw.branch_and_bound` [False];
* :attr:`~DraftLaw.torch_sampler` -- its torch sampler hook, ``"module:function"`` [``None``: decoding
  cannot draw it].

Laws are frozen dataclasses with ``eq=False, repr=False``. Token ids are ``0..V-1``; tuples are
int64 arrays of shape ``(M, k)``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from otspec._tolerances import ROUNDING_PER_TERM
from otspec._validation import as_distribution, as_int_in_range, as_token_tuples, check_memory
from otspec.errors import InvalidDraftCountError, InvalidDraftsError, ShapeMismatchError
from otspec.laws.enumeration import prefix_by_max_rank, sets_from_tuples, subset_prob_all_in

__all__ = ["DraftLaw", "q_and_k_in_support"]

#: Bytes per enumerated tuple entry we budget for (int64 ids + float64 weight + temporaries).
_BYTES_PER_TUPLE_ENTRY = 24


@dataclass(frozen=True, eq=False, repr=False)
class DraftLaw:
    """Base class of draft laws: the protocol every law module implements (see the module
    docstring for which members are required and which have defaults); use the constructors
    :func:`~otspec.laws.iid`, :func:`~otspec.laws.without_replacement`, :func:`~otspec.laws.greedy`,
    :func:`~otspec.laws.product` and :func:`~otspec.laws.explicit`, or :func:`~otspec.laws.by_kind`.

    Attributes
    ----------
    k : int
        Number of drafts per tuple.
    V : int
        Vocabulary size; token ids are ``0..V-1``.
    kind : str
        The law's family (``"iid"``, ``"without_replacement"``, ``"greedy"``, ``"product"``,
        ``"explicit"``), set by the subclass; the key of :func:`~otspec.laws.by_kind`, for display
        and JSON. Code asks the law's capabilities, never compares this name.
    """

    k: int
    V: int
    kind: str = field(init=False, default="law")
    #: Per-law cache of derived quantities (see :meth:`cached`); not part of the law's value.
    _cache: dict = field(init=False, default_factory=dict, repr=False, compare=False)

    #: Most entries :meth:`cached` keeps per law (oldest dropped first).
    CACHE_SIZE: ClassVar[int] = 32

    #: How the public constructor is parametrised: ``"q"`` (one draft distribution and ``k``:
    #: ``constructor(q, k)``), ``"qs"`` (one distribution per draft: ``constructor([q_1, ..., q_k])``)
    #: or ``"tuples"`` (``constructor(tuples, weights, vocab_size=V)``). Test-problem generators,
    #: the audit and the torch adapters build and shrink laws from it.
    parameters: ClassVar[str] = "tuples"

    #: The public constructor (``otspec.laws.<kind>``), taking :attr:`parameters`.
    constructor: ClassVar[Callable[..., DraftLaw]]

    #: Whether ``k`` may not exceed the support size of ``q`` (the drafts are distinct tokens).
    k_within_support: ClassVar[bool] = False

    #: The law's torch sampler twin as ``"module:function"`` (``None``: none), resolved lazily by
    #: :func:`otspec_gpu.drafting.sample_drafts` so that the core never imports torch. The function
    #: takes ``(q, k, *, generator, n, validate)`` with ``q`` a checked ``[B, V]`` tensor and returns
    #: ``[B, k]`` drafts (``[n, k]`` from a shared ``[1, V]`` row when ``n`` is given).
    torch_sampler: ClassVar[str | None] = None

    #: Whether the law proposes one fixed tuple by construction (the drafts are chosen from
    #: :attr:`source_q`, not sampled): its only tuple has probability 1.
    deterministic: ClassVar[bool] = False

    #: Whether the law describes a draft tree (its single-step members -- ``k``, the tuples, the
    #: cut function -- are those of the root's children): tables of single-step laws list its
    #: root set once, under the set law.
    draft_tree: ClassVar[bool] = False

    #: Whether ``optimal_acceptance(method="product")`` (the branch-and-bound over independent
    #: drafters of :mod:`otspec.bounds.product`, reading ``law.qs``) applies.
    branch_and_bound: ClassVar[bool] = False

    #: Whether :meth:`subset_prob_all_in` enumerates the law's draft sets (sizing checks its memory
    #: before ``method="subsets"`` runs); ``False`` for a law with a closed form over every subset.
    cut_function_enumerates: ClassVar[bool] = True

    #: Whether the sorted-prefix dual (``optimal_acceptance(method="prefix")``) is exact for this
    #: law, i.e. whether it overrides :meth:`prefix_cut_order` (set for each subclass).
    prefix_exact: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.prefix_exact = cls.prefix_cut_order is not DraftLaw.prefix_cut_order

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
        """The distribution the drafts are drawn from under the law's scheme: the proposal of a
        verifier written as ``f(p, q, drafts)`` (``None`` for product and explicit laws, and for
        deterministic drafts of more than one token; see :attr:`source_q`)."""
        return None

    @property
    def source_q(self) -> np.ndarray | None:
        """The draft distribution the law was built from (the constructor's ``q``; ``None`` when it
        has none). Equal to :attr:`q` for sampled laws; for deterministic drafts (the top tokens of
        ``source_q``) :attr:`q` is the law the drafts follow instead."""
        return self.q

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
        vals = prefix_by_max_rank(tuples, weights, order, self.V)
        return vals, ROUNDING_PER_TERM * max(len(weights), 1)

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

    def prefix_minimum(self, p: np.ndarray, order: np.ndarray) -> tuple[int, float, float]:
        r"""The sorted-prefix dual over the prefixes of ``order``: the minimiser and the minimum of
        :math:`1 + P(H_i) - Q(H_i^k)`, with a bound on its rounding error.

        The generic implementation scans :meth:`prefix_prob_all_in`; a law with a sharper
        evaluation (the race integral of drafts without replacement) overrides it.

        Parameters
        ----------
        p : ndarray, shape (V,)
            Target distribution (validated).
        order : ndarray of int64, shape (V,)
            The token order, normally :meth:`prefix_cut_order` of ``p``.

        Returns
        -------
        index : int
            ``i`` such that the first ``i`` tokens of ``order`` are a minimising prefix.
        value : float
            :math:`1 + \min_i [P(H_i) - Q(H_i^k)]`.
        error_bound : float
            A bound on the absolute rounding error of ``value``.
        """
        P = np.concatenate([[0.0], np.cumsum(p[order])])
        Qv, err = self.prefix_prob_all_in(order)
        f = P - Qv
        i = int(np.argmin(f))
        return i, 1.0 + float(f[i]), err + ROUNDING_PER_TERM * self.V  # P's prefix sums

    def subset_prob_all_in(self, *, memory_cap: float | None = None) -> np.ndarray:
        r""":math:`Q(H^k)` for every token set :math:`H` at once (the cut function of the dual on all
        :math:`2^V` sets; bit ``b`` of the index is token ``b``). Generic: one zeta transform of
        :meth:`enumerate_sets` (then :attr:`cut_function_enumerates` is True).

        Parameters
        ----------
        memory_cap : float, optional
            Most bytes the enumeration may use; ``None``: the library default.

        Returns
        -------
        ndarray, shape (2**V,)
            ``out[mask]`` :math:`= Q(H^k)` for the set ``mask``.

        Raises
        ------
        ProblemTooLargeError
            If enumerating the law would exceed ``memory_cap``.
        """
        sets, weights = self.enumerate_sets(memory_cap=memory_cap)
        return subset_prob_all_in(sets, weights, self.V)

    def inclusion_probabilities(self) -> np.ndarray | None:
        r"""The probability that each token is among the drafts, :math:`P(y \in \{X_1..X_k\})`, in
        closed form, or ``None`` when the law has none (callers then enumerate).

        Returns
        -------
        ndarray, shape (V,), or None
            One probability per token.
        """
        return None

    def closed_form_optimum(self, p: np.ndarray) -> float | None:
        r"""The optimal acceptance :math:`\alpha^*(p, Q)` in closed form, unclamped, or ``None`` when
        the law has none; ``method="prefix"`` checks its dual against it.

        Parameters
        ----------
        p : ndarray, shape (V,)
            Validated target distribution.

        Returns
        -------
        float or None
            The value, or ``None``.
        """
        return None

    def closed_form_lower(self, p: np.ndarray) -> float | None:
        """The acceptance of an explicit feasible coupling in closed form (the primal lower bound of
        ``method="prefix"``), or ``None`` when the law has none (then the bound is built from the
        selection law of the optimal cut).

        Parameters
        ----------
        p : ndarray, shape (V,)
            Validated target distribution.

        Returns
        -------
        float or None
            A lower bound on :math:`\\alpha^*` attained by a coupling, or ``None``.
        """
        return None

    # -- structure the law declares (``None``: the law does not have it) -----------------------
    @property
    def iid_q(self) -> np.ndarray | None:
        """``q`` when the drafts are, by construction, k i.i.d. draws from one ``q`` (as in
        :func:`~otspec.laws.iid`), else ``None``."""
        return None

    @property
    def independent_qs(self) -> tuple | None:
        """The per-draft distributions ``(q_1, ..., q_k)`` when the drafts are independent (i.i.d. or
        a product of drafters), else ``None``."""
        return None

    @property
    def without_replacement_q(self) -> np.ndarray | None:
        """``q`` when the drafts are successive sampling proportional to ``q`` without replacement
        (as in :func:`~otspec.laws.without_replacement`), else ``None``."""
        return None

    @property
    def top_and_rest(self) -> tuple[np.ndarray, np.ndarray] | None:
        r"""``(G, q~)`` when the first k-1 drafts are the fixed tokens ``G`` and the last is one draw
        from :math:`\tilde q` (zero on ``G``), as in :func:`~otspec.laws.greedy`; else ``None``."""
        return None

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
        return sets_from_tuples(tuples, weights)

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


def q_and_k_in_support(q: Any, k: Any, drafting: str, fix: str) -> tuple[np.ndarray, int]:
    """``q`` as a distribution and ``k`` as an int no larger than q's support (distinct drafts): the
    input check of the constructors whose drafts are distinct tokens.

    Parameters
    ----------
    q : array_like, shape (V,)
        Draft distribution.
    k : int
        Number of drafts.
    drafting : str
        The drafting scheme, for the message (``"greedy drafting"``).
    fix : str
        What to do instead, for the message.

    Returns
    -------
    q : ndarray, shape (V,)
        The validated distribution.
    k : int
        The validated draft count.

    Raises
    ------
    InvalidDistributionError
        If ``q`` is not a distribution.
    InvalidDraftCountError
        If ``k`` is not an integer in ``[1, support size of q]``.
    """
    q = as_distribution(q, "q")
    k = as_int_in_range(k, "k")
    support = int(np.count_nonzero(q))
    if k > support:
        raise InvalidDraftCountError(
            f"k must be <= the support size of q for {drafting} (got k = {k}, q has {support} tokens with positive probability); {fix}"
        )
    return q, k
