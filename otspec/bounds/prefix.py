r"""Back end ``method="prefix"``: the sorted-prefix dual, exact for i.i.d., without-replacement and
greedy drafts (:doc:`math`, the sorted-prefix dual).

For these laws the minimum of :math:`P(H) + 1 - Q(H^k)` is attained on a prefix of the tokens in
the law's :meth:`~otspec.laws.DraftLaw.prefix_cut_order` (the p/q order for i.i.d. and without
replacement), which gives O(V log V) closed forms: :math:`q(H)^k` for i.i.d. drafts, the
exponential-race integral with an error bound for without replacement
(:func:`otspec._race.wor_dual_minimum`), the closed form for greedy drafts.
"""

from __future__ import annotations

import time

import numpy as np

from otspec._arith import power
from otspec._tolerances import ROUNDING_PER_TERM
from otspec.bounds import iid_compiled, jit_policy
from otspec.bounds.certificate import CutAnswer
from otspec.bounds.primal import prefix_lower
from otspec.laws import DraftLaw

__all__ = ["iid_error_bound", "iid_prefix", "iid_reference", "power", "ratio_keys", "ratio_sort", "solve"]


def ratio_keys(p: np.ndarray, q: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    r"""The keys of the sorted-prefix order: :math:`p/q`, ``+inf`` where only p is positive, 0
    where both vanish.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Target and draft distributions (validated).
    out : ndarray, shape (V,), optional
        A float64 buffer for the keys (a fresh array when omitted).

    Returns
    -------
    ndarray, shape (V,)
        The keys (``out`` when given).

    Examples
    --------
    >>> import numpy as np
    >>> ratio_keys(np.array([0.5, 0.5, 0.0]), np.array([0.25, 0.0, 0.75])).tolist()
    [2.0, inf, 0.0]
    """
    if q.min() > 0:
        with np.errstate(over="ignore"):  # a denormal q overflows p/q to +inf: the right key
            return np.divide(p, q, out=out)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        key = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.where(p > 0, np.inf, 0.0))
    if out is None:
        return key
    out[...] = key
    return out


def ratio_sort(key: np.ndarray, kernels=None) -> np.ndarray:
    r"""The stable ascending order of non-negative keys (no NaN; -0.0 counts as 0), as
    :func:`~otspec.laws.ratio_order` orders them, by one sort of 64-bit integers.

    A non-negative float's bit pattern, read as an int64, is monotone in its value; each key's
    low :math:`\lceil \log_2 V \rceil` bits are replaced by its token id and the words sorted by
    value (numpy's integer sort, several times faster than an argsort of the keys). That orders
    the tokens by the key's kept bits, then by id; the runs of words with equal kept bits (ties,
    and keys closer than :math:`2^{-52 + \log_2 V}` relative) are then re-sorted by (key, id).

    Parameters
    ----------
    key : ndarray of float64, shape (V,)
        Non-negative sort keys (:func:`ratio_keys`).
    kernels : module, optional
        :mod:`otspec.bounds.iid_kernels`: packs and unpacks the words in one compiled pass each
        (the same words, the same order).

    Returns
    -------
    ndarray of int64, shape (V,)
        ``np.argsort(key, kind="stable")`` exactly.

    Examples
    --------
    >>> ratio_sort(np.array([2.0, 0.5, 2.0, 0.0])).tolist()
    [3, 1, 0, 2]
    """
    V = key.size
    idbits = max(1, (V - 1).bit_length())
    low = (1 << idbits) - 1
    if kernels is not None:
        words = np.empty(V, dtype=np.int64)
        kernels.pack_words(key.view(np.int64), idbits, words)
        words.sort()
        order = np.empty(V, dtype=np.int64)
        if not kernels.unpack_order(words, idbits, order):
            return order
        np.right_shift(words, idbits, out=words)
    else:
        words = np.maximum(key.view(np.int64), 0)  # -0.0 is the only key with the sign bit: the key 0
        np.bitwise_and(words, ~low, out=words)
        np.bitwise_or(words, np.arange(V, dtype=np.int64), out=words)
        words.sort()
        order = np.bitwise_and(words, low)
        np.right_shift(words, idbits, out=words)
    same = np.equal(words[1:], words[:-1])
    if same.any():  # runs of equal kept bits: re-sort them by (key, id)
        involved = np.zeros(V, dtype=bool)
        involved[1:] |= same
        involved[:-1] |= same
        pos = np.flatnonzero(involved)
        sub = order[pos]
        order[pos] = sub[np.lexsort((sub, key[sub]))]
    return order


