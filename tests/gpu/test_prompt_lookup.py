"""Prompt-lookup drafts: the matcher, its incremental index, the exact theory, losslessness, bad inputs.

Losslessness end to end: on the random-weight Llama of ``test_decode_lossless.py`` (V = 6, one layer,
hidden size 8), N = 100 000 independent decodings of a prompt with repeated tokens (so that rounds
with a 1-, 2- and 3-gram match and rounds without a match all occur) run as one batch; the law of
the first three generated tokens (216 cells) is compared with the target's exact joint law by
Pearson chi-square (cells of expected count < 5 pooled), false alarm FALSE_ALARM = 1e-6 per case.
The negative control tells the verifier a q that is not the law the drafts came from (half of the
point mass moved to another token); the same test must reject it.
"""

import numpy as np
import pytest
import torch

from otspec.errors import InvalidDraftCountError, InvalidDraftsError, NotAnIntegerError, UnsupportedMethodError
from otspec_gpu import models
from otspec_gpu.decoding import decode
from otspec_gpu.processing import probs_from_logits
from otspec_gpu.prompt_lookup import NgramIndex, PromptLookup, PromptLookupDrafter, lookup
from tests.gpu._stats import first_tokens_law, first_tokens_pvalue
from tests.gpu._tolerances import FALSE_ALARM, FLOAT64_ATOL, MODEL_FLOAT32_ATOL

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: one intra-op thread per module

N = 100_000
PROMPT = [1, 2, 3, 1, 2, 0, 1]


# ------------------------------------------------------------------------------------------------
# The matcher on hand-made contexts


@pytest.mark.parametrize(
    "context,gamma,max_ngram,drafts,n",
    [
        # the longest suffix wins: "2 3" occurred at 1 (followed by 9); "3" alone last occurred at 5 (followed by 7)
        ([1, 2, 3, 9, 5, 3, 7, 2, 3], 2, 3, [9, 5], 2),
        # with max_ngram = 1 only the last token is matched: its most recent earlier occurrence
        ([1, 2, 3, 9, 5, 3, 7, 2, 3], 2, 1, [7, 2], 1),
        # several occurrences of the 2-gram "4 5": the most recent one (start 3) gives "8 ..."
        ([4, 5, 6, 4, 5, 8, 0, 4, 5], 1, 2, [8], 2),
        # a 3-gram match overlapping the suffix: the copy runs into the drafts themselves (LZ77), period 2
        ([7, 1, 2, 1, 2, 1], 5, 3, [2, 1, 2, 1, 2], 3),
        # "2 1 2" never occurred before, "1 2" did (start 1): a 2-gram match
        ([7, 1, 2, 1, 2], 5, 3, [1, 2, 1, 2, 1], 2),
        # a run of one token: the suffix "1 1 1" occurs at 0 (overlapping the suffix), copying 1s
        ([1, 1, 1, 1], 3, 3, [1, 1, 1], 3),
        # no earlier occurrence of the last token: the last token repeated
        ([1, 2, 3], 3, 3, [3, 3, 3], 0),
        # a single-token context has nothing earlier
        ([4], 2, 3, [4, 4], 0),
        # the suffix itself is not a match: "2" occurs only at the end, "1 2" never earlier
        ([2, 1, 2], 2, 2, [1, 2], 1),
    ],
)
def test_lookup_hand_made_contexts(context, gamma, max_ngram, drafts, n):
    assert lookup(context, gamma, max_ngram) == (drafts, n)
    assert NgramIndex(context, max_ngram).propose(gamma) == (drafts, n)


def test_incremental_index_equals_the_reference_rule():
    """500 random contexts over 3 tokens (many matches), grown token by token: index == lookup at every length."""
    rng = np.random.default_rng(11)
    for _ in range(500):
        max_ngram, gamma = int(rng.integers(1, 5)), int(rng.integers(1, 6))
        ctx = [int(t) for t in rng.integers(0, 3, size=int(rng.integers(1, 4)))]
        ix = NgramIndex(ctx, max_ngram)
        for _ in range(int(rng.integers(1, 12))):
            assert ix.propose(gamma) == lookup(ctx, gamma, max_ngram)
            new = [int(t) for t in rng.integers(0, 3, size=int(rng.integers(1, 4)))]
            ctx += new
            ix.extend(new)
        assert ix.propose(gamma) == lookup(ctx, gamma, max_ngram)


