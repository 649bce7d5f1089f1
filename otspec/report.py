r"""Reports that put verifiers next to the optimum: :func:`compare` and its row type.

This module sits above :mod:`otspec.bounds` and :mod:`otspec.verifiers` (it needs both); neither
imports it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from otspec import models as _models
from otspec import prefixes
from otspec.bounds import optimal_acceptance
from otspec.bounds.block import block_optimum
from otspec.bounds.sizing import lp_size
from otspec.bounds.tree import tree_optimum
from otspec.errors import ProblemTooLargeError, UnsupportedMethodError
from otspec.trees import check_tree_enumeration
from otspec.verifiers import ALL
from otspec.verifiers import block as _block
from otspec.verifiers import exact_match_chain as _exact_match_chain
from otspec.verifiers import token_chain as _token_chain
from otspec.verifiers import traversal as _traversal
from otspec.verifiers import tree as _tree
from otspec.verifiers import typical_chain as _typical_chain

__all__ = ["ComparisonRow", "ComparisonTable", "compare", "BlockReport", "block_report", "LP_AUTO_MAX_NONZEROS"]

#: ``block_report(lp="auto")`` solves an LP only below this many constraint-matrix nonzeros (a
#: few seconds on the project machine).
LP_AUTO_MAX_NONZEROS = 3_000_000


@dataclass(frozen=True)
class ComparisonRow:
    """One verifier's acceptance next to the optimum (a row of :func:`compare`).

    ``how`` is ``"closed_form"``, ``"kernel"``, ``"monte_carlo"`` or ``"unavailable"`` (the law is
    too large for a verifier that needs enumeration; numbers are NaN then).
    ``shortfall = optimum - acceptance`` (how far the verifier is from the optimum; not a
    duality gap); ``percent_of_optimum = 100 * acceptance / optimum``.

    Attributes
    ----------
    name : str
        The verifier's registry name.
    acceptance : float
        Its acceptance :math:`P(Y \\in \\{X_1..X_k\\})`.
    how : str
        How ``acceptance`` was obtained (see above).
    ci_low, ci_high : float
        99% confidence interval for Monte Carlo; equal to ``acceptance`` for exact answers.
    optimum : float
        The optimal acceptance :math:`\\alpha^*(p, Q)`.
    shortfall : float
        ``optimum - acceptance``.
    percent_of_optimum : float
        ``100 * acceptance / optimum``.
    lossless : bool
        Whether the verifier reproduces the target exactly (False for approximate ones).
    """

    name: str
    acceptance: float
    how: str
    ci_low: float
    ci_high: float
    optimum: float
    shortfall: float
    percent_of_optimum: float
    lossless: bool = True
    #: why the numbers are NaN (``how == "unavailable"``), else empty
    reason: str = ""


def _ci_text(row: ComparisonRow) -> str:
    """A row's interval as table text: ``exact`` for exact answers, ``-`` when unavailable."""
    if row.how in ("closed_form", "kernel"):
        return "exact"
    if math.isnan(row.ci_low):
        return "-"
    return f"[{row.ci_low:.6g}, {row.ci_high:.6g}]"


class ComparisonTable(list):
    """What :func:`compare` returns: a plain ``list`` of :class:`ComparisonRow`, shown as an HTML
    table in Jupyter (``_repr_html_``); its ``repr``, equality and indexing are the list's.
    """

    def _repr_html_(self) -> str:
        """The rows as an HTML table (Jupyter shows it in place of the ``repr``)."""
        from otspec._display import html_table

        header = ("verifier", "acceptance", "how", "99% CI", "optimum", "shortfall", "% of optimum", "lossless")
        rows = [
            (r.name, r.acceptance, r.how, _ci_text(r), r.optimum, f"{r.shortfall:.3g}", f"{r.percent_of_optimum:.4g}", r.lossless)
            for r in self
        ]
        notes = [f"{r.name}: {r.reason}" for r in self if r.reason]
        return html_table(header, rows, notes=notes)


