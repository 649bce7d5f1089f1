r"""Each torch sampler draws from its own ``conditional``: a batched chi-square test per fixed draft
tuple, a negative control that reuses the accept uniform for the residual draw (which the test
must catch), determinism and row independence.

The test. For one (p, q, draft tuple) we run the sampler on N = 100 000 identical rows and compare
the token counts with N * conditional by Pearson's chi-square over the tokens of positive
conditional probability (df = their number - 1); a token of conditional probability 0 must never
appear. Every chi-square test in this file uses the threshold ``chi2.isf(1e-6 / N_TESTS, df)``, so
the whole file raises a false alarm with probability <= 1e-6 (Bonferroni).

Power. A sampler whose law is at total-variation distance 0.02 from the conditional has
noncentrality N * sum (pi' - pi)^2 / pi >= N * (sum |pi' - pi|)^2 = N * 0.04^2 = 160 (Cauchy-Schwarz),
and :func:`test_power_against_tv_002` checks that the noncentral chi-square with that
noncentrality exceeds the threshold with probability >= 0.999 for every df used here (V <= 6).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
from scipy import stats

from otspec_gpu.verifiers import SINGLE_STEP, StepOutput
from otspec_gpu.verifiers.step import token as token_module
from tests.gpu._single_step import COMBOS, LAWS, extra_for, random_law_pair
from tests.gpu._tolerances import ACCEPT_RATE_ATOL, DESIGN_POWER, FALSE_ALARM, FLOAT64_ULPS_ATOL, TV_DETECT

N = 100_000
# one random law per combination; approximate also with a random predicate (case 1)
SAMPLE_CASES = [(n, law, k, 0) for n, law, k in COMBOS] + [("approximate", "iid", 1, 1)]
N_TESTS = len(SAMPLE_CASES) + 6  # + negative control, TV control, two independence tests, two rrs_wor per-row tests
FAMILY_ALPHA = FALSE_ALARM
V_MAX = 6


def threshold(df: int) -> float:
    return float(stats.chi2.isf(FAMILY_ALPHA / N_TESTS, df))


def chi_square(tokens: np.ndarray, pi: np.ndarray) -> tuple[float, int]:
    """Pearson statistic and df of ``tokens`` against the law ``pi``; asserts no token of law 0."""
    counts = np.bincount(tokens, minlength=pi.shape[0])
    zero = pi <= FLOAT64_ULPS_ATOL
    assert counts[zero].sum() == 0, f"tokens of probability 0 were drawn: {np.flatnonzero(zero & (counts > 0))}"
    e = N * pi[~zero]
    return float(((counts[~zero] - e) ** 2 / e).sum()), int((~zero).sum() - 1)


def test_power_against_tv_002():
    for df in range(1, V_MAX):
        assert stats.ncx2.sf(threshold(df), df, N * (2 * TV_DETECT) ** 2) >= DESIGN_POWER


def _case(name, law, k, c):
    rng = np.random.default_rng(zlib.crc32(f"sample-{name}-{law}-{k}-{c}".encode()))
    V = int(rng.integers(max(3, k + 1), V_MAX + 1))
    p, q = random_law_pair(rng, V, k, law)
    extra = extra_for(name, law, V, rng if c == 1 else None)
    T, W = LAWS[law](q, k).enumerate()
    return p, q, T, W, extra, V


@pytest.mark.parametrize("name,law,k,c", SAMPLE_CASES, ids=[f"{n}-{l}-k{k}-{c}" for n, l, k, c in SAMPLE_CASES])
def test_sampler_matches_conditional(name, law, k, c, device):
    v = SINGLE_STEP[name]
    p, q, T, _W, extra, _V = _case(name, law, k, c)
    kw = {key: torch.as_tensor(val, device=device) if isinstance(val, np.ndarray) else val for key, val in extra.items()}
    pt = torch.as_tensor(p, device=device)[None]
    qt = torch.as_tensor(q, device=device)[None]
    pis = v.conditional(pt, qt, torch.as_tensor(T, device=device), **kw).cpu().numpy()
    # the tuple most likely to be rejected (exercises the residual draw)
    m = int(np.argmin([pis[i, list(set(T[i]))].sum() for i in range(len(T))]))
    drafts = torch.as_tensor(T[m], device=device).expand(N, -1).contiguous()
    gen = torch.Generator(device).manual_seed(1000 + c)
    out = v.sample(pt, qt, drafts, generator=gen, **kw)  # a shared [1, V] law (see the next test for [B, V])
    assert isinstance(out, StepOutput) and out.token.shape == (N,) and out.token.dtype == torch.long
    tok = out.token.cpu().numpy()
    # accepted / index agree with the tokens and drafts
    eq = T[m][None, :] == tok[:, None]
    assert np.array_equal(out.accepted.cpu().numpy(), eq.any(axis=1))
    assert np.array_equal(out.index.cpu().numpy(), np.where(eq.any(axis=1), eq.argmax(axis=1), -1))
    stat, df = chi_square(tok, pis[m])
    if df > 0:
        assert stat < threshold(df), f"{name}: chi2 = {stat:.1f} >= {threshold(df):.1f} (df {df})"


@pytest.mark.parametrize("name,law,k", COMBOS, ids=[f"{n}-{l}-k{k}" for n, l, k in COMBOS])
def test_per_row_laws_give_the_same_tokens(name, law, k, device):
    """[B, V] rows equal to a shared [1, V] law consume the same uniforms and give the same tokens,
    so the chi-square tests above (run on the shared form) cover the per-row form too."""
    v = SINGLE_STEP[name]
    p, q, T, W, extra, _V = _case(name, law, k, 1)
    kw = {key: torch.as_tensor(val, device=device) if isinstance(val, np.ndarray) else val for key, val in extra.items()}
    pt = torch.as_tensor(p, device=device)[None]
    qt = torch.as_tensor(q, device=device)[None]
    idx = torch.as_tensor(np.random.default_rng(0).choice(len(T), 3000, p=W), device=device)
    drafts = torch.as_tensor(T, device=device)[idx]
    a = v.sample(pt, qt, drafts, generator=torch.Generator(device).manual_seed(4), **kw)
    b = v.sample(
        pt.expand(3000, -1).contiguous(), qt.expand(3000, -1).contiguous(), drafts, generator=torch.Generator(device).manual_seed(4), **kw
    )
    if name != "rrs_wor":
        # (rrs_wor's shared-law path draws its residual in p/q order, a different but equally exact
        # inverse CDF, so its tokens differ; its per-row path gets its own chi-square below)
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=False))
    np.testing.assert_allclose(
        v.conditional(pt, qt, drafts, **kw).cpu().numpy(),
        v.conditional(pt.expand(3000, -1), qt.expand(3000, -1), drafts, **kw).cpu().numpy(),
        rtol=0,
        atol=FLOAT64_ULPS_ATOL,
    )


@pytest.mark.parametrize("k", [2, 3])
def test_rrs_wor_per_row_sampler_matches_conditional(k, device):
    """rrs_wor's per-row ([B, V]) path, chi-square as above (its shared path is tested above)."""
    v = SINGLE_STEP["rrs_wor"]
    p, q, T, _W, _extra, _V = _case("rrs_wor", "without_replacement", k, 0)
    pt = torch.as_tensor(p, device=device)[None].expand(N, -1).contiguous()
    qt = torch.as_tensor(q, device=device)[None].expand(N, -1).contiguous()
    pis = v.conditional(pt[:1], qt[:1], torch.as_tensor(T, device=device)).cpu().numpy()
    m = int(np.argmin([pis[i, list(set(T[i]))].sum() for i in range(len(T))]))
    drafts = torch.as_tensor(T[m], device=device).expand(N, -1).contiguous()
    tok = v.sample(pt, qt, drafts, generator=torch.Generator(device).manual_seed(8)).token.cpu().numpy()
    stat, df = chi_square(tok, pis[m])
    if df > 0:
        assert stat < threshold(df)


