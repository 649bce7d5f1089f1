"""otspec.report.compare: one row per applicable verifier, against the optimum."""

from __future__ import annotations

import math

import numpy as np

import otspec
from otspec._tolerances import EXACT_ATOL
from otspec.report import compare
from otspec.verifiers import ALL
from tests._tolerances import FLOAT64_ULPS_ATOL


def test_rows_for_each_applicable_verifier(rng):
    V = 6
    p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    for law in (otspec.iid(q, 2), otspec.without_replacement(q, 3), otspec.greedy(q, 2), otspec.iid(q, 1)):
        rows = compare(p, law)
        assert [r.name for r in rows] == [v.name for v in ALL if v.applies_to(law)]
        opt = otspec.optimal_acceptance(p, law).value
        for r in rows:
            assert r.optimum == opt
            assert abs(r.shortfall - (opt - r.acceptance)) < FLOAT64_ULPS_ATOL
            assert abs(r.percent_of_optimum - 100 * r.acceptance / opt) < EXACT_ATOL
            if r.lossless:  # a lossy rule (lossy_optimal, typical, fuzzy) may accept more than the lossless optimum
                assert r.shortfall >= -EXACT_ATOL, r
            if r.name in ("optimal_plan", "khisti", "greedy_optimal", "spechub"):
                assert abs(r.shortfall) < EXACT_ATOL, r


def test_explicit_optimum_and_large_law():
    rng = np.random.default_rng(4)
    V = 5000
    p, q = rng.dirichlet(np.full(V, 0.2)), rng.dirichlet(np.full(V, 0.2))
    law = otspec.iid(q, 4)
    rows = {r.name: r for r in compare(p, law, optimum=0.9)}
    assert all(r.optimum == 0.9 for r in rows.values())
    assert rows["kseq"].how == "closed_form" and rows["rrs"].how == "closed_form"
    # khisti's canonical selection for i.i.d. drafts is the optimal i.i.d. rule: alpha* in closed form
    assert rows["khisti"].how == "closed_form" and not math.isnan(rows["khisti"].acceptance)
    assert rows["khisti"].acceptance == otspec.verifiers.optimal_iid.acceptance(p, law).value
    assert rows["optimal_plan"].how == "unavailable"


def test_global_resolution_is_bracketed_in_compare_even_when_fitting():
    """Its convex fit takes minutes at a real vocabulary: compare shows the certified [0, alpha*]
    (from the closed form, no fit) while fit=True still fits the other rules."""
    import otspec
    from otspec.synthetic import synthetic_pair

    p, q = synthetic_pair(2000, seed=0)
    rows = {r.name: r for r in compare(p, otspec.iid(q, 2), n_samples=200, fit=True)}
    gr = rows["global_resolution"]
    assert gr.how == "bracket" and gr.ci_low == 0.0
    assert abs(gr.ci_high - rows["optimal_iid"].acceptance) <= 1e-12