def compare(p: Any, law: Any, *, optimum: float | None = None, n_samples: int = 2000, rng: Any = None, fit: bool = True) -> ComparisonTable:
    r"""Acceptance of every verifier in :data:`ALL` that applies to ``law``, against the optimum.

    ``optimum`` defaults to ``otspec.optimal_acceptance(p, law).value``. Each verifier's
    ``acceptance(p, law)`` is used (closed form, else exact kernel, else Monte Carlo with
    ``n_samples`` draft tuples and ``rng``, default ``numpy.random.default_rng(0)``); verifiers
    that need an enumerable law get a row with ``how="unavailable"`` and NaN values on large laws.

    Parameters
    ----------
    p : array_like, shape (V,)
        Target distribution.
    law : DraftLaw
        The draft law (:func:`otspec.iid` and friends).
    optimum : float, optional
        :math:`\alpha^*(p, Q)` if already known.
    n_samples : int
        Draft tuples for Monte Carlo estimates.
    rng : numpy.random.Generator, optional
        Generator for Monte Carlo estimates.
    fit : bool
        False: a verifier whose acceptance needs a costly fit on this law (it has a
        ``certified_bracket`` that is not None: ``optimal_wor`` at scale) gets a row with
        ``how="bracket"``, NaN acceptance and the certified interval in ``ci_low, ci_high``.
        A rule whose fit takes minutes at scale (``fit_in_compare = False``: Global Resolution,
        an approximation of ``optimal_iid``, whose exact value is in the same table) gets its
        bracket even when ``fit`` is True.

    Returns
    -------
    ComparisonTable
        A list of :class:`ComparisonRow`, one per applicable verifier of
        :data:`otspec.verifiers.ALL`, in table order (an HTML table in Jupyter).

    Raises
    ------
    OtspecInputError
        For a bad ``p`` or ``law`` (see :mod:`otspec.errors`).

    Examples
    --------
    >>> import otspec
    >>> rows = compare([0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 2))
    >>> [r.name for r in rows][:3]
    ['kseq', 'rrs', 'khisti']
    >>> all(r.shortfall > -1e-9 for r in rows if r.lossless)  # lossy rules may accept more
    True
    """
    if optimum is None:
        optimum = float(optimal_acceptance(p, law).value)
    optimum = float(optimum)
    rows = ComparisonTable()
    for v in ALL:
        if not v.applies_to(law):
            continue
        # a rule may ask to be bracketed even when fitting is on (its fit takes minutes at scale)
        fits = fit and getattr(v, "fit_in_compare", True)
        bracket = None if fits else getattr(v, "certified_bracket", lambda p, law: None)(p, law)
        if bracket is not None:  # the acceptance needs a fit (seconds to minutes): its certified interval
            lo, hi = bracket
            why = getattr(v, "bracket_reason", "not fitted (the acceptance needs a weight fit); the interval is certified")
            rows.append(ComparisonRow(v.name, math.nan, "bracket", lo, hi, optimum, math.nan, math.nan, v.lossless, why))
            continue
        try:
            est = v.acceptance(p, law, n_samples=n_samples, rng=rng)
        except ProblemTooLargeError as exc:
            nan = math.nan
            rows.append(ComparisonRow(v.name, nan, "unavailable", nan, nan, optimum, nan, nan, v.lossless, str(exc)))
            continue
        pct = 100.0 * est.value / optimum if optimum > 0 else math.nan
        rows.append(ComparisonRow(v.name, est.value, est.how, est.ci_low, est.ci_high, optimum, optimum - est.value, pct, v.lossless))
    return rows


@dataclass(frozen=True)
class BlockReport:
    """Rows of :func:`block_report`: one dict per quantity, and the computations skipped (with why).

    Each row has ``verifier``, ``how``, ``expected_accepted`` (:math:`E[\\tau]`),
    ``block_efficiency`` (:math:`E[\\tau] + 1`), ``status`` (results with a certificate) and
    ``seconds`` (wall time, ``None`` for quantities read off another result).

    Attributes
    ----------
    rows : list of dict
        One dict per verifier or optimum, in the order computed.
    skipped : list of str
        The computations left out, each with the reason (e.g. an LP above the size limit).
    """

    rows: list = field(default_factory=list)
    skipped: list = field(default_factory=list)

    def _repr_html_(self) -> str:
        """The rows as an HTML table, the skipped computations under it (Jupyter shows it in
        place of the ``repr``)."""
        from otspec._display import html_table

        header = ("verifier", "how", "E[tau]", "block efficiency", "status", "seconds")
        keys = ("verifier", "how", "expected_accepted", "block_efficiency", "status", "seconds")
        rows = [tuple(r.get(k) for k in keys) for r in self.rows]
        return html_table(header, rows, notes=[f"skipped: {s}" for s in self.skipped])


