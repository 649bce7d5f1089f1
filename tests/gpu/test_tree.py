"""otspec_gpu.verifiers.tree: SpecTr / RRS over k draft sequences equal the numpy tree kernels.

* ``conditional`` equals :func:`otspec.verifiers.tree.kernel`'s law of the emitted block for every
  drafted tree of random small models (V <= 4, k <= 3, gamma <= 3, exact zeros): 1e-12 in float64,
  1e-5 in float32.
* ``sample`` draws from ``conditional``: chi-square per fixed drafted tree over B = 100 000 rows
  (false-alarm rate 1e-6 per comparison; power against a 0.02 TV error in
  ``test_chi_square_design_has_power``), and a negative control (RSD trees verified with the
  with-replacement rule) that the same test rejects.
* ``draft_sequences`` draws trees with the law of :func:`otspec.trees.draft_trees`.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from scipy import stats

from otspec import models
from otspec.errors import InvalidDraftsError, ShapeMismatchError, UnsupportedMethodError
from otspec.trees import draft_trees
from otspec.verifiers import tree as np_tree
from otspec_gpu.verifiers import TREE, StepOutput, chain, tree
from tests.gpu._stats import pooled_chi_square
from tests.gpu._tolerances import (
    DESIGN_POWER,
    FALSE_ALARM,
    FLOAT32_KERNEL_ATOL,
    FLOAT32_ROUNDING_ATOL,
    FLOAT32_SUM_ATOL,
    FLOAT64_FEW_OPS_ATOL,
    FLOAT64_KERNEL_ATOL,
    TV_DETECT,
)

N_ROWS = 100_000
ALPHA = FALSE_ALARM
RULES = TREE


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: one intra-op thread per module


def along(p_model, q_model, trees):
    """(P [M, k, gamma + 1, V], Q [M, k, gamma, V]) float64 conditionals along every sequence."""
    trees = np.asarray(trees)
    g, V = trees.shape[2], p_model.V
    prefixes = {tuple(s[:i]) for t in trees.tolist() for s in t for i in range(g + 1)}
    p_of = {pre: p_model(pre) for pre in prefixes}
    q_of = {pre: q_model(pre) for pre in prefixes}
    P = np.empty(trees.shape[:2] + (g + 1, V))
    Q = np.empty(trees.shape[:2] + (g, V))
    for m, t in enumerate(trees.tolist()):
        for j, s in enumerate(t):
            for i in range(g + 1):
                P[m, j, i] = p_of[tuple(s[:i])]
                if i < g:
                    Q[m, j, i] = q_of[tuple(s[:i])]
    return P, Q


def kernel_tensor(K, V: int) -> np.ndarray:
    """The numpy per-tree laws {O: P(O)} in the torch layout [M, k, gamma + 1, V] (lowest sequence index)."""
    M, k, g = K.trees.shape
    W = np.zeros((M, k, g + 1, V))
    for m, (t, law) in enumerate(zip(K.trees, K.laws, strict=False)):
        for o, pr in law.items():
            tau = len(o) - 1
            j = next(j for j in range(k) if tuple(int(v) for v in t[j, :tau]) == o[:tau])
            W[m, j, tau, o[-1]] += pr
    return W


SHAPES = [(3, 2, 2), (4, 3, 1), (2, 3, 3), (3, 3, 2), (4, 2, 2), (2, 1, 3)]  # (V, k, gamma)


@pytest.mark.parametrize("rule", RULES)
def test_conditional_equals_numpy_kernel(rule, device):
    for i, (V, k, g) in enumerate(SHAPES):
        pm = models.dirichlet(V, seed=10 * i + 1, zero_prob=0.25 if i % 2 else 0.0, concentration=0.8)
        qm = models.dirichlet(V, seed=10 * i + 2, zero_prob=0.2) if i % 3 else models.close_draft(pm, temperature=1.4, noise=0.3, seed=i)
        if rule == "rrs_wor" and k > np.count_nonzero(qm(())):
            continue
        K = np_tree.kernel(pm, qm, k, g, verifier=rule)
        P, Q = along(pm, qm, K.trees)
        want = kernel_tensor(K, V)
        x = torch.as_tensor(np.array(K.trees), device=device)
        law = tree.conditional(torch.as_tensor(P, device=device), torch.as_tensor(Q, device=device), x, rule=rule)
        np.testing.assert_allclose(law.cpu().numpy(), want, rtol=0, atol=FLOAT64_KERNEL_ATOL)
        law32 = tree.conditional(
            torch.as_tensor(P, dtype=torch.float32, device=device), torch.as_tensor(Q, dtype=torch.float32, device=device), x, rule=rule
        )
        assert law32.dtype == torch.float32
        np.testing.assert_allclose(law32.cpu().numpy(), want, rtol=0, atol=FLOAT32_KERNEL_ATOL)
        # E[tau | tree]: from the law, and without building it; and the numpy kernel's average.
        e = tree.expected_accepted_given_drafts(torch.as_tensor(P), torch.as_tensor(Q), x.cpu(), rule=rule).numpy()
        np.testing.assert_allclose(tree.expected_accepted(law.cpu()).numpy(), e, rtol=0, atol=FLOAT64_KERNEL_ATOL)
        assert abs(float(K.weights @ e) - K.expected_accepted()) < FLOAT64_KERNEL_ATOL


def test_one_sequence_is_token_verification():
    """k = 1: every rule is token verification of the chain (the chain module's law)."""
    pm = models.dirichlet(4, seed=3, zero_prob=0.2)
    qm = models.close_draft(pm, temperature=1.5, noise=0.4, seed=1)
    K = np_tree.kernel(pm, qm, 1, 3, verifier="rrs")
    P, Q = along(pm, qm, K.trees)
    want = chain.token_conditional(torch.as_tensor(P[:, 0]), torch.as_tensor(Q[:, 0]), torch.as_tensor(np.array(K.trees[:, 0])))
    for rule in RULES:
        got = tree.conditional(torch.as_tensor(P), torch.as_tensor(Q), torch.as_tensor(np.array(K.trees)), rule=rule)
        torch.testing.assert_close(got[:, 0], want, rtol=0, atol=FLOAT64_FEW_OPS_ATOL)


# ------------------------------------------------------------------------------------------------
def test_chi_square_design_has_power():
    """N = 1e5 rows: noncentrality >= N (2 TV)^2 = 160 at TV = 0.02 (Cauchy-Schwarz), rejected with
    probability > 0.999 at the largest df used here, k (gamma + 1) V - 1 = 44."""
    df = 3 * 3 * 5 - 1
    assert stats.ncx2.sf(stats.chi2.isf(ALPHA, df), df, N_ROWS * (2 * TV_DETECT) ** 2) > DESIGN_POWER


def fixed_trees(rule):
    """Two drafted trees (k = 3, gamma = 2, V = 5) with their conditionals, chosen among all drafted
    trees of a random pair as those whose law of (path, tau) has the largest entropy; for the i.i.d.
    rules the first has two sequences sharing their first token."""
    pm = models.dirichlet(5, seed=21, zero_prob=0.2, concentration=1.5)
    qm = models.dirichlet(5, seed=22, concentration=1.5)
    trees, _ = draft_trees(qm, 3, 2, replacement=rule != "rrs_wor")
    trees = np.array(trees)[np.random.default_rng(0).choice(len(trees), 400, replace=False)]
    P, Q = along(pm, qm, trees)
    law = tree.conditional(torch.as_tensor(P), torch.as_tensor(Q), torch.as_tensor(trees), rule=rule).sum(-1).flatten(1).numpy()
    ent = -(law * np.log(np.where(law > 0, law, 1.0))).sum(1)
    shared = trees[:, 0, 0] == trees[:, 1, 0]
    first = int(np.argmax(np.where(shared, ent, -1.0))) if rule != "rrs_wor" else int(np.argmax(ent))
    ent[first] = -1.0
    pick = [first, int(np.argmax(ent))]
    return P[pick], Q[pick], trees[pick]


def _batch(P, Q, x, n):
    return torch.as_tensor(P).expand(n, -1, -1, -1), torch.as_tensor(Q).expand(n, -1, -1, -1), torch.as_tensor(x).expand(n, -1, -1)


def outcome_counts(out: StepOutput, k: int, g: int, V: int) -> np.ndarray:
    cell = ((out.index * (g + 1) + out.accepted) * V + out.token).numpy()
    return np.bincount(cell, minlength=k * (g + 1) * V)


def _chi_square_tree(rule, P, Q, x, law, gen, dtype=torch.float64, shared=False):
    """``shared``: pass the conditionals once (``[1, k, gamma + 1, V]``) for all rows, not per row."""
    k, g, V = x.shape[0], x.shape[1], P.shape[-1]
    Pb, Qb, xb = _batch(P, Q, x, N_ROWS)
    if shared:
        Pb, Qb = Pb[:1], Qb[:1]
    out = tree.sample(Pb.to(dtype), Qb.to(dtype), xb, rule=rule, generator=gen)
    # The path's first tau tokens are the emitted prefix by construction; the cell encodes it.
    counts = outcome_counts(out, k, g, V)
    impossible = int(counts[law.ravel() == 0].sum())
    stat, thr, df = pooled_chi_square(counts, law.ravel(), N_ROWS, ALPHA)
    return stat, thr, df, impossible


@pytest.mark.parametrize("shared", [False, True], ids=["per_row", "shared_rows"])
@pytest.mark.parametrize("rule", RULES)
def test_sampler_matches_conditional(rule, shared):
    """Per-row conditionals ``[B, ...]`` and one shared set ``[1, ...]`` (the node rules then run on
    a ``[1, V]`` row for every draft row at once) both sample the exact law."""
    gen = torch.Generator().manual_seed(17 + shared)
    for P, Q, trees in [fixed_trees(rule)]:
        for m in range(trees.shape[0]):
            law = tree.conditional(*_batch(P[m], Q[m], trees[m], 1), rule=rule)[0].numpy()
            assert (law.sum(-1)[:, 1:] > 0).sum() >= 2, "the fixed tree must reach depth >= 1 on several branches"
            dtype = torch.float32 if m == 1 else torch.float64  # the second tree sampled in float32
            stat, thr, df, impossible = _chi_square_tree(rule, P[m], Q[m], trees[m], law, gen, dtype, shared)
            assert impossible == 0, "an outcome of probability 0 was emitted"
            assert df >= 5 and stat < thr, f"{rule} tree {m}: chi2 = {stat:.1f} >= {thr:.1f} (df {df})"


def test_negative_control_wrong_node_rule(monkeypatch):
    """The classic mismatch of draft law and verifier: RSD trees (first tokens drafted without
    replacement) verified with the with-replacement RRS rule at the root. The chi-square against the
    true rrs_wor law must reject it."""
    P, Q, trees = fixed_trees("rrs_wor")
    laws = [tree.conditional(*_batch(P[m], Q[m], trees[m], 1), rule="rrs_wor")[0].numpy() for m in range(1)]
    wrong = tree.conditional(*_batch(P[0], Q[0], trees[0], 1), rule="rrs", validate=False)[0].numpy()
    assert 0.5 * np.abs(wrong - laws[0]).sum() > 0.1  # the first tree separates the rules (TV 0.23)
    wrong_rule = dataclasses.replace(tree.VERIFIERS["rrs_wor"], single_step=tree.VERIFIERS["rrs"].single_step)
    monkeypatch.setitem(tree.VERIFIERS, "rrs_wor", wrong_rule)
    stat, thr, _, impossible = _chi_square_tree("rrs_wor", P[0], Q[0], trees[0], laws[0], torch.Generator().manual_seed(3))
    assert stat >= thr or impossible


@pytest.mark.parametrize("shared", [False, True], ids=["per_row", "shared_rows"])
def test_determinism(shared):
    P, Q, trees = fixed_trees("rrs")
    args = _batch(P[0], Q[0], trees[0], 2000)
    if shared:
        args = (args[0][:1], args[1][:1], args[2])
    a = tree.sample(*args, rule="kseq", generator=torch.Generator().manual_seed(5))
    b = tree.sample(*args, rule="kseq", generator=torch.Generator().manual_seed(5))
    c = tree.sample(*args, rule="kseq", generator=torch.Generator().manual_seed(6))
    assert all(torch.equal(u, v) for u, v in zip(a, b, strict=False))
    assert not all(torch.equal(u, v) for u, v in zip(a, c, strict=False))


# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("replacement", [True, False])
def test_draft_sequences_law(replacement):
    """draft_sequences' trees have the law of otspec.trees.draft_trees (chi-square over all
    V^(k gamma) = 81 trees), and the returned q rows are the drafter's conditionals."""
    V, k, g, n = 3, 2, 2, 50_000
    qm = models.dirichlet(V, seed=8, concentration=1.0)
    table = [np.stack([qm(pre) for pre in itertools.product(range(V), repeat=t)]) for t in range(g)]

    def next_q(prefix):
        code = torch.zeros(prefix.shape[0], dtype=torch.long)
        for i in range(prefix.shape[1]):
            code = code * V + prefix[:, i]
        return torch.as_tensor(table[prefix.shape[1]])[code]

    x, q = tree.draft_sequences(next_q, n, k, g, replacement=replacement, generator=torch.Generator().manual_seed(9))
    assert x.shape == (n, k, g) and q.shape == (n, k, g, V)
    torch.testing.assert_close(q[:, :, 1], torch.as_tensor(table[1])[x[:, :, 0]], rtol=0, atol=0)
    trees, w = draft_trees(qm, k, g, replacement=replacement)
    codes = lambda t: (t.reshape(t.shape[0], -1) * V ** np.arange(k * g)[::-1]).sum(1)
    probs = np.zeros(V ** (k * g))
    probs[codes(np.asarray(trees))] = w
    counts = np.bincount(codes(x.numpy()), minlength=V ** (k * g))
    assert counts[probs == 0].sum() == 0
    stat, thr, df = pooled_chi_square(counts, probs, n, ALPHA)
    assert df >= 20 and stat < thr


# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rule", RULES)
def test_float32_equal_and_disjoint(rule):
    """p == q: every draft is accepted; disjoint supports: tau = 0 and the next token ~ p. No NaN."""
    V, k, g, n = 6, 3, 2, 4000
    p = torch.tensor([0.3, 0.2, 0.2, 0.1, 0.1, 0.1])
    x = torch.tensor([[[0, 1], [1, 2], [2, 0]]])
    P = p.expand(1, k, g + 1, V).contiguous()
    law = tree.conditional(P, P[:, :, :g], x, rule=rule)
    assert torch.isfinite(law).all()
    assert torch.all(law[:, :, :g] == 0) and abs(float(law.sum()) - 1) < FLOAT32_SUM_ATOL
    out = tree.sample(
        P.expand(n, -1, -1, -1),
        P[:, :, :g].expand(n, -1, -1, -1),
        x.expand(n, -1, -1),
        rule=rule,
        generator=torch.Generator().manual_seed(0),
    )
    assert torch.all(out.accepted == g)
    q = torch.tensor([0.0, 0.0, 0.0, 0.4, 0.3, 0.3])
    pd = torch.tensor([0.5, 0.5, 0.0, 0.0, 0.0, 0.0])
    xd = torch.tensor([[[3, 4], [4, 4], [5, 3]]])
    Pd, Qd = pd.expand(1, k, g + 1, V).contiguous(), q.expand(1, k, g, V).contiguous()
    law = tree.conditional(Pd, Qd, xd, rule=rule)
    want = torch.zeros(1, k, g + 1, V)
    want[0, 0, 0] = pd
    torch.testing.assert_close(law, want, rtol=0, atol=FLOAT32_ROUNDING_ATOL)
    out = tree.sample(
        Pd.expand(n, -1, -1, -1), Qd.expand(n, -1, -1, -1), xd.expand(n, -1, -1), rule=rule, generator=torch.Generator().manual_seed(0)
    )
    assert torch.all(out.accepted == 0) and torch.all(out.token < 2) and torch.all(out.index == 0)


def test_bad_inputs():
    P = torch.full((1, 2, 3, 4), 0.25)
    Q = torch.full((1, 2, 2, 4), 0.25)
    x = torch.tensor([[[0, 1], [0, 2]]])
    with pytest.raises(UnsupportedMethodError, match="rule must be one of"):
        tree.conditional(P, Q, x, rule="spectr")
    with pytest.raises(ShapeMismatchError, match="p must have shape"):
        tree.sample(P[:, :, :2], Q, x, rule="rrs", generator=torch.Generator())
    with pytest.raises(ShapeMismatchError, match="drafts must have shape"):
        tree.conditional(P, Q, x[0], rule="rrs")
    with pytest.raises(InvalidDraftsError, match="distinct first tokens"):
        tree.conditional(P, Q, x, rule="rrs_wor")
    Qz = Q.clone()
    Qz[0, 1, 1] = torch.tensor([0.5, 0.5, 0.0, 0.0])
    with pytest.raises(InvalidDraftsError, match=r"drafts\[0, 1, 1\]"):
        tree.conditional(P, Qz, x, rule="kseq")
    x2 = torch.tensor([[[0, 1], [0, 2]], [[1, 1], [2, 2]]])
    with pytest.raises(ShapeMismatchError, match="like q"):  # p shared, q per row
        tree.conditional(P, Q.expand(2, -1, -1, -1), x2, rule="rrs")
    with pytest.raises(ShapeMismatchError, match="shared by every row"):  # q neither [B, ...] nor [1, ...]
        tree.conditional(P.expand(3, -1, -1, -1), Q.expand(3, -1, -1, -1), x2, rule="rrs")
    with pytest.raises(InvalidDraftsError, match=r"drafts\[1, 1, 1\]"):  # shared q checked against every row
        tree.sample(P, Qz, torch.tensor([[[0, 1], [0, 1]], [[1, 1], [2, 3]]]), rule="kseq", generator=torch.Generator())


@pytest.mark.parametrize("rule", RULES)
def test_shared_rows_equal_repeated_rows(rule):
    """Conditionals passed once (``[1, ...]``) give exactly the law of the same rows repeated for
    every row of drafts (here: the 6 orders of one drafted tree's sequences)."""
    P, Q, trees = fixed_trees(rule)
    x = torch.as_tensor(trees[0])[torch.tensor(list(itertools.permutations(range(trees.shape[1]))))]  # [6, k, gamma]
    Pt, Qt = torch.as_tensor(P[:1]), torch.as_tensor(Q[:1])
    n = x.shape[0]
    want = tree.conditional(Pt.expand(n, -1, -1, -1).contiguous(), Qt.expand(n, -1, -1, -1).contiguous(), x, rule=rule)
    assert torch.equal(tree.conditional(Pt, Qt, x, rule=rule), want)
    torch.testing.assert_close(
        tree.expected_accepted_given_drafts(Pt, Qt, x, rule=rule), tree.expected_accepted(want), rtol=0, atol=FLOAT64_KERNEL_ATOL
    )
