"""The fused Triton kernels of K-SEQ (:mod:`otspec_gpu.kernels.kseq`): rho* against the torch passes of
``_kseq_root.rho_star_masked`` and the numpy core's bisection, the selection (``kseq_select``) against
the torch selection, and the K-SEQ step on the kernel path.

Same structure as test_kernels.py (helpers in ``tests/gpu/_kernel_checks.py``): on CPU the kernels run
under ``TRITON_INTERPRET=1`` in one child pytest process of this file
(:func:`test_kseq_kernels_under_the_interpreter`); on CUDA they run compiled, in this process. Few
programs (about 30 s in the interpreter, 10 of them the selection's chi-square): V = 200 / 300 in
blocks of 64 (3-4 chunks per row), the edge rows and the rho* chi-square's one row in the default
layout (one chunk), the selection's chi-square and mass-0 rows at V = 4 in two chunks. The checks:

* rho* of the kernels against the torch passes and ``otspec.verifiers.step.kseq.kseq_rho_star``
  (relative ``FLOAT64_KERNEL_ATOL``: the bins and sums add in another order and x^k is a binary power,
  so f moves by a few ulps and the root of these well-conditioned rows by < 1e-13), the lossless side
  of the result (f <= ``FLOAT64_FEW_OPS_ATOL`` at it, > -``FLOAT64_FEW_OPS_ATOL`` one float64 below it,
  as in test_single_step_kseq_rho.py), a per-row k (rows with k = 1..8 in one call; under the
  interpreter bitwise what a call on the row alone gives, since each row's atomics run in chunk
  order), rows with p == q (exactly 1), rows with q = 0 and p = 0 tokens, rows whose ratios are all
  within 1e-5 of 1;
* ``kseq.step`` and ``kseq.node_step`` on the kernel path against the torch passes, same uniforms:
  equal tokens on seeded problems (rho* differs by a few ulps, so a token could differ only for a
  coin within ~1e-15 of its accept probability: a chance of ~1e-13 per row);
* a Pearson chi-square of ``kseq.step``'s output on the kernel path (one shared row, V = 4, k = 3, one
  fixed drafted tuple repeated N = 20 000 times, seed 31) against ``kseq.conditional``, cells of
  expected count < 10 pooled, false-alarm rate ``FALSE_ALARM`` (1e-6); cells of probability 0 must be
  empty (exact);
* ``kseq_select`` given the torch passes' rho* against the torch selection of ``step`` and
  ``node_step`` (1..k valid slots), per-row and shared rows, rows rejecting every draft: equal tokens
  (the same accept arithmetic; beta and the residual sums add in another order, so a token could
  differ only for a uniform within a few ulps of a cumulative boundary); the kernels' gamma against
  ``_one_minus_pow``'s within 4 ulps for beta from 1e-300 to 1; a residual of mass 0 (p == q,
  dyadic, coins forced to 1) draws from p, as ``fallback_rows``;
* a Pearson chi-square of the whole kernel path (rho* and selection) against ``kseq.conditional``:
  V = 4 in two chunks, k = 3, N = 120 under the interpreter, 20 000 on CUDA, seed 33, ``FALSE_ALARM``;
* a kernel failure falls back to the torch passes / the torch selection (and warns); the rho* and
  the selection kernels compile ahead of time for sm_90 (the interpreter does not lower them).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from otspec.verifiers.step.kseq import kseq_rho_star
from otspec_gpu.verifiers.step import _kseq_root
from otspec_gpu.verifiers.step import kseq as kseq_step
from otspec_gpu.verifiers.step._kseq_root import passes, rho_star_masked
from tests.gpu._kernel_checks import INTERPRET, KERNEL_DEVICES, compile_sm90, run_under_interpreter, set_layout
from tests.gpu._stats import pooled_chi_square
from tests.gpu._tolerances import FALSE_ALARM, FLOAT64_FEW_OPS_ATOL, FLOAT64_KERNEL_ATOL
from tests.gpu.test_single_step_kseq_rho import _f, _laws

pytest.importorskip("triton", reason="the Triton kernels need the optional triton package (pip install 'otspec[triton]')")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import otspec_gpu.kernels as kernels  # noqa: E402
from otspec_gpu.kernels import kseq as KK  # noqa: E402


@pytest.fixture(params=KERNEL_DEVICES)
def kdevice(request):
    """``cpu`` when this process interprets the kernels, else ``cuda`` when present (compiled kernels)."""
    return request.param


@pytest.fixture
def small_layout(monkeypatch):
    """Blocks of 64 and at most 4 chunks per row: V = 300 is 3 chunks of 2 blocks, V = 200 4 chunks."""
    set_layout(monkeypatch, 64, 4)
    assert KK.layout(300) == (64, 128, 3)
    assert KK.layout(200) == (64, 64, 4)


@pytest.fixture
def tiny_layout(monkeypatch):
    """Blocks of 2 and at most 2 chunks per row: V = 4 is two chunks of one block, so every draw of the
    selection goes through the chunk search with few programs."""
    set_layout(monkeypatch, 2, 2)
    assert KK.layout(4) == (2, 2, 2)


@pytest.fixture
def kernel_path(monkeypatch):
    """``rho_star_masked`` and ``kseq.step`` / ``node_step``'s selection dispatch to the kernels (on CPU
    too: this process interprets them), and ``kseq.rho_star`` takes the passes rather than the host
    solver; the test then checks no kernel failed (a failure would fall back to the torch path
    silently, up to a warning)."""
    # a compiled (not interpreted) kernel reads device memory only: the CPU reference laws the tests
    # compute beside a CUDA run keep the torch path
    on = lambda x: INTERPRET or x.device.type == "cuda"  # noqa: E731
    monkeypatch.setattr(_kseq_root, "use_kernels", on)
    monkeypatch.setattr(kseq_step, "use_kernels", on)
    monkeypatch.setattr(kseq_step, "host_shortcuts", lambda x: False)
    yield
    assert kernels.failure() is None, kernels.failure()


def _torch_path(monkeypatch):
    """Switch the fixture's dispatch to the torch passes and the torch selection (same solver, no kernel)."""
    monkeypatch.setattr(_kseq_root, "use_kernels", lambda x: False)
    monkeypatch.setattr(kseq_step, "use_kernels", lambda x: False)


