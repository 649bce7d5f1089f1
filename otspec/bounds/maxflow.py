r"""Exact sparse max-flow for the membership transport problem (OR-Tools ``SimpleMaxFlow``).

Back end ``method="maxflow"``. The membership problem of :mod:`otspec.bounds.membership` is a max-flow on the network

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
reported gap; :func:`otspec.bounds.certificate.certify` downgrades the status if it exceeds the certificate
tolerance, as for every other method.

Presolve. Before the solver runs, :func:`peel_abundant_tokens` routes every draft set that contains
an *abundant* token (one whose capacity covers all the sets containing it) entirely to that token,
repeatedly; this is exact (some maximum flow does it) and the rest of the network keeps its own
minimum cut, so the solver sees a smaller network (a third fewer arcs on the i.i.d. benchmark
laws) and the flow, the cut and the certificate are those of the whole problem.

OR-Tools is an optional dependency (``pip install "otspec[maxflow]"``), imported only when this
method runs. It bundles its own HiGHS; importing it next to ``highspy`` in one process was checked
(both import orders, an LP solved before and after a max flow) and works, so no isolation is used.
"""

from __future__ import annotations

import importlib
import math

import numpy as np

from otspec._docs import fill_doc
from otspec._optional import require
from otspec.bounds.membership import PlanAnswer, membership_pairs

__all__ = ["solve", "peel_abundant_tokens", "pairs32", "scale_bits", "require_ortools", "MAXFLOW_INSTALL", "maxflow_available"]

#: How to install the optional max-flow dependency.
MAXFLOW_INSTALL = 'pip install "otspec[maxflow]"  (ortools)'


def maxflow_available() -> bool:
    """True when OR-Tools' max-flow module can be imported.

    Returns
    -------
    bool
        Whether ``method="maxflow"`` can run (``method="auto"`` uses it above the dense limits).
    """
    try:
        importlib.import_module("ortools.graph.python.max_flow")
    except ImportError:
        return False
    return True


def require_ortools():
    """OR-Tools' max_flow module, or an ImportError naming the extra to install.

    Returns
    -------
    module
        ``ortools.graph.python.max_flow``.

    Raises
    ------
    ImportError
        If OR-Tools is not installed (the message has the install command).
    """
    return require("ortools.graph.python.max_flow", "maxflow", needed_by="method='maxflow' (OR-Tools)")


def scale_bits(k: int) -> int:
    r"""The N of the :math:`2^N` capacity scaling for sets of at most ``k`` tokens (module docstring).

    The largest N with :math:`(k + 2)\, 2^N < 2^{63}` (with a relative margin of 1e-8), so no
    integer capacity or flow sum on an augmenting path overflows int64.

    Parameters
    ----------
    k : int
        Largest number of distinct tokens in a draft set.

    Returns
    -------
    int
        :math:`63 - \lceil \log_2((k + 2)(1 + 10^{-8})) \rceil`.

    Examples
    --------
    >>> [scale_bits(k) for k in (1, 2, 5, 6, 13, 14, 29, 30)]
    [61, 60, 60, 59, 59, 58, 58, 57]
    """
    return 63 - math.ceil(math.log2((int(k) + 2) * (1.0 + 1e-8)))


#: Peeling stops when a round removes fewer than this fraction of the remaining middle arcs.
_PEEL_MIN_GAIN = 0.02


