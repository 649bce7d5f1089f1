"""Tree verifiers: SpecTr over sequences, recursive rejection over a draft tree (with/without replacement)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import chi2

from otspec import models
from otspec._tolerances import EXACT_ATOL, FLOAT64_ATOL
from otspec.errors import (
    InvalidDraftCountError,
    InvalidDraftsError,
    ProblemTooLargeError,
    UnsupportedMethodError,
)
from otspec.trees import draft_trees, sample_tree
from otspec.verifiers import token_chain as tc
from otspec.verifiers import tree
from tests._oracles import criterion_violation, make_pair
from tests._tolerances import CLEAR_DIFFERENCE, EXACT_RTOL, FALSE_ALARM, FLOAT64_ULPS_ATOL

instances = st.builds(make_pair, st.integers(0, 10_000), st.integers(2, 3), st.sampled_from([0.3, 1.0, 3.0]), st.booleans())


@pytest.mark.parametrize("verifier", tree.VERIFIERS)
@given(inst=instances, gamma=st.integers(1, 3), k=st.integers(1, 2))
def test_lossless_by_criterion(verifier, inst, gamma, k):
    p, q = inst
    if verifier == "rrs_wor" and k > np.count_nonzero(q(())):
        with pytest.raises(InvalidDraftCountError):
            tree.kernel(p, q, k, gamma, verifier=verifier)
        return
    K = tree.kernel(p, q, k, gamma, verifier=verifier)
    assert abs(K.weights.sum() - 1.0) <= EXACT_ATOL
    for law in K.laws[:20]:
        assert abs(sum(law.values()) - 1.0) <= EXACT_ATOL
        # every emitted accepted prefix is a path of the drafted tree
    for t, law in zip(K.trees, K.laws, strict=False):
        prefixes = {tuple(int(v) for v in path[:i]) for path in t for i in range(K.gamma + 1)}
        assert all(o[:-1] in prefixes for o in law)
    assert criterion_violation(K.output_law(), p, p.V) <= EXACT_ATOL


def test_criterion_catches_ignoring_rejected_mass(monkeypatch):
    """Control: SpecTr whose residual is replaced by the target conditional breaks the criterion."""
    p, q = make_pair(4, 3, 1.0, False)
    original = tree.node_schedule

    def broken_plan(pv, qv, drafts, verifier):
        acc, _ = original(pv, qv, drafts, verifier)
        return acc, pv

    monkeypatch.setattr(tree, "node_schedule", broken_plan)
    walker = tree._Walker(p, q, "kseq")
    trees, w = draft_trees(q, 2, 2)
    law: dict = {}
    for t, wt in zip(trees, w, strict=False):
        for o, pr in walker.tree_law(tuple(tuple(int(v) for v in path) for path in t)).items():
            law[o] = law.get(o, 0.0) + wt * pr
    assert criterion_violation(law, p, 3) > CLEAR_DIFFERENCE


@pytest.mark.parametrize("verifier", tree.VERIFIERS)
@given(inst=instances, gamma=st.integers(1, 3))
def test_single_draft_is_token_verification(verifier, inst, gamma):
    p, q = inst
    K = tree.kernel(p, q, 1, gamma, verifier=verifier)
    ref = tc.kernel(p, q, gamma).output_law()
    got = K.output_law()
    assert set(got) <= set(ref) | {o for o in got if got[o] < FLOAT64_ULPS_ATOL}
    assert max(abs(got.get(o, 0.0) - ref.get(o, 0.0)) for o in set(got) | set(ref)) <= EXACT_ATOL


@given(seed=st.integers(0, 10_000), k=st.integers(2, 3))
def test_depth_one_kseq_tree_is_kseq_membership(seed, k):
    """gamma = 1: E[tau] = P(Y in drafts) = K-SEQ's membership acceptance (docs/verifiers.rst, kseq)."""
    from otspec.verifiers.step.kseq import kseq_details

    p, q = make_pair(seed, 3, 1.0, False)
    got = tree.expected_accepted(p, q, k, 1, verifier="kseq")
    assert abs(got - kseq_details(p(()), q(()), k).membership) <= EXACT_ATOL


