"""The decoder's modes, input errors, batching, and the per-round theory against the torch twins.

All on the tiny random-weight models (V = 6), so each test takes well under a second of model time.
With ``top_k_trace = V`` the trace keeps every distribution whole, so the numpy-core theory it
records can be recomputed from the trace alone by the independent torch kernels.
"""

import numpy as np
import pytest
import torch

from otspec.errors import OtspecInputError, UnsupportedMethodError
from otspec_gpu import models
from otspec_gpu.decoding import IncompatibleModelsError, decode, mode_for
from otspec_gpu.verifiers import SINGLE_STEP, chain
from tests.gpu._tolerances import EXACT_ATOL, FLOAT64_ATOL

V = 6


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: one intra-op thread per module


@pytest.fixture(scope="module")
def pair():
    t = models.tiny(seed=0)
    return t, models.self_draft(t, 1.6)


def test_plan_modes():
    assert mode_for("block", 1, 4).mode == "chain"
    assert mode_for("kseq", 4, 1).mode == "single"
    assert mode_for("rrs_wor", 3, 1).draft_law == "without_replacement"
    tree = mode_for("kseq", 4, 3)
    assert (tree.mode, tree.rule) == ("tree", "kseq")
    assert mode_for("rrs_wor", 2, 3).draft_law == "without_replacement"


@pytest.mark.parametrize(
    "args, match",
    [
        (("nss", 2, 4), "single-step verifiers need gamma = 1"),
        (("block", 2, 4), "verifies one drafted block"),
        (("magic", 1, 1), "unknown verifier 'magic'"),
        (("approximate", 2, 1), "lossy"),
    ],
)
def test_plan_errors(args, match):
    with pytest.raises(UnsupportedMethodError, match=match):
        mode_for(*args)


def test_input_errors(pair):
    t, d = pair
    with pytest.raises(IncompatibleModelsError, match="vocabularies differ"):
        decode(t, models.tiny(seed=1, vocab_size=7), [1, 2], max_new_tokens=2)
    with pytest.raises(OtspecInputError, match=r"must lie in \[0, 6\)"):
        decode(t, d, [1, 9], max_new_tokens=2)
    with pytest.raises(OtspecInputError, match="no tokenizer"):
        decode(t, d, "text", max_new_tokens=2)
    with pytest.raises(OtspecInputError, match="temperature must be"):
        decode(t, d, [1, 2], temperature=-1.0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        decode(t, d, [1, 2], max_new_tokens=0)


def test_seeded_and_callable_module(pair):
    import otspec_gpu

    a = otspec_gpu.decode(*pair, [[1, 2], [3]], verifier="block", gamma=3, max_new_tokens=10, seed=4, theory=False)
    b = decode(*pair, [[1, 2], [3]], verifier="block", gamma=3, max_new_tokens=10, seed=4, theory=False)
    assert a.tokens == b.tokens and all(len(x) == 10 for x in a.tokens)
    c = decode(*pair, [[1, 2], [3]], verifier="block", gamma=3, max_new_tokens=10, seed=5, theory=False)
    assert c.tokens != a.tokens


def _full(trace, name, n_pos):
    """Dense [n, n_pos, V] distributions rebuilt from the trace's top-K (K = V: exact)."""
    ids, vals = trace[f"{name}_top_ids"], trace[f"{name}_top"]
    out = np.zeros(ids.shape[:2] + (V,))
    np.put_along_axis(out, ids, vals, -1)
    assert out.shape[1] == n_pos
    return torch.from_numpy(out)


@pytest.mark.parametrize("verifier", ["token", "block"])
def test_chain_theory_matches_torch_conditional(pair, verifier):
    res = decode(*pair, [[1, 2, 3], [4], [5, 0]], verifier=verifier, gamma=3, max_new_tokens=20, seed=1, top_k_trace=V)
    tr = res.trace
    P, Q = _full(tr, "p", 4), _full(tr, "q", 3)
    X = torch.from_numpy(tr["drafts"][:, 0, :])
    for rule, col in (("token", "th_exp_token"), ("block", "th_exp_block")):
        cond = getattr(chain, f"{rule}_conditional")(P, Q, X)
        np.testing.assert_allclose(chain.expected_accepted(cond).numpy(), tr[col], atol=EXACT_ATOL)
    np.testing.assert_allclose(tr["th_expected"], tr[f"th_exp_{verifier}"])
    # sum_x min(p0, q0) from the trace
    np.testing.assert_allclose(torch.minimum(P[:, 0], Q[:, 0]).sum(-1).numpy(), tr["th_opt_first"], atol=FLOAT64_ATOL)


@pytest.mark.parametrize("verifier,k", [("kseq", 3), ("rrs", 2), ("rrs_wor", 3), ("greedy_optimal", 2)])
def test_single_step_theory_matches_torch_conditional(pair, verifier, k):
    res = decode(*pair, [[1, 2, 3], [4]], verifier=verifier, drafts=k, gamma=1, max_new_tokens=16, seed=2, top_k_trace=V)
    tr = res.trace
    p, q = _full(tr, "p", 2)[:, 0], _full(tr, "q", 1)[:, 0]
    x = torch.from_numpy(tr["drafts"][:, :, 0])
    law = SINGLE_STEP[verifier].conditional(p, q, x)  # [n, V]
    member = torch.zeros_like(law, dtype=torch.bool).scatter_(1, x, True)
    np.testing.assert_allclose((law * member).sum(-1).numpy(), tr["th_expected_cond"], atol=EXACT_ATOL)
    assert np.all(tr[f"th_exp_{verifier}"] <= tr["th_optimum"] + EXACT_ATOL)
    assert np.all(tr["th_expected_cond"] >= 0) and np.all(tr["th_expected_cond"] <= 1 + FLOAT64_ATOL)


def test_tree_theory_of_one_sequence_is_token_verification(pair):
    """A tree with k = 1 is token verification: both theories agree path by path."""
    res = decode(*pair, [[1, 2]], verifier="kseq", drafts=1, gamma=3, max_new_tokens=12, seed=3, top_k_trace=V)
    assert res.config["mode"] == "tree"
    tr = res.trace
    P, Q = _full(tr, "p", 4), _full(tr, "q", 3)
    cond = chain.token_conditional(P, Q, torch.from_numpy(tr["drafts"][:, 0, :]))
    np.testing.assert_allclose(tr["th_expected"], chain.expected_accepted(cond).numpy(), atol=EXACT_ATOL)
