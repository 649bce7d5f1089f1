r"""The optimal verifier for drafts without replacement on small vocabularies, by the Gale transport.

A selection rule for drafts without replacement is a transport plan from draft *sets* to tokens:
row U carries :math:`P(D = U)`, column y the selection law :math:`r(y)`, and row U may only send mass
to its own tokens. For the closed-form optimal law :math:`r^*`
(:mod:`~otspec.verifiers.step._wor_selection`, in the base polytope of drafts without replacement)
such a plan exists by Gale's supply-demand theorem, and :math:`\sum_y \min(p, r^*) =
\alpha^*_{WOR}`. This module finds one by a **maximum flow** (Dinic's algorithm: source -> set U with
capacity :math:`P(D = U)`, U -> y for y in U unbounded, y -> sink with capacity :math:`r^*(y)`): a
combinatorial algorithm with no tolerance, so it works on degenerate faces (ties, tight sets other
than A) where a fitted Luce rule (``optimal_wor``) or an LP solved to a tolerance can stop short.
Float rounding leaves a flow of at least :math:`1 - \delta` with :math:`\delta` of the order of
1e-16; the accept step uses the plan's own column sums :math:`\tilde r`, so the verifier is exactly
lossless and accepts :math:`\sum_y \min(p, \tilde r) \ge \alpha^*_{WOR} - \delta`.

It needs the draft sets enumerated (``law.enumerate_sets()``), so it is a small-V reference (not
registered in :data:`otspec.verifiers.ALL`): ``wor_transport.kernel(p, law)``,
``wor_transport.sample(...)``; ``docs/wor_iid.rst`` relates it to ``optimal_wor`` and ``wor_iid``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from otspec.errors import ProblemTooLargeError
from otspec.laws import DraftLaw
from otspec.verifiers.base import Verifier
from otspec.verifiers.schedule import AcceptSchedule, accept_ratio, residual
from otspec.verifiers.step._wor_selection import wor_selection

__all__ = ["GaleTransport", "WorTransportVerifier", "gale_transport", "wor_transport"]

#: Most draft sets the transport is built for (a pure-Python max flow).
MAX_SETS = 20_000


@dataclass(frozen=True, eq=False)
class GaleTransport:
    """A selection plan from draft sets to tokens.

    Attributes
    ----------
    sets : ndarray of int64, shape (S, k)
        The draft sets (``-1`` padded), as ``DraftLaw.enumerate_sets`` returns them.
    weights : ndarray, shape (S,)
        :math:`P(D = U)`.
    plan : ndarray, shape (S, V)
        Mass sent from set U to token y (zero off U); row sums at most ``weights``.
    flow : float
        Total mass moved (1 up to rounding when the target law is feasible).
    """

    sets: np.ndarray
    weights: np.ndarray
    plan: np.ndarray
    flow: float


class _Dinic:
    """Dinic's maximum flow on float capacities (exact comparisons: no tolerance)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.head: list[list[int]] = [[] for _ in range(n)]
        self.to: list[int] = []
        self.cap: list[float] = []

    def add(self, a: int, b: int, c: float) -> int:
        self.head[a].append(len(self.to))
        self.to.append(b)
        self.cap.append(c)
        self.head[b].append(len(self.to))
        self.to.append(a)
        self.cap.append(0.0)
        return len(self.to) - 2

    def _levels(self, s: int, t: int) -> list[int] | None:
        level = [-1] * self.n
        level[s] = 0
        dq = deque([s])
        while dq:
            a = dq.popleft()
            for e in self.head[a]:
                if self.cap[e] > 0.0 and level[self.to[e]] < 0:
                    level[self.to[e]] = level[a] + 1
                    dq.append(self.to[e])
        return level if level[t] >= 0 else None

    def _push(self, a: int, t: int, f: float, level: list[int], it: list[int]) -> float:
        if a == t:
            return f
        while it[a] < len(self.head[a]):
            e = self.head[a][it[a]]
            b = self.to[e]
            if self.cap[e] > 0.0 and level[b] == level[a] + 1:
                d = self._push(b, t, min(f, self.cap[e]), level, it)
                if d > 0.0:
                    self.cap[e] -= d
                    self.cap[e ^ 1] += d
                    return d
            it[a] += 1
        return 0.0

    def max_flow(self, s: int, t: int) -> float:
        total = 0.0
        while (level := self._levels(s, t)) is not None:
            it = [0] * self.n
            while (f := self._push(s, t, float("inf"), level, it)) > 0.0:
                total += f
        return total


