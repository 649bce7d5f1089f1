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
    \mathrm{greedy}(q, k))` (Hu et al.'s sorted-prefix dual and greedy closed form, batched by
    :mod:`otspec.bounds.batched` without a full sort).
``opt_wor_k{k}``, ``opt_wor_k{k}_err``
    The without-replacement optimum (:func:`otspec.optimal_acceptance`, ``method="prefix"``: the
    exponential-race integral) and its certified error bound.
``{verifier}_{law}_k{k}``
    A verifier's acceptance from :meth:`otspec.verifiers.Verifier.acceptance` (closed forms for
    ``kseq`` and ``rrs`` at any V); where the only way is Monte Carlo (``rrs_wor`` at large V) the
    estimate comes with ``_lo`` / ``_hi`` columns (its 99% interval), drawn from a generator seeded
    by (seed, document, position) so that it too is engine-independent.
``{verifier}_{law}_k{k}_tv``
    For a lossy verifier (``approximate``, ``typical``, ``fuzzy``, ``lossy_optimal``): the exact
    :math:`d_{TV}(P, p)` of its output law :math:`P` to the target
    (:func:`otspec.verifiers.lossy.exact_tv_or_none`: closed form at any V where the rule has one,
    e.g. ``typical`` with i.i.d. or greedy drafts; else the exact kernel when it is no larger than
    the one ``acceptance`` builds); ``nan`` where neither is available.

For logged top-K traces (:func:`solve_logged`) the columns are certified intervals
``one_minus_tv_lo`` / ``_hi``, ``opt_iid_k{k}_lo`` / ``_hi`` and ``opt_greedy_k{k}_lo`` / ``_hi``
(:mod:`otspec.truncation`).

The optima themselves are the core's (:mod:`otspec.bounds.batched`); ``iid_optima``,
``greedy_optima``, ``all_optima`` and ``one_minus_tv`` are re-exported here for existing callers.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otspec.bounds.batched import all_optima, greedy_optima, iid_optima, one_minus_tv
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
                    if _lossy(name):
                        cols.append(f"{base}_tv")
    return cols


def _probe_law(law: str, k: int):
    from otspec.laws import by_kind

    q = np.full(k + 1, 1.0 / (k + 1))
    return by_kind(law).constructor(q, k)


@functools.cache
def _applies(name: str, law: str) -> bool:
    """Whether verifier ``name`` applies to draft law ``law`` (for every k >= 2)."""
    from otspec.verifiers import by_name

    return bool(by_name(name).applies_to(_probe_law(law, 2)))


@functools.cache
def _lossy(name: str) -> bool:
    """Whether verifier ``name`` is lossy (then its columns include the TV of its output law)."""
    from otspec.verifiers import by_name

    return not by_name(name).lossless


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
    out.update(_verifier_columns(p, q, spec, support, doc, position))
    return out


def _verifier_columns(p: np.ndarray, q: np.ndarray, spec: SolverSpec, support: int, doc: int, position: int) -> dict[str, float]:
    """The ``{verifier}_{law}_k{k}`` columns (with ``_lo`` / ``_hi`` and ``_tv`` where they apply) at one position."""
    from otspec.laws import by_kind
    from otspec.verifiers import by_name
    from otspec.verifiers.lossy import exact_tv_or_none

    out: dict[str, float] = {}
    laws = {law: by_kind(law) for law in spec.laws}  # each law's constructor and what it needs
    for name in spec.verifiers:
        ver = by_name(name)
        for law in spec.laws:
            if not _applies(name, law):
                continue
            mc, lossy = _needs_mc(name, law), _lossy(name)
            for k in spec.ks:
                base = f"{name}_{_SHORT[law]}_k{k}"
                if laws[law].k_within_support and k > support:
                    out[base] = np.nan
                    if mc:
                        out[f"{base}_lo"] = out[f"{base}_hi"] = np.nan
                    if lossy:
                        out[f"{base}_tv"] = np.nan
                    continue
                rng = np.random.default_rng([spec.seed, doc, position, k])
                draft_law = laws[law].constructor(q, k)
                est = ver.acceptance(p, draft_law, n_samples=spec.mc_samples, rng=rng)
                out[base] = float(est.value)
                if mc:
                    out[f"{base}_lo"], out[f"{base}_hi"] = float(est.ci_low), float(est.ci_high)
                if lossy:
                    tv = exact_tv_or_none(ver, p, draft_law)
                    out[f"{base}_tv"] = np.nan if tv is None else float(tv)
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
