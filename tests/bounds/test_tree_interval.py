"""The real-vocabulary tree interval: it contains the exact tree optimum on enumerable models
explored like real rounds (drafted trie + top-K children, optional expansion passes), closes on it
when every node is explored, and refuses bad input with a specific error."""

from __future__ import annotations

import numpy as np
import pytest

from otspec import TreeIntervalResult, models, prefixes, tree_interval, tree_optimum
from otspec.errors import InvalidDistributionError, InvalidDraftCountError, InvalidDraftsError, InvalidOptionError, ShapeMismatchError


def _pair(V: int, seed: int, family: int):
    if family == 0:
        p = models.dirichlet(V, concentration=1.0, seed=seed)
        return p, models.close_draft(p, noise=0.5, temperature=1.3, seed=seed + 1)
    p = models.dirichlet(V, concentration=0.3, seed=seed, zero_prob=0.2)
    return p, models.dirichlet(V, concentration=0.3, seed=seed + 7)


class _Round:
    """One drafted round of an enumerable pair: k i.i.d. drafts, their rows, and an expansion oracle."""

    def __init__(self, V: int, gamma: int, k: int, seed: int, family: int):
        self.p, self.q = _pair(V, seed, family)
        self.t = prefixes.enumerate_prefixes(self.p, self.q, gamma)
        self.V, self.gamma, self.k = V, gamma, k
        rng = np.random.default_rng(seed)
        X = np.zeros((k, gamma), dtype=np.int64)
        for j in range(k):
            idx = 0
            for d in range(gamma):
                y = int(rng.choice(V, p=self.t.q_cond[d][idx]))
                X[j, d], idx = y, idx * V + y
        self.X = X
        self.P = np.array([[self.rows(tuple(X[j, :d]))[0] for d in range(gamma)] for j in range(k)])
        self.Q = np.array([[self.rows(tuple(X[j, :d]))[1] for d in range(gamma)] for j in range(k)])
        self.calls: list = []

    def rows(self, u: tuple):
        idx = 0
        for a in u:
            idx = idx * self.V + a
        return self.t.p_cond[len(u)][idx], self.t.q_cond[len(u)][idx]

    def expand(self, nodes):
        self.calls.append(list(nodes))
        return np.array([self.rows(u)[0] for u in nodes]), np.array([self.rows(u)[1] for u in nodes])


# 20 seeded cases: gamma 2..3, V 3..8 (gamma 2) or 3..4 (gamma 3), k 1..3, K 1..2, 0..2 expansion
# levels, two model families
CASES = [
    (int(r.integers(3, 9 if g == 2 else 5)), g, int(r.integers(1, 4)), int(r.integers(1, 3)), int(r.integers(0, 3)), s)
    for s, r, g in ((s, np.random.default_rng(500 + s), 2 + s % 2) for s in range(20))
]


@pytest.mark.parametrize(("V", "gamma", "k", "K", "levels", "seed"), CASES)
def test_interval_contains_exact_tree_optimum(V, gamma, k, K, levels, seed):
    rnd = _Round(V, gamma, k, seed, seed % 2)
    r = tree_interval(rnd.X, rnd.P, rnd.Q, top_k=K, levels=levels, expand=rnd.expand)
    T = tree_optimum(rnd.p, rnd.q, k, gamma)
    assert abs(T.gap) < 1e-9  # certified to the dual (status aside: a slow cutting-plane case may say so)
    assert r.lower <= T.value + 1e-9
    assert T.value <= r.upper + 1e-9
    assert r.checks["membership"] <= 1e-12
    assert r.checks["lp_value"] <= r.upper + 1e-9  # weak duality bounds the LP's own value
    assert len(rnd.calls) == r.levels <= levels


@pytest.mark.parametrize(("V", "gamma", "k", "seed"), [(3, 2, 2, 0), (3, 3, 3, 1), (4, 2, 3, 2), (4, 3, 3, 3)])
def test_interval_closes_when_everything_is_explored(V, gamma, k, seed):
    rnd = _Round(V, gamma, k, seed, seed % 2)
    r = tree_interval(rnd.X, rnd.P, rnd.Q, top_k=V, levels=gamma, expand=rnd.expand)
    T = tree_optimum(rnd.p, rnd.q, k, gamma).value
    assert r.n_nodes == sum(V**d for d in range(gamma + 1)) - _unreachable(rnd)
    assert abs(r.upper - T) < 1e-7 and abs(r.lower - T) < 1e-7