def _reused_uniform_token(p, q, drafts, generator):
    """BROKEN on purpose: one uniform for the accept coin and the residual inverse CDF."""
    plan = token_module.schedule(p, q, drafts)
    u = torch.rand(drafts.shape[0], dtype=torch.float64, generator=generator)
    cdf = torch.cumsum(plan.residual[0], 0)
    res_tok = torch.searchsorted(cdf, u * cdf[-1], right=True).clamp(max=p.shape[1] - 1)
    return torch.where(u < plan.accept[:, 0], drafts[:, 0], res_tok)


NEG_P = np.array([0.3, 0.3, 0.2, 0.2, 0.0])
NEG_Q = np.array([0.6, 0.05, 0.05, 0.1, 0.2])


def test_negative_control_reused_uniform_is_caught():
    """The reused-uniform variant keeps the acceptance rate but biases the residual: caught."""
    p, q = torch.as_tensor(NEG_P)[None], torch.as_tensor(NEG_Q)[None]
    drafts = torch.zeros((N, 1), dtype=torch.long)
    pi = SINGLE_STEP["token"].conditional(p, q, drafts[:1])[0].numpy()
    tok = _reused_uniform_token(p, q, drafts, torch.Generator().manual_seed(5)).numpy()
    assert abs((tok == 0).mean() - pi[0]) < ACCEPT_RATE_ATOL  # the acceptance rate looks right
    stat, df = chi_square(tok, pi)
    assert stat > threshold(df) * 10
    # and the correct sampler on the same problem passes
    ok = SINGLE_STEP["token"].sample(p, q, drafts, generator=torch.Generator().manual_seed(5)).token.numpy()
    assert chi_square(ok, pi)[0] < threshold(df)


