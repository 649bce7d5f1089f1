"""method="product": the branch-and-bound for independent heterogeneous drafters, and its certificate."""

import dataclasses

import numpy as np
import pytest

import otspec
from otspec._tolerances import EXACT_ATOL
from otspec.bounds import maxflow, multidraft, product
from otspec.bounds.cuts import cut_value
from otspec.errors import UnsupportedMethodError
from otspec.synthetic import synthetic_pair
from tests._tolerances import CLEAR_DIFFERENCE
from tests.conftest import random_simplex


def brute_force(p, qs):
    """1 + min over all 2^V token sets of p(H) - prod_i q_i(H)."""
    V = p.size
    masks = (np.arange(2**V)[:, None] >> np.arange(V)) & 1
    h = masks @ p - np.prod(np.stack([masks @ q for q in qs]), axis=0)
    return 1.0 + float(h.min())


def _case(seed):
    """A random product problem with V <= 12, k = 2..4, exact zeros, ties and degenerate laws."""
    rng = np.random.default_rng(seed)
    V, k = int(rng.integers(2, 13)), int(rng.integers(2, 5))
    alpha = [0.2, 0.5, 1.0, 5.0][seed % 4]
    p = random_simplex(rng, V, zeros=int(rng.integers(0, V)), alpha=alpha)
    qs = [random_simplex(rng, V, zeros=int(rng.integers(0, V - 1)), alpha=alpha) for _ in range(k)]
    shape = seed % 6
    if shape == 1:  # identical drafters (the i.i.d. law)
        qs = [qs[0]] * k
    elif shape == 2:  # duplicated tokens: ties in every ratio
        half = max(V // 2, 1)

        def twice(x):
            return np.concatenate([x[:half], x[:half]]) / (2 * x[:half].sum())

        p, qs = twice(p + 1e-3), [twice(q + 1e-3) for q in qs]
    elif shape == 3:  # a point-mass drafter
        qs[0] = np.eye(V)[int(rng.integers(V))]
    elif shape == 4:  # p equal to a drafter
        p = qs[-1].copy()
    return p, qs


@pytest.mark.parametrize("seed", range(60))
def test_equals_brute_force_with_a_valid_certificate(seed):
    """The value equals the brute-force optimum and the re-checked lower bound lies within the gap
    below it, with leaves of the default size and with every box forced to branch (leaf_size 0)."""
    p, qs = _case(seed)
    ref = brute_force(p, qs)
    # Forced branching (leaf 0) when p equals a drafter makes the box bound flat: at V = 7 the tree
    # reaches ~40 000 boxes (about 25 s), so that combination is forced only up to V = 6.
    flat = any(np.array_equal(p, q) for q in qs) and len(p) > 6
    for leaf in (3, product.LEAF_SIZE) if flat else (0, 3, product.LEAF_SIZE):
        cut, cert = product.branch_and_bound(p, qs, leaf_size=leaf)
        lower = 1.0 + product.recheck(p, qs, cert, leaf_size=leaf)
        assert abs(cut_value(p, otspec.product(qs), cut) - ref) <= EXACT_ATOL, (leaf, cut)
        assert lower <= ref + 1e-15 and ref - lower <= 1e-12, (leaf, lower, ref)
    r = otspec.optimal_acceptance(p, otspec.product(qs), method="product")
    assert r.status == "optimal" and abs(r.value - ref) <= EXACT_ATOL
    assert r.gap is not None and 0.0 <= r.gap <= 1e-12 and r.certificate.n_boxes >= 1


def test_forged_certificate_is_caught():
    """A tree that closes the root box by its bound alone (a wrong claim at this size) re-checks to
    a lower bound far below the optimum: the certificate can fail."""
    p, q0 = synthetic_pair(300, seed=0)
    qs = [q0, synthetic_pair(300, seed=0, draft_noise=1.0, target_noise=1.0)[1]]
    cut, cert = product.branch_and_bound(p, qs)
    assert cert.n_boxes > 1 and cert.nodes[0].kind == "split"
    root = cert.nodes[0]
    forged = dataclasses.replace(cert, nodes=(dataclasses.replace(root, kind="bound", children=()),))
    true_min = cert.upper
    assert product.recheck(p, qs, cert) >= true_min - 1e-12
    assert product.recheck(p, qs, forged) <= true_min - CLEAR_DIFFERENCE


@pytest.mark.parametrize("V, k", [(200, 2), (200, 3), (2000, 2)])
def test_equals_maxflow(V, k):
    """Against the exact sparse max-flow: the same cut value."""
    pytest.importorskip("ortools", reason="install the [maxflow] extra (OR-Tools)")
    rng = np.random.default_rng(V + k)
    p = random_simplex(rng, V, alpha=0.3)
    qs = [random_simplex(rng, V, alpha=0.3) for _ in range(k)]
    law = otspec.product(qs)
    a = otspec.optimal_acceptance(p, law, method="product")
    b = otspec.optimal_acceptance(p, law, method="maxflow")
    assert a.status == b.status == "optimal"
    assert abs(a.value - b.value) <= 1e-12
    assert abs(cut_value(p, law, a.cut) - cut_value(p, law, b.cut)) <= 1e-12


@pytest.mark.parametrize("k", [2, 3, 4])
def test_iid_special_case_equals_prefix(k):
    rng = np.random.default_rng(k)
    V = 3000
    p, q = random_simplex(rng, V, alpha=0.5), random_simplex(rng, V, alpha=0.5)
    a = otspec.optimal_acceptance(p, otspec.product([q] * k), method="product")
    b = otspec.optimal_acceptance(p, otspec.iid(q, k), method="prefix")
    assert a.status == "optimal" and abs(a.value - b.value) <= 1e-12


def test_auto_uses_product_beyond_the_tuple_limits(monkeypatch):
    rng = np.random.default_rng(0)
    V = 600  # 360 000 tuples: above AUTO_MAX_TUPLES, which used to be refused without OR-Tools
    p = random_simplex(rng, V)
    law = otspec.product([random_simplex(rng, V) for _ in range(2)])
    monkeypatch.setattr(maxflow, "maxflow_available", lambda: False)
    assert law.num_tuples() > multidraft.AUTO_MAX_TUPLES
    r = otspec.optimal_acceptance(p, law)
    assert r.method == "product" and r.status == "optimal"
    monkeypatch.setattr(maxflow, "maxflow_available", lambda: True)  # with OR-Tools, beyond its memory estimate
    assert multidraft._auto_method(law, 1e6) == "product"


def test_method_product_needs_a_product_law():
    q = random_simplex(np.random.default_rng(1), 5)
    with pytest.raises(UnsupportedMethodError, match="method='prefix'"):
        otspec.optimal_acceptance(q, otspec.iid(q, 2), method="product")


def test_cli_law_product(capsys):
    """``otspec bound --law product``: k drafters (q at temperatures 1, 1.25, ...), solved by the
    branch-and-bound with its gap."""
    import json

    from otspec.cli import main

    assert main(["bound", "--vocab", "3000", "--drafts", "3", "--law", "product", "--method", "product", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["results"]
    assert row["method"] == "product" and row["status"] == "optimal" and 0.0 <= row["gap"] <= 1e-9