@pytest.mark.skipif(INTERPRET, reason="already the interpreter run")
def test_kseq_kernels_under_the_interpreter():
    """Every test of this file on CPU tensors, in a child pytest with TRITON_INTERPRET=1."""
    run_under_interpreter(__file__)


def _check_root(p: np.ndarray, q: np.ndarray, rho: float, k: int) -> None:
    """rho against the numpy bisection and its lossless side (f <= 0 at it, > 0 one float64 below)."""
    ref = kseq_rho_star(p, q, k)
    assert abs(rho - ref) <= FLOAT64_KERNEL_ATOL * ref, (rho, ref, k)
    assert 1.0 <= rho <= k
    assert _f(p, q, rho, k) <= FLOAT64_FEW_OPS_ATOL
    if rho > 1.0:
        assert _f(p, q, np.nextafter(rho, 0.0), k) > -FLOAT64_FEW_OPS_ATOL


def test_rho_star_kernel_equals_torch_passes_and_numpy(kdevice, small_layout):
    """Six rows of V = 300 (three chunks each) with k = 2, 3, 4, 8, 8, 1 in one call: LLM-like laws with
    target and draft zeros, row 0 a Dirichlet draft far from the target."""
    p, q = _laws(41, 6, 300)
    P, Q = torch.as_tensor(p, device=kdevice), torch.as_tensor(q, device=kdevice)
    k = [2, 3, 4, 8, 8, 1]
    K = torch.tensor(k, dtype=torch.float64, device=kdevice)
    got = KK.rho_star_passes(P, Q, K, passes(8), _kseq_root.BINS).cpu()
    ref = rho_star_masked(P.cpu(), Q.cpu(), K.cpu(), k_max=8)
    assert got[5] == 1.0  # k = 1: token verification
    for b in range(6):
        assert abs(got[b] - ref[b]) <= FLOAT64_KERNEL_ATOL * ref[b], (b, float(got[b]), float(ref[b]))
        _check_root(p[b], q[b], float(got[b]), k[b])
    assert bool(got[:5].gt(1.0).all())  # interior roots: the passes did move the brackets
    # the same row alone with its k: bitwise under the interpreter (row b's atomics run in chunk order
    # whatever the other rows hold), within a few ulps on CUDA (atomics in any order)
    alone = KK.rho_star_passes(P[1:2], Q[1:2], K[1:2], passes(8), _kseq_root.BINS).cpu()
    if kdevice == "cpu":
        assert alone[0] == got[1]
    else:
        assert abs(alone[0] - got[1]) <= FLOAT64_KERNEL_ATOL * got[1]
    # one shared [1, V] row with a per-row k: each row equals that row run with its own k
    shared = KK.rho_star_passes(P[1:2], Q[1:2], K[:5], passes(8), _kseq_root.BINS).cpu()
    for b in range(5):
        one = KK.rho_star_passes(P[1:2], Q[1:2], K[b : b + 1], passes(8), _kseq_root.BINS).cpu()
        assert abs(shared[b] - one[0]) <= FLOAT64_KERNEL_ATOL * one[0], b


