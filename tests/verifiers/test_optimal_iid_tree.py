"""Threshold-tree builders of ``otspec.verifiers.step.optimal_iid`` (``TREE_METHODS``).

What is checked here (each check is an assertion that can fail):

* ``"heap_compiled"`` (numba) returns the bit-identical tree of the pure-Python ``"heap"``, and the
  kernels run without numba (plain Python) return the same arrays as compiled;
* every builder's tree is nested and its selection law, integrated over the level s from the tree
  alone, equals r* to 1e-12 at V in the thousands, with ties, zeros, p == q, k = 1 and a one-token
  q; builders agree with each other and with the ``"argmax"`` reference;
* the exact kernel built on each builder's tree is lossless (1e-12) and attains the subsets
  optimum (1e-12) on small enumerated laws;
* on adversarial inputs (monotone ratios, many ties, denormal q) the work counters stay within
  their stated bounds (flips <= 4 per boundary; heap record moves <= m + 4 m (log_4 m + 1));
* the vectorised top-down clamp equals the sequential loop.
"""

from __future__ import annotations

import importlib.util
import math
import sys

import numpy as np
import pytest

import otspec
from otspec.synthetic import synthetic_pair
from otspec.verifiers.step import _iid_selection as isel
from otspec.verifiers.step import _iid_tree as it
from otspec.verifiers.step import optimal_iid as oi
from tests._oracles import awkward_pair, check_iid_rule_kernel

ATOL = 1e-12
numba = pytest.importorskip("numba")  # the test extra installs it; the pure path is checked below too


def _state(p, q, k, method):
    p, q, k = isel.check_pqk(p, q, k)
    return oi._build_state(p, q, k, method)


def _geo(p, q, k):
    p, q, k = isel.check_pqk(p, q, k)
    return it.geometry(isel.solve_selection(p, q, k), q, k)[0]


def _ties_zeros(V, seed):
    rng = np.random.default_rng(seed)
    q = rng.dirichlet(np.full(V, 0.3))
    p = q * rng.choice([0.5, 1.0, 2.0], size=V)  # three distinct ratios: big tied blocks
    p[:50] = 0.0
    q[50:80] = 0.0
    return p / p.sum(), q / q.sum()


def _monotone(V):
    """p/q strictly increasing along a smooth curve: the tree is a comb (depth ~ m)."""
    x = np.linspace(0.0, 1.0, V)
    q = np.full(V, 1.0 / V)
    p = np.exp(3.0 * x)
    return p / p.sum(), q