def gale_transport(r: np.ndarray, sets: np.ndarray, weights: np.ndarray) -> GaleTransport:
    """A transport plan from draft sets (mass ``weights``) to tokens (mass ``r``), each set sending
    only to its own tokens, by a maximum flow.

    Parameters
    ----------
    r : ndarray, shape (V,)
        The target selection law (sums to 1).
    sets : ndarray of int64, shape (S, k)
        Draft sets, ``-1`` padded (``DraftLaw.enumerate_sets``).
    weights : ndarray, shape (S,)
        Their probabilities.

    Returns
    -------
    GaleTransport
        The plan and the mass it moves (1 up to rounding exactly when ``r`` is the law of some
        selection rule, by Gale's theorem).
    """
    S, V = sets.shape[0], r.shape[0]
    src, sink = S + V, S + V + 1
    g = _Dinic(S + V + 2)
    mid = []
    for i in range(S):
        g.add(src, i, float(weights[i]))
        for y in sets[i]:
            if y >= 0:
                mid.append((i, int(y), g.add(i, S + int(y), float("inf"))))
    for y in range(V):
        if r[y] > 0.0:
            g.add(S + y, sink, float(r[y]))
    flow = g.max_flow(src, sink)
    plan = np.zeros((S, V))
    for i, y, e in mid:
        plan[i, y] = g.cap[e ^ 1]
    return GaleTransport(sets=sets, weights=np.asarray(weights, dtype=np.float64), plan=plan, flow=flow)


@dataclass(frozen=True, eq=False)
class _State:
    transport: GaleTransport
    index: dict
    beta: np.ndarray  # (S, V) selection law given each set
    r: np.ndarray  # the plan's selection law (column sums)
    alpha_star: float


class WorTransportVerifier(Verifier):
    r"""The optimal verifier for drafts without replacement on enumerable laws, by a max-flow transport.

    Examples
    --------
    >>> import numpy as np, otspec
    >>> from otspec.verifiers.step.wor_transport import wor_transport
    >>> p, q = np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.4, 0.3, 0.2, 0.1])
    >>> law = otspec.without_replacement(q, 2)
    >>> a = wor_transport.acceptance(p, law).value
    >>> bool(abs(a - otspec.optimal_acceptance(p, law, method="lp").value) < 1e-9)
    True
    """

    name = "wor_transport"
    optimal = True
    monte_carlo_ok = False
    rule = "the Gale transport is built for drafts sampled without replacement (otspec.without_replacement)"
    fix = "use optimal_iid for i.i.d. drafts, greedy_optimal for greedy drafts, or optimal_plan on small laws"
    reference = "otspec: the Gale transport of the optimal WOR selection law, by maximum flow (docs/wor_iid.rst)"

    def applies_to(self, law: DraftLaw) -> bool:
        return law.without_replacement_q is not None

    def _state(self, p: np.ndarray, law: DraftLaw) -> _State:
        def build() -> _State:
            sets, weights = law.enumerate_sets()
            if sets.shape[0] > MAX_SETS:
                raise ProblemTooLargeError(
                    f"verifier {self.name!r} builds a max flow over the draft sets and {law!r} has {sets.shape[0]:,} "
                    f"(limit {MAX_SETS:,}); use wor_iid or optimal_wor"
                )
            sel = wor_selection(p, np.asarray(law.q, dtype=np.float64), law.k)
            tr = gale_transport(sel.r, sets, weights)
            out = tr.plan.sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                beta = np.where(out[:, None] > 0, tr.plan / np.where(out > 0, out, 1.0)[:, None], 0.0)
            # a set the flow left short (rounding) keeps its missing mass on its first token
            short = out < tr.weights
            first = sets[:, 0]
            beta[short, first[short]] += 1.0 - beta[short].sum(axis=1)
            r = tr.weights @ beta
            index = {tuple(sorted(int(x) for x in s if x >= 0)): i for i, s in enumerate(sets)}
            return _State(transport=tr, index=index, beta=beta, r=r, alpha_star=sel.alpha)

        return law.cached("wor_transport.state", p, build)

    def _prepare(self, p, law):
        self._state(p, law)

    def _schedule(self, p, law, tuples) -> AcceptSchedule:
        st = self._state(p, law)
        rows = np.array([st.index[tuple(sorted(int(x) for x in t))] for t in tuples], dtype=np.int64)
        sel = st.beta[rows[:, None], tuples]  # P(select x_j | set)
        mass = sel * accept_ratio(p[tuples], st.r[tuples])  # P(select x_j and keep it)
        before = np.concatenate([np.zeros((tuples.shape[0], 1)), np.cumsum(mass, axis=1)[:, :-1]], axis=1)
        left = 1.0 - before
        with np.errstate(divide="ignore", invalid="ignore"):
            acc = np.clip(np.where(left > 0, mass / np.where(left > 0, left, 1.0), 1.0), 0.0, 1.0)
        res, _ = residual(p, st.r)
        return AcceptSchedule(tokens=tuples, accept=acc, residual=res)


wor_transport = WorTransportVerifier()