def test_drafter_rows_are_one_hot_and_follow_the_contexts():
    d = PromptLookupDrafter([[1, 2, 1], [3]], gamma=3, max_ngram=2, V=5, device="cpu")
    X, Q, n = d.draft()
    assert X.tolist() == [[2, 1, 2], [3, 3, 3]] and n.tolist() == [1, 1]
    assert Q.dtype == torch.float64 and Q.shape == (2, 3, 5)
    assert torch.equal(Q.argmax(-1), X) and torch.equal(Q.sum(-1), torch.ones(2, 3, dtype=torch.float64))
    d.observe([[2, 4], [0]])  # contexts [1, 2, 1, 2, 4] and [3, 0]
    X, _, _ = d.draft()
    assert X.tolist() == [[4, 4, 4], [0, 0, 0]]
    assert d.matched == [[1, 0], [0, 0]]


# ------------------------------------------------------------------------------------------------
# Exact theory: the per-round E[tau | drafts] of token verification with one-hot q


def test_chain_theory_with_one_hot_q_by_hand():
    """p rows (0.5, 0.3, 0.2), (0.1, 0.6, 0.3), (.., .., ..); drafts (0, 1): E[tau] = 0.5 + 0.5 * 0.6 = 0.8."""
    from otspec_gpu.theory import chain_theory

    p = np.array([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]])
    q = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    th = chain_theory(p, q, np.array([0, 1]), "token")
    assert abs(th["expected"] - 0.8) < FLOAT64_ATOL
    assert abs(th["opt_first"] - 0.5) < FLOAT64_ATOL


def test_decoded_round_theory_equals_the_product_of_target_probabilities():
    """First round of a decode: th_expected = sum_i prod_{j <= i} p(d_j | prompt, d_<j), with p from cache-free forwards."""
    target = models.tiny(seed=0, hidden_size=8, layers=1)
    gamma = 3
    res = decode(target, PromptLookup(3), [PROMPT], gamma=gamma, max_new_tokens=4, seed=0, theory=True, top_k_trace=1)
    d, n = lookup(PROMPT, gamma, 3)
    assert n == 1 and d == [2, 0, 1]  # "0 1" is new, "1" last occurred at 3 (followed by 2, 0, 1)
    assert res.trace.columns["drafts"][0, 0].tolist() == d
    lg = target.logits(torch.tensor([PROMPT + d]))[0]  # position len(PROMPT) - 1 + j predicts d[j]
    p = np.array([probs_from_logits(lg[len(PROMPT) - 1 + j], temperature=1.0, dtype=torch.float64)[d[j]].item() for j in range(gamma)])
    hand = float(np.cumprod(p).sum())
    # the decoder's probabilities come from KV-cached forwards, the hand's from one cache-free forward:
    # logits within MODEL_FLOAT32_ATOL, so each probability (and the sum of <= 3 products) within a few of it
    assert abs(res.trace.columns["th_expected"][0] - hand) < 3 * MODEL_FLOAT32_ATOL
    assert res.config["draft"] == "prompt-lookup-n3" and res.config["draft_calls"] == 0
    assert res.config["lookup_matched"][0][0] == 1


# ------------------------------------------------------------------------------------------------
# Losslessness end to end


@pytest.fixture(scope="module")
def target():
    return models.tiny(seed=0, hidden_size=8, layers=1)


def run(target, verifier, gamma, seed=3):
    return decode(
        target, PromptLookup(3), [PROMPT] * N, verifier=verifier, gamma=gamma, max_new_tokens=3, seed=seed, theory=False, top_k_trace=1
    )


@pytest.mark.slow
@pytest.mark.parametrize("verifier,gamma", [("token", 2), ("block", 3)])
def test_first_tokens_follow_the_target_law(target, verifier, gamma):
    res = run(target, verifier, gamma)
    matched = np.array(res.config["lookup_matched"])  # [N, rounds]
    assert {0, 1, 2, 3} <= set(np.unique(matched).tolist())  # every kind of round occurred
    assert first_tokens_pvalue(res.tokens, first_tokens_law(target, PROMPT, temperature=1.0)) > FALSE_ALARM