def peel_abundant_tokens(pair_set: np.ndarray, pair_token: np.ndarray, cap_set: np.ndarray, cap_tok: np.ndarray):
    r"""Exact presolve: route whole draft sets to tokens that can absorb every set containing them.

    A live token :math:`y` is *abundant* when :math:`c(y) \ge \sum_{s \ni y,\ s \text{ live}} c(s)`
    (integer capacities; tested in float64 with a margin that makes the test conservative, so
    exact ties may be left to the solver). Then some maximum flow sends each live set containing :math:`y` entirely
    to :math:`y` (exchange argument: rerouting those sets to :math:`y` is feasible, saturates them and
    only frees capacity elsewhere). Such sets and the abundant tokens are removed, the demands are
    recomputed, and the rule is applied again. The remaining network is the original one restricted
    to the live sets and tokens (no live set contains a removed token), so

    * max flow = (sum of the removed sets' capacities) + (max flow of the remaining network), and
    * the tokens on the source side of any minimum cut of the remaining network form an optimal
      dual set :math:`H` of the whole problem: every removed set contains a removed token, which is
      outside :math:`H`, so the cut pays exactly the removed capacity on top of the remaining cut.

    Parameters
    ----------
    pair_set, pair_token : ndarray of int64, shape (n,)
        The middle arcs (set, token) in :func:`~otspec.bounds.membership.membership_pairs` order.
    cap_set, cap_tok : ndarray of int64, shapes (S,) and (V,)
        Integer capacities of the source and sink arcs.

    Returns
    -------
    live_set : ndarray of bool, shape (S,)
        Sets left for the solver.
    live_tok : ndarray of bool, shape (V,)
        Tokens left for the solver.
    fixed_pairs : ndarray of int64
        Indices of the middle arcs that carry a removed set's whole capacity (one per removed set).

    Examples
    --------
    Sets {0, 1} and {1} with capacities 3 and 2; token 1 (capacity 6) can absorb both, token 0
    (capacity 1) cannot; once both sets are routed to token 1 nothing is left for the solver:

    >>> ps, pt = np.array([0, 0, 1]), np.array([0, 1, 1])
    >>> live_set, live_tok, fixed = peel_abundant_tokens(ps, pt, np.array([3, 2]), np.array([1, 6]))
    >>> live_set.tolist(), live_tok.tolist(), fixed.tolist()
    ([False, False], [False, False], [1, 2])
    """
    S, V = cap_set.size, cap_tok.size
    live_set = np.ones(S, dtype=bool)
    live_tok = np.ones(V, dtype=bool)
    tok_f = cap_tok.astype(np.float64)
    set_f = cap_set.astype(np.float64)
    live_pairs = None  # all pairs (no index array until the first removal)
    ls, lt = pair_set, pair_token
    fixed = []
    while ls.size:
        # The integer demand sum_{s live, s ni y} c(s), bounded from above in float64: each term
        # and each partial sum is rounded at most once (relative 2^-53), so the float sum of n terms
        # is within (n + 1) 2^-53 of the exact one, relatively (terms are non-negative). A token is
        # taken as abundant only if it stays so with that margin doubled, and the float of its own
        # capacity rounded down: the test is conservative, so the integer rule holds exactly.
        demand = np.bincount(lt, weights=set_f[ls], minlength=V)
        margin = 1.0 + 2.0 * (ls.size + 2) * 2.0**-53
        abundant = live_tok & (tok_f * (1.0 - 2.0**-52) >= demand * margin)
        if not abundant.any():
            break
        hit = abundant[lt]
        hit_pairs = np.flatnonzero(hit) if live_pairs is None else live_pairs[hit]
        # One arc per removed set: its first arc to an abundant token (pairs are set-major, sorted).
        hs = pair_set[hit_pairs]
        first = np.ones(hs.size, dtype=bool)
        first[1:] = hs[1:] != hs[:-1]
        fixed.append(hit_pairs[first])
        live_set[hs[first]] = False
        live_tok &= ~abundant
        keep = live_set[ls]
        before = ls.size
        live_pairs = np.flatnonzero(keep) if live_pairs is None else live_pairs[keep]
        ls, lt = ls[keep], lt[keep]
        if before - ls.size < _PEEL_MIN_GAIN * before:
            break
    live_tok &= np.bincount(lt, minlength=V) > 0  # tokens with no live set
    fixed_pairs = np.concatenate(fixed) if fixed else np.zeros(0, dtype=np.int64)
    return live_set, live_tok, fixed_pairs


