"""The fused Triton kernels (:mod:`otspec_gpu.kernels.chain`) against the pure-torch steps they replace.

On CPU the kernels run under ``TRITON_INTERPRET=1`` (slow: about 20 ms per program, so few
programs). Triton reads that variable when it is imported, so a normal run checks the CPU cases in
one child pytest process of this file with the variable set (:func:`test_kernels_under_the_interpreter`);
on CUDA they run compiled, in this process. The checks:

* equality with the torch step given the same uniforms (token chain, block chain, single-step
  token, RRS and RSD; V not a multiple of the kernel's block, so the scan crosses blocks; forced all-accept and
  all-reject coins; with the default layout and with blocks of 64 and at most 4 chunks). The accept
  decisions of the token rules use the torch step's arithmetic; the block kernels use their own
  ``log`` / ``exp`` (a few ulps), so a decision could differ only for a coin within a few ulps of
  :math:`h_i`, and a token only for a uniform within rounding of a cumulative boundary (the draw's
  sums add in another order): with fixed seeds, a chance of about 1e-4 per checked row at V = 1 100;
* the kernels compiled ahead of time for sm_90 (the interpreter does not lower them), and the draw's
  guarantee of a positive-weight token when a chunk's sum and its scan disagree (forced);
* Pearson chi-square of the drawn ``(tau, Y)`` (chain, V = 5) or ``Y`` (single step, V = 3; both
  with blocks of 2 and two chunks per row, so every draw goes through the chunk search) against the exact
  conditional law of the torch module (``token_conditional``, ``block_conditional``,
  ``step.token.conditional``, ``step.rrs(_wor).conditional``) for one fixed drafted path repeated
  ``N`` times: N = 120 on CPU, 20 000 on CUDA, cells of expected count < 10 pooled, false-alarm rate
  alpha = 1e-3 per test (5 tests per device), fixed seeds. Cells of probability 0 must be empty (exact check).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from otspec_gpu.verifiers import chain
from otspec_gpu.verifiers.step import rrs as single_rrs
from otspec_gpu.verifiers.step import rrs_wor as single_rrs_wor
from otspec_gpu.verifiers.step import token as single_token
from tests.gpu._kernel_checks import INTERPRET, KERNEL_DEVICES, compile_sm90, run_under_interpreter, set_layout
from tests.gpu._stats import pooled_chi_square

pytest.importorskip("triton", reason="the Triton kernels need the optional triton package (pip install 'otspec[triton]')")

from otspec_gpu.kernels import chain as K  # noqa: E402

ALPHA = 1e-3


@pytest.fixture(params=KERNEL_DEVICES)
def kdevice(request):
    """``cpu`` when this process interprets the kernels, else ``cuda`` when present (compiled kernels)."""
    return request.param


@pytest.mark.skipif(INTERPRET, reason="already the interpreter run")
def test_kernels_under_the_interpreter():
    """Every test of this file on CPU tensors, in a child pytest with TRITON_INTERPRET=1."""
    run_under_interpreter(__file__)


def _chain(B, g, V, dtype, device, seed=0, same=False):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(V, 0.5), size=(1 if same else B, g + 1))
    q = rng.dirichlet(np.full(V, 0.5), size=(1 if same else B, g))
    p[..., 1] = 0.0  # a zero of the target: the residual must never emit it
    p /= p.sum(-1, keepdims=True)
    p, q = (torch.tensor(x, dtype=dtype, device=device).expand(B, -1, -1).contiguous() for x in (p, q))
    gen = torch.Generator(device).manual_seed(seed)
    drafts = torch.multinomial(q[:, :, :].reshape(-1, V).double(), 1, generator=gen).reshape(B, g)
    if same:
        drafts = drafts[:1].expand(B, -1).contiguous()
    return p, q, drafts


def _uniforms(B, g, dtype, device, seed):
    gen = torch.Generator(device).manual_seed(seed)
    return torch.rand((B, g), generator=gen, dtype=dtype, device=device), torch.rand(B, generator=gen, dtype=torch.float64, device=device)


@pytest.mark.parametrize("coins_kind", ["random", "accept", "reject"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_token_chain_kernel_equals_torch_step(kdevice, dtype, coins_kind):
    p, q, drafts = _chain(5, 3, 1100, dtype, kdevice, seed=1)  # V > 1024: two blocks
    coins, u = _uniforms(5, 3, dtype, kdevice, seed=2)
    if coins_kind != "random":
        coins = torch.zeros_like(coins) if coins_kind == "accept" else torch.full_like(coins, 1.0 - 1e-7)
    tau, tok, idx = K.token_chain_step(p, q, drafts, coins, u)
    ref = chain.token_step(p.cpu(), q.cpu(), drafts.cpu(), coins.cpu(), u.cpu())
    assert torch.equal(tau.cpu(), ref.accepted)
    assert torch.equal(tok.cpu(), ref.token)
    assert torch.equal(idx.cpu(), ref.index)  # 0: the chain's one drafted block


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_block_chain_kernels_equal_torch_step(kdevice, dtype):
    p, q, drafts = _chain(5, 3, 1100, dtype, kdevice, seed=3)
    coins, u = _uniforms(5, 3, dtype, kdevice, seed=4)
    tau, tok, idx = K.block_chain_step(p, q, drafts, coins, u)
    ref = chain.block_step(p.cpu(), q.cpu(), drafts.cpu(), coins.cpu(), u.cpu())
    assert torch.equal(tau.cpu(), ref.accepted)
    assert torch.equal(tok.cpu(), ref.token)
    assert torch.equal(idx.cpu(), ref.index)  # 0: the chain's one drafted block


@pytest.fixture
def small_layout(monkeypatch):
    """Blocks of 64 and at most 4 chunks per row: V = 1 100 is 3 chunks of 8 blocks, so the draw
    crosses chunks and the blocks inside one (the CUDA layout needs V in the tens of thousands for that)."""
    set_layout(monkeypatch, 64, 4)
    assert K.layout(1100) == (64, 512, 3)


def test_layout_spreads_a_row_over_many_programs():
    assert K.layout(49_152) == (1024, 1024, 48)
    assert K.layout(128_256) == (1024, 1024, 126)
    assert K.layout(262_144) == (1024, 2048, 128)
    assert K.layout(3) == (4, 4, 1)


@pytest.mark.skipif(INTERPRET, reason="compiles for a GPU target: not an interpreter case")
@pytest.mark.parametrize("mode", [0, 1, 2, 3], ids=["token-chain", "block-chain", "single-token", "rrs"])
def test_chain_kernels_compile_for_a_gpu_target(mode):
    """The interpreter does not lower the kernels: compile them ahead of time for sm_90 (Triton's
    bundled ptxas, no GPU needed), float32 chains / float64 single step, the CUDA layout of V 49 152."""
    P = "*fp32" if mode != 2 else "*fp64"
    strides = dict.fromkeys(("sp_b", "sp_t", "sq_b", "sq_t"), "i32")
    ptrs = {"p_ptr": P, "q_ptr": P, "d_ptr": "*i64"}
    w = {"w_ptr": P if mode == 1 else "*fp64"}
    block, chunk, nch = K.layout(49_152)
    if mode == 3:  # RSD (a superset of RRS's code), k = 8, float32 rows: the final-residual launch and the search
        rrs = {"p_ptr": "*fp32", "q_ptr": "*fp32", "d_ptr": "*i64", "c_ptr": "*fp64"}
        tail = {"V": "i32", "NCH": "i32", "sp_b": "i32", "sq_b": "i32"}
        sizes = {"K": 8, "BLOCK_K": 8, "BLOCK_V": block, "BLOCK_C": K.pow2(nch), "CHUNK": chunk, "WOR": True}
        kernels = [
            (K._rrs_partials, {**rrs, "s_ptr": "*fp64", "m_ptr": "*i64", **tail, "R": "i32"}, {**sizes, "FINAL": True}),
            (K._rrs_search, {**rrs, "u_ptr": "*fp64", "s_ptr": "*fp64", "m_ptr": "*i64", "tok_ptr": "*i64", **tail}, sizes),
        ]
    else:
        kernels = [
            (K._partials, {**ptrs, "c_ptr": P, "z_ptr": "*fp64", "part_ptr": "*fp64", "tau_ptr": "*i64", **w},
             {"MODE": mode, "BLOCK_G": 4, "BLOCK_V": block, "BLOCK_C": K.pow2(nch), "CHUNK": chunk}),
            (K._search, {**ptrs, "u_ptr": "*fp64", "part_ptr": "*fp64", "tau_ptr": "*i64", **w, "tok_ptr": "*i64", "idx_ptr": "*i64"},
             {"MODE": mode, "BLOCK_V": block, "BLOCK_C": K.pow2(nch), "CHUNK": chunk}),
        ]  # fmt: skip
    if mode == 1:
        kernels.append((K._masses, {**ptrs, "z_ptr": "*fp64"}, {"BLOCK_G": 4, "BLOCK_V": block, "CHUNK": chunk}))
    for fn, sig, consts in kernels:
        compile_sm90(fn, {**sig, **({} if mode == 3 else {"G": "i32", "V": "i32", "NCH": "i32", **strides})}, consts)


@pytest.mark.parametrize("rule", ["token", "block"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_chain_kernels_across_chunks_equal_torch_step(kdevice, small_layout, rule, dtype):
    """Row 0 has coins 0 (accepts where the rule can), row 1 coins near 1 (rejects where it can)."""
    p, q, drafts = _chain(6, 4, 1100, dtype, kdevice, seed=21)
    coins, u = _uniforms(6, 4, dtype, kdevice, seed=22)
    coins[0] = 0.0
    coins[1] = 1.0 - 1e-7
    fused, ref_step = (K.token_chain_step, chain.token_step) if rule == "token" else (K.block_chain_step, chain.block_step)
    tau, tok, idx = fused(p, q, drafts, coins, u)
    ref = ref_step(p.cpu(), q.cpu(), drafts.cpu(), coins.cpu(), u.cpu())
    assert torch.equal(tau.cpu(), ref.accepted)
    assert torch.equal(tok.cpu(), ref.token)
    assert torch.equal(idx.cpu(), ref.index)  # 0: the chain's one drafted block
    assert len(set(ref.accepted.tolist())) > 1  # rows stop at different positions


def test_block_chain_kernel_of_one_draft_equals_torch_step(kdevice):
    """gamma = 1: no look-ahead mass (the masses launch is skipped), h_1 = p_1."""
    p, q, drafts = _chain(6, 1, 300, torch.float64, kdevice, seed=23)
    coins, u = _uniforms(6, 1, torch.float64, kdevice, seed=24)
    tau, tok, idx = K.block_chain_step(p, q, drafts, coins, u)
    ref = chain.block_step(p.cpu(), q.cpu(), drafts.cpu(), coins.cpu(), u.cpu())
    assert torch.equal(tau.cpu(), ref.accepted)
    assert torch.equal(tok.cpu(), ref.token)
    assert torch.equal(idx.cpu(), ref.index)  # 0: the chain's one drafted block


def test_draw_never_returns_a_token_of_weight_zero(kdevice, small_layout):
    """The chunk sums say chunk 1 holds twice its mass (as rounding could, by a few ulps): the uniform
    falls past the chunk's real running sum, and the draw takes the chunk's last index of positive
    weight -- never one of the zero-weight indices at the chunk's end, never another chunk."""
    V = 1100
    block, chunk, nch = K.layout(V)
    rng = np.random.default_rng(25)
    p = torch.tensor(rng.dirichlet(np.full(V, 0.5))[None], device=kdevice)
    q = torch.tensor(rng.dirichlet(np.full(V, 0.5))[None], device=kdevice)
    p[0, 2 * chunk - 40 : 2 * chunk] = q[0, 2 * chunk - 40 : 2 * chunk]  # residual 0 on the last 40 of chunk 1
    r = (p - q).clamp_min(0.0)[0].cpu()
    sums = torch.stack([r[c * chunk : (c + 1) * chunk].sum() for c in range(nch)])
    part = torch.zeros((1, 2, nch), dtype=torch.float64)
    part[0, 0] = sums
    part[0, 0, 1] *= 2.0
    part[0, 1] = torch.stack([p[0, c * chunk : (c + 1) * chunk].cpu().sum() for c in range(nch)])
    u = ((sums[0] + 1.5 * sums[1]) / part[0, 0].sum()).reshape(1)
    tau = torch.zeros(1, dtype=torch.long, device=kdevice)  # single step, draft rejected
    tok = torch.empty(1, dtype=torch.long, device=kdevice)
    drafts = torch.zeros((1, 1), dtype=torch.long, device=kdevice)
    part, u = part.to(kdevice), u.to(kdevice)
    single = {"MODE": 2, "BLOCK_V": block, "BLOCK_C": K.pow2(nch), "CHUNK": chunk, **K.no_fma()}  # index not written in MODE 2
    K._search[(1,)](p, q, drafts, u, part, tau, part, tok, tok, 1, V, nch, 0, 0, 0, 0, **single)
    positive = torch.nonzero(r[chunk : 2 * chunk] > 0).flatten()
    assert int(tok) == chunk + int(positive[-1]) < 2 * chunk - 40