def test_rho_star_kernel_edge_rows(kdevice):
    """Default layout (one chunk per row): p == q gives 1 exactly; a rolled target; a row whose ratios
    all lie within ~1e-5 of 1 (f must be summed over the tokens above rho: see
    test_single_step_kseq_rho.py); k = 4 everywhere."""
    rng = np.random.default_rng(3)
    V = 400
    p = rng.dirichlet(np.ones(V))
    z = 3.0 * rng.standard_normal(V)
    p_near = np.exp(z) / np.exp(z).sum()
    q_near = np.exp(z + 1e-5 * rng.standard_normal(V))
    q_near /= q_near.sum()
    P = np.stack([p, p, p_near])
    Q = np.stack([p, np.roll(p, 1), q_near])
    K = torch.full((3,), 4.0, dtype=torch.float64, device=kdevice)
    got = KK.rho_star_passes(torch.as_tensor(P, device=kdevice), torch.as_tensor(Q, device=kdevice), K, passes(4), _kseq_root.BINS).cpu()
    assert got[0] == 1.0  # p == q: no ratio above 1, P_q - B_q = 0 exactly
    for b in (1, 2):
        _check_root(P[b], Q[b], float(got[b]), 4)


def _problem(seed: int, B: int, V: int, k: int, device: str, shared: bool = False):
    """``B`` rows of Dirichlet(1/2) laws (one shared ``[1, V]`` pair with ``shared``), i.i.d. drafts,
    the uniforms of ``kseq.uniforms``; rows 0 and 1 reject every draft."""
    rng = np.random.default_rng(seed)
    n = 1 if shared else B
    p = torch.tensor(rng.dirichlet(np.full(V, 0.5), size=n), device=device)
    q = torch.tensor(rng.dirichlet(np.full(V, 0.5), size=n), device=device)
    gen = torch.Generator(device).manual_seed(seed)
    drafts = torch.multinomial(q.expand(B, -1), k, replacement=True, generator=gen)
    coins, u = kseq_step.uniforms(p, q, drafts, gen)
    coins[:2] = 1.0 - 1e-12  # rows 0 and 1 reject every draft: the residual (built from rho*) draws
    return p, q, drafts, coins, u


