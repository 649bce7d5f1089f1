r"""The torch optimal i.i.d. verifier (``optimal_iid``, also registered as ``khisti``) against the
numpy core.

* ``conditional`` equals the numpy kernel row for every draft tuple of random small laws (V <= 6,
  k <= 3, exact zeros, ties in q and in p/q, p == q, q with one token): 1e-12 in float64, 1e-5 in
  float32; stacked problems in one batch (one state per distinct law) give the same rows.
* Its closed-form integration over the level s equals the numpy ``selection_rows`` (an integral
  over the intervals between sorted thresholds) at V = 3000, k = 4, where the range-minimum table
  is 12 levels deep.
* Sampler vs conditional: for each fixed tuple, N = 100 000 identical rows, Pearson chi-square
  (cells of expected count < 10 pooled, :func:`tests.gpu._stats.pooled_chi_square`) at level
  ``1e-6 / N_TESTS`` (family false-alarm rate <= 1e-6, Bonferroni); the tree-free device path
  (``method="bridge"``) gives the same tokens row by row. A negative control that reuses the
  accept coin as the residual uniform is caught.
* The four draws come from four ``rand`` calls in the documented order (level, choice, coin,
  residual), so the same seed gives the same tokens.
* V = 49 152 float32, drafts sampled by torch from q: the accepted fraction over 10^6 rows is
  within 4.89 binomial standard errors (two-sided 1e-6) of :math:`\alpha^*` (the output histogram
  against p is ``tests/gpu/test_single_step_lossless.py``, which covers every registered verifier).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import otspec
from otspec.verifiers.step.optimal_iid import prepare as np_prepare
from otspec_gpu.drafting import sample_drafts
from otspec_gpu.sampling import categorical
from otspec_gpu.verifiers import SINGLE_STEP
from otspec_gpu.verifiers.step import optimal_iid as mod
from tests.gpu._stats import pooled_chi_square

pytestmark = pytest.mark.usefixtures("one_thread")

NAMES = ("optimal_iid", "khisti")
TOL = {torch.float64: 1e-12, torch.float32: 1e-5}
N = 100_000
N_TESTS = 14  # chi-square tests in this file, on CPU and CUDA ((5 cases + V = 2000) x 2 devices, + 2)
ALPHA = 1e-6 / N_TESTS
Z = 4.891638475698996  # two-sided normal quantile for 1e-6


def _laws(rng: np.random.Generator, n: int):
    """Random small (p, q, k) with zeros, ties and the corner cases."""
    out = [
        (np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), 2),
        (np.array([0.25, 0.25, 0.25, 0.25]), np.array([0.25, 0.25, 0.25, 0.25]), 3),  # p == q, all ratios tied
        (np.array([0.5, 0.5, 0.0]), np.array([0.0, 0.0, 1.0]), 2),  # disjoint, q with one token
        (np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.0, 1.0, 0.0, 0.0]), 3),  # q with one token
        (np.array([0.3, 0.3, 0.2, 0.2]), np.array([0.15, 0.15, 0.35, 0.35]), 2),  # ties in q and p/q
        (np.array([0.4, 0.2, 0.2, 0.1, 0.1]), np.array([0.2, 0.1, 0.1, 0.3, 0.3]), 3),  # ratio 2, 2, 2, 1/3, 1/3
    ]
    while len(out) < n:
        V, k = int(rng.integers(2, 7)), int(rng.integers(1, 4))
        p, q = rng.dirichlet(np.full(V, 0.6)), rng.dirichlet(np.full(V, 0.6))
        if rng.random() < 0.4:
            p[rng.integers(V)] = 0.0
        if rng.random() < 0.4:
            q[rng.integers(V)] = 0.0
        if rng.random() < 0.3:  # ties: quarters
            q = np.round(q * 4) + (q > 0)
        if q.sum() == 0 or p.sum() == 0:
            continue
        p, q = p / p.sum(), q / q.sum()
        if rng.random() < 0.1:
            p = q.copy()
        out.append((p, q, k))
    return out


def _t(x, dtype, device):
    return torch.as_tensor(np.asarray(x), dtype=dtype, device=device)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_conditional_equals_numpy_kernel(dtype, device):
    rng = np.random.default_rng(13)
    for name in NAMES:
        v = SINGLE_STEP[name]
        P, Q, D, want = [], [], [], []
        for p, q, k in _laws(rng, 40):
            K = otspec.verifiers.by_name(name).kernel(p, otspec.iid(q, k))
            got = v.conditional(_t(p[None], dtype, device), _t(q[None], dtype, device), torch.as_tensor(K.tuples, device=device))
            assert got.dtype == dtype and got.shape == K.pi.shape
            np.testing.assert_allclose(got.cpu().double().numpy(), K.pi, rtol=0, atol=TOL[dtype], err_msg=f"{name} {p} {q} {k}")
            if k == 2:
                V = p.size
                P.append(np.tile(np.pad(p, (0, 6 - V)), (len(K.tuples), 1)))
                Q.append(np.tile(np.pad(q, (0, 6 - V)), (len(K.tuples), 1)))
                D.append(K.tuples)
                want.append(np.pad(K.pi, ((0, 0), (0, 6 - V))))
        # every k = 2 problem in one [B, V] call: one state per distinct law, rows never mix
        got = v.conditional(
            _t(np.concatenate(P), dtype, device), _t(np.concatenate(Q), dtype, device), torch.as_tensor(np.concatenate(D), device=device)
        )
        np.testing.assert_allclose(got.cpu().double().numpy(), np.concatenate(want), rtol=0, atol=TOL[dtype])


#: The law that failed on CUDA (H200): the numpy kernel moves by 6.4e-12 when q is renormalised by a
#: sum taken in another order (1.0000000000000002 instead of 1.0): the state build is discontinuous.
CUDA_LAW = (
    np.array([0.1307863010248479, 0.07967809345835783, 0.7895356055167942]),
    np.array([1.1605827006157481e-05, 0.3163317825406035, 0.6836566116323904]),
)


class OtherOrder(torch.Tensor):
    """A CPU tensor that sums its rows by a tree reduction (entry i plus entry i + ceil(n / 2), halving
    n; for three entries ``(x_0 + x_2) + x_1``), the order of a CUDA block reduction, while its host
    copy (``.cpu()`` / ``.to("cpu")``) is a plain tensor."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.sum and args[0].ndim == 2 and kwargs.get("dim", args[1] if len(args) > 1 else None) == -1:
            x = args[0].as_subclass(torch.Tensor).to(kwargs.get("dtype") or args[0].dtype, copy=True)
            n = x.shape[1]
            while n > 1:
                h = (n + 1) // 2
                x[:, : n - h] += x[:, h:n]
                n = h
            return x[:, :1] if kwargs.get("keepdim") else x[:, 0]
        if func in (torch.Tensor.cpu, torch.Tensor.to, torch.Tensor.numpy):
            return func(*(a.as_subclass(torch.Tensor) if isinstance(a, OtherOrder) else a for a in args), **kwargs)
        return super().__torch_function__(func, types, args, kwargs)