@pytest.mark.parametrize("layout", ["default", "small"])
@pytest.mark.parametrize("shared", [False, True], ids=["rows", "shared"])
def test_single_step_token_kernel_equals_torch_step(kdevice, shared, layout, request):
    if layout == "small":
        request.getfixturevalue("small_layout")
    rng = np.random.default_rng(5)
    n = 1 if shared else 6
    p = torch.tensor(rng.dirichlet(np.full(1030, 0.5), size=n), device=kdevice)
    q = torch.tensor(rng.dirichlet(np.full(1030, 0.5), size=n), device=kdevice)
    drafts = torch.multinomial(q.expand(6, -1), 1, generator=torch.Generator(kdevice).manual_seed(5))
    coins, u = single_token.uniforms(p, q, drafts, torch.Generator(kdevice).manual_seed(6))
    acc, tok = K.token_single_step(p, q, drafts, coins, u)
    ref = single_token.step(p.cpu(), q.cpu(), drafts.cpu(), coins.cpu(), u.cpu())
    assert torch.equal(acc.cpu(), ref.accepted)
    assert torch.equal(tok.cpu(), ref.token)


@pytest.mark.parametrize(
    ("mod", "shared"), [(single_rrs, False), (single_rrs, True), (single_rrs_wor, False)], ids=["rrs-rows", "rrs-shared", "rrs_wor-rows"]
)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_rrs_kernel_equals_torch_step(kdevice, mod, shared, dtype):
    rng = np.random.default_rng(11)
    n = 1 if shared else 6
    p = torch.tensor(rng.dirichlet(np.full(1030, 0.3), size=n), dtype=dtype, device=kdevice)
    q = torch.tensor(rng.dirichlet(np.full(1030, 0.3), size=n), dtype=dtype, device=kdevice)
    wor = mod is single_rrs_wor
    drafts = torch.multinomial(q.expand(6, -1).double(), 4, replacement=not wor, generator=torch.Generator(kdevice).manual_seed(12))
    coins, u = mod.uniforms(p, q, drafts, torch.Generator(kdevice).manual_seed(13))
    tok = K.rrs_single_step(p, q, drafts, coins, u, wor)
    ref = mod.step(p.cpu(), q.cpu(), drafts.cpu(), coins.cpu(), u.cpu())
    assert torch.equal(tok.cpu(), ref.token)