def test_kseq_step_on_the_kernel_path_equals_the_torch_passes(kdevice, small_layout, kernel_path, monkeypatch):
    """``kseq.step`` (8 rows, V = 200 in four chunks, k = 4): kernel rho* and selection against torch
    rho* and selection, same uniforms, same tokens; also ``node_step`` with 1..4 alive drafts per row
    (a per-row k)."""
    p, q, drafts, coins, u = _problem(29, 8, 200, 4, kdevice)
    count = torch.tensor([1, 2, 3, 4, 4, 3, 2, 1], device=kdevice)
    fused = kseq_step.step(p, q, drafts, coins, u)
    fused_node = kseq_step.node_step(p, q, drafts, count, coins, u)
    assert kernels.failure() is None
    _torch_path(monkeypatch)
    ref = kseq_step.step(p, q, drafts, coins, u)
    ref_node = kseq_step.node_step(p, q, drafts, count, coins, u)
    assert torch.equal(fused.token.cpu(), ref.token.cpu())
    assert torch.equal(fused.accepted.cpu(), ref.accepted.cpu())
    assert torch.equal(fused_node.cpu(), ref_node.cpu())
    assert not bool(ref.accepted[:2].any()) and bool(ref.accepted.any())  # both the residual and the accept paths ran


def test_failed_kernel_falls_back_to_the_torch_passes(monkeypatch):
    """A kernel that raises warns, turns the kernels off (here on a private failure list) and leaves the
    torch passes' answer."""
    monkeypatch.setattr(kernels, "_FAILURE", [])
    monkeypatch.setattr(_kseq_root, "use_kernels", lambda x: True)

    def broken(*args):
        raise RuntimeError("no launch")

    monkeypatch.setattr(KK, "rho_star_passes", broken)
    p, q = _laws(43, 2, 100)
    P, Q = torch.as_tensor(p), torch.as_tensor(q)
    with pytest.warns(RuntimeWarning, match="kernels are off"):
        got = rho_star_masked(P, Q, 3)
    assert kernels.failure() == "RuntimeError: no launch"
    monkeypatch.setattr(_kseq_root, "use_kernels", lambda x: False)
    assert torch.equal(got, rho_star_masked(P, Q, 3))


def test_kseq_kernel_path_draws_the_exact_conditional_law(kdevice, kernel_path, monkeypatch):
    """N = 20 000 rows of one shared (p, q) row, V = 4, k = 3, drafts (1, 3, 1) (q > p at both, so
    rejections and the residual matter); rho* of that row from the kernels, the selection in torch
    (20 000 rows of the interpreted selection would take minutes: the selection kernel's own chi-square
    is :func:`test_kseq_select_kernel_draws_the_exact_conditional_law`). Power: rho* is 1.94 there,
    and rho* off by 10% moves the law by a total variation of 0.04-0.06 (expected Pearson statistic
    125-141 against the threshold 27.6)."""
    monkeypatch.setattr(kseq_step, "use_kernels", lambda x: False)
    n = 20_000
    p = torch.tensor([[0.4, 0.1, 0.35, 0.15]], dtype=torch.float64, device=kdevice)
    q = torch.tensor([[0.1, 0.3, 0.2, 0.4]], dtype=torch.float64, device=kdevice)
    drafts = torch.tensor([[1, 3, 1]], device=kdevice).expand(n, -1).contiguous()
    coins, u = kseq_step.uniforms(p, q, drafts, torch.Generator(kdevice).manual_seed(31))
    rho = rho_star_masked(p, q, 3)
    assert 1.0 < float(rho) < 3.0  # an interior root: the passes decide it
    tok = kseq_step.step(p, q, drafts, coins, u).token
    law = kseq_step.conditional(p.cpu(), q.cpu(), drafts[:1].cpu())[0].numpy()
    counts = np.bincount(tok.cpu().numpy(), minlength=4)
    assert counts[law <= 0].sum() == 0  # no draw where the exact law is 0
    stat, thr, df = pooled_chi_square(counts, law, n, FALSE_ALARM)
    assert stat <= thr, f"chi-square {stat:.2f} > {thr:.2f} (df {df}, N {n}, alpha {FALSE_ALARM})"


