"""End-to-end losslessness of the decoding harness (caches, rollback, bonus tokens and all).

On a random-weight Llama with V = 6 tokens (one layer, hidden size 8: a real transformer whose next
token depends on the whole context through attention), N = 100 000 independent decodings of one
prompt run as one batch of 100 000 prompts. The law of the first three generated tokens (216 cells)
is compared with the target's exact joint law, computed by enumeration with cache-free forwards:
P(t1, t2, t3) = p(t1 | c) p(t2 | c t1) p(t3 | c t1 t2). Short draft supports (a top-p nucleus with
fewer than k tokens) are run the same way. Pearson chi-square over the cells (cells of
expected count in (0, 5) pooled into one; cells of probability 0 must stay empty), false alarm 1e-6 per case (about 1e-5 over the file).

The draft is the target at logit temperature 1.6 (single-draft acceptance ~0.85, so blocks are
both fully accepted and rejected at every position). The negative control keeps one rejected draft
token in the target's KV cache; the same test must reject it.
"""

import pytest
import torch

from otspec_gpu import models
from otspec_gpu.decoding import decode
from tests.gpu._stats import first_tokens_law, first_tokens_pvalue
from tests.gpu._tolerances import FALSE_ALARM

N = 100_000
ALPHA = FALSE_ALARM
PROMPT = [1, 2, 3]


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: one intra-op thread per module


@pytest.fixture(scope="module")
def pair():
    target = models.tiny(seed=0, hidden_size=8, layers=1)
    return target, models.self_draft(target, 1.6)


def run(pair, verifier, k, gamma, *, seed=7, **sampling):
    target, draft = pair
    res = decode(
        target,
        draft,
        [PROMPT] * N,
        verifier=verifier,
        drafts=k,
        gamma=gamma,
        max_new_tokens=3,
        seed=seed,
        theory=False,
        top_k_trace=1,
        **sampling,
    )
    return res


CASES = [
    # family: chains
    ("token", 1, 3),
    ("block", 1, 3),
    # family: k single-token drafts (i.i.d., without replacement, greedy draft laws)
    ("rrs", 3, 1),
    ("rrs_wor", 3, 1),
    ("greedy_optimal", 3, 1),
]


@pytest.mark.slow
@pytest.mark.parametrize("verifier,k,gamma", CASES)
def test_first_tokens_follow_the_target_law(pair, verifier, k, gamma):
    res = run(pair, verifier, k, gamma)
    assert res.config["mode"] == ("chain" if k == 1 else "single")
    assert first_tokens_pvalue(res.tokens, first_tokens_law(pair[0], PROMPT, temperature=1.0)) > ALPHA


@pytest.mark.slow
@pytest.mark.parametrize("verifier", ["kseq", "rrs_wor"])
def test_tree_first_tokens_follow_the_target_law(pair, verifier):
    """Trees of k = 2 sequences of depth 2: SpecTr (i.i.d. sequences), RSD (first tokens without replacement)."""
    res = run(pair, verifier, 2, 2)
    assert res.config["mode"] == "tree"
    assert first_tokens_pvalue(res.tokens, first_tokens_law(pair[0], PROMPT, temperature=1.0)) > ALPHA


SHORT_SUPPORT = [
    # (verifier, k, gamma, sampling): the truncated q holds fewer than k tokens in some rounds (top_k
    # = 2 < k: in every round; the nucleus of top_p: in some), which then draft min(k, support)
    # tokens and are verified with that many drafts (token for spechub's point masses)
    ("rrs_wor", 3, 1, {"top_k": 2}),
    ("greedy_optimal", 3, 1, {"top_k": 2}),
    ("rrs_wor", 3, 2, {"top_k": 2}),
    ("spechub", 2, 1, {"top_p": 0.8}),
    ("rrs_wor", 4, 1, {"top_p": 0.8}),
]


@pytest.mark.slow
@pytest.mark.parametrize("verifier,k,gamma,sampling", SHORT_SUPPORT)
def test_short_draft_supports_are_lossless(pair, verifier, k, gamma, sampling):
    """Rounds whose truncated q has fewer than k tokens: still the processed target's joint law.

    spechub (k = 2) needs a one-token nucleus of q next to a wider one of p: a draft sharper than
    the target (logit temperature 0.6) gives both."""
    if verifier == "spechub":
        pair = (pair[0], models.self_draft(pair[0], 0.6))
    res = run(pair, verifier, k, gamma, **sampling)
    assert (res.trace.columns["n_drafts"] < k).any()  # short rounds occurred
    assert first_tokens_pvalue(res.tokens, first_tokens_law(pair[0], PROMPT, **sampling)) > ALPHA


@pytest.mark.slow
def test_processed_distributions_are_lossless(pair):
    """Temperature, top-k and top-p applied to both models: the output follows the processed target."""
    sampling = dict(temperature=0.8, top_k=5, top_p=0.95)
    res = run(pair, "block", 1, 2, **sampling)
    assert first_tokens_pvalue(res.tokens, first_tokens_law(pair[0], PROMPT, **sampling)) > ALPHA


@pytest.mark.slow
def test_wrong_rollback_is_caught(pair, monkeypatch):
    """Negative control: keeping one rejected draft token in the target cache must fail the test."""
    from otspec_gpu.scoring import DecodeCaches

    monkeypatch.setattr(DecodeCaches, "target_keep", lambda self, tau, gamma: torch.clamp(tau + 2, max=gamma + 1))
    res = run(pair, "block", 1, 3)
    assert first_tokens_pvalue(res.tokens, first_tokens_law(pair[0], PROMPT, temperature=1.0)) < ALPHA