@pytest.mark.parametrize("layout", ["default", "small"])
@pytest.mark.parametrize("wor", [False, True], ids=["rrs", "rrs_wor"])
def test_masked_rrs_kernel_equals_the_torch_rounds(kdevice, wor, layout, request):
    """The tree node form: rows with 1..k real drafts (left-aligned, the rest padding); V = 300 is one
    chunk by default, three chunks of two blocks with the small layout."""
    if layout == "small":
        request.getfixturevalue("small_layout")
    from otspec_gpu.verifiers.recursive import sample_recursive

    rng = np.random.default_rng(15)
    p = torch.tensor(rng.dirichlet(np.full(300, 0.3), size=8), device=kdevice)
    q = torch.tensor(rng.dirichlet(np.full(300, 0.3), size=8), device=kdevice)
    drafts = torch.multinomial(q, 4, replacement=not wor, generator=torch.Generator(kdevice).manual_seed(16))
    count = torch.tensor([1, 2, 3, 4, 4, 3, 2, 1], device=kdevice)
    gen = torch.Generator(kdevice).manual_seed(17)
    coins = torch.rand((8, 4), generator=gen, dtype=torch.float64, device=kdevice)
    u = torch.rand(8, generator=gen, dtype=torch.float64, device=kdevice)
    tok = K.rrs_single_step(p, q, drafts, coins, u, wor, count)
    valid = torch.arange(4)[None, :] < count.cpu()[:, None]
    ref = sample_recursive(p.cpu(), q.cpu(), drafts.cpu(), coins.cpu(), u.cpu(), wor=wor, valid=valid)
    assert torch.equal(tok.cpu(), ref)


