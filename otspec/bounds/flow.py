r"""Back end ``method="flow"``: the membership problem (:mod:`otspec.bounds.membership`) as the
two-marginal transport from sets to tokens with cost :math:`1[y \notin s]`, solved exactly by POT's
network simplex (``ot.emd``): the fast path for moderately sized laws (dense: sets x tokens). POT
is imported when this method runs."""

from __future__ import annotations

import numpy as np

from otspec._docs import fill_doc
from otspec.bounds.membership import PlanAnswer, membership_pairs

__all__ = ["solve"]


@fill_doc
def solve(p: np.ndarray, sets: np.ndarray, weights: np.ndarray) -> PlanAnswer:
    """Exact transport with POT's network simplex.

    The dense transport from sets to tokens with cost :math:`1[y \\notin s]`; its optimum sends
    :math:`\\alpha^*` at cost 0. ``p`` is rescaled to the sets' total (POT demands equal masses).

    Parameters
    ----------
    {backend_args}

    Returns
    -------
    PlanAnswer
        The plan's mass on each member pair (zeros on failure), POT's token potentials, whether
        POT's result code is optimal with no warning, and POT's warning (or ``"optimal"``).
    """
    import ot

    S, V = sets.shape[0], p.shape[0]
    pair_set, pair_token, _ = membership_pairs(sets)
    cost = np.ones((S, V))
    cost[pair_set, pair_token] = 0.0
    # numItermax: POT's default (1e5) silently returns a non-optimal plan on large instances
    # (docs/benchmarks.rst, tooling measurements); network simplex needs O(nodes * arcs) pivots at worst.
    iters = int(max(10 * S * V, 10_000_000))
    b = p / p.sum() * weights.sum()  # POT demands equal totals bit-for-bit; both are 1 +- 1e-9
    G, log = ot.emd(weights, b, cost, numItermax=iters, log=True)
    ok = log.get("result_code", 0) == 1 and not log.get("warning")
    w = G[pair_set, pair_token] if ok else np.zeros(pair_set.size)
    v = np.asarray(log.get("v", np.zeros(V)), dtype=np.float64)
    return PlanAnswer("flow", sets, weights, w, v, ok, str(log.get("warning") or "optimal"))