def _unreachable(rnd: _Round) -> int:
    """Prefixes neither model reaches from an explored parent (never added as nodes)."""
    miss = 0
    for d in range(1, rnd.gamma + 1):
        pj, qj = rnd.t.p_joint[d], rnd.t.q_joint[d]
        miss += int(((pj == 0) & (qj == 0)).sum())
    return miss


def test_expansion_asks_for_the_frontier_once_per_level_and_respects_the_budget():
    rnd = _Round(6, 3, 2, 11, 0)
    r = tree_interval(rnd.X, rnd.P, rnd.Q, top_k=2, levels=2, expand=rnd.expand, max_expand=3)
    assert len(rnd.calls) == 2 and all(1 <= len(c) <= 3 for c in rnd.calls)
    drafted = {tuple(rnd.X[j, :d]) for j in range(rnd.k) for d in range(rnd.gamma)}
    asked = [u for c in rnd.calls for u in c]
    assert len(set(asked)) == len(asked) and not (set(asked) & drafted)
    assert all(len(u) < rnd.gamma for u in asked)
    assert r.n_expanded == len(drafted) + len(asked)
    assert isinstance(r, TreeIntervalResult) and r.to_dict()["levels"] == 2


def test_more_exploration_can_only_use_more_information():
    """Level 0 vs full exploration on one case: both contain T*, the full one is (nearly) a point."""
    rnd = _Round(4, 3, 3, 5, 1)
    T = tree_optimum(rnd.p, rnd.q, 3, 3).value
    r0 = tree_interval(rnd.X, rnd.P, rnd.Q, top_k=1)
    r3 = tree_interval(rnd.X, rnd.P, rnd.Q, top_k=4, levels=3, expand=rnd.expand)
    assert r0.contains(T, atol=1e-9) and r3.contains(T, atol=1e-9)
    assert r3.gap < 1e-7 < r0.gap


def _good():
    rnd = _Round(4, 2, 2, 3, 0)
    return rnd.X, rnd.P, rnd.Q


@pytest.mark.parametrize(
    ("change", "error", "words"),
    [
        (lambda X, P, Q: (X[:, :1], P, Q), ShapeMismatchError, "shape"),
        (lambda X, P, Q: (X.astype(float), P, Q), InvalidDraftsError, "integer"),
        (lambda X, P, Q: (X + 10, P, Q), InvalidDraftsError, "token ids"),
        (lambda X, P, Q: (X, P * 0.9, Q), InvalidDistributionError, "sum to 1"),
        (lambda X, P, Q: (X, P, np.where(Q.max() == Q, np.nan, Q)), InvalidDistributionError, "finite"),
        (lambda X, P, Q: (X, P[..., :3], Q), ShapeMismatchError, "shape"),
    ],
)
def test_bad_arrays_are_refused(change, error, words):
    X, P, Q = change(*_good())
    with pytest.raises(error, match=words):
        tree_interval(X, P, Q)


def test_a_draft_the_draft_rows_cannot_produce_is_refused():
    X, P, Q = _good()
    Q = Q.copy()
    t = X[0, 0]
    Q[:, 0, t] = 0.0
    Q[:, 0] /= Q[:, 0].sum(axis=1, keepdims=True)
    with pytest.raises(InvalidDraftsError, match="draft probability 0"):
        tree_interval(X, P, Q)


def test_bad_options_are_refused():
    X, P, Q = _good()
    with pytest.raises(InvalidOptionError, match="needs expand"):
        tree_interval(X, P, Q, levels=1)
    with pytest.raises(InvalidOptionError, match="callable"):
        tree_interval(X, P, Q, levels=1, expand=3)
    with pytest.raises(InvalidDraftCountError, match="top_k"):
        tree_interval(X, P, Q, top_k=0)
    with pytest.raises(ShapeMismatchError, match="expand"):
        tree_interval(X, P, Q, levels=1, expand=lambda nodes: np.zeros((len(nodes), 4)))
    with pytest.raises(ShapeMismatchError, match="expand's p_rows"):
        tree_interval(X, P, Q, levels=1, expand=lambda nodes: (np.zeros((1, 4)), np.zeros((1, 4))))