# long-function: the public entry: one row per verifier in a fixed order, with its docstring
def block_report(p_model: Any, q_model: Any, gamma: int, k: int = 1, *, lp: str = "auto", memory_cap: float | None = None) -> BlockReport:
    r"""Exact :math:`E[\tau]` of every chain (and, for ``k > 1``, tree) verifier next to the optima.

    Token and block verification (closed forms), the block optimum (closed form; the certified
    block LP when ``lp`` allows), the joint-coupling bound (not achievable), the engines' chain rules
    (strict exact match; typical acceptance, lossy, so it may exceed the optimum) and, with ``k > 1``,
    K-SEQ over sequences, recursive rejection over the tree (with and without replacement), their
    BV boosts, Traversal Verification (:mod:`otspec.verifiers.traversal`, with and without
    replacement) and the optimal tree verifier (select-then-BV, :doc:`trees`), the tree optimum by the
    node LP and, when small enough, the trie LPs. Enumerations that would not fit are refused before
    any work.

    Parameters
    ----------
    p_model, q_model : model
        Target and draft models (:mod:`otspec.models`).
    gamma, k : int
        Block length and number of drafted sequences.
    lp : {"auto", "yes", "no"}
        Solve the LPs: ``"auto"`` below :data:`LP_AUTO_MAX_NONZEROS` nonzeros, always, or never.
    memory_cap : float, optional
        Bytes (see :func:`otspec.block_optimum`).

    Returns
    -------
    BlockReport

    Raises
    ------
    ProblemTooLargeError
        If an exact enumeration (prefixes, or draft trees for ``k > 1``) is over its cap.
    UnsupportedMethodError
        If ``lp`` is not one of the three choices.

    Examples
    --------
    >>> from otspec import models
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> [round(r["expected_accepted"] * 9, 6) for r in block_report(p, q, 2, lp="no").rows]
    [10.0, 11.0, 11.0, 12.0, 5.777778, 18.0]
    """
    if lp not in ("auto", "yes", "no"):
        raise UnsupportedMethodError(f"lp must be 'auto', 'yes' or 'no' (got {lp!r})")
    p_model = _models.as_model(p_model, name="p_model")
    q_model = _models.as_model(q_model, V=p_model.V, name="q_model")
    V = p_model.V
    # Refuse before any work: the chain enumeration and (k > 1) the tree enumeration.
    prefixes.check_prefix_enumeration(V, gamma)
    if k > 1:
        check_tree_enumeration(V, k, gamma)
    rows: list[dict] = []
    skipped: list[str] = []

    def add(name: str, how: str, fn) -> None:
        t0 = time.perf_counter()
        val = fn()
        status = None
        if hasattr(val, "value"):
            status, val = val.status, val.value
        rows.append(
            {
                "verifier": name,
                "how": how,
                "expected_accepted": float(val),
                "block_efficiency": float(val) + 1.0,
                "status": status,
                "seconds": round(time.perf_counter() - t0, 4),
            }
        )

    def lp_wanted(nnz: int) -> bool:
        return lp == "yes" or (lp == "auto" and nnz <= LP_AUTO_MAX_NONZEROS)

    add("token", "closed form (product of mins)", lambda: _token_chain.expected_accepted(p_model, q_model, gamma, memory_cap=memory_cap))
    add("block", "closed form (sum of W)", lambda: _block.expected_accepted(p_model, q_model, gamma, memory_cap=memory_cap))
    opt = block_optimum(p_model, q_model, gamma, memory_cap=memory_cap)
    rows.append(
        {
            "verifier": "block optimum",
            "how": "closed form W",
            "expected_accepted": opt.value,
            "block_efficiency": opt.value + 1.0,
            "status": opt.status,
            "seconds": None,
        }
    )
    _, _, nnz = lp_size(V, gamma, [V**gamma] * (gamma + 1), V**gamma)
    if lp_wanted(nnz):
        add(
            "block optimum",
            "block LP (HiGHS, certified)",
            lambda: block_optimum(p_model, q_model, gamma, method="lp", memory_cap=memory_cap),
        )
    else:
        skipped.append(f"block LP ({nnz:,} nonzeros; pass --lp yes to force)")
    rows.append(
        {
            "verifier": "joint-coupling bound",
            "how": "sum_i (1 - TV of i-token joints); NOT achievable",
            "expected_accepted": opt.joint_coupling_bound,
            "block_efficiency": opt.joint_coupling_bound + 1.0,
            "status": None,
            "seconds": None,
        }
    )
    # the engines' chain rules: strict exact match (lossless) and typical acceptance (lossy: it can
    # exceed the optimum, so its row says so)
    add(
        "exact match (chain)",
        "closed form (product of p q)",
        lambda: _exact_match_chain.expected_accepted(p_model, q_model, gamma, memory_cap=memory_cap),
    )
    add(
        "typical (chain)",
        "closed form, vLLM defaults; LOSSY",
        lambda: _typical_chain.expected_accepted(p_model, q_model, gamma, memory_cap=memory_cap),
    )
    if k > 1:
        add(
            f"K-SEQ sequence (k={k})",
            "exact enumeration of draft trees",
            lambda: _tree.expected_accepted(p_model, q_model, k, gamma, verifier="kseq"),
        )
        add(
            f"RRS tree (k={k})",
            "exact enumeration, with replacement",
            lambda: _tree.expected_accepted(p_model, q_model, k, gamma, verifier="rrs"),
        )
        wor_ok = k <= int((q_model(()) > 0).sum())
        if wor_ok:
            add(
                f"RRS tree w/o replacement (k={k})",
                "exact enumeration",
                lambda: _tree.expected_accepted(p_model, q_model, k, gamma, verifier="rrs_wor"),
            )
        for rule, label in (("kseq_bv", "K-SEQ + BV boost"), ("rrs_bv", "RRS tree + BV boost")) + (
            (("rrs_wor_bv", "RRS w/o replacement + BV boost"),) if wor_ok else ()
        ):
            add(
                f"{label} (k={k})",
                "its own selection law, block-verified; exact enumeration",
                lambda rule=rule: _tree.expected_accepted(p_model, q_model, k, gamma, verifier=rule),
            )
        # Traversal Verification (Weng et al. 2025): exact, lossless, not optimal on trees
        add(
            f"Traversal Verification (k={k})",
            "leaf-to-root sequence-level RRS, with replacement; exact enumeration",
            lambda: _traversal.expected_accepted(p_model, q_model, k, gamma, replacement=True),
        )
        if wor_ok:
            add(
                f"Traversal Verification w/o replacement (k={k})",
                "leaf-to-root sequence-level RRS, distinct first tokens; exact enumeration",
                lambda: _traversal.expected_accepted(p_model, q_model, k, gamma, replacement=False),
            )
        if lp != "no":
            add(
                f"optimal tree verifier (k={k})",
                "select by the node LP's law (transport), then BV; exact enumeration",
                lambda: _tree.expected_accepted(p_model, q_model, k, gamma, verifier="optimal"),
            )
        if lp != "no":
            add(
                f"tree optimum (k={k}, iid)",
                "node LP, cutting planes (HiGHS, certified)",
                lambda: tree_optimum(p_model, q_model, k, gamma, method="node", memory_cap=memory_cap),
            )
        _, _, tnnz = lp_size(V, gamma, [min(k, V**t) * V ** (k * gamma) for t in range(gamma + 1)], V ** (k * gamma))
        if lp_wanted(tnnz):
            if wor_ok:
                add(
                    f"tree optimum (k={k}, w/o repl.)",
                    "tree LP (HiGHS, certified)",
                    lambda: tree_optimum(p_model, q_model, k, gamma, method="trie", replacement=False, memory_cap=memory_cap),
                )
        else:
            skipped.append(f"tree LP (up to {tnnz:,} nonzeros; pass --lp yes to force)")
    return BlockReport(rows=rows, skipped=skipped)
