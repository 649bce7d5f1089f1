"""otspec_gpu.verifiers.chain: token / block verification in torch equal the numpy kernels exactly.

* ``*_conditional`` equals the per-path row of :func:`otspec.verifiers.token_chain.kernel` /
  :func:`otspec.verifiers.block.kernel` for every drafted path of random small models (V <= 6,
  gamma <= 3, exact zeros included): 1e-12 in float64, 1e-5 in float32.
* ``*_sample`` draws from ``*_conditional``: chi-square per fixed drafted path over B = 100 000
  rows (false-alarm rate 1e-6 per comparison; power against any 0.02 TV error computed in
  ``test_chi_square_design_has_power``), with negative controls that it must reject.
* Tiny-mass residuals in float32 (p == q, one-token difference, disjoint supports, a long block)
  give no NaN and the float64 law.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from scipy import stats

from otspec import models
from otspec.errors import InvalidDistributionError, InvalidDraftsError, ShapeMismatchError
from otspec.verifiers import block, token_chain
from otspec_gpu.verifiers import StepOutput, chain
from tests.gpu._stats import pooled_chi_square
from tests.gpu._tolerances import (
    DESIGN_POWER,
    FALSE_ALARM,
    FLOAT32_KERNEL_ATOL,
    FLOAT32_REL_RTOL,
    FLOAT32_ROUNDING_ATOL,
    FLOAT64_FEW_OPS_ATOL,
    FLOAT64_KERNEL_ATOL,
    TINY_MASS_ATOL,
    TV_DETECT,
)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
RULES = {
    "token": (token_chain, chain.token_conditional, chain.token_sample, chain.token_step),
    "block": (block, chain.block_conditional, chain.block_sample, chain.block_step),
}
N_ROWS = 100_000
ALPHA = FALSE_ALARM  # false-alarm rate of one chi-square comparison
TV_POWER = TV_DETECT


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: one intra-op thread per module


def along(p_model, q_model, paths):
    """(P [N, gamma + 1, V], Q [N, gamma, V]) float64 conditionals along every path."""
    P = np.stack([models.conditionals_along(p_model, tuple(int(v) for v in x)) for x in paths])
    Q = np.stack([models.conditionals_along(q_model, tuple(int(v) for v in x), include_last=False) for x in paths])
    return P, Q


def small_cases():
    """Random context-dependent pairs with exact zeros, V in 2..6, gamma in 1..3, plus the toy of Sun et al."""
    cases = [(models.context_free([1 / 3, 2 / 3]), models.context_free([2 / 3, 1 / 3]), 2)]
    for seed in range(12):
        V, g = 2 + seed % 5, 1 + seed % 3
        zp = 0.0 if seed % 4 == 0 else 0.3
        pm = models.dirichlet(V, seed=seed, zero_prob=zp, concentration=0.7)
        qm = (
            models.dirichlet(V, seed=1000 + seed, zero_prob=zp)
            if seed % 3
            else models.close_draft(pm, temperature=1.3, noise=0.2, seed=seed)
        )
        cases.append((pm, qm, g))
    return cases


# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rule", sorted(RULES))
def test_conditional_equals_numpy_kernel(rule, device):
    mod, cond, _, _ = RULES[rule]
    for pm, qm, g in small_cases():
        K = mod.kernel(pm, qm, g)
        P, Q = along(pm, qm, K.paths)
        x = torch.as_tensor(np.array(K.paths), device=device)
        law64 = cond(torch.as_tensor(P, device=device), torch.as_tensor(Q, device=device), x).cpu().numpy()
        np.testing.assert_allclose(law64, K.law, rtol=0, atol=FLOAT64_KERNEL_ATOL)
        law32 = cond(torch.as_tensor(P, dtype=torch.float32, device=device), torch.as_tensor(Q, dtype=torch.float32, device=device), x)
        assert law32.dtype == torch.float32
        np.testing.assert_allclose(law32.cpu().numpy(), K.law, rtol=0, atol=FLOAT32_KERNEL_ATOL)
        # E[tau | path] agrees with the numpy per-path estimator.
        e = chain.expected_accepted(torch.as_tensor(law64)).numpy()
        want = [mod.expected_accepted_given_path(P[n], Q[n], K.paths[n]) for n in range(len(K.paths))]
        np.testing.assert_allclose(e, want, rtol=0, atol=FLOAT64_KERNEL_ATOL)


def test_toy_known_answers():
    """Sun et al.'s toy (M_b = (1/3, 2/3), M_s = (2/3, 1/3), gamma = 2): E[tau] = 10/9 token, 11/9 block."""
    p, q = models.context_free([1 / 3, 2 / 3]), models.context_free([2 / 3, 1 / 3])
    paths = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])
    w = np.array([4, 2, 2, 1]) / 9  # M_s of each path
    P, Q = along(p, q, paths)
    for f, want in ((chain.token_conditional, 10 / 9), (chain.block_conditional, 11 / 9)):
        e = chain.expected_accepted(f(torch.as_tensor(P), torch.as_tensor(Q), torch.as_tensor(paths))).numpy()
        assert abs(float(w @ e) - want) < FLOAT64_FEW_OPS_ATOL


