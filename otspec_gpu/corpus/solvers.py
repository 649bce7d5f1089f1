r"""The per-position solvers: every quantity of one (p, q) pair, pure numpy, shared by both engines.

:func:`solve_rows` turns ``(n, V)`` arrays of target and draft distributions into one row of
quantities per position. It runs position by position (a loop over rows, never a reduction across
them), so a position's numbers do not depend on how positions were batched: the local and the Ray
engines give bit-identical results.

Quantities (columns), for each requested draft law and number of drafts ``k``:

``one_minus_tv``
    :math:`\sum_x \min(p, q)`: single-draft speculative sampling's acceptance (the ``token``
    verifier), the optimum for one draft.
``opt_iid_k{k}``, ``opt_greedy_k{k}``
    The exact optima :math:`\alpha^*(p, \mathrm{iid}(q, k))` and :math:`\alpha^*(p,
    \mathrm{greedy}(q, k))` (Hu et al.'s sorted-prefix dual and greedy closed form; see
    :func:`iid_optima` for how the sort is avoided).
``opt_wor_k{k}``, ``opt_wor_k{k}_err``
    The without-replacement optimum (:func:`otspec.optimal_acceptance`, ``method="prefix"``: the
    exponential-race integral) and its certified error bound.
``{verifier}_{law}_k{k}``
    A verifier's acceptance from :meth:`otspec.verifiers.Verifier.acceptance` (closed forms for
    ``kseq`` and ``rrs`` at any V); where the only way is Monte Carlo (``rrs_wor`` at large V) the
    estimate comes with ``_lo`` / ``_hi`` columns (its 99% interval), drawn from a generator seeded
    by (seed, document, position) so that it too is engine-independent.

For logged top-K traces (:func:`solve_logged`) the columns are certified intervals
``one_minus_tv_lo`` / ``_hi``, ``opt_iid_k{k}_lo`` / ``_hi`` and ``opt_greedy_k{k}_lo`` / ``_hi``
(:mod:`otspec.truncation`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otspec.errors import InvalidOptionError

__all__ = [
    "LAWS",
    "DEFAULT_LAWS",
    "DEFAULT_KS",
    "DEFAULT_VERIFIERS",
    "SolverSpec",
    "iid_optima",
    "greedy_optima",
    "all_optima",
    "one_minus_tv",
    "solve_position",
    "solve_rows",
    "solve_logged",
    "columns_for",
]

LAWS = ("iid", "without_replacement", "greedy")
DEFAULT_LAWS = ("iid", "greedy")
DEFAULT_KS = (2, 4, 8)
DEFAULT_VERIFIERS = ("kseq", "rrs")
_SHORT = {"iid": "iid", "without_replacement": "wor", "greedy": "greedy"}

# Ratio bins: the top 12 bits of a non-negative float64's bit pattern after its sign (11 exponent
# bits and 6 mantissa bits: 64 bins per octave) are a monotone function of the value. Keys below
# 2^-40 share the first bin and keys above 2^40 (and +inf: q = 0 < p) the last one.
_SHIFT = 46
_LO = int(np.float64(2.0**-40).view(np.int64) >> _SHIFT)
_HI = int(np.float64(2.0**40).view(np.int64) >> _SHIFT)
_NBINS = _HI - _LO + 1
_BLOCK = 64  # block width of the top-m search of greedy drafts


@dataclass(frozen=True)
class SolverSpec:
    """What to compute at every position.

    Attributes
    ----------
    laws : tuple of str
        Draft laws among :data:`LAWS`.
    ks : tuple of int
        Numbers of drafts (each >= 2; k = 1 is ``one_minus_tv``).
    verifiers : tuple of str
        Verifier names of :data:`otspec.verifiers.ALL`; each is evaluated for every law it applies
        to (``kseq``, ``rrs``: i.i.d.; ``rrs_wor``: without replacement, by Monte Carlo at large V).
    mc_samples : int
        Draft tuples per Monte Carlo estimate.
    seed : int
        Seed of the Monte Carlo generators (combined with document and position).
    """

    laws: tuple[str, ...] = DEFAULT_LAWS
    ks: tuple[int, ...] = DEFAULT_KS
    verifiers: tuple[str, ...] = DEFAULT_VERIFIERS
    mc_samples: int = 2000
    seed: int = 0
    _checked: bool = field(default=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from otspec.verifiers import ALL

        bad = [x for x in self.laws if x not in LAWS]
        if bad or not self.laws:
            raise InvalidOptionError(f"laws must be a non-empty subset of {LAWS} (got {list(self.laws)}); pick from those")
        if not self.ks or any(int(k) != k or k < 2 for k in self.ks):
            raise InvalidOptionError(f"ks must be integers >= 2 (got {list(self.ks)}); k = 1 is reported as one_minus_tv")
        names = {v.name for v in ALL}
        badv = [v for v in self.verifiers if v not in names or v == "token"]
        if badv:
            raise InvalidOptionError(
                f"unknown verifier(s) {badv} (token is always reported as one_minus_tv); pick from {sorted(names - {'token'})}"
            )
        if int(self.mc_samples) < 2:
            raise InvalidOptionError(f"mc_samples must be >= 2 (got {self.mc_samples}); pass e.g. 2000")
        object.__setattr__(self, "ks", tuple(sorted({int(k) for k in self.ks})))


_BUFFERS: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # V -> (ratios, bins, a flag per token)


def _buffers(V: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scratch arrays reused from one position to the next (a ratio, a bin index and a byte per
    token): fresh pages for three V-arrays per position cost more than the arithmetic."""
    buf = _BUFFERS.get(V)
    if buf is None:
        _BUFFERS.clear()
        buf = _BUFFERS[V] = (np.empty(V), np.empty(V, dtype=np.int64), np.empty(V, dtype=bool))
    return buf