def _failing_run(monkeypatch, fail_call: int) -> dict:
    """Make HiGHS' ``fail_call``-th run return an error without solving, as a run does when its
    ``threads`` option differs from the process's scheduler: status "Not Set", a zero solution."""
    import highspy

    real = highspy.Highs.run
    calls = {"n": 0}

    def run(self):
        calls["n"] += 1
        return highspy.HighsStatus.kError if calls["n"] == fail_call else real(self)

    monkeypatch.setattr(highspy.Highs, "run", run)
    return calls


def test_a_failed_first_solve_is_not_read_as_the_lp_optimum(monkeypatch):
    """The zero solution of a failed run is not a solution: the interval falls back to the columns'
    bounds and the drafts' own bucket law, still contains T*, and says the solver failed."""
    rnd = _Round(5, 2, 2, 4, 0)
    T = tree_optimum(rnd.p, rnd.q, 2, 2).value
    clean = tree_interval(rnd.X, rnd.P, rnd.Q, top_k=1)
    assert clean.status == "optimal" and clean.lower > 0
    _failing_run(monkeypatch, 1)
    r = tree_interval(rnd.X, rnd.P, rnd.Q, top_k=1)
    assert r.status == "solver_failed" and r.solver_info == "Not Set"
    assert r.contains(T, atol=1e-9) and r.upper >= clean.upper - 1e-12
    assert r.lower > 0 and r.checks["membership"] <= 1e-12  # the drafts' law, not the zero vector
    assert np.isnan(r.to_dict()["checks"]["lp_value"])


def test_a_failed_cutting_plane_round_keeps_the_last_optimal_round(monkeypatch):
    """A run failing after cuts were added: the previous round's duals (0 on the new rows) and its
    bucket law give the interval, which contains T* and is reported as a failed solve."""
    rnd = _Round(4, 3, 3, 3, 1)  # everything explored: the cuts run to convergence
    T = tree_optimum(rnd.p, rnd.q, 3, 3).value
    clean = tree_interval(rnd.X, rnd.P, rnd.Q, top_k=4, levels=3, expand=rnd.expand)
    assert clean.checks["rounds"] >= 2
    calls = _failing_run(monkeypatch, 2)
    r = tree_interval(rnd.X, rnd.P, rnd.Q, top_k=4, levels=3, expand=rnd.expand)
    assert calls["n"] == 2 and r.status == "solver_failed" and r.checks["rounds"] == 2
    assert r.contains(T, atol=1e-9) and r.upper >= clean.upper - 1e-9
    assert r.lower > 0 and r.checks["membership"] <= 1e-12


@pytest.mark.parametrize("case", [CASES[s] for s in (1, 11, 13)])
def test_the_early_cut_stop_leaves_at_most_its_room_to_the_full_loop(monkeypatch, case):
    """When the cutting planes stop early, the full loop's upper bound is below the stopped one by at
    most the reported room (the dual bound minus the LP's value at a feasible point), and both
    intervals contain T*."""
    from otspec.bounds import tree_interval as module

    V, gamma, k, K, levels, seed = case
    rnd = _Round(V, gamma, k, seed, seed % 2)
    T = tree_optimum(rnd.p, rnd.q, k, gamma).value
    r = tree_interval(rnd.X, rnd.P, rnd.Q, top_k=K, levels=levels, expand=rnd.expand)
    monkeypatch.setattr(module, "TREE_INTERVAL_CUT_ROOM", 0.0)
    full = tree_interval(rnd.X, rnd.P, rnd.Q, top_k=K, levels=levels, expand=_Round(V, gamma, k, seed, seed % 2).expand)
    assert r.status == "width_tolerance" and full.status == "optimal"
    assert r.checks["rounds"] < full.checks["rounds"]
    assert full.upper - 1e-12 <= r.upper <= full.upper + r.checks["cut_room"] + 1e-10
    assert r.contains(T, atol=1e-9) and full.contains(T, atol=1e-9)