def test_tv_002_error_is_caught():
    """Samples of the true law tested against a conditional off by TV 0.02: rejected."""
    p, q = torch.as_tensor(NEG_P)[None], torch.as_tensor(NEG_Q)[None]
    drafts = torch.zeros((N, 1), dtype=torch.long)
    pi = SINGLE_STEP["token"].conditional(p, q, drafts[:1])[0].numpy()
    wrong = pi.copy()
    wrong[1] += TV_DETECT
    wrong[2] -= TV_DETECT
    tok = SINGLE_STEP["token"].sample(p, q, drafts, generator=torch.Generator().manual_seed(6)).token.numpy()
    stat, df = chi_square(tok, wrong)
    assert stat > threshold(df)


@pytest.mark.parametrize("name", sorted(SINGLE_STEP))
def test_same_seed_same_tokens(name, device):
    v = SINGLE_STEP[name]
    law = v.draft_law
    k = 2 if v.k_max is None or v.k_max >= 2 else 1
    p, q, _T, _W, extra, _V = _case(name, law, k, 0)
    pt, qt = torch.as_tensor(p, device=device)[None], torch.as_tensor(q, device=device)[None]
    from otspec_gpu.drafting import sample_drafts

    drafts = sample_drafts(qt, k, law, generator=torch.Generator(device).manual_seed(3), n=4096)
    runs = [v.sample(pt, qt, drafts, generator=torch.Generator(device).manual_seed(s), **extra).token for s in (11, 11, 12)]
    assert torch.equal(runs[0], runs[1])
    assert not torch.equal(runs[0], runs[2])
    # a row's token does not depend on the other rows' inputs (per-row uniforms at fixed positions)
    P = pt.expand(4096, -1).clone()
    P[1::2] = torch.as_tensor(np.roll(p, 1), device=device)  # change every odd row's target
    Q = qt.expand(4096, -1).contiguous()
    same = v.sample(
        pt.expand(4096, -1).contiguous(), Q, drafts, generator=torch.Generator(device).manual_seed(11), validate=False, **extra
    ).token
    other = v.sample(P, Q, drafts, generator=torch.Generator(device).manual_seed(11), validate=False, **extra).token
    assert torch.equal(other[0::2], same[0::2])  # the even rows did not change, nor did their tokens
    assert not torch.equal(other[1::2], same[1::2])


@pytest.mark.parametrize("name", ["token", "kseq"])
def test_rows_are_independent(name):
    """Pairs of consecutive rows have the product law pi x pi (chi-square on the V x V table)."""
    v = SINGLE_STEP[name]
    p, q = torch.as_tensor(NEG_P)[None], torch.as_tensor(NEG_Q)[None]
    k = 1 if name == "token" else 2
    drafts = torch.tensor([[0] * k]).expand(2 * N, -1).contiguous()
    pi = v.conditional(p, q, drafts[:1])[0].numpy()
    tok = v.sample(p, q, drafts, generator=torch.Generator().manual_seed(9)).token.numpy().reshape(N, 2)
    joint = np.outer(pi, pi).ravel()
    pair = tok[:, 0] * len(pi) + tok[:, 1]
    stat, df = chi_square(pair, joint)
    assert stat < threshold(df)