# ------------------------------------------------------------------------------------------------
def outcome_counts(out: StepOutput, g: int, V: int) -> np.ndarray:
    cell = (out.accepted * V + out.token).cpu().numpy()
    return np.bincount(cell, minlength=(g + 1) * V).reshape(g + 1, V)


def chi_square_paths():
    """Three (P [gamma + 1, V], Q [gamma, V], path) drafted paths for the sampler tests: V = 5,
    gamma = 3, a token with target probability exactly 0 at each position, drafted tokens with
    ratios near 0.75, 1.3 and 0.7 (so that every tau has positive probability)."""
    rng = np.random.default_rng(2026)
    g, V = 3, 5
    out = []
    for _ in range(3):
        P = rng.dirichlet(np.full(V, 2.0), size=g + 1)
        P[:, 4] = 0.0  # target never emits token 4; the draft proposes it
        P /= P.sum(-1, keepdims=True)
        Q = 0.3 * P[:g] + 0.7 * rng.dirichlet(np.full(V, 0.7), size=g)
        ratio = np.where(P[:g] > 0, P[:g] / Q, np.inf)
        path = np.argmin(np.abs(ratio - np.array([[0.75], [1.3], [0.7]])), axis=1)  # r ~ 0.75, 1.3, 0.7
        out.append((P, Q, path))
    return out


def test_chi_square_design_has_power():
    """With N = 1e5 rows, any sampler law at TV >= 0.02 from the truth (on the tested cells) is
    rejected with probability >= 0.999: sum d^2 / p >= (sum |d|)^2 = (2 TV)^2 (Cauchy-Schwarz),
    so the noncentrality is >= N (2 TV)^2 = 160, at the largest df (gamma + 1) V - 1 = 19 used here."""
    df = 4 * 5 - 1
    lam = N_ROWS * (2 * TV_POWER) ** 2
    assert stats.ncx2.sf(stats.chi2.isf(ALPHA, df), df, lam) > DESIGN_POWER


def _batch(P, Q, path, n, dtype=torch.float64):
    return (
        torch.as_tensor(P, dtype=dtype).expand(n, -1, -1),
        torch.as_tensor(Q, dtype=dtype).expand(n, -1, -1),
        torch.as_tensor(path).expand(n, -1),
    )


@pytest.mark.parametrize("rule", sorted(RULES))
def test_sampler_matches_conditional(rule):
    _, cond, sample, _ = RULES[rule]
    gen = torch.Generator().manual_seed(11)
    for i, (P, Q, path) in enumerate(chi_square_paths()):
        g, V = Q.shape
        law = cond(*_batch(P, Q, path, 1))[0].numpy()
        dtype = torch.float32 if i == 0 else torch.float64  # one path sampled in float32
        out = sample(*_batch(P, Q, path, N_ROWS, dtype), generator=gen)
        counts = outcome_counts(out, g, V)
        assert counts[law == 0].sum() == 0, "an outcome of probability 0 was emitted"
        stat, thr, df = pooled_chi_square(counts.ravel(), law.ravel(), N_ROWS, ALPHA)
        assert df >= 3
        assert stat < thr, f"{rule} path {path}: chi2 = {stat:.1f} >= {thr:.1f} (df {df})"


def _reused_uniform(from_uniforms, coin):
    """A broken sampler: the residual / bonus draw reuses accept coin number ``coin``."""

    def sample(p, q, drafts, *, generator):
        coins = torch.rand(drafts.shape, generator=generator, dtype=p.dtype)
        return from_uniforms(p, q, drafts.long(), coins, coins[:, coin].to(torch.float64))

    return sample


