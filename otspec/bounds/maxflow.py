r"""Exact sparse max-flow for the membership transport problem (OR-Tools ``SimpleMaxFlow``).

The tuple-level problem of :mod:`otspec.bounds.lp` is a max-flow on the network

.. math:: \text{source} \xrightarrow{Q(s)} s \xrightarrow{Q(s)} y \in s \xrightarrow{p(y)} \text{sink}

with one node per distinct draft set :math:`s` and per token :math:`y`. A flow is exactly a
feasible :math:`w(s, y)` (the flow on the middle arcs), so the max flow is :math:`\alpha^*`. The
middle arcs carry capacity :math:`Q(s)` instead of infinity: no flow through them can exceed the
set's inflow anyway, and a cut that severs middle arcs of a set costs at least :math:`Q(s)`, as much
as severing the set's source arc; so the tokens on the source side of *any* minimum cut form a set
:math:`H` with :math:`P(H) + 1 - Q(H^k) \le` the cut, i.e. an optimal dual cut (:doc:`math`, the
min-cut dual).

Integer scaling. OR-Tools takes int64 capacities. Every capacity is :math:`\lfloor x\, 2^N \rfloor`
with

.. math:: N = 63 - \lceil \log_2\big((k + 2)(1 + 10^{-8})\big) \rceil ,

so that the sum of *all* capacities in the network, :math:`\sum_s Q(s)(1 + |s|) + \sum_y p(y) \le
(k + 2)(1 + 10^{-8})` before scaling (sets have at most k tokens; both laws sum to 1 within the
validation tolerance), stays below :math:`2^{63}`: no sum the solver can form -- an excess, a flow
value, a cut -- can overflow, for any k (N = 61 for k = 1, 60 for k = 2..5, 59 for k = 6..13).
Flooring makes every capacity at most its real value, so the integer max flow divided by
:math:`2^N` is a feasible plan of the real problem: a certified **lower** bound. The min cut's
token set :math:`H` is re-evaluated in float64 from the law itself: an **upper** bound. Their
difference (at most the number of arcs in the cut times :math:`2^{-N}`, ~1e-13 in practice) is the
reported gap; :func:`otspec.bounds.lp.certify` downgrades the status if it exceeds the certificate
tolerance, as for every other method.

OR-Tools is an optional dependency (``pip install "otspec[maxflow]"``), imported only when this
method runs. It bundles its own HiGHS; importing it next to ``highspy`` in one process was checked
(both import orders, an LP solved before and after a max flow) and works, so no isolation is used.
"""

from __future__ import annotations

import importlib
import math

import numpy as np

from otspec.bounds.lp import membership_pairs

__all__ = ["solve_maxflow", "scale_bits", "require_ortools", "MAXFLOW_INSTALL", "maxflow_available", "BYTES_PER_ARC"]

#: How to install the optional max-flow dependency.
MAXFLOW_INSTALL = 'pip install "otspec[maxflow]"  (ortools)'

#: Peak bytes per network arc (OR-Tools' graph with its reverse arcs, our int64 arrays, the flows
#: read back), added to the enumeration's own estimate. Measured: 1.68 GB whole-process peak at
#: 1e7 LP columns (1.5e7 arcs, i.i.d. V = 3163, k = 2), ~110 B per arc *including* the enumeration
#: (:doc:`benchmarks`); the estimate (enumeration + 100 B/arc) is 2.9 GB there.
BYTES_PER_ARC = 100


def maxflow_available() -> bool:
    """True when OR-Tools' max-flow module can be imported."""
    try:
        importlib.import_module("ortools.graph.python.max_flow")
    except ImportError:
        return False
    return True


def require_ortools():
    """OR-Tools' max_flow module, or an ImportError naming the extra to install."""
    try:
        max_flow = importlib.import_module("ortools.graph.python.max_flow")
    except ImportError as exc:
        raise ImportError(f"method='maxflow' needs OR-Tools, which is not installed; install the maxflow extra: {MAXFLOW_INSTALL}") from exc
    return max_flow


def scale_bits(k: int) -> int:
    r"""The N of the :math:`2^N` capacity scaling for sets of at most ``k`` tokens (module docstring).

    >>> [scale_bits(k) for k in (1, 2, 5, 6, 13, 14, 29, 30)]
    [61, 60, 60, 59, 59, 58, 58, 57]
    """
    return 63 - math.ceil(math.log2((int(k) + 2) * (1.0 + 1e-8)))


def solve_maxflow(p: np.ndarray, sets: np.ndarray, weights: np.ndarray):
    """Solve the membership problem as an integer max-flow.

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target law.
    sets, weights : ndarray, shapes (S, k) and (S,)
        Draft sets (``-1`` padded rows) and their probabilities, from ``law.enumerate_sets()``.

    Returns
    -------
    w : ndarray, shape (n_pairs,)
        Flow on each (set, token) arc in :func:`~otspec.bounds.lp.membership_pairs` order.
    cut_indicator : ndarray, shape (V,)
        1.0 for the tokens on the source side of the min cut (the dual set H), else 0.0; passed
        to :func:`~otspec.bounds.lp.certify` as token scores, whose first prefix scan is then H.
    ok : bool
        The solver reported an optimal flow.
    info : str
        Solver status, scaling and integer flow value.
    """
    max_flow = require_ortools()
    S, V = sets.shape[0], p.shape[0]
    N = scale_bits(sets.shape[1])
    scale = float(2**N)
    pair_set, pair_token, _ = membership_pairs(sets)
    # x * 2^N is exact in float64 (a power-of-two scaling); the cast to int64 floors non-negatives.
    cap_set = np.floor(np.asarray(weights, dtype=np.float64) * scale).astype(np.int64)
    cap_tok = np.floor(np.asarray(p, dtype=np.float64) * scale).astype(np.int64)
    source, sink = 0, S + V + 1
    set_node = 1 + np.arange(S, dtype=np.int64)
    tok_node = 1 + S + np.arange(V, dtype=np.int64)
    tails = np.concatenate([np.full(S, source, dtype=np.int64), set_node[pair_set], tok_node])
    heads = np.concatenate([set_node, tok_node[pair_token], np.full(V, sink, dtype=np.int64)])
    caps = np.concatenate([cap_set, cap_set[pair_set], cap_tok])
    del cap_set, cap_tok
    smf = max_flow.SimpleMaxFlow()
    arcs = smf.add_arcs_with_capacity(tails, heads, caps)
    del tails, heads, caps
    status = smf.solve(source, sink)
    ok = status == smf.OPTIMAL
    if not ok:
        return np.zeros(pair_set.size), np.zeros(V), False, f"ortools max_flow status {status}"
    mid = np.asarray(arcs)[S : S + pair_set.size]
    w = np.asarray(smf.flows(mid), dtype=np.float64) / scale
    side = np.asarray(smf.get_source_side_min_cut(), dtype=np.int64)
    side = side[(side > S) & (side <= S + V)] - (S + 1)
    indicator = np.zeros(V)
    indicator[side] = 1.0
    return w, indicator, True, f"ortools max_flow optimal (capacities floor(x * 2^{N}), integer flow {smf.optimal_flow()})"