@pytest.mark.slow
def test_a_q_that_is_not_the_proposal_is_caught(target, monkeypatch):
    """Negative control: the verifier is told q = (delta_d + delta_{d+1 mod V}) / 2 while d is proposed
    with probability 1 (a q that is not the law the drafts came from: d is kept with probability
    min(1, 2 p(d)) instead of p(d))."""
    real = PromptLookupDrafter.draft

    def wrong(self, *a, **kw):
        X, Q, n = real(self, *a, **kw)
        return X, 0.5 * (Q + torch.roll(Q, 1, dims=2)), n

    monkeypatch.setattr(PromptLookupDrafter, "draft", wrong)
    res = run(target, "token", 2)
    assert first_tokens_pvalue(res.tokens, first_tokens_law(target, PROMPT, temperature=1.0)) < FALSE_ALARM


# ------------------------------------------------------------------------------------------------
# Bad inputs


@pytest.mark.parametrize(
    "value,error", [(0, InvalidDraftCountError), (-2, InvalidDraftCountError), (1.5, NotAnIntegerError), (True, NotAnIntegerError)]
)
def test_bad_max_ngram(value, error):
    with pytest.raises(error, match="max_ngram"):
        PromptLookup(value)
    with pytest.raises(error, match="max_ngram"):
        lookup([1, 2], 2, value)


def test_bad_lookup_arguments():
    with pytest.raises(InvalidDraftCountError, match="gamma"):
        lookup([1, 2], 0)
    with pytest.raises(InvalidDraftsError, match="at least one token"):
        lookup([], 2)


@pytest.mark.parametrize("verifier,drafts,gamma", [("rrs", 2, 1), ("kseq", 2, 3), ("greedy_optimal", 3, 1)])
def test_prompt_lookup_needs_a_chain_verifier(target, verifier, drafts, gamma):
    with pytest.raises(UnsupportedMethodError, match=r"proposes one drafted sequence per prompt \(chain\).*'block', 'token'"):
        decode(target, "prompt-lookup", [1, 2, 1], verifier=verifier, drafts=drafts, gamma=gamma, max_new_tokens=2)


def test_prompt_lookup_by_name_is_the_default_settings(target):
    a = decode(target, "prompt-lookup", [PROMPT], max_new_tokens=6, seed=5, theory=False)
    b = decode(target, PromptLookup(), [PROMPT], max_new_tokens=6, seed=5, theory=False)
    assert a.tokens == b.tokens and a.config["draft"] == b.config["draft"] == "prompt-lookup-n3"


def test_cli_prompt_lookup(capsys):
    from otspec.cli import main

    assert (
        main(["decode", "--target", "tiny", "--draft", "prompt-lookup", "--ngram", "2", "--prompt-ids", "1,2,1,2", "-n", "4", "--json"])
        == 0
    )
    out = capsys.readouterr().out
    assert '"draft": "prompt-lookup-n2"' in out
    for argv, msg in [
        (["--draft", "prompt-lookup", "--ngram", "0"], "--ngram must be >= 1"),
        (["--draft", "tiny-draft", "--ngram", "2"], "applies to --draft prompt-lookup only"),
        (["--draft", "prompt-lookup", "--verifier", "rrs", "-k", "2", "-g", "1"], "proposes one drafted sequence per prompt (chain)"),
    ]:
        assert main(["decode", "--target", "tiny", "--prompt-ids", "1,2", "-n", "2", *argv]) == 2
        assert msg in capsys.readouterr().err


def test_greedy_batch_of_unequal_prompts_equals_greedy_decoding(target):
    """temperature 0: every verifier reproduces greedy decoding; a batch of prompts of different
    lengths (left padding, per-row contexts) gives each prompt's own greedy continuation."""
    prompts = [[1, 2, 3, 1, 2], [4], [5, 5, 0, 5, 5, 0, 5]]
    res = decode(target, PromptLookup(2), prompts, gamma=3, temperature=0.0, max_new_tokens=10, seed=0, theory=False)
    for pr, got in zip(prompts, res.tokens, strict=True):
        seq = list(pr)
        for _ in range(10):  # cache-free greedy decoding of the target
            seq.append(int(target.logits(torch.tensor([seq]))[0, -1].argmax()))
        assert got == seq[len(pr) :]
    assert any(n > 0 for row in res.config["lookup_matched"] for n in row)