@pytest.mark.parametrize("control", ["token_reused_first_coin", "block_reused_last_coin", "block_lookahead_off_by_one"])
def test_negative_controls_are_caught(control, monkeypatch):
    """The same chi-square rejects samplers that are wrong in the ways the field has shipped."""
    cond = chain.token_conditional if control.startswith("token") else chain.block_conditional
    cases = [(P, Q, path, cond(*_batch(P, Q, path, 1))[0].numpy()) for P, Q, path in chi_square_paths()]  # the true laws
    if control == "token_reused_first_coin":
        sample = _reused_uniform(chain.token_step, 0)
    elif control == "block_reused_last_coin":
        sample = _reused_uniform(chain.block_step, -1)
    else:
        # Off by one in the backward pass: h_i built from p_{i-1} instead of p_i.
        real_h = chain._block_h
        monkeypatch.setattr(chain, "_block_h", lambda logp, Z: real_h(torch.cat([torch.zeros_like(logp[:, :1]), logp[:, :-1]], dim=1), Z))
        sample = chain.block_sample
    gen = torch.Generator().manual_seed(5)
    caught = 0
    for P, Q, path, law in cases:
        g, V = Q.shape
        counts = outcome_counts(sample(*_batch(P, Q, path, N_ROWS), generator=gen), g, V)
        stat, thr, _ = pooled_chi_square(counts.ravel(), law.ravel(), N_ROWS, ALPHA)
        caught += bool(stat >= thr or counts[law == 0].sum() > 0)
    assert caught >= 2, f"negative control {control} slipped through on {3 - caught} of 3 paths"


# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rule", sorted(RULES))
def test_determinism_and_row_independence(rule):
    _, cond, sample, _ = RULES[rule]
    P, Q, path = chi_square_paths()[0]
    args = _batch(P, Q, path, N_ROWS)
    a = sample(*args, generator=torch.Generator().manual_seed(123))
    b = sample(*args, generator=torch.Generator().manual_seed(123))
    c = sample(*args, generator=torch.Generator().manual_seed(124))
    assert torch.equal(a.accepted, b.accepted) and torch.equal(a.token, b.token)
    assert not torch.equal(a.token, c.token)
    # Rows 2i and 2i+1 (same path) are independent: their joint tau law is the product law.
    g = Q.shape[0]
    tau = cond(*_batch(P, Q, path, 1))[0].sum(-1).numpy()
    t = a.accepted.numpy()
    pairs = np.bincount(t[0::2] * (g + 1) + t[1::2], minlength=(g + 1) ** 2)
    stat, thr, df = pooled_chi_square(pairs, np.outer(tau, tau).ravel(), N_ROWS // 2, ALPHA)
    assert df >= 1 and stat < thr


# ------------------------------------------------------------------------------------------------
# Numerics in float32: residuals of tiny mass.


def _f32_and_f64(cond, P, Q, x):
    P32, Q32 = torch.as_tensor(P, dtype=torch.float32), torch.as_tensor(Q, dtype=torch.float32)
    law32 = cond(P32, Q32, x)
    # the same float32 inputs, computed in float64: their rows sum to 1 only within float32 rounding
    # (~1e-7), beyond float64's tolerance, so the values are checked by the float32 call above
    law64 = cond(P32.double(), Q32.double(), x, validate=False)
    assert torch.isfinite(law32).all()
    return law32.double(), law64


@pytest.mark.parametrize("rule", sorted(RULES))
def test_float32_p_equals_q(rule):
    _, cond, sample, _ = RULES[rule]
    rng = np.random.default_rng(0)
    B, g, V = 8, 4, 1000
    P = rng.dirichlet(np.full(V, 0.1), size=(B, g + 1)).astype(np.float32)
    x = torch.as_tensor(rng.integers(0, V, size=(B, g)))
    P[np.arange(B)[:, None], np.arange(g), x.numpy()] += 0.01  # drafted tokens have positive mass
    P /= P.sum(-1, keepdims=True)
    law32, _law64 = _f32_and_f64(cond, P, P[:, :g], x)
    assert torch.all(law32[:, :g] == 0)
    torch.testing.assert_close(law32[:, g], torch.as_tensor(P[:, g], dtype=torch.float64), rtol=0, atol=FLOAT32_ROUNDING_ATOL)
    out = sample(torch.as_tensor(P), torch.as_tensor(P[:, :g]), x, generator=torch.Generator().manual_seed(0))
    assert torch.all(out.accepted == g)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_float32_one_token_difference(rule):
    """p and q differ by 1e-7 moved from token j to token i: the residual is exactly delta_i."""
    _, cond, _, _ = RULES[rule]
    V, g, i, j = 49_152, 2, 17, 4_000
    rng = np.random.default_rng(1)
    q = rng.dirichlet(np.full(V, 1.0)).astype(np.float32)
    q[j] = 0.3
    q /= q.sum()
    p = q.copy()
    p[j] -= np.float32(1e-7)
    p[i] += np.float32(1e-7)
    P = np.stack([p] * (g + 1))[None]
    Q = np.stack([q] * g)[None]
    x = torch.tensor([[j, j]])
    law32, law64 = _f32_and_f64(cond, P, Q, x)
    torch.testing.assert_close(law32, law64, rtol=FLOAT32_REL_RTOL, atol=TINY_MASS_ATOL)
    stop0 = law32[0, 0]
    assert stop0.sum() > 0 and stop0[i] == stop0.sum(), "the residual must put all its mass on token i"
    # Force the rejection branch (coins just below 1): the emitted residual token is i.
    from_uniforms = RULES[rule][3]
    n = 64
    coins = torch.full((n, g), 1 - 2**-24, dtype=torch.float32)
    u = torch.rand(n, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    out = from_uniforms(torch.as_tensor(P).expand(n, -1, -1), torch.as_tensor(Q).expand(n, -1, -1), x.expand(n, -1), coins, u)
    assert (out.accepted < g).all() and torch.all(out.token == i)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_float32_disjoint_supports(rule):
    _, cond, sample, _ = RULES[rule]
    V, g = 8, 3
    p = np.array([0.5, 0.5, 0, 0, 0, 0, 0, 0], dtype=np.float32)
    q = np.array([0, 0, 0, 0, 0.25, 0.25, 0.25, 0.25], dtype=np.float32)
    P, Q = np.stack([p] * (g + 1))[None], np.stack([q] * g)[None]
    x = torch.tensor([[4, 5, 6]])
    law32, _ = _f32_and_f64(cond, P, Q, x)
    want = torch.zeros(1, g + 1, V, dtype=torch.float64)
    want[0, 0] = torch.as_tensor(p, dtype=torch.float64)
    torch.testing.assert_close(law32, want, rtol=0, atol=0)
    out = sample(
        torch.as_tensor(P).expand(1000, -1, -1),
        torch.as_tensor(Q).expand(1000, -1, -1),
        x.expand(1000, -1),
        generator=torch.Generator().manual_seed(0),
    )
    assert torch.all(out.accepted == 0) and torch.all(out.token < 2)


def test_float32_long_block_log_space():
    """gamma = 64 with ratios whose running product leaves float32's range: the float32 block law
    equals the numpy float64 kernel row of the same inputs to 1e-5 (log-space running ratio)."""
    rng = np.random.default_rng(3)
    g, V = 64, 6
    Q = rng.dirichlet(np.full(V, 1.0), size=g).astype(np.float64)
    P = rng.dirichlet(np.full(V, 1.0), size=g + 1).astype(np.float64)
    x = np.array([rng.choice(V, p=Q[i]) for i in range(g)])
    P[np.arange(g), x] = np.where(np.arange(g) < g // 2, 1e-3, 0.9)  # 32 ratios ~1e-3, then large
    P /= P.sum(-1, keepdims=True)
    P, Q = P.astype(np.float32).astype(np.float64), Q.astype(np.float32).astype(np.float64)
    P /= P.sum(-1, keepdims=True)
    Q /= Q.sum(-1, keepdims=True)
    path = tuple(int(v) for v in x)
    pm = models.tabulated({path[:i]: P[i] for i in range(g + 1)})
    qm = models.tabulated({path[:i]: Q[i] for i in range(g)})
    want = block.conditional_law(pm, qm, path)  # the numpy kernel row of this path
    got = chain.block_conditional(
        torch.as_tensor(P[None], dtype=torch.float32), torch.as_tensor(Q[None], dtype=torch.float32), torch.as_tensor(x[None])
    )
    assert torch.isfinite(got).all()
    np.testing.assert_allclose(got[0].double().numpy(), want, rtol=0, atol=FLOAT32_KERNEL_ATOL)


# ------------------------------------------------------------------------------------------------
def test_bad_inputs():
    P = torch.full((2, 3, 4), 0.25)
    Q = torch.full((2, 2, 4), 0.25)
    x = torch.zeros(2, 2, dtype=torch.long)
    f = chain.block_conditional
    with pytest.raises(ShapeMismatchError, match="p must have shape"):
        f(P[:, :2], Q, x)
    with pytest.raises(ShapeMismatchError, match="q must have shape"):
        f(P, Q[:, :1], x)
    with pytest.raises(ShapeMismatchError, match="drafts must have shape"):
        f(P, Q, x[0])
    with pytest.raises(InvalidDistributionError, match="dtype"):
        f(P, Q.double(), x)
    with pytest.raises(InvalidDraftsError, match="integer"):
        f(P, Q, x.float())
    with pytest.raises(InvalidDraftsError, match=r"\[0, 4\)"):
        f(P, Q, x + 4)
    Qz = Q.clone()
    Qz[1, 1] = torch.tensor([0.0, 1 / 3, 1 / 3, 1 / 3])
    with pytest.raises(InvalidDraftsError, match=r"drafts\[1, 1\]"):
        chain.token_sample(P, Qz, x, generator=torch.Generator())