def test_reduction_order_emulation_reproduces_the_cuda_failure():
    """The cause, on CPU in float64: q renormalised by its sum in tree order is one ulp off, and
    the numpy kernel of that q is 6.4e-12 away from the kernel of q (the CUDA failure's size)."""
    p, q = CUDA_LAW
    s_tree = OtherOrder(torch.as_tensor(q[None])).sum(dim=-1)
    assert float(s_tree[0]) == 1.0000000000000002 and q.sum() == 1.0
    K = otspec.verifiers.by_name("optimal_iid").kernel(p, otspec.iid(q, 2))
    K_tree = otspec.verifiers.by_name("optimal_iid").kernel(p, otspec.iid(q / float(s_tree[0]), 2))
    assert np.abs(K_tree.pi - K.pi).max() > 5e-12


@pytest.mark.parametrize("name", NAMES)
def test_state_does_not_depend_on_the_device_reduction_order(name):
    """The per-law state is built from the host copy of p and q, so a device that sums rows in
    another order gets bitwise the CPU law (and the numpy kernel within FLOAT64 rounding); before, the
    renormalisation ran on the device and this law moved by 6.4e-12 on CUDA."""
    p, q = CUDA_LAW
    K = otspec.verifiers.by_name(name).kernel(p, otspec.iid(q, 2))
    drafts = torch.as_tensor(K.tuples)
    plain = SINGLE_STEP[name].conditional(_t(p[None], torch.float64, "cpu"), _t(q[None], torch.float64, "cpu"), drafts)
    other = SINGLE_STEP[name].conditional(
        OtherOrder(_t(p[None], torch.float64, "cpu")), OtherOrder(_t(q[None], torch.float64, "cpu")), drafts, validate=False
    )
    assert torch.equal(other.as_subclass(torch.Tensor), plain)
    np.testing.assert_allclose(plain.numpy(), K.pi, rtol=0, atol=TOL[torch.float64])