def _n(device: str) -> int:
    return 120 if device == "cpu" else 20_000


def _check_counts(counts: np.ndarray, law: np.ndarray, n: int) -> None:
    assert counts[law <= 0].sum() == 0  # no draw where the exact law is 0
    stat, thr, df = pooled_chi_square(counts, law, n, ALPHA)
    assert stat <= thr, f"chi-square {stat:.2f} > {thr:.2f} (df {df}, N {n}, alpha {ALPHA})"


@pytest.fixture
def tiny_layout(monkeypatch):
    """Blocks of 2 and at most 2 chunks per row: V = 5 is 2 chunks of 2 blocks, V = 3 two chunks of one
    block, so the chi-square tests' draws cross chunks and blocks with few programs."""
    set_layout(monkeypatch, 2, 2)
    assert K.layout(5) == (2, 4, 2)
    assert K.layout(3) == (2, 2, 2)


@pytest.mark.parametrize("rule", ["token", "block"])
def test_chain_kernels_draw_the_exact_conditional_law(kdevice, tiny_layout, rule):
    n = _n(kdevice)
    g, V = 2, 5
    p, q, drafts = _chain(n, g, V, torch.float64, kdevice, seed=7, same=True)
    coins, u = _uniforms(n, g, torch.float64, kdevice, seed=8)
    if rule == "token":
        tau, tok, _ = K.token_chain_step(p, q, drafts, coins, u)
        law = chain.token_conditional(p[:1].cpu(), q[:1].cpu(), drafts[:1].cpu())[0]
    else:
        tau, tok, _ = K.block_chain_step(p, q, drafts, coins, u)
        law = chain.block_conditional(p[:1].cpu(), q[:1].cpu(), drafts[:1].cpu())[0]
    counts = np.bincount((tau * V + tok).cpu().numpy(), minlength=(g + 1) * V)
    _check_counts(counts, law.reshape(-1).numpy(), n)