@pytest.mark.parametrize("counted", [False, True], ids=["step", "node_step"])
@pytest.mark.parametrize("shared", [False, True], ids=["rows", "shared"])
def test_kseq_select_kernel_equals_the_torch_selection(kdevice, small_layout, monkeypatch, shared, counted):
    """``kseq_select`` against the torch selection of ``kseq.step`` / ``node_step`` given the same rho*
    (the torch passes'), same uniforms: equal tokens. 8 rows, V = 300 in three chunks of two blocks (the
    scan crosses blocks and chunks), k = 4, rows 0-1 rejecting every draft; per-row rows or one shared
    ``[1, V]`` pair; ``node_step`` with 1..4 valid slots per row. Only the sums of beta and of the
    residual add in another order, so a token could differ only for a uniform within a few ulps of a
    cumulative boundary (or a coin of its accept probability: the same arithmetic, exactly equal)."""
    monkeypatch.setattr(kseq_step, "host_shortcuts", lambda x: False)  # rho* from the torch passes in both
    _torch_path(monkeypatch)
    k = 4
    p, q, drafts, coins, u = _problem(37, 8, 300, k, kdevice, shared)
    count = torch.tensor([1, 2, 3, 4, 4, 3, 2, 1], device=kdevice) if counted else None
    p64, q64 = (x.clone() for x in kseq_step._normalised(p, q))
    rho = rho_star_masked(p64, q64, count.clamp(1, k).double() if counted else k, k_max=k)
    tok = KK.kseq_select(p64, q64, rho, count, drafts, coins, u)
    if counted:
        ref = kseq_step.node_step(p, q, drafts, count, coins, u)
    else:
        ref = kseq_step.step(p, q, drafts, coins, u).token
    assert torch.equal(tok.cpu(), ref.cpu())
    drafted = (drafts == ref[:, None]).any(1)
    assert not bool(drafted[:2].any()) and bool(drafted.any())  # both the residual and the accept paths ran


@triton.jit
def _gamma_probe(beta_ptr, cnt_ptr, out_ptr, K: tl.constexpr):
    """Program ``b``: the selection kernels' gamma of ``beta[b]`` with ``cnt[b]`` drafts."""
    b = tl.program_id(0).to(tl.int64)
    tl.store(out_ptr + b, KK._gamma(beta_ptr, b, tl.load(cnt_ptr + b), 1, K, 1))


def test_kseq_select_gamma_matches_one_minus_pow(kdevice):
    """The kernels' gamma = (1 - (1 - beta)^m) / beta (log1p / expm1 by the Goldberg / Kahan identities)
    against the torch residual's (``_one_minus_pow``): within 4 ulps (2 measured under the
    interpreter) for beta from 1e-300 to 1 and m = 1, 2, 3, 8; exactly 0 at beta = 0 and 1 / beta at
    beta >= 1."""
    special = [0.0, 1.0, 1.0 + 2.0**-52, 1.0 - 2.0**-53, 2.0**-60, 0.3, 0.5, 0.7, 0.9, 0.99]
    beta = torch.cat([torch.logspace(-300, 0, 30, dtype=torch.float64), torch.tensor(special, dtype=torch.float64)])
    m = torch.tensor([1, 2, 3, 8]).repeat_interleave(beta.shape[0])
    beta = beta.repeat(4)
    out = torch.empty_like(beta, device=kdevice)
    _gamma_probe[(beta.shape[0],)](beta.to(kdevice), m.to(kdevice), out, K=8)
    pos = beta > 0
    ref = torch.where(pos, kseq_step._one_minus_pow(beta, m.double()) / torch.where(pos, beta, 1.0), 0.0)
    out = out.cpu()
    ulps = (out - ref).abs() / ref.clamp_min(torch.finfo(torch.float64).tiny) / torch.finfo(torch.float64).eps
    assert float(ulps.max()) <= 4.0, float(ulps.max())
    exact = (beta == 0) | (beta >= 1)
    assert torch.equal(out[exact], ref[exact])


