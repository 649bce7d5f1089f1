"""Typical acceptance's closed-form output law for several independent or greedy drafts against the
exact kernel and against a direct enumeration of the rule (pass set, largest p, first in draft order)."""

import itertools

import numpy as np
import pytest

import otspec
from otspec.verifiers.lossy import exact_tv_or_none, tv_distance
from otspec.verifiers.step.typical import TypicalVerifier, typical_threshold

#: sums of at most a few dozen products of numbers in [0, 1] (a few ulps each)
CLOSED_FORM_ATOL = 1e-12


def _target(rng, V):
    """A target with ties and zeros half the time (small integer weights), else a Dirichlet draw."""
    if rng.random() < 0.5:
        w = rng.integers(0, 4, V).astype(float)
        w[int(rng.integers(V))] += 1.0  # never all zero
        return w / w.sum()
    return rng.dirichlet(np.ones(V))


def _draft(rng, V):
    q = rng.dirichlet(np.ones(V))
    if rng.random() < 0.5:
        q[int(rng.integers(V))] = 0.0
        q /= q.sum()
    return q


def _cases(kind, n=60, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        V, k = int(rng.integers(2, 7)), int(rng.integers(1, 4))
        p, q = _target(rng, V), _draft(rng, V)
        if kind == "iid":
            law = otspec.iid(q, k)
        elif kind == "product":
            law = otspec.product([_draft(rng, V) for _ in range(k)])
        else:
            if np.count_nonzero(q) < k:
                continue
            law = otspec.greedy(q, k)
        v = TypicalVerifier(
            posterior_threshold=float(rng.choice([0.0, 0.09, 0.2, 0.3])),
            posterior_alpha=float(rng.choice([0.3, 1.0])),
            on_reject=str(rng.choice(["sample", "argmax"])),
        )
        out.append((v, p, law))
    return out


def _enumerated_output_law(v, p, qs):
    """Sum over every draft tuple of independent drafts ``qs`` of the rule applied by hand."""
    tau = typical_threshold(p, v.posterior_threshold, v.posterior_alpha)
    reject = p if v.on_reject == "sample" else np.eye(p.size)[int(np.argmax(p))]
    P = np.zeros(p.size)
    for xs in itertools.product(range(p.size), repeat=len(qs)):
        w = float(np.prod([qj[x] for qj, x in zip(qs, xs, strict=True)]))
        passing = [x for x in xs if p[x] > tau]
        if passing:
            best = max(p[x] for x in passing)
            P[next(x for x in passing if p[x] == best)] += w  # the first passing draft of largest p
        else:
            P += w * reject
    return P


def _qs(law):
    if law.independent_qs is not None:
        return [np.asarray(qj) for qj in law.independent_qs]
    top, q_rest = law.top_and_rest
    return [np.eye(law.V)[int(t)] for t in top] + [np.asarray(q_rest)]


@pytest.mark.parametrize("kind", ["iid", "product", "greedy"])
def test_closed_form_output_law_equals_kernel_and_enumeration(kind):
    ties = 0
    for v, p, law in _cases(kind):
        p_checked = v.check_inputs(p, law)
        v._prepare(p_checked, law)
        closed = v._output_law(p_checked, law)
        assert closed is not None
        np.testing.assert_allclose(closed, v.kernel(p, law).output_law(), rtol=0, atol=CLOSED_FORM_ATOL)
        np.testing.assert_allclose(closed, _enumerated_output_law(v, p, _qs(law)), rtol=0, atol=CLOSED_FORM_ATOL)
        ties += np.unique(p[p > 0]).size < np.count_nonzero(p)
    assert ties >= 10  # the equal-p groups (draft order breaks ties) are exercised


def test_without_replacement_has_no_closed_form_beyond_one_draft():
    v, p = TypicalVerifier(), np.array([0.5, 0.3, 0.2])
    law = otspec.without_replacement(np.array([0.2, 0.3, 0.5]), 2)
    assert v._output_law(p, law) is None
    assert v.output_law(p, law) == pytest.approx(v.kernel(p, law).output_law(), abs=0)  # falls back to the kernel


def test_exact_tv_at_large_vocabulary_uses_the_closed_form():
    """At V = 2000 and k = 3 the kernel (8e9 tuples) is out of reach: the TV still comes back, and
    it is the closed-form law's distance; the law sums to 1."""
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.full(2000, 0.1)), rng.dirichlet(np.full(2000, 0.1))
    law = otspec.iid(q, 3)
    P = TypicalVerifier().output_law(p, law)
    assert abs(P.sum() - 1.0) <= CLOSED_FORM_ATOL and P.min() >= 0.0
    assert exact_tv_or_none(TypicalVerifier(), p, law) == tv_distance(P, p) > 0.0