@given(seed=st.integers(0, 10_000), k=st.integers(2, 3))
def test_depth_one_rrs_is_mss_membership(seed, k):
    """gamma = 1: E[tau] = the SpecInfer MSS membership formula of docs/verifiers.rst, rrs, recomputed here."""
    p, q = make_pair(seed, 3, 1.0, False)
    pv, qv = p(()), q(())
    cur, prej, notin = pv.copy(), 1.0, np.ones(3)
    for _ in range(k):
        beta = np.minimum(cur, qv).sum()
        prej *= 1 - beta
        if beta < 1:
            notin *= 1 - np.maximum(qv - cur, 0.0) / (1 - beta)
            res = np.maximum(cur - qv, 0.0)
            cur = res / res.sum()
    expect = (1 - prej) + prej * float(cur @ (1 - notin))
    assert abs(tree.expected_accepted(p, q, k, 1, verifier="rrs") - expect) <= EXACT_ATOL


def test_more_drafts_help_on_average():
    p, q = make_pair(8, 3, 1.0, False)
    one = tree.expected_accepted(p, q, 1, 3, verifier="kseq")
    for v in tree.VERIFIERS:
        assert tree.expected_accepted(p, q, 2, 3, verifier=v) > one


def test_draft_trees_laws():
    q = models.dirichlet(3, seed=3, concentration=0.5, zero_prob=0.2)
    trees, w = draft_trees(q, 2, 2, replacement=True)
    assert abs(w.sum() - 1) <= EXACT_ATOL and trees.shape[1:] == (2, 2)
    # i.i.d.: weight = product of path probabilities (recomputed from the model)
    for t, wt in list(zip(trees, w, strict=False))[:10]:
        prob = 1.0
        for path in t:
            for i, x in enumerate(path):
                prob *= q(tuple(int(v) for v in path[:i]))[x]
        assert abs(prob - wt) <= FLOAT64_ULPS_ATOL
    trees, w = draft_trees(q, 2, 2, replacement=False)
    assert abs(w.sum() - 1) <= EXACT_ATOL
    assert np.all(trees[:, 0, 0] != trees[:, 1, 0])


def test_sample_tree_matches_draft_law():
    """First-token pairs drawn without replacement follow draft_trees' weights (chi-square, 1e-6)."""
    q = models.dirichlet(4, seed=5, concentration=1.0)
    trees, w = draft_trees(q, 2, 1, replacement=False)
    index = {tuple(int(v) for v in t[:, 0]): i for i, t in enumerate(trees)}
    rng = np.random.default_rng(3)
    counts = np.zeros(len(w))
    n = 20_000
    for _ in range(n):
        t = sample_tree(q, 2, 1, replacement=False, rng=rng)
        counts[index[tuple(int(v) for v in t[:, 0])]] += 1
    stat = float(((counts - n * w) ** 2 / (n * w)).sum())
    assert chi2.sf(stat, len(w) - 1) > FALSE_ALARM


N_SAMPLES = 60_000


@pytest.mark.parametrize("verifier, drafted", [("kseq", [[0, 1], [0, 2]]), ("rrs", [[1, 1], [1, 1]]), ("rrs_wor", [[0, 2], [1, 0]])])
def test_sampler_matches_kernel(verifier, drafted):
    """Chi-square (false alarm 1e-6) of N = 60 000 verifications of one drafted tree against its exact
    block law; N detects a TV error of 0.02 with power >= 0.999 (4 N d^2 = 96 noncentrality, at most
    15 degrees of freedom; see tests/verifiers/test_chain.py::test_sample_size_detects_tv_002)."""
    p, q = make_pair(2, 3, 1.0, False)
    walker = tree._Walker(p, q, verifier)
    law = walker.tree_law(tuple(tuple(v) for v in drafted))
    keys = sorted(law)
    probs = np.array([law[o] for o in keys])
    pos = {o: i for i, o in enumerate(keys)}
    counts = np.zeros(len(keys))
    for tau, o in tree.sample_many(p, q, drafted, N_SAMPLES, verifier=verifier, rng=np.random.default_rng(77)):
        assert o in pos, f"sampled block {o} has probability 0"
        assert tau == len(o) - 1
        counts[pos[o]] += 1
    exp = probs * N_SAMPLES
    big = exp >= 5
    obs_c, exp_c = np.append(counts[big], counts[~big].sum()), np.append(exp[big], exp[~big].sum())
    keep = exp_c > 0
    stat = float(((obs_c[keep] - exp_c[keep]) ** 2 / exp_c[keep]).sum())
    assert chi2.sf(stat, keep.sum() - 1) > FALSE_ALARM
    # the single-call sampler is the same code path
    tau, o = tree.sample(p, q, drafted, verifier=verifier, rng=np.random.default_rng(0))
    assert o in pos and tau == len(o) - 1


