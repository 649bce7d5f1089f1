"""The decoding pipeline's parts and the defects fixed in them: short draft supports (temperature 0,
top_k < k, top_p), the zero-weight guard of the token draws, per-phase timing on CUDA, and the
report's verdict on too few rounds."""

import math

import numpy as np
import pytest
import torch

from otspec_gpu import models
from otspec_gpu.decoding import decode, mode_for
from otspec_gpu.drafting import ModelDrafter
from otspec_gpu.recording import PhaseClock
from otspec_gpu.report import summarize

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: one intra-op thread per module


@pytest.fixture(scope="module")
def pair50():
    """V = 50 with sharp next-token laws (output layer x 3): a top-p nucleus of 0.9 often holds < 3 tokens."""
    return models.tiny(vocab_size=50, seed=0, scale=3.0), models.tiny(vocab_size=50, seed=1, scale=3.0)


def greedy_reference(target, prompt: list, n: int) -> list:
    """The target's argmax continuation, by cache-free forwards."""
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(torch.argmax(target.logits(torch.tensor([seq]))[0, -1])))
    return seq[len(prompt) :]


@pytest.mark.parametrize(
    "verifier,k,gamma,sampling",
    [
        ("rrs_wor", 3, 1, {"top_p": 0.9}),  # a round's nucleus has < 3 tokens now and then
        ("rrs_wor", 3, 1, {"top_k": 2}),
        ("greedy_optimal", 3, 1, {"top_k": 2}),
        ("spechub", 2, 1, {"top_k": 1}),
        ("rrs_wor", 3, 2, {"top_p": 0.9}),
    ],
)
def test_short_supports_decode_to_the_end(pair50, verifier, k, gamma, sampling):
    """A prompt whose truncated q has fewer than k tokens no longer kills the batch mid-run."""
    t, d = pair50
    res = decode(t, d, [[1, 2, 3], [4, 5]], verifier=verifier, drafts=k, gamma=gamma, max_new_tokens=60, seed=0, **sampling)
    assert [len(x) for x in res.tokens] == [60, 60]
    nd = res.trace.columns["n_drafts"]
    assert (nd < k).any() and (nd >= 1).all() and (nd <= k).all()
    th = res.trace.columns["th_expected"]
    assert np.isfinite(th).all()  # the theory is computed with the law actually used


@pytest.mark.parametrize("verifier,k,gamma", [("rrs_wor", 3, 1), ("greedy_optimal", 3, 1), ("spechub", 2, 1), ("rrs_wor", 3, 3)])
def test_temperature_zero_is_greedy_for_every_draft_law(pair50, verifier, k, gamma):
    t, d = pair50
    res = decode(t, d, [1, 2, 3], verifier=verifier, drafts=k, gamma=gamma, temperature=0, max_new_tokens=12, seed=0)
    assert res.tokens[0] == greedy_reference(t, [1, 2, 3], 12)
    assert (res.trace.columns["n_drafts"] == 1).all()  # a point mass: one real draft


def test_token_draws_never_return_a_zero_weight_token(monkeypatch):
    """A uniform at the very top (u * S reaching S) draws the last token of positive weight, never a
    trailing token of weight 0 (the decoder's former sampler clamped to V - 1)."""
    q = torch.tensor([[0.1, 0.2, 0.0, 0.0]], dtype=torch.float64)
    u_top = torch.tensor([1.0], dtype=torch.float64)
    monkeypatch.setattr(torch, "rand", lambda *a, **kw: u_top.clone())
    x, n = ModelDrafter("chain", 1, 1, 1, "iid").first_tokens(q, torch.Generator())
    assert x.tolist() == [1] and n.tolist() == [1]


def test_phase_clock_synchronises_cuda_at_each_boundary(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    clock = PhaseClock(torch.device("cuda"))
    assert clock.timer == "perf_counter+cuda_synchronize"
    clock.start()
    clock.lap("draft")
    clock.lap("target")
    assert len(calls) == 4 and set(clock.times) == {"draft", "target"}
    assert PhaseClock(torch.device("cpu")).timer == "perf_counter"


def test_trace_config_says_how_phases_were_timed():
    t = models.tiny(seed=0)
    res = decode(t, models.self_draft(t, 1.5), [1, 2], max_new_tokens=4)
    assert res.config["timer"] == "perf_counter"
    assert res.trace.config["timer"] == "perf_counter"


def test_one_round_gives_no_verdict():
    """One record: the sample variance is undefined, so the report says 'too few rounds', not 'agree'."""
    t = models.tiny(seed=0)
    res = decode(t, models.self_draft(t, 1.5), [1, 2], verifier="block", gamma=4, max_new_tokens=2)
    rep = summarize(res.trace)
    (a,) = rep.agreement
    assert a.n == 1 and math.isinf(a.ci_high) and not a.decided and a.verdict == "too few rounds"
    row = dict(rep.table())["accepted tokens | path: realized vs expected"]
    assert "too few rounds" in row and "agree" not in row
    assert rep.to_dict()["agreement"][0]["verdict"] == "too few rounds"


def test_mode_names():
    m = mode_for("rrs_wor", 3, 1)
    assert (m.mode, m.k, m.gamma, m.draft_law) == ("single", 3, 1, "without_replacement")


@pytest.mark.parametrize("law", ["without_replacement", "greedy"])
def test_more_drafts_than_tokens_follow_the_short_support_rule(law):
    """k = 5 drafts over V = 3 tokens: the first 3 slots are exactly the law's 3 drafts from the same
    uniforms (every token once, in the law's order), the other 2 repeat the first draft, and
    n_drafts = 3 (formerly ``selected index k out of range`` / ``greedy drafts need k <= V``)."""
    from otspec_gpu.drafting import sample_drafts

    q = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64)
    for seed in range(20):
        x, n = ModelDrafter("single", 1, 5, 1, law).first_tokens(q.expand(5, -1), torch.Generator().manual_seed(seed))
        ref = sample_drafts(q, 3, law, generator=torch.Generator().manual_seed(seed))[0].tolist()
        assert x.tolist() == ref + [ref[0]] * 2 and n.tolist() == [3]


@pytest.mark.parametrize("verifier,gamma", [("wor_iid", 1), ("rrs_wor", 1), ("greedy_optimal", 1), ("rrs_wor", 3), ("kseq", 1)])
def test_more_drafts_than_the_vocabulary_decode(verifier, gamma):
    """drafts = 8 > V = 6, as kseq always allowed: every round has min(k, support) <= V real drafts
    and the theory is computed with the law actually used."""
    t = models.tiny(seed=0)
    res = decode(t, models.self_draft(t, 1.6), [[1, 2], [3]], verifier=verifier, drafts=8, gamma=gamma, max_new_tokens=8, seed=0)
    assert [len(x) for x in res.tokens] == [8, 8]
    nd = res.trace.columns["n_drafts"]
    assert (nd >= 1).all() and (nd <= (8 if verifier == "kseq" else 6)).all()
    assert np.isfinite(res.trace.columns["th_expected"]).all()


def test_cli_more_drafts_than_the_vocabulary(capsys):
    from otspec.cli import main

    argv = ["decode", "--target", "tiny", "--draft", "tiny-draft", "--prompt-ids", "1,2", "-n", "3", "--json", "-g", "1", "-k", "9"]
    assert main([*argv, "--verifier", "wor_iid"]) == 0
    assert '"tokens"' in capsys.readouterr().out
