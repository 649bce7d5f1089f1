"""K-SEQ's BV boost in torch (``rule="kseq_bv"``): the selection law's conditionals equal the numpy
core's closed form, the sampler draws the core's exact per-tree law, and decoding with it is lossless.
"""

import numpy as np
import pytest
import torch
from scipy import stats

from otspec import models
from otspec.verifiers import tree_deployable as td
from otspec_gpu import models as lms
from otspec_gpu.decoding import decode, mode_for
from otspec_gpu.verifiers import tree, tree_boost
from tests._oracles import make_pair
from tests.gpu._stats import first_tokens_law, first_tokens_pvalue
from tests.gpu._tolerances import FALSE_ALARM

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: one intra-op thread per module

#: float64 closed forms evaluated by two implementations (numpy, torch) of the same arithmetic.
EXACT = 1e-12


def _tree(seed, V, k, g):
    p, q = make_pair(seed, V, 1.0, False)
    rng = np.random.default_rng(seed)
    X = np.array([models.sample_path(q, g, rng=rng) for _ in range(k)])
    P = np.stack([models.conditionals_along(p, row.tolist()) for row in X])
    Q = np.stack([models.conditionals_along(q, row.tolist(), include_last=False) for row in X])
    return P, Q, X


@pytest.mark.parametrize("seed,V,k,g", [(0, 3, 2, 2), (1, 4, 3, 3), (2, 5, 4, 2), (3, 2, 4, 3)])
def test_torch_conditionals_equal_the_core_closed_form(seed, V, k, g):
    P, Q, X = _tree(seed, V, k, g)
    got = tree_boost.mu_conditionals(torch.from_numpy(P), torch.from_numpy(Q), torch.from_numpy(X), k).numpy()
    for j in range(k):
        want = td.mu_conditionals(X[j], P[j], Q[j], k, rule="kseq_bv")
        assert np.abs(got[j] - want).max() <= EXACT


def test_torch_sampler_draws_the_exact_law_of_the_tree():
    """N = 4000 rows of one drafted tree (V = 4, k = 3, gamma = 2) through ``tree.sample(rule="kseq_bv")``
    against the core's exact per-tree law; Pearson chi-square, false alarm 1e-6."""
    P, Q, X = _tree(5, 4, 3, 2)
    law = td.block_law_given_tree(X, P, Q, rule="kseq_bv")
    N = 4000
    rep = [torch.from_numpy(a)[None].expand(N, *a.shape).contiguous() for a in (P, Q, X)]
    out = tree.sample(*rep, rule="kseq_bv", generator=torch.Generator().manual_seed(3))
    keys = sorted(law)
    index = {o: i for i, o in enumerate(keys)}
    counts = np.zeros(len(keys))
    for tau, tok, j in zip(out.accepted.tolist(), out.token.tolist(), out.index.tolist(), strict=True):
        counts[index[tuple(X[j, :tau].tolist()) + (tok,)]] += 1  # a KeyError: a block of probability 0
    expected = N * np.array([law[o] for o in keys])
    big = expected >= 5
    obs, exp = np.append(counts[big], counts[~big].sum()), np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    assert stats.chisquare(obs, exp).pvalue > FALSE_ALARM


def test_decode_mode():
    assert mode_for("kseq_bv", 2, 3).mode == "tree"
    with pytest.raises(Exception, match="numpy core only"):
        mode_for("nested", 2, 3)


@pytest.mark.slow
def test_decoding_with_the_boost_is_lossless():
    """N = 4000 decodings of one prompt (tiny random Llama, V = 6; draft: the target at logit
    temperature 1.6), k = 2 sequences of depth 2: the first three generated tokens against the
    target's exact joint law (216 cells), Pearson chi-square, false alarm 1e-6."""
    target = lms.tiny(seed=0, hidden_size=8, layers=1)
    draft = lms.self_draft(target, 1.6)
    prompt = [1, 2, 3]
    res = decode(
        target, draft, [prompt] * 4000, verifier="kseq_bv", drafts=2, gamma=2, max_new_tokens=3, seed=7, theory=False, top_k_trace=1
    )
    assert res.config["mode"] == "tree"
    assert first_tokens_pvalue(res.tokens, first_tokens_law(target, prompt, temperature=1.0)) > FALSE_ALARM
