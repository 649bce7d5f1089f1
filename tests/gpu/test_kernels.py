"""The fused Triton kernels (:mod:`otspec_gpu.kernels.chain`) against the pure-torch steps they replace.

On CPU the kernels run under ``TRITON_INTERPRET=1`` (slow: about 20 ms per program, so few
programs). Triton reads that variable when it is imported, so a normal run checks the CPU cases in
one child pytest process of this file with the variable set (:func:`test_kernels_under_the_interpreter`);
on CUDA they run compiled, in this process. Two kinds of checks:

* exact equality with the torch step given the same uniforms (token chain, block chain, single-step
  token, RRS and RSD; V not a multiple of the kernel's block, so the scan crosses blocks; forced all-accept and
  all-reject coins);
* Pearson chi-square of the drawn ``(tau, Y)`` (chain) or ``Y`` (single step) against the exact
  conditional law of the torch module (``token_conditional``, ``block_conditional``,
  ``step.token.conditional``, ``step.rrs(_wor).conditional``) for one fixed drafted path repeated
  ``N`` times: N = 120 on CPU, 20 000 on CUDA, cells of expected count < 10 pooled, false-alarm rate
  alpha = 1e-3 per test (5 tests per device), fixed seeds. Cells of probability 0 must be empty (exact check).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from otspec_gpu.verifiers import chain
from otspec_gpu.verifiers.step import rrs as single_rrs
from otspec_gpu.verifiers.step import rrs_wor as single_rrs_wor
from otspec_gpu.verifiers.step import token as single_token
from tests.gpu._stats import pooled_chi_square

pytest.importorskip("triton", reason="the Triton kernels need the optional triton package (pip install 'otspec[triton]')")

from otspec_gpu.kernels import chain as K  # noqa: E402

ALPHA = 1e-3
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
KERNEL_DEVICES = (
    ["cpu"]
    if INTERPRET
    else [
        pytest.param(
            "cuda",
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the CPU cases run in the interpreter child run)"),
        )
    ]
)


@pytest.fixture(params=KERNEL_DEVICES)
def kdevice(request):
    """``cpu`` when this process interprets the kernels, else ``cuda`` when present (compiled kernels)."""
    return request.param


@pytest.mark.skipif(INTERPRET, reason="already the interpreter run")
def test_kernels_under_the_interpreter():
    """Every test of this file on CPU tensors, in a child pytest with TRITON_INTERPRET=1."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(Path(__file__).resolve())]
    run = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


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
    tau, tok = K.token_chain_step(p, q, drafts, coins, u)
    ref = chain.token_step(p.cpu(), q.cpu(), drafts.cpu(), coins.cpu(), u.cpu())
    assert torch.equal(tau.cpu(), ref.accepted)
    assert torch.equal(tok.cpu(), ref.token)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_block_chain_kernels_equal_torch_step(kdevice, dtype):
    p, q, drafts = _chain(5, 3, 1100, dtype, kdevice, seed=3)
    coins, u = _uniforms(5, 3, dtype, kdevice, seed=4)
    out = chain._block_step_fused(p, q, drafts, coins, u)
    ref = chain.block_step(p.cpu(), q.cpu(), drafts.cpu(), coins.cpu(), u.cpu())
    assert torch.equal(out.accepted.cpu(), ref.accepted)
    assert torch.equal(out.token.cpu(), ref.token)


@pytest.mark.parametrize("shared", [False, True], ids=["rows", "shared"])
def test_single_step_token_kernel_equals_torch_step(kdevice, shared):
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


@pytest.mark.parametrize("wor", [False, True], ids=["rrs", "rrs_wor"])
def test_masked_rrs_kernel_equals_the_torch_rounds(kdevice, wor):
    """The tree node form: rows with 1..k real drafts (left-aligned, the rest padding)."""
    from otspec_gpu.verifiers.step._recursive import sample_recursive

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


@pytest.mark.parametrize("rule", ["token", "block"])
def test_chain_kernels_draw_the_exact_conditional_law(kdevice, rule):
    n = _n(kdevice)
    g, V = 2, 3
    p, q, drafts = _chain(n, g, V, torch.float64, kdevice, seed=7, same=True)
    coins, u = _uniforms(n, g, torch.float64, kdevice, seed=8)
    if rule == "token":
        tau, tok = K.token_chain_step(p, q, drafts, coins, u)
        law = chain.token_conditional(p[:1].cpu(), q[:1].cpu(), drafts[:1].cpu())[0]
    else:
        out = chain._block_step_fused(p, q, drafts, coins, u)
        tau, tok = out.accepted, out.token
        law = chain.block_conditional(p[:1].cpu(), q[:1].cpu(), drafts[:1].cpu())[0]
    counts = np.bincount((tau * V + tok).cpu().numpy(), minlength=(g + 1) * V)
    _check_counts(counts, law.reshape(-1).numpy(), n)


def test_single_step_token_kernel_draws_the_exact_conditional_law(kdevice):
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