def test_bad_inputs():
    p, q = make_pair(0, 3, 1.0, False)
    with pytest.raises(UnsupportedMethodError):
        tree.kernel(p, q, 2, 2, verifier="traversal")
    with pytest.raises(ProblemTooLargeError, match="draft trees"):
        tree.kernel(p, q, 6, 4)
    with pytest.raises(InvalidDraftsError):
        tree.sample(p, q, [[0, 1], [0, 2]], verifier="rrs_wor", rng=np.random.default_rng(0))
    with pytest.raises(InvalidDraftsError):
        tree.sample(p, q, [0, 1], verifier="rrs", rng=np.random.default_rng(0))
    with pytest.raises(TypeError):
        tree.sample(p, q, [[0, 1]], verifier="rrs", rng=1)
    with pytest.raises(InvalidDraftCountError):
        draft_trees(models.context_free([1.0, 0.0]), 2, 1, replacement=False)


def test_kernel_repr():
    p, q = make_pair(0, 2, 1.0, False)
    K = tree.kernel(p, q, 2, 2, verifier="rrs")
    assert "TreeKernel(verifier='rrs', k=2, gamma=2" in repr(K)
    assert K.k == 2 and K.gamma == 2


@given(seed=st.integers(0, 10_000), k=st.integers(1, 3), zeros=st.booleans())
def test_node_rules_match_the_single_step_verifiers(seed, k, zeros):
    """Each node's rule equals the single-step verifier's exact conditional law (cross-module check)."""
    from otspec.verifiers.step.kseq import kseq_conditional
    from otspec.verifiers.step.rrs import rrs_conditional
    from otspec.verifiers.step.rrs_wor import rrs_wor_conditional

    rng = np.random.default_rng(seed)
    V = 4
    p = rng.dirichlet(np.ones(V))
    q = rng.dirichlet(np.ones(V))
    if zeros:
        p[rng.integers(V)] = 0.0
        p /= p.sum()
    iid_drafts = tuple(int(x) for x in rng.choice(V, size=k, p=q))
    wor_drafts = tuple(int(x) for x in rng.choice(V, size=k, replace=False, p=q))
    for verifier, drafts, ref in (
        ("kseq", iid_drafts, kseq_conditional),
        ("rrs", iid_drafts, rrs_conditional),
        ("rrs_wor", wor_drafts, rrs_wor_conditional),
    ):
        acc, res = tree.node_schedule(p, q, drafts, verifier)
        assert np.allclose(tree._node_law(acc, res, drafts), ref(p, q, list(drafts))[0], atol=FLOAT64_ATOL)


def test_wor_draft_law_stable_when_one_first_token_takes_almost_all_mass():
    # Regression: 1 - cumsum(q) cancelled, the draft-tree law summed to 1.0000221
    # and E[tau] exceeded gamma. The law is the explicit two-tree law: (1, 0) w.p. (1 - e) * 1 and
    # (0, 1) w.p. e * 1 (the second draft is forced), e = 1e-12.
    p, q = models.context_free([0.5, 0.5]), models.context_free([1e-12, 1 - 1e-12])
    trees, w = draft_trees(q, 2, 1, replacement=False)
    assert abs(float(w.sum()) - 1.0) <= EXACT_ATOL
    got = {tuple(t[:, 0].tolist()): float(x) for t, x in zip(trees, w, strict=False)}
    assert got[(1, 0)] == pytest.approx(1 - 1e-12, abs=FLOAT64_ULPS_ATOL) and got[(0, 1)] == pytest.approx(1e-12, rel=EXACT_RTOL)
    # both tokens are always drafted at gamma = 1, so the first position is always accepted
    assert tree.expected_accepted(p, q, 2, 1, verifier="rrs_wor") == pytest.approx(1.0, abs=EXACT_ATOL)