def test_single_step_token_kernel_draws_the_exact_conditional_law(kdevice, tiny_layout):
    n = _n(kdevice)
    p = torch.tensor([[0.5, 0.1, 0.4]], dtype=torch.float64, device=kdevice)
    q = torch.tensor([[0.2, 0.6, 0.2]], dtype=torch.float64, device=kdevice)
    drafts = torch.full((n, 1), 1, dtype=torch.long, device=kdevice)  # q > p at the draft: a real reject path
    coins, u = single_token.uniforms(p, q, drafts, torch.Generator(kdevice).manual_seed(9))
    _, tok = K.token_single_step(p, q, drafts, coins, u)
    law = single_token.conditional(p.cpu(), q.cpu(), drafts[:1].cpu())[0].numpy()
    _check_counts(np.bincount(tok.cpu().numpy(), minlength=3), law, n)


@pytest.mark.parametrize("mod", [single_rrs, single_rrs_wor], ids=["rrs", "rrs_wor"])
def test_rrs_kernel_draws_the_exact_conditional_law(kdevice, mod):
    n = _n(kdevice)
    p = torch.tensor([[0.5, 0.1, 0.4]], dtype=torch.float64, device=kdevice).expand(n, -1).contiguous()
    q = torch.tensor([[0.2, 0.6, 0.2]], dtype=torch.float64, device=kdevice).expand(n, -1).contiguous()
    drafts = torch.tensor([[1, 1]] if mod is single_rrs else [[1, 0]], device=kdevice).expand(n, -1).contiguous()
    coins, u = mod.uniforms(p, q, drafts, torch.Generator(kdevice).manual_seed(14))
    tok = K.rrs_single_step(p, q, drafts, coins, u, mod is single_rrs_wor)
    law = mod.conditional(p[:1].cpu(), q[:1].cpu(), drafts[:1].cpu())[0].numpy()
    _check_counts(np.bincount(tok.cpu().numpy(), minlength=3), law, n)


def test_dispatch_uses_kernels_only_on_cuda():
    from otspec_gpu.kernels import use_kernels

    assert not use_kernels(torch.zeros(1))
    if torch.cuda.is_available():
        assert use_kernels(torch.zeros(1, device="cuda"))