def _denormal(V, seed):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(V))
    q = rng.dirichlet(np.ones(V))
    q[: V // 4] = 1e-310 * rng.random(V // 4)  # denormal q-masses
    return p / p.sum(), q / q.sum()


CASES = {
    "zipf_k4": (lambda: synthetic_pair(3000, seed=1), 4),
    "dirichlet_k8": (lambda: synthetic_pair(2000, family="dirichlet", seed=3), 8),
    "peaked_k8": (lambda: synthetic_pair(2000, seed=2, temperature=0.2), 8),
    "ties_zeros_k3": (lambda: _ties_zeros(2000, 8), 3),
    "p_eq_q_k4": (lambda: (lambda p: (p, p.copy()))(synthetic_pair(2000, seed=4)[0]), 4),
    "k1": (lambda: synthetic_pair(2000, seed=5), 1),
    "one_token_q": (lambda: (synthetic_pair(2000, seed=6)[0], np.eye(2000)[7]), 5),
    "monotone_k8": (lambda: _monotone(3000), 8),
    "denormal_k2": (lambda: _denormal(2000, 9), 2),
}


# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CASES))
def test_compiled_heap_is_bit_identical_to_the_pure_heap(name):
    make, k = CASES[name]
    geo = _geo(*make(), k)
    a, b = it.build_tree(geo, "heap"), it.build_tree(geo, "heap_compiled")
    for f in ("G", "left", "right", "order"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert a.max_clamp == b.max_clamp
    assert b.method == "heap_compiled"


def test_kernels_without_numba_give_the_compiled_arrays(monkeypatch):
    """Load the kernels module with numba hidden: the functions are plain Python and must return
    exactly what the compiled ones return."""
    spec = importlib.util.find_spec("otspec.verifiers.step.optimal_iid_kernels")
    monkeypatch.setitem(sys.modules, "numba", None)
    plain = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plain)
    monkeypatch.undo()
    assert plain.COMPILED is False
    from otspec.verifiers.step import optimal_iid_kernels as jit

    assert jit.COMPILED is True
    for k in (2, 6):
        geo = _geo(*synthetic_pair(300, seed=k), k)
        i = np.arange(1, geo.m)
        R0 = geo.ratio(i - 1, i, i + 1)
        packed = it._packed(geo)  # the arrays the builders pass (no second numba specialisation)
        perm = np.random.default_rng(0).permutation(np.arange(1, geo.m))
        for name, args in (("heap_build", (R0, *packed, k)), ("flip_build", (*packed, k, perm, 10**6))):
            a, b = getattr(plain, name)(*args), getattr(jit, name)(*args)
            for x, y in zip(a[:4], b[:4], strict=False):
                assert np.array_equal(x, y), name
            assert a[4] == b[4]
        assert np.array_equal(plain.local_ratios(*packed, k), R0) and np.array_equal(jit.local_ratios(*packed, k), R0)


def test_auto_is_compiled_with_numba_and_the_pure_heap_without(monkeypatch):
    geo = _geo(*synthetic_pair(500, seed=0), 3)
    assert it.build_tree(geo, "auto").method == "heap_compiled"
    monkeypatch.setattr(it, "_jit_kernels", lambda need_compiled=False: None)
    t = it.build_tree(geo, "auto")
    assert t.method == "heap"
    assert np.array_equal(t.G, it.build_tree(geo, "heap").G)
    with pytest.raises(otspec.errors.UnsupportedMethodError, match="numba"):
        it.build_tree(geo, "heap_compiled")


# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("method", ["auto", "flip"])
def test_integrated_law_equals_r_star_and_the_tree_is_nested(name, method):
    make, k = CASES[name]
    p, q = make()
    st = _state(p, q, k, method)
    tr = st.tree
    inner = tr.order
    assert np.all(tr.G[inner] <= np.minimum(tr.G[tr.left[inner]], tr.G[tr.right[inner]]))  # nested
    assert np.all((tr.G >= 0) & (tr.G <= 1))
    np.testing.assert_allclose(st.integrated_selection_law(), st.r, rtol=0, atol=ATOL)
    if k > 1 and st.geometry.m > 1:
        assert sorted(inner.tolist()) == list(range(1, st.geometry.m))  # every interior boundary is a node


@pytest.mark.parametrize("seed", range(4))
def test_builders_agree_with_the_argmax_reference(seed):
    p, q = synthetic_pair(400, family=("zipf", "dirichlet")[seed % 2], seed=seed)
    k = 2 + 2 * seed
    ref = _state(p, q, k, "argmax")
    for method in ("heap", "heap_compiled", "flip"):
        st = _state(p, q, k, method)
        np.testing.assert_allclose(st.tree.G, ref.tree.G, rtol=0, atol=1e-10)
        np.testing.assert_allclose(st.integrated_selection_law(), ref.integrated_selection_law(), rtol=0, atol=ATOL)


def test_flip_gives_the_heap_tree_on_lm_shaped_pairs():
    """Both insertion orders (the biased default and the uniform one of the expected-work proof)
    reach the heap's tree exactly: the threshold tree is unique and these pairs have no ties."""
    for k in (2, 8):
        geo = _geo(*synthetic_pair(5000, seed=k), k)
        a, b = it.build_tree(geo, "heap_compiled"), it.build_tree(geo, "flip")
        assert b.method == "flip"
        for f in ("G", "left", "right"):
            assert np.array_equal(getattr(a, f), getattr(b, f)), f
        G, left, right, order, flips = it._build_flip(geo, it._jit_kernels(), "random")
        c = it._finish(geo, G, left, right, order, "flip")
        assert 0 <= flips <= 2.5 * geo.m  # expected < 2 per boundary
        for f in ("G", "left", "right"):
            assert np.array_equal(getattr(a, f), getattr(c, f)), f
    # regression: the root's own clamp to 1 (here 8.6e-9, also in the heap's tree) is not a reason to
    # abandon the flip tree
    assert it.build_tree(_geo(*synthetic_pair(49152, seed=0), 8), "flip").method == "flip"


# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["heap_compiled", "flip"])
def test_exact_kernel_on_each_builder_is_lossless_and_optimal(method):
    rng = np.random.default_rng(13)
    for _ in range(60):
        V = int(rng.integers(2, 7))
        k = int(rng.integers(1, 4))
        p, q = awkward_pair(rng, V)
        st = _state(p, q, k, method)
        tuples = np.array(np.meshgrid(*[np.arange(V)] * k, indexing="ij")).reshape(k, -1).T
        beta = st.selection_rows(tuples)
        check_iid_rule_kernel(p, q, k, st, tuples, beta, ATOL)


# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["monotone_k8", "ties_zeros_k3", "denormal_k2", "peaked_k8"])
def test_work_counters_stay_within_their_bounds_on_adversarial_inputs(name):
    make, k = CASES[name]
    geo = _geo(*make(), k)
    m = geo.m
    n = m - 1
    heap = it.build_tree(geo, "heap_compiled")
    assert heap.work <= n + 4 * n * (math.floor(math.log(n, 4)) + 1)
    flips = it._build_flip(geo, it._jit_kernels())[4]
    assert 0 <= flips <= 4 * m  # expected < 2 per boundary


def test_monotone_ratios_make_a_comb_that_the_builders_handle():
    """The adversarial shape for round-based (parallel) builders: tree depth ~ m."""
    geo = _geo(*_monotone(3000), 8)
    tr = it.build_tree(geo, "heap_compiled")
    par = it._parents(tr.left, tr.right, tr.order)
    depth, i = 0, int(tr.order[0])
    while i not in (0, geo.m):
        i, depth = int(par[i]), depth + 1
    assert depth > geo.m // 2


def test_vectorised_clamp_equals_the_sequential_loop():
    rng = np.random.default_rng(3)
    geo = _geo(*synthetic_pair(3000, seed=0), 4)
    G, left, right, order = it._build_heap(geo)
    G = G * (1.0 + 0.05 * rng.standard_normal(G.size))  # force many clamps, some below 0
    G[rng.integers(1, geo.m, 20)] = -0.0
    ref = G.copy()
    ref[0] = ref[geo.m] = 1.0
    for i in reversed(order):
        ref[i] = max(0.0, min(ref[i], ref[left[i]], ref[right[i]]))
    tr = it._finish(geo, G.copy(), left, right, order, "heap")
    assert np.array_equal(tr.G, ref) and tr.max_clamp > 0