@pytest.mark.parametrize("name", NAMES)
def test_cuda_law_equals_numpy_kernel(name, device):
    """The CUDA failure's law on every device, at the float64 tolerance (no looser one)."""
    p, q = CUDA_LAW
    K = otspec.verifiers.by_name(name).kernel(p, otspec.iid(q, 2))
    got = SINGLE_STEP[name].conditional(
        _t(p[None], torch.float64, device), _t(q[None], torch.float64, device), torch.as_tensor(K.tuples, device=device)
    )
    np.testing.assert_allclose(got.cpu().numpy(), K.pi, rtol=0, atol=TOL[torch.float64])


def test_khisti_is_the_same_rule():
    assert SINGLE_STEP["khisti"].draft_law == SINGLE_STEP["optimal_iid"].draft_law == "iid"
    assert SINGLE_STEP["khisti"].lossless and SINGLE_STEP["optimal_iid"].lossless


def test_selection_law_equals_numpy_at_scale(device):
    """Closed-form integration over s (torch) == interval integration (numpy) at V = 3000, k = 4;
    and summed over every tuple the selection law is r* (small V, exact enumeration)."""
    rng = np.random.default_rng(3000)
    V, k = 3000, 4
    p, q = rng.dirichlet(np.full(V, 3.0)), rng.dirichlet(np.full(V, 3.0))
    st = np_prepare(p, q, k)
    assert st.tree.kappa.size > 2**11
    drafts = np.stack([rng.choice(V, size=(400, k), p=q), np.repeat(rng.choice(V, size=(400, 1), p=q), k, axis=1)]).reshape(-1, k)
    state = mod.prepare(_t(p[None], torch.float64, device), _t(q[None], torch.float64, device), k)
    got = mod.selection_rows(state, torch.as_tensor(drafts, device=device), V).cpu().numpy()
    want = st.selection_rows(drafts)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    # r* from the tuples' selection laws (V = 5, k = 3: every tuple)
    p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
    T, W = otspec.iid(q, 3).enumerate()
    state = mod.prepare(_t(p[None], torch.float64, device), _t(q[None], torch.float64, device), 3)
    beta = mod.selection_rows(state, torch.as_tensor(T, device=device), 5).cpu().numpy()
    np.testing.assert_allclose(W @ beta, otspec.verifiers.step.optimal_iid.selection_law(p, q, 3), rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# sampling

P1, Q1 = np.array([0.4, 0.2, 0.2, 0.1, 0.1, 0.0]), np.array([0.1, 0.1, 0.2, 0.3, 0.2, 0.1])
P2, Q2 = np.array([0.3, 0.3, 0.2, 0.2]), np.array([0.15, 0.15, 0.35, 0.35])
P3, Q3 = np.array([0.1, 0.3, 0.05, 0.25, 0.3]), np.array([0.3, 0.1, 0.3, 0.2, 0.1])
#: (p, q, tuple): tuples whose selection is random (two or three candidates) and often rejected
SAMPLE_CASES = [(P1, Q1, (3, 4)), (P1, Q1, (2, 3, 4)), (P2, Q2, (2, 3)), (P3, Q3, (0, 2)), (P3, Q3, (0, 2, 2))]


def test_power_and_threshold():
    """df <= 5 here: a TV-0.02 error (noncentrality >= N * 0.04^2 = 160) is detected w.p. >= 0.999."""
    from scipy import stats

    for df in range(1, 6):
        assert stats.ncx2.sf(stats.chi2.isf(ALPHA, df), df, N * 0.04**2) >= 0.999


@pytest.mark.parametrize("case", range(len(SAMPLE_CASES)))
def test_sampler_matches_conditional(case, device):
    p, q, tup = SAMPLE_CASES[case]
    name = NAMES[case % 2]
    v = SINGLE_STEP[name]
    pt, qt = _t(p[None], torch.float64, device), _t(q[None], torch.float64, device)
    drafts = torch.tensor([tup], device=device).expand(N, -1).contiguous()
    pi = v.conditional(pt, qt, drafts[:1])[0].cpu().numpy()
    out = v.sample(pt, qt, drafts, generator=torch.Generator(device).manual_seed(100 + case))  # one shared law, N rows: the tree
    tok = out.token.cpu().numpy()
    counts = np.bincount(tok, minlength=p.size)
    assert counts[pi <= 0].sum() == 0
    stat, thr, df = pooled_chi_square(counts, pi, N, ALPHA)
    assert df >= 1 and stat < thr, (name, stat, thr)
    assert np.array_equal(out.accepted.cpu().numpy(), np.isin(tok, tup))
    # the device path (decoding's) reads the same uniforms and gives the same tokens, so the test covers it too
    bridge = v.sample(pt, qt, drafts, generator=torch.Generator(device).manual_seed(100 + case), method="bridge")
    assert torch.equal(bridge.token, out.token)


def test_sampler_at_larger_vocabulary(device):
    """V = 2000, k = 4, a fixed tuple: 12-level tables, residual over 2000 tokens (pooled cells)."""
    rng = np.random.default_rng(2000)
    V = 2000
    p, q = rng.dirichlet(np.full(V, 0.3)), rng.dirichlet(np.full(V, 0.3))
    tup = rng.choice(V, size=4, p=q)
    pt, qt = _t(p[None], torch.float64, device), _t(q[None], torch.float64, device)
    drafts = torch.as_tensor(tup, device=device)[None].expand(N, -1).contiguous()
    pi = SINGLE_STEP["optimal_iid"].conditional(pt, qt, drafts[:1])[0].cpu().numpy()
    tok = SINGLE_STEP["optimal_iid"].sample(pt, qt, drafts, generator=torch.Generator(device).manual_seed(7)).token.cpu().numpy()
    counts = np.bincount(tok, minlength=V)
    assert counts[pi <= 0].sum() == 0
    stat, thr, df = pooled_chi_square(counts, pi, N, ALPHA)
    assert df >= 1 and stat < thr


def _rand(gen, n, device):
    return torch.rand(n, dtype=torch.float64, device=device, generator=gen)


def test_negative_control_reused_coin_is_caught(device):
    """BROKEN on purpose: the accept coin reused as the residual draw's uniform (a rejected row
    then only reaches the upper part of the residual CDF). The chi-square catches it."""
    p, q, tup = SAMPLE_CASES[3]  # rejected w.p. 0.62, residual on two tokens
    pt, qt = _t(p[None], torch.float64, device), _t(q[None], torch.float64, device)
    drafts = torch.tensor([tup], device=device).expand(N, -1).contiguous()
    pi = SINGLE_STEP["optimal_iid"].conditional(pt, qt, drafts[:1])[0].cpu().numpy()
    state = mod.prepare(pt, qt, len(tup))
    gen = torch.Generator(device).manual_seed(5)
    s, u, coin = _rand(gen, N, device), _rand(gen, N, device), _rand(gen, N, device)
    cdf = torch.cumsum(state.residual[0], 0)
    res_tok = torch.searchsorted(cdf, coin * cdf[-1], right=True).clamp(max=p.size - 1)
    tok = mod.sample_with_uniforms(state, drafts, s, u, coin, res_tok).cpu().numpy()
    stat, thr, _df = pooled_chi_square(np.bincount(tok, minlength=p.size), pi, N, ALPHA)
    assert stat > 10 * thr


def test_uniform_order_and_determinism(device):
    """sample() = the rule on uniforms drawn as level, choice, coin, residual (four calls); the
    same seed gives the same tokens, another seed other tokens."""
    rng = np.random.default_rng(1)
    V, k, n = 50, 3, 20_000
    p, q = rng.dirichlet(np.full(V, 0.5)), rng.dirichlet(np.full(V, 0.5))
    pt, qt = _t(p[None], torch.float32, device), _t(q[None], torch.float32, device)
    drafts = sample_drafts(qt, k, "iid", generator=torch.Generator(device).manual_seed(0), n=n)
    a = SINGLE_STEP["optimal_iid"].sample(pt, qt, drafts, generator=torch.Generator(device).manual_seed(11)).token
    b = SINGLE_STEP["optimal_iid"].sample(pt, qt, drafts, generator=torch.Generator(device).manual_seed(11)).token
    c = SINGLE_STEP["khisti"].sample(pt, qt, drafts, generator=torch.Generator(device).manual_seed(12)).token
    assert torch.equal(a, b) and not torch.equal(a, c)
    gen = torch.Generator(device).manual_seed(11)
    state = mod.prepare(pt, qt, k)
    s, u, coin = _rand(gen, n, device), _rand(gen, n, device), _rand(gen, n, device)
    res_tok = categorical(state.residual, gen, n=n)
    assert torch.equal(a, mod.sample_with_uniforms(state, drafts, s, u, coin, res_tok))


def test_acceptance_at_vocabulary_49152_float32(device):
    """Drafts from q by torch, float32 laws: the accepted fraction estimates alpha* (exact)."""
    V, k, n = 49_152, 2, 1_000_000
    g = np.random.default_rng(49152)
    lp = 3.0 * g.standard_normal(V)
    lq = lp + 0.8 * g.standard_normal(V)
    p = torch.softmax(torch.as_tensor(lp, dtype=torch.float32), 0)[None].to(device)
    q = torch.softmax(torch.as_tensor(lq, dtype=torch.float32), 0)[None].to(device)
    gen = torch.Generator(device).manual_seed(49)
    drafts = sample_drafts(q, k, "iid", generator=gen, n=n)
    out = SINGLE_STEP["optimal_iid"].sample(p, q, drafts, generator=gen)
    p64, q64 = p[0].double().cpu().numpy(), q[0].double().cpu().numpy()
    alpha = otspec.optimal_acceptance(p64 / p64.sum(), otspec.iid(q64 / q64.sum(), k)).value
    acc = float(out.accepted.double().mean())
    se = math.sqrt(alpha * (1 - alpha) / n)
    assert abs(acc - alpha) < Z * se, (acc, alpha, se)
    # the exact conditional of the first rows is a distribution in float32
    pi = SINGLE_STEP["optimal_iid"].conditional(p, q, drafts[:4])
    assert pi.dtype == torch.float32 and torch.isfinite(pi).all()
    assert float((pi.double().sum(1) - 1).abs().max()) < 1e-5


def test_decoding_with_optimal_iid_is_lossless():
    """End to end through the decoder (caches, bonus tokens): 20 000 decodings of a tiny random
    transformer (V = 6; the model pair and exact joint law of ``test_decode_lossless.py``) with
    k = 3 drafts verified by ``optimal_iid``, as one batch of per-row laws (the decoder's case:
    ``sample(method="auto")`` takes the pure device step, nothing is built on the host). The law of the first three tokens (216 cells) against the exact
    joint law: pooled Pearson chi-square, false alarm 1e-6."""
    from otspec_gpu import models
    from otspec_gpu.decoding import decode
    from tests.gpu._stats import first_tokens_law
    from tests.gpu.test_decode_lossless import PROMPT

    n = 20_000
    target = models.tiny(seed=0, hidden_size=8, layers=1)
    res = decode(
        target,
        models.self_draft(target, 1.6),
        [PROMPT] * n,
        verifier="optimal_iid",
        drafts=3,
        gamma=1,
        max_new_tokens=3,
        seed=7,
        theory=False,
    )
    assert res.config["mode"] == "single"
    tok = np.asarray(res.tokens)
    assert tok.shape == (n, 3)
    joint = first_tokens_law(target, PROMPT, temperature=1.0).reshape(-1)
    counts = np.bincount(tok[:, 0] * 36 + tok[:, 1] * 6 + tok[:, 2], minlength=216)
    assert counts[joint <= 0].sum() == 0
    stat, thr, df = pooled_chi_square(counts, joint, n, 1e-6)
    assert df >= 10 and stat < thr, (stat, thr, df)