def test_kseq_select_kernel_draws_the_exact_conditional_law(kdevice, kernel_path, tiny_layout):
    """The whole kernel path (rho* and the selection) of ``kseq.step``: N rows of one shared (p, q) row,
    V = 4 in two chunks, k = 3, drafts (1, 3, 1), seed 33; N = 120 under the interpreter (each row is
    three interpreted programs), 20 000 on CUDA. Pearson chi-square against ``kseq.conditional``, cells
    of expected count < 10 pooled, false-alarm rate ``FALSE_ALARM`` (1e-6); cells of probability 0 must
    be empty (exact). The token equality tests above are the sharp check; this one guards the law."""
    n = 120 if kdevice == "cpu" else 20_000
    p = torch.tensor([[0.4, 0.1, 0.35, 0.15]], dtype=torch.float64, device=kdevice)
    q = torch.tensor([[0.1, 0.3, 0.2, 0.4]], dtype=torch.float64, device=kdevice)
    drafts = torch.tensor([[1, 3, 1]], device=kdevice).expand(n, -1).contiguous()
    coins, u = kseq_step.uniforms(p, q, drafts, torch.Generator(kdevice).manual_seed(33))
    out = kseq_step.step(p, q, drafts, coins, u)
    law = kseq_step.conditional(p.cpu(), q.cpu(), drafts[:1].cpu())[0].numpy()
    counts = np.bincount(out.token.cpu().numpy(), minlength=4)
    assert counts[law <= 0].sum() == 0  # no draw where the exact law is 0
    assert 0 < int(out.accepted.sum()) < n  # both the accept tests and the residual draw ran
    stat, thr, df = pooled_chi_square(counts, law, n, FALSE_ALARM)
    assert stat <= thr, f"chi-square {stat:.2f} > {thr:.2f} (df {df}, N {n}, alpha {FALSE_ALARM})"


def test_kseq_select_residual_of_mass_zero_draws_from_p(kdevice, kernel_path, tiny_layout, monkeypatch):
    """p == q (dyadic, so every sum is exact): rho* = 1, beta = 1, gamma = 1, and the residual
    (p - gamma min(p / rho*, q))_+ is 0 everywhere, so the draw falls back to p (``fallback_rows``). Every
    accept probability is 1 there, so no coin in [0, 1) rejects: coins of exactly 1 force the rejection
    (outside the uniforms' support; the only way to reach this branch). The tokens are p's inverse CDF at
    u, on the kernel path and on the torch path, for ``step`` and ``node_step``."""
    pr = np.array([0.5, 0.25, 0.125, 0.125])
    uu = np.array([0.1, 0.55, 0.8, 0.9, 0.99])
    want = np.searchsorted(np.cumsum(pr), uu, side="right")  # p's inverse CDF: the fallback's draw
    p = torch.tensor(pr[None], device=kdevice).expand(5, -1).contiguous()  # node rows: [B, V]
    drafts = torch.tensor([[0, 1, 2, 3]], device=kdevice).expand(5, -1).contiguous()
    coins = torch.ones((5, 4), dtype=torch.float64, device=kdevice)
    u = torch.tensor(uu, device=kdevice)
    count = torch.tensor([4, 3, 2, 1, 4], device=kdevice)
    rho = rho_star_masked(p, p, 4)
    assert bool((rho == 1.0).all())
    assert torch.equal(kseq_step._residual(p.cpu(), p.cpu(), rho.cpu(), 4), p.cpu())  # mass 0: replaced by p
    fused = kseq_step.step(p, p, drafts, coins, u)
    fused_node = kseq_step.node_step(p, p, drafts, count, coins, u)
    _torch_path(monkeypatch)
    ref = kseq_step.step(p, p, drafts, coins, u)
    ref_node = kseq_step.node_step(p, p, drafts, count, coins, u)
    for tok in (fused.token, fused_node, ref.token, ref_node):
        assert tok.cpu().tolist() == want.tolist()