def _keys(p: np.ndarray, q: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``p / q`` with ``+inf`` where only p is positive and 0 where both vanish."""
    if q.min() > 0:
        with np.errstate(over="ignore"):
            return np.divide(p, q, out=out)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        key = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.where(p > 0, np.inf, 0.0))
    if out is None:
        return key
    out[...] = key
    return out


def _bin_of(x: np.ndarray | float) -> Any:
    b = np.asarray(x, dtype=np.float64).view(np.int64) >> _SHIFT
    if b.ndim == 0:
        return int(np.clip(b, _LO, _HI)) - _LO
    np.clip(b, _LO, _HI, out=b)
    b -= _LO
    return b


#: The smallest ratio of each bin (its lower edge; 0 for the first, which also holds every smaller key).
_EDGES = ((np.arange(_NBINS, dtype=np.int64) + _LO) << _SHIFT).view(np.float64).copy()
_EDGES[0] = 0.0


class _Binned:
    """One position's tokens grouped in ratio bins, with per-bin masses and their prefix sums
    (arrays restricted to the bins between the first and the last one holding any mass)."""

    def __init__(self, p: np.ndarray, q: np.ndarray):
        self.p, self.q = p, q
        keybuf, binbuf, self._codebuf = _buffers(p.size)
        self.key = _keys(p, q, out=keybuf)
        self.bins = np.right_shift(self.key.view(np.int64), _SHIFT, out=binbuf)
        np.clip(self.bins, _LO, _HI, out=self.bins)
        self.bins -= _LO
        Pb = np.bincount(self.bins, weights=p, minlength=_NBINS)
        Qb = np.bincount(self.bins, weights=q, minlength=_NBINS)
        used = np.flatnonzero(Pb + Qb)
        j0, j1 = (int(used[0]), int(used[-1]) + 1) if used.size else (0, 1)
        self.j0 = j0
        self.Qbin = Qb[j0:j1]
        self.Pc = np.cumsum(Pb[j0:j1])
        self.Qc = np.cumsum(self.Qbin)
        self.Pprev = np.concatenate([[0.0], self.Pc[:-1]])
        self.Qprev = np.concatenate([[0.0], self.Qc[:-1]])
        self.edges = _EDGES[j0:j1]

    def local(self, j: int) -> int:
        """Index into the restricted arrays of global bin ``j`` (clipped to the used range)."""
        return min(max(j - self.j0, 0), self.Pc.size - 1)

    def gather(self, sort_bins: np.ndarray, other_bins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of two sets of bins (restricted range) in one pass: those of ``sort_bins``
        sorted by ratio (ties: lower id), and those of ``other_bins`` in id order."""
        full_sort = np.zeros(_NBINS, dtype=bool)
        full_sort[self.j0 : self.j0 + sort_bins.size] = sort_bins
        full_other = np.zeros(_NBINS, dtype=bool)
        full_other[self.j0 : self.j0 + other_bins.size] = other_bins
        idx = np.flatnonzero(np.take(full_sort | full_other, self.bins, out=self._codebuf))  # a bool pass: fast nonzero
        b = self.bins[idx]
        s = idx[full_sort[b]]
        return s[np.argsort(self.key[s], kind="stable")], idx[full_other[b]]


def _iid_bounds(b: _Binned, ks: Sequence[int]) -> dict[int, tuple[float, np.ndarray]]:
    """For each k: the best prefix value at bin ends, and the bins whose interior could beat it.

    A prefix ending inside bin j takes masses ``x_q <= Q_j`` and ``x_p >= r_j x_q`` of it (every
    ratio in the bin is at least its lower edge ``r_j``), so its value is at least
    ``P_prev + r_j x_q - (Q_prev + x_q)^k``: concave in ``x_q``, hence at least its smaller end value.
    """
    if not ks:
        return {}
    kk = np.asarray(ks, dtype=np.float64)[:, None]
    Qk = np.minimum(b.Qc, 1.0)[None, :] ** kk  # [len(ks), bins]
    best = np.minimum(np.min(b.Pc[None, :] - Qk, axis=1), 0.0)
    lower = np.minimum(b.Pprev - np.minimum(b.Qprev, 1.0)[None, :] ** kk, (b.Pprev + b.edges * b.Qbin)[None, :] - Qk)
    cand = lower < best[:, None]
    return {int(k): (float(best[i]), cand[i]) for i, k in enumerate(ks)}


def _iid_interior(b: _Binned, tokens: np.ndarray, bounds: dict) -> dict[int, float]:
    """The minimum over every prefix ending inside the gathered bins, for each k (sorted ``tokens``)."""
    if tokens.size == 0:
        return {k: best for k, (best, _) in bounds.items()}
    tb = b.bins[tokens] - b.j0
    start = np.flatnonzero(np.concatenate([[True], tb[1:] != tb[:-1]]))
    first = np.repeat(start, np.diff(np.append(start, tokens.size)))
    cp = np.cumsum(b.p[tokens])
    cq = np.cumsum(b.q[tokens])
    P = b.Pprev[tb] + (cp - np.concatenate([[0.0], cp])[first])
    Q = np.minimum(b.Qprev[tb] + (cq - np.concatenate([[0.0], cq])[first]), 1.0)
    return {k: min(best, float(np.min(P - Q**k))) for k, (best, _) in bounds.items()}


def iid_optima(p: np.ndarray, q: np.ndarray, ks: Sequence[int], *, _binned: _Binned | None = None) -> dict[int, float]:
    r"""Exact i.i.d. optima :math:`\alpha^*(p, \mathrm{iid}(q, k))` for several k, without a full sort.

    .. math:: \alpha^* = 1 + \min_t \big[P(r \le t) - Q(r \le t)^k\big], \qquad r = p/q .

    The minimum over the prefixes of the ratio order is found in three steps: (1) the tokens are
    put in ratio bins (64 per octave, from the float's bits: one pass, no sort) and the prefix
    value is evaluated at every bin end; (2) a prefix ending inside bin ``j`` has
    :math:`P \ge P(\text{bins} < j)` and :math:`Q \le Q(\text{bins} \le j)`, which bounds its
    value from below; (3) only bins whose bound is below the best bin-end value are sorted and
    scanned (usually one or two). The minimum is the same as over the fully sorted order; only the
    summation order (hence the last bits) differs from :func:`otspec.optimal_acceptance`.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Validated float64 distributions.
    ks : sequence of int
        Numbers of drafts (>= 1).

    Returns
    -------
    dict of int to float
        ``k -> value`` (clipped to at most 1).

    Examples
    --------
    >>> import numpy as np
    >>> v = iid_optima(np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), [1, 2])
    >>> round(v[1], 12), round(v[2], 12)
    (0.7, 0.86)
    """
    return all_optima(p, q, ks, (), _binned=_binned)[1]


def _sum_min_scaled(b: _Binned, c: float, tokens: np.ndarray) -> float:
    r""":math:`\sum_x \min(p(x), c\,q(x))` from the bins: p below the bin of c, c q above it, and
    the tokens of that bin (which ``tokens`` must hold) one by one."""
    g = _bin_of(c)
    inside = tokens[b.bins[tokens] == g]
    j = b.local(g)
    if g < b.j0:  # every token's ratio exceeds c
        return float(c * b.Qc[-1])
    if g >= b.j0 + b.Pc.size:  # every token's ratio is below c
        return float(b.Pc[-1])
    below = b.Pprev[j]
    above = c * (b.Qc[-1] - b.Qc[j])
    return float(below + above + np.minimum(b.p[inside], c * b.q[inside]).sum())


def _top(q: np.ndarray, m: int) -> np.ndarray:
    """The m largest entries of q (larger first, ties: lower id), as :attr:`otspec.laws.GreedyLaw.top`.

    One pass of group maxima (group j = tokens ``j, j + n, j + 2n, ...``: 64 rows of a ``(64, n)``
    view, reduced across rows): the m-th largest group maximum ``thr`` is at most the m-th largest
    entry (m groups hold an entry >= thr), so the top m, ties included, lie in the groups whose
    maximum reaches ``thr`` (or in the last ``V mod 64`` tokens); only those are sorted.
    """
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    n = q.size // _BLOCK
    if n >= 2 * m:
        group_max = q[: n * _BLOCK].reshape(_BLOCK, n).max(axis=0)
        thr = np.partition(group_max, n - m)[n - m]
        groups = np.flatnonzero(group_max >= thr)
        cand = (np.arange(_BLOCK)[:, None] * n + groups[None, :]).ravel()
        cand = np.concatenate([cand, np.arange(n * _BLOCK, q.size)])
    else:
        cand = np.arange(q.size)
    order = np.lexsort((cand, -q[cand]))
    return cand[order[:m]].astype(np.int64)


def _greedy_constants(p: np.ndarray, q: np.ndarray, ks: Sequence[int]) -> dict[int, tuple[np.ndarray, float, float]]:
    top = _top(q, max(ks) - 1)
    out = {}
    for k in ks:
        G = top[: k - 1]
        rest = 1.0 - float(q[G].sum())
        out[k] = (G, rest, float(p[G].sum()))
    return out


def greedy_optima(p: np.ndarray, q: np.ndarray, ks: Sequence[int], *, _binned: _Binned | None = None) -> dict[int, float]:
    r"""Exact greedy optima :math:`P(G) + \sum_{x \notin G} \min(p(x), \tilde q(x))` for several k.

    :math:`G` is the top-(k-1) of q (:attr:`otspec.laws.GreedyLaw.top`'s tie rule), :math:`\tilde
    q = q / (1 - q(G))` off G. The sum over all tokens of :math:`\min(p, c\,q)` is read from the
    ratio bins (tokens with :math:`p/q \le c` give p, the others :math:`c\,q`), so only the bin
    holding :math:`c` is visited token by token; G's own terms are then taken out.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Validated float64 distributions.
    ks : sequence of int
        Numbers of drafts (>= 1; ``k - 1 < V``).

    Returns
    -------
    dict of int to float
        ``k -> value`` (clipped to at most 1).

    Examples
    --------
    >>> import numpy as np
    >>> greedy_optima(np.array([0.2, 0.5, 0.3]), np.array([0.5, 0.3, 0.2]), [2])  # G = {0}: 0.2 + 0.5 + 0.3
    {2: 1.0}
    """
    if _binned is not None:
        return all_optima(p, q, (), ks, _binned=_binned)[2]
    out = {}  # alone, three direct passes per k cost less than binning the vocabulary
    for k, (G, rest, pG) in _greedy_constants(p, q, ks).items():
        if rest <= 0:
            out[k] = min(1.0, pG)
            continue
        c = 1.0 / rest
        cq = c * q
        out[k] = min(1.0, pG + float(np.minimum(p, cq).sum()) - float(np.minimum(p[G], cq[G]).sum()))
    return out


def _want(b: _Binned, wanted: np.ndarray, c: float) -> None:
    g = _bin_of(c)
    if b.j0 <= g < b.j0 + wanted.size:
        wanted[g - b.j0] = True


def all_optima(
    p: np.ndarray, q: np.ndarray, iid_ks: Sequence[int], greedy_ks: Sequence[int], *, _binned: _Binned | None = None
) -> tuple[float, dict[int, float], dict[int, float]]:
    r""":math:`1 - d_{TV}`, the i.i.d. optima and the greedy optima of one pair, from one binning and
    one gather of the few bins the scans need (:func:`iid_optima`, :func:`greedy_optima`).

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Validated float64 distributions.
    iid_ks, greedy_ks : sequence of int
        Numbers of drafts of each law (greedy: k at most the number of tokens with q > 0).

    Returns
    -------
    one_minus_tv : float
        :math:`\sum_x \min(p, q)`.
    iid : dict of int to float
        ``k -> value``.
    greedy : dict of int to float
        ``k -> value``.

    Examples
    --------
    >>> import numpy as np
    >>> tv, iid, greedy = all_optima(np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), [2], [2])
    >>> round(tv, 12), round(iid[2], 12), round(greedy[2], 12)
    (0.7, 0.86, 0.9)
    """
    b = _binned if _binned is not None else _Binned(p, q)
    scan = np.zeros(b.Pc.size, dtype=bool)
    bounds = _iid_bounds(b, list(iid_ks))
    for _, cand in bounds.values():
        scan |= cand
    consts = _greedy_constants(p, q, greedy_ks) if greedy_ks else {}
    visit = np.zeros(b.Pc.size, dtype=bool)
    for _, rest, _ in consts.values():
        if rest > 0:
            _want(b, visit, 1.0 / rest)
    sorted_tokens, bin_tokens = b.gather(scan, visit)
    iid = {k: min(1.0, 1.0 + v) for k, v in _iid_interior(b, sorted_tokens, bounds).items()}
    greedy = {}
    for k, (G, rest, pG) in consts.items():
        if rest <= 0:  # q lives on G: the last draft has no law; every p-mass on G is accepted
            greedy[k] = min(1.0, pG)
            continue
        c = 1.0 / rest
        total = _sum_min_scaled(b, c, bin_tokens) - float(np.minimum(p[G], c * q[G]).sum())
        greedy[k] = min(1.0, pG + total)
    return one_minus_tv(p, q), iid, greedy


def one_minus_tv(p: np.ndarray, q: np.ndarray) -> float:
    r""":math:`\sum_x \min(p(x), q(x)) = 1 - d_{TV}(p, q)`.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Distributions.

    Returns
    -------
    float
        The single-draft acceptance.

    Examples
    --------
    >>> import numpy as np
    >>> round(one_minus_tv(np.array([0.5, 0.5]), np.array([0.75, 0.25])), 12)
    0.75
    """
    return float(np.minimum(p, q).sum())


def columns_for(spec: SolverSpec, *, logged: bool = False) -> list[str]:
    """The quantity columns :func:`solve_rows` (or :func:`solve_logged`) writes for ``spec``, in order.

    Parameters
    ----------
    spec : SolverSpec
        What is computed.
    logged : bool
        Columns of logged top-K input (certified ``_lo`` / ``_hi`` intervals) instead.

    Returns
    -------
    list of str
        Column names.
    """

    if logged:
        cols = ["one_minus_tv_lo", "one_minus_tv_hi"]
        for law in ("iid", "greedy"):
            if law in spec.laws:
                for k in spec.ks:
                    cols += [f"opt_{law}_k{k}_lo", f"opt_{law}_k{k}_hi"]
        return cols
    cols = ["one_minus_tv"]
    for law in spec.laws:
        for k in spec.ks:
            cols.append(f"opt_{_SHORT[law]}_k{k}")
            if law == "without_replacement":
                cols.append(f"opt_wor_k{k}_err")
    for name in spec.verifiers:
        for law in spec.laws:
            if _applies(name, law):
                for k in spec.ks:
                    base = f"{name}_{_SHORT[law]}_k{k}"
                    cols += [base, f"{base}_lo", f"{base}_hi"] if _needs_mc(name, law) else [base]
    return cols


def _probe_law(law: str, k: int):
    import otspec

    q = np.full(k + 1, 1.0 / (k + 1))
    return {"iid": otspec.iid, "without_replacement": otspec.without_replacement, "greedy": otspec.greedy}[law](q, k)


@functools.cache
def _applies(name: str, law: str) -> bool:
    """Whether verifier ``name`` applies to draft law ``law`` (for every k >= 2)."""
    from otspec.verifiers import by_name

    return bool(by_name(name).applies_to(_probe_law(law, 2)))


@functools.cache
def _needs_mc(name: str, law: str) -> bool:
    """Whether the verifier has no closed form for the law (then it is Monte Carlo at large V, and
    its columns carry the estimate's interval)."""
    from otspec.errors import UnsupportedMethodError
    from otspec.verifiers import by_name

    v, probe = by_name(name), _probe_law(law, 2)
    if not v.applies_to(probe):
        return False
    try:
        v.acceptance(np.full(3, 1.0 / 3), probe, method="closed_form")
    except UnsupportedMethodError:
        return True
    return False


def solve_position(p: np.ndarray, q: np.ndarray, spec: SolverSpec, *, doc: int = 0, position: int = 0) -> dict[str, float]:
    """Every quantity of :func:`columns_for` at one position.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Float64 target and draft distributions (summing to 1 within 1e-9).
    spec : SolverSpec
        What to compute.
    doc, position : int
        Document index and position, seeding Monte Carlo estimates (engine-independent).

    Returns
    -------
    dict of str to float
        Column name -> value.
    """
    import otspec
    from otspec.verifiers import by_name

    ks = spec.ks
    support = int(np.count_nonzero(q))
    ok = [k for k in ks if k <= support]  # greedy and without-replacement drafts need k distinct tokens
    tv, iid, greedy = all_optima(p, q, ks if "iid" in spec.laws else (), ok if "greedy" in spec.laws else ())
    out: dict[str, float] = {"one_minus_tv": tv}
    for law in spec.laws:
        if law == "iid":
            for k in ks:
                out[f"opt_iid_k{k}"] = iid[k]
        elif law == "greedy":
            for k in ks:
                out[f"opt_greedy_k{k}"] = greedy.get(k, np.nan)
        else:
            for k in ks:
                if k > support:
                    out[f"opt_wor_k{k}"] = out[f"opt_wor_k{k}_err"] = np.nan
                    continue
                r = otspec.optimal_acceptance(p, otspec.without_replacement(q, k), method="prefix")
                out[f"opt_wor_k{k}"] = float(r.value)
                out[f"opt_wor_k{k}_err"] = float(r.error_bound)
    makers = {"iid": otspec.iid, "without_replacement": otspec.without_replacement, "greedy": otspec.greedy}
    for name in spec.verifiers:
        ver = by_name(name)
        for law in spec.laws:
            if not _applies(name, law):
                continue
            mc = _needs_mc(name, law)
            for k in ks:
                base = f"{name}_{_SHORT[law]}_k{k}"
                if law != "iid" and k > support:
                    out[base] = np.nan
                    if mc:
                        out[f"{base}_lo"] = out[f"{base}_hi"] = np.nan
                    continue
                rng = np.random.default_rng([spec.seed, doc, position, k])
                est = ver.acceptance(p, makers[law](q, k), n_samples=spec.mc_samples, rng=rng)
                out[base] = float(est.value)
                if mc:
                    out[f"{base}_lo"], out[f"{base}_hi"] = float(est.ci_low), float(est.ci_high)
    return out


def solve_rows(P: np.ndarray, Q: np.ndarray, spec: SolverSpec, *, docs: Any = None, positions: Any = None) -> dict[str, np.ndarray]:
    """:func:`solve_position` for every row: the per-batch function of both engines.

    Parameters
    ----------
    P, Q : ndarray, shape (n, V)
        Float64 target and draft distributions, one row per position.
    spec : SolverSpec
        What to compute.
    docs, positions : array_like of int, shape (n,), optional
        Document index and position of each row (seed Monte Carlo; default 0 and the row index).

    Returns
    -------
    dict of str to ndarray
        Column name -> ``(n,)`` float64 values, in :func:`columns_for` order.

    Examples
    --------
    >>> import numpy as np
    >>> P = np.array([[0.5, 0.3, 0.2]]); Q = np.array([[0.2, 0.3, 0.5]])
    >>> cols = solve_rows(P, Q, SolverSpec(laws=("iid",), ks=(2,), verifiers=()))
    >>> {k: round(float(v[0]), 6) for k, v in cols.items()}
    {'one_minus_tv': 0.7, 'opt_iid_k2': 0.86}
    """
    n = P.shape[0]
    docs = np.zeros(n, dtype=np.int64) if docs is None else np.asarray(docs)
    positions = np.arange(n) if positions is None else np.asarray(positions)
    names = columns_for(spec)
    out = {c: np.empty(n) for c in names}
    with _one_blas_thread():
        for i in range(n):
            row = solve_position(P[i], Q[i], spec, doc=int(docs[i]), position=int(positions[i]))
            for c in names:
                out[c][i] = row[c]
    return out


def _one_blas_thread() -> Any:
    """One BLAS thread while solving (threadpoolctl, part of the ``corpus`` extra).

    The verifiers' closed forms take dot products of V-vectors; a multi-threaded BLAS makes each
    one wait for its other threads (measured 20-30x slower on a loaded 2-core machine), and a
    result could depend on the thread count. Every engine solves with one BLAS thread per process,
    so the numbers are the same whatever runs them. Without threadpoolctl, a no-op.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - the corpus extra installs it
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


def solve_logged(records: Sequence[Any], spec: SolverSpec) -> dict[str, np.ndarray]:
    """Certified intervals (:func:`otspec.truncation.certified_interval`) for logged top-K steps.

    Parameters
    ----------
    records : sequence of otspec.truncation.TruncatedPair
        One validated log per position.
    spec : SolverSpec
        Its ``iid`` and ``greedy`` laws and ``ks`` are used (without replacement has no certified
        interval; verifiers need full distributions).

    Returns
    -------
    dict of str to ndarray
        ``columns_for(spec, logged=True)`` -> ``(n,)`` values.
    """
    from otspec.truncation import certified_interval

    names = columns_for(spec, logged=True)
    out = {c: np.empty(len(records)) for c in names}
    for i, t in enumerate(records):
        iv = certified_interval(t, "iid", 1)
        out["one_minus_tv_lo"][i], out["one_minus_tv_hi"][i] = iv.low, iv.high
        for law in ("iid", "greedy"):
            if law not in spec.laws:
                continue
            for k in spec.ks:
                if law == "greedy" and k - 1 > t.q_ids.size:
                    lo = hi = np.nan
                else:
                    iv = certified_interval(t, law, k)
                    lo, hi = iv.low, iv.high
                out[f"opt_{law}_k{k}_lo"][i], out[f"opt_{law}_k{k}_hi"][i] = lo, hi
    return out
