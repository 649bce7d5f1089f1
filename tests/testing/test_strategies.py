"""otspec.testing.strategies: valid values of every kind, reproducible reprs, readable shrinking."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import find, given, settings
from hypothesis import strategies as st

import otspec
from otspec._tolerances import FLOAT64_ATOL
from otspec.testing import assert_lossless
from otspec.testing import strategies as ots
from otspec.verifiers import ALL


@settings(max_examples=60, database=None)
@given(ots.distributions(), st.data())
def test_distributions_are_on_the_simplex(p, data):
    assert p.dtype == np.float64 and 2 <= p.size <= 5
    assert np.all(p >= 0) and abs(p.sum() - 1.0) < FLOAT64_ATOL
    q = data.draw(ots.distributions(4, zeros=False, peaky=False))
    assert q.shape == (4,) and np.all(q > 0)


@settings(max_examples=60, database=None)
@given(ots.pairs())
def test_pairs_share_the_vocabulary(pq):
    p, q = pq
    assert p.shape == q.shape


def test_laws_cover_every_kind_within_the_size_budget():
    seen = set()

    @settings(max_examples=150, database=None)
    @given(ots.laws())
    def collect(law):
        assert law.num_tuples() <= 125 and 1 <= law.k <= 3 and 2 <= law.V <= 5
        tuples, weights = law.enumerate()
        assert abs(weights.sum() - 1.0) < FLOAT64_ATOL
        seen.add(law.kind)

    collect()
    assert seen == set(ots.LAW_KINDS)


@settings(max_examples=40, database=None)
@given(ots.problems())
def test_problem_repr_rebuilds_the_problem(problem):
    ns = {"np": np, "otspec": otspec}
    text = repr(problem)
    assert text.startswith("Problem(p=")
    p = eval(text.split("Problem(p=", 1)[1].split(", law=")[0], ns)
    law = eval(text.split(", law=", 1)[1][:-1], ns)
    assert np.array_equal(p, problem.p) and law.kind == problem.law.kind
    t1, w1 = law.enumerate()
    t2, w2 = problem.law.enumerate()
    assert np.array_equal(t1, t2) and np.array_equal(w1, w2)


def test_shrinking_gives_small_round_counterexamples():
    # "some token of p is at least 0.6" shrinks to two tokens and round weights
    p = find(ots.distributions(), lambda p: p.max() >= 0.6)
    assert p.size == 2 and set(np.round(p * 6).tolist()) <= set(range(7))
    problem = find(ots.problems(), lambda pr: pr.law.k >= 2)
    assert problem.law.kind == "iid" and problem.law.k == 2 and problem.p.size == 2


@settings(max_examples=25, database=None)
@given(ots.problems())
def test_lossless_verifiers_on_generated_problems(problem):
    p, law = problem
    for v in ALL:
        if v.lossless and v.applies_to(law):
            assert_lossless(v, p, law, atol=FLOAT64_ATOL)


def test_import_otspec_testing_does_not_import_hypothesis():
    code = "import sys, otspec, otspec.testing; assert 'hypothesis' not in sys.modules; otspec.testing.strategies; assert 'hypothesis' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