def pairs32(sets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(pair_set, pair_token)`` of :func:`~otspec.bounds.membership.membership_pairs`, same order,
    as int32 (what OR-Tools takes; half the memory of the int64 copies at 1e7 arcs).

    Parameters
    ----------
    sets : ndarray of int, shape (S, k)
        Draft sets, ``-1`` padded.

    Returns
    -------
    pair_set, pair_token : ndarray of int32 (int64 when an id does not fit in int32), shape (n,)
        The set and the token of each middle arc.
    """
    if max(sets.shape[0], int(sets.max(initial=0)) + 1) >= 2**31 - 2:
        pair_set, pair_token, _ = membership_pairs(sets)
        return pair_set, pair_token
    valid = sets >= 0
    pair_set = np.repeat(np.arange(sets.shape[0], dtype=np.int32), np.count_nonzero(valid, axis=1))
    pair_token = sets[valid].astype(np.int32)
    return pair_set, pair_token


# long-function: graph build, solve and flow read-back share large arrays; one pass keeps them unsplit
@fill_doc
def solve(p: np.ndarray, sets: np.ndarray, weights: np.ndarray) -> PlanAnswer:
    """Solve the membership problem as an integer max-flow.

    The network is first reduced by :func:`peel_abundant_tokens` (exact); OR-Tools solves what is
    left. The returned flows and cut are those of the whole network.

    Parameters
    ----------
    {backend_args}

    Returns
    -------
    PlanAnswer
        ``w``: the flow on each (set, token) arc in
        :func:`~otspec.bounds.membership.membership_pairs` order; ``token_duals``: 1.0 for the
        tokens on the source side of the min cut (the dual set H), else 0.0, so that the first
        prefix scan of :func:`~otspec.bounds.certificate.certify` is H; ``ok``: the solver
        reported an optimal flow; ``info``: solver status, scaling, presolve and integer flow value.
    """
    max_flow = require_ortools()
    V = p.shape[0]
    N = scale_bits(sets.shape[1])
    scale = float(2**N)
    pair_set, pair_token = pairs32(sets)
    # x * 2^N is exact in float64 (a power-of-two scaling); the cast to int64 floors non-negatives.
    cap_set = (np.asarray(weights, dtype=np.float64) * scale).astype(np.int64)
    cap_tok = (np.asarray(p, dtype=np.float64) * scale).astype(np.int64)
    live_set, live_tok, fixed_pairs = peel_abundant_tokens(pair_set, pair_token, cap_set, cap_tok)
    n_pairs = pair_set.size
    fixed_cap = cap_set[pair_set[fixed_pairs]]
    fixed_flow = int(fixed_cap.sum())
    indicator = np.zeros(V)
    set_ids, tok_ids = np.flatnonzero(live_set), np.flatnonzero(live_tok)
    S1, V1 = set_ids.size, tok_ids.size
    peeled = f"presolve fixed {fixed_pairs.size:,} of {sets.shape[0]:,} sets"
    if S1 == 0:  # everything was routed by the presolve: the empty cut is optimal
        w = np.zeros(n_pairs)
        w[fixed_pairs] = fixed_cap / scale
        info = f"ortools max_flow not needed ({peeled}; capacities floor(x * 2^{N}), integer flow {fixed_flow})"
        return PlanAnswer("maxflow", sets, weights, w, indicator, True, info)
    # Nodes: source 0, live sets 1..S1, live tokens S1+1..S1+V1, sink S1+V1+1 (int32, as OR-Tools takes).
    set_node = np.zeros(live_set.size, dtype=np.int32)
    set_node[set_ids] = np.arange(1, S1 + 1, dtype=np.int32)
    tok_node = np.zeros(V, dtype=np.int32)
    tok_node[tok_ids] = np.arange(S1 + 1, S1 + V1 + 1, dtype=np.int32)
    source, sink = 0, S1 + V1 + 1
    mid = np.flatnonzero(live_set[pair_set])
    n_mid = mid.size
    n_arcs = S1 + n_mid + V1
    tails = np.empty(n_arcs, dtype=np.int32)
    heads = np.empty(n_arcs, dtype=np.int32)
    caps = np.empty(n_arcs, dtype=np.int64)
    tails[:S1] = source
    heads[:S1] = set_node[set_ids]
    caps[:S1] = cap_set[set_ids]
    ms = pair_set[mid]
    tails[S1 : S1 + n_mid] = set_node[ms]
    caps[S1 : S1 + n_mid] = cap_set[ms]
    del ms, pair_set, set_node
    heads[S1 : S1 + n_mid] = tok_node[pair_token[mid]]
    del pair_token
    tails[S1 + n_mid :] = tok_node[tok_ids]
    heads[S1 + n_mid :] = sink
    caps[S1 + n_mid :] = cap_tok[tok_ids]
    # OR-Tools solves the reversed network (every arc turned round, from the sink to the source):
    # the same flows and cuts, and its push-relabel did ~20% less work on it at 1e7 LP columns
    # (5.7 s vs 7.2 s CPU, median of 3; the same at 1e6).
    smf = max_flow.SimpleMaxFlow()
    mid_arcs = np.asarray(smf.add_arcs_with_capacity(heads, tails, caps), dtype=np.int32)[S1 : S1 + n_mid].copy()
    del tails, heads, caps
    status = smf.solve(sink, source)
    if status != smf.OPTIMAL:
        return PlanAnswer("maxflow", sets, weights, np.zeros(n_pairs), np.zeros(V), False, f"ortools max_flow status {status}")
    w = np.zeros(n_pairs)
    w[fixed_pairs] = fixed_cap / scale
    w[mid] = np.asarray(smf.flows(mid_arcs), dtype=np.float64) / scale
    del mid_arcs, mid
    # H: the live tokens that cannot reach the sink in the residual network (the complement of the
    # minimal sink side is a minimum cut); in the reversed network that side is the source side.
    sink_side = np.asarray(smf.get_source_side_min_cut(), dtype=np.int64)
    reach = np.zeros(sink + 1, dtype=bool)
    reach[sink_side] = True
    indicator[tok_ids[~reach[S1 + 1 : S1 + V1 + 1]]] = 1.0
    info = f"ortools max_flow optimal (capacities floor(x * 2^{N}), {peeled}, integer flow {smf.optimal_flow() + fixed_flow})"
    return PlanAnswer("maxflow", sets, weights, w, indicator, True, info)