# long-function: a long numpydoc docstring on the exact arithmetic; the code (48 lines) is one pass over reused buffers
def iid_prefix(p: np.ndarray, q: np.ndarray, k: int, *, return_order: bool = False, return_scan: bool = False) -> tuple:
    r"""The i.i.d. optimum :math:`1 + \min_i [P(H_i) - q(H_i)^k]` over the prefixes :math:`H_i` of the
    tokens sorted by :math:`p/q` (:doc:`math`, the sorted-prefix dual); returns ``(value, cut,
    error_bound)``.

    The numpy path of ``method="prefix"`` for i.i.d. drafts (:func:`iid_reference`; the compiled
    twin is :mod:`otspec.bounds.iid_compiled`). The order is :func:`~otspec.laws.ratio_order`'s
    exactly (:func:`ratio_sort`: one sort of packed 64-bit words, then only the runs of close keys
    re-sorted by (key, id)), so the prefix sums, the minimiser and
    the cut are the same as through the generic :meth:`~otspec.laws.IIDLaw.prefix_prob_all_in`
    path; what is saved is the key's masked copies, the permutation check, the concatenations and
    ``np.power``: the powers :math:`q(H_i)^k` are formed by repeated squaring (a few ulps) to
    *locate* the minimum, and the value there is recomputed with ``np.power``, the arithmetic of
    the generic path.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Target and draft distributions (validated).
    k : int
        Number of i.i.d. drafts.
    return_order : bool
        Also return the token order (ascending p/q).
    return_scan : bool
        Also return (after ``order``) the scan's arrays in that order, ``(ps, qs, cp, cq, pw)``: p,
        q, their prefix sums and :math:`\min(q(H_i), 1)^k` by repeated squaring, which the
        certificate's O(V) primal reuses (:func:`~otspec.bounds.primal.iid_primal_sorted`).

    Returns
    -------
    value : float
        The optimum.
    cut : ndarray of int64
        The minimising prefix, as sorted token ids.
    error_bound : float
        Bound on the rounding error of ``value``.
    order : ndarray of int64
        Only with ``return_order`` (or ``return_scan``): the tokens in ascending p/q.
    scan : tuple of ndarray
        Only with ``return_scan``: ``(ps, qs, cp, cq, pw)``.
    """
    V = p.size
    # Few, reused buffers: on a loaded machine fresh pages cost more than the arithmetic.
    a, b = np.empty(V), np.empty(V)
    key = ratio_keys(p, q, out=a)
    order = ratio_sort(key)
    del key
    if return_scan:  # keep the sorted p, q and the powers for the certificate (no second gather)
        ps, qs = np.take(p, order), np.take(q, order)
        cp, cq = np.cumsum(ps, out=a), np.cumsum(qs, out=b)
        pw = power(np.minimum(cq, 1.0), k)
        f = np.subtract(cp, pw)
    else:
        cp = np.cumsum(np.take(p, order, out=a), out=a)  # P(H_i), i = 1..V
        cq = np.cumsum(np.take(q, order, out=b), out=b)
        f = power(np.minimum(cq, 1.0), k)
        np.subtract(cp, f, out=f)  # P(H_i) - Q(H_i^k); the empty prefix has 0
    j = int(np.argmin(f))
    if f[j] < 0.0:
        i = j + 1
        value = 1.0 + float(cp[j] - np.power(np.minimum(cq[j : j + 1], 1.0), k)[0])
    else:
        i, value = 0, 1.0
    in_cut = np.zeros(V, dtype=bool)
    in_cut[order[:i]] = True
    err = iid_error_bound(V, k)
    if return_scan:
        return value, np.flatnonzero(in_cut), err, order, (ps, qs, cp, cq, pw)
    if return_order:
        return value, np.flatnonzero(in_cut), err, order
    return value, np.flatnonzero(in_cut), err


def iid_error_bound(V: int, k: int) -> float:
    """The rounding bound of the i.i.d. prefix scan: Q's prefix sums raised to the k-th power and
    P's prefix sums.

    Parameters
    ----------
    V : int
        Vocabulary size.
    k : int
        Number of i.i.d. drafts.

    Returns
    -------
    float
        The bound on the value's rounding error.

    Examples
    --------
    >>> iid_error_bound(1000, 2) > 0
    True
    """
    return ROUNDING_PER_TERM * V * k + ROUNDING_PER_TERM * V


def iid_reference(p: np.ndarray, law: DraftLaw) -> CutAnswer:
    """The i.i.d. optimum with its certificate in numpy: :func:`iid_prefix` and the primal of
    :func:`~otspec.bounds.primal.prefix_lower` on the scan's arrays (the reference that
    :func:`otspec.bounds.iid_compiled.solve` reproduces bit for bit).

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution (validated).
    law : DraftLaw
        An i.i.d. law (``law.iid_q`` is not None).

    Returns
    -------
    CutAnswer
        The value, its cut and error bound, and the primal lower bound with its membership check.
    """
    value, cut, err, order, scan = iid_prefix(p, law.iid_q, law.k, return_scan=True)
    lower, reason, checks = prefix_lower(p, law, cut, order, scan=scan)
    return CutAnswer("prefix", value, cut, err, checks, lower=lower, lower_reason=reason)


def solve(p: np.ndarray, law: DraftLaw) -> CutAnswer:
    """The sorted-prefix dual of a law for which it is exact (:attr:`DraftLaw.prefix_exact`).

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution (validated).
    law : DraftLaw
        An i.i.d., without-replacement or greedy law.

    Returns
    -------
    CutAnswer
        The minimum over the prefixes, its prefix and its error bound (greedy laws add the check
        against their closed form), and the primal lower bound of :func:`~otspec.bounds.primal.prefix_lower`
        (``None`` with a reason for without-replacement laws too large to check).
    """
    if law.iid_q is not None:  # i.i.d. drafts: compiled where it pays (identical answers), else numpy
        if iid_compiled.ready(p.size) and law.iid_q.min() > 0:
            order = ratio_sort(ratio_keys(p, law.iid_q), iid_compiled.kernels())
            answer = iid_compiled.solve(p, law.iid_q, law.k, order, iid_error_bound(p.size, law.k))
            if answer is not None:
                return answer
        t0 = time.perf_counter()
        answer = iid_reference(p, law)
        jit_policy.count_reference(p.size, time.perf_counter() - t0)
        return answer
    order = law.prefix_cut_order(p)
    i, value, err = law.prefix_minimum(p, order)  # the law's own evaluation of the prefixes
    in_cut = np.zeros(law.V, dtype=bool)
    in_cut[order[:i]] = True
    cut = np.flatnonzero(in_cut)
    lower, reason, checks = prefix_lower(p, law, cut, order)
    closed = law.closed_form_optimum(p)
    if closed is not None:
        checks["closed_form_minus_value"] = closed - value
    return CutAnswer("prefix", value, cut, float(err), checks, lower=lower, lower_reason=reason)