def test_failed_select_kernel_falls_back_to_the_torch_selection(monkeypatch):
    """A selection kernel that raises warns, turns the kernels off (on a private failure list) and
    leaves the torch selection's tokens."""
    monkeypatch.setattr(kernels, "_FAILURE", [])
    monkeypatch.setattr(kseq_step, "use_kernels", lambda x: not kernels._FAILURE)  # on until the failure

    def broken(*args):
        raise RuntimeError("no launch")

    monkeypatch.setattr(KK, "kseq_select", broken)
    p, q, drafts, coins, u = _problem(39, 4, 50, 3, "cpu")
    count = torch.tensor([1, 2, 3, 3])
    with pytest.warns(RuntimeWarning, match="kernels are off"):
        got = kseq_step.step(p, q, drafts, coins, u)
    assert kernels.failure() == "RuntimeError: no launch"
    got_node = kseq_step.node_step(p, q, drafts, count, coins, u)  # kernels off: no second try
    monkeypatch.setattr(kseq_step, "use_kernels", lambda x: False)
    assert torch.equal(got.token, kseq_step.step(p, q, drafts, coins, u).token)
    assert torch.equal(got_node, kseq_step.node_step(p, q, drafts, count, coins, u))


@pytest.mark.skipif(INTERPRET, reason="compiles for a GPU target: not an interpreter case")
@pytest.mark.parametrize("first", [True, False], ids=["first-pass", "later-pass"])
def test_kseq_kernels_compile_for_a_gpu_target(first):
    """The interpreter does not lower the kernels: compile both ahead of time for sm_90 (Triton's
    bundled ptxas, no GPU needed), the CUDA layout of V 262 144, float64 atomics included."""
    block, chunk, _ = KK.layout(262_144)
    M = _kseq_root.BINS
    kernels_ = [
        (
            KK._bin_pass,
            {"p_ptr": "*fp64", "q_ptr": "*fp64", "lo_ptr": "*i64", "hi_ptr": "*i64", "h_ptr": "*fp64", "s_ptr": "*fp64",
             "V": "i32", "sp_b": "i32", "sq_b": "i32"},
            {"M": M, "BLOCK_V": block, "CHUNK": chunk},
        ),
        (
            KK._update,
            {"h_ptr": "*fp64", "s_ptr": "*fp64", "k_ptr": "*fp64", "lo_ptr": "*i64", "hi_ptr": "*i64", "end_ptr": "*i32",
             "out_ptr": "*fp64"},
            {"M": M, "BLOCK_M": KK.pow2(M + 1), "FIRST": first},
        ),
    ]  # fmt: skip
    for fn, sig, consts in kernels_:
        compile_sm90(fn, sig, consts)


@pytest.mark.skipif(INTERPRET, reason="compiles for a GPU target: not an interpreter case")
@pytest.mark.parametrize("counted", [False, True], ids=["step", "node_step"])
def test_kseq_select_kernels_compile_for_a_gpu_target(counted):
    """The three selection kernels compiled ahead of time for sm_90 (float64 rows, k = 8, the CUDA layout
    of V 262 144), with and without per-row valid counts."""
    block, chunk, nch = KK.layout(262_144)
    rows = {
        "p_ptr": "*fp64",
        "q_ptr": "*fp64",
        "d_ptr": "*i64",
        "c_ptr": "*fp64",
        "cnt_ptr": "*i64",
        "rho_ptr": "*fp64",
        "beta_ptr": "*fp64",
    }
    tail = {"V": "i32", "NCH": "i32", "sp_b": "i32", "sq_b": "i32", "sr": "i32"}
    consts = {"K": 8, "BLOCK_K": 8, "HAS_COUNT": counted, "BLOCK_V": block, "CHUNK": chunk}
    with_c = {**consts, "BLOCK_C": KK.pow2(nch)}
    kernels_ = [
        (KK._select_beta, {**rows, **tail}, consts),
        (KK._select_partials, {**rows, "part_ptr": "*fp64", **tail}, with_c),
        (KK._select, {**rows, "part_ptr": "*fp64", "u_ptr": "*fp64", "tok_ptr": "*i64", **tail}, with_c),
    ]  # fmt: skip
    for fn, sig, c in kernels_:
        compile_sm90(fn, sig, c)
