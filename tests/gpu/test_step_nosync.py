"""The verify steps run without host synchronisation: every pure step (a function of p, q, the drafts
and its uniforms) traces whole under ``torch.compile(fullgraph=True)``, gives the same tokens as
eager mode and as ``sample`` from the same generator state; on CUDA the whole ``sample`` call (with
``validate=False``) runs under ``torch.cuda.set_sync_debug_mode("error")``.

``torch.compile(..., fullgraph=True, backend="eager")`` refuses any graph break, so a ``.item()``, a
``bool(tensor)``, a ``nonzero`` or a shape read from a tensor value makes these tests fail on the CPU
build of torch (the CPU early exits of :func:`otspec_gpu._scratch.host_shortcuts` are off while tracing).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from otspec_gpu.verifiers import SINGLE_STEP, tree
from otspec_gpu.verifiers.chain import block_sample, block_step, token_sample, token_step
from tests.gpu._stats import pooled_chi_square

pytestmark = pytest.mark.usefixtures("one_thread")

#: Single-step rules whose per-law state is built on the host: none any more. ``optimal_iid``,
#: ``khisti`` and ``wor_iid`` step with the tree-free draw (``_iid_bridge``), ``kseq`` with the
#: multisection rho* (``_kseq_root``).
HOST_STATE: set[str] = set()
#: Every single-step rule has a pure step.
PURE = sorted(set(SINGLE_STEP) - HOST_STATE)


def _k(name: str) -> int:
    v = SINGLE_STEP[name]
    k = max(v.k_min, 3)
    return k if v.k_max is None else min(k, v.k_max)


def _problem(name: str, B: int, V: int, shared: bool, device: str, dtype=torch.float64, seed: int = 0):
    """Random p, q (rows with some zeros) and drafts of the rule's draft law (numpy generator)."""
    rng = np.random.default_rng(seed)
    n = 1 if shared else B
    p = rng.dirichlet(np.full(V, 0.6), size=n)
    q = rng.dirichlet(np.full(V, 0.6), size=n)
    p[:, 0] = 0.0
    p /= p.sum(1, keepdims=True)
    k = _k(name)
    law = SINGLE_STEP[name].draft_law
    drafts = np.zeros((B, k), dtype=np.int64)
    for b in range(B):
        qb = q[0 if shared else b]
        if law == "iid":
            drafts[b] = rng.choice(V, size=k, p=qb)
        elif law == "without_replacement":
            drafts[b] = rng.choice(V, size=k, p=qb, replace=False)
        else:  # greedy: the top-(k-1) tokens of q, then one draw from the rest
            top = np.argsort(-qb, kind="stable")[: k - 1]
            rest = qb.copy()
            rest[top] = 0.0
            drafts[b, : k - 1] = top
            drafts[b, k - 1] = rng.choice(V, p=rest / rest.sum())
    t = lambda x: torch.tensor(x, dtype=dtype, device=device)  # noqa: E731
    return t(p), t(q), torch.tensor(drafts, device=device)


def test_every_rule_but_the_host_state_ones_has_a_pure_step():
    """Fails if a single-step rule (other than the host-state ones) loses its pure step."""
    missing = [name for name in PURE if SINGLE_STEP[name].step is None or SINGLE_STEP[name].uniforms is None]
    assert missing == []


@pytest.mark.parametrize("shared", [False, True], ids=["rows", "shared"])
@pytest.mark.parametrize("name", PURE)
def test_single_step_traces_whole_and_matches_sample(name, shared):
    v = SINGLE_STEP[name]
    p, q, drafts = _problem(name, B=5, V=13, shared=shared, device="cpu")
    ref = v.sample(p, q, drafts, generator=torch.Generator().manual_seed(7))
    uni = v.uniforms(p, q, drafts, torch.Generator().manual_seed(7))
    eager = v.step(p, q, drafts, *uni)
    torch._dynamo.reset()
    traced = torch.compile(v.step, fullgraph=True, backend="eager", dynamic=False)(p, q, drafts, *uni)
    for a, b, c in zip(ref, eager, traced, strict=True):
        assert torch.equal(a, b)
        assert torch.equal(a, c)


def test_single_step_traced_takes_the_reject_path():
    """The traced step runs the residual draw (coins of 1 reject every round): no early exit hides it."""
    v = SINGLE_STEP["token"]
    p, q, drafts = _problem("token", B=4, V=9, shared=False, device="cpu")
    coins, u = v.uniforms(p, q, drafts, torch.Generator().manual_seed(1))
    coins = torch.ones_like(coins)
    torch._dynamo.reset()
    out = torch.compile(v.step, fullgraph=True, backend="eager", dynamic=False)(p, q, drafts, coins, u)
    assert torch.equal(out.token, v.step(p, q, drafts, coins, u).token)
    res = (p - q).clamp_min(0.0)
    assert bool((res.gather(1, out.token[:, None]) > 0).all())  # residual support only


def _chain_problem(B: int, g: int, V: int, device: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    p = torch.tensor(rng.dirichlet(np.full(V, 0.6), size=(B, g + 1)), device=device)
    q = torch.tensor(rng.dirichlet(np.full(V, 0.6), size=(B, g)), device=device)
    drafts = torch.multinomial(q.reshape(-1, V), 1, generator=torch.Generator(device).manual_seed(seed)).reshape(B, g)
    return p, q, drafts


@pytest.mark.parametrize("all_pass", [False, True], ids=["mixed", "all_pass"])
@pytest.mark.parametrize(("step", "sample"), [(token_step, token_sample), (block_step, block_sample)], ids=["token", "block"])
def test_chain_step_traces_whole_and_matches_sample(step, sample, all_pass):
    p, q, drafts = _chain_problem(6, 3, 11, "cpu")
    if all_pass:  # p == q: every coin passes, the CPU early exit of block_step is taken in eager mode
        p = torch.cat([q, p[:, -1:]], dim=1)
    g = torch.Generator().manual_seed(3)
    ref = sample(p, q, drafts, generator=g)
    g = torch.Generator().manual_seed(3)
    coins = torch.rand(drafts.shape, generator=g, dtype=p.dtype)
    u = torch.rand(drafts.shape[0], generator=g, dtype=torch.float64)
    torch._dynamo.reset()
    traced = torch.compile(step, fullgraph=True, backend="eager", dynamic=False)(p, q, drafts, coins, u)
    for a, c in zip(ref, traced, strict=True):
        assert torch.equal(a, c)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: set_sync_debug_mode checks device synchronisation")


@cuda
@pytest.mark.parametrize("name", PURE)
def test_cuda_single_step_sample_never_syncs(name):
    v = SINGLE_STEP[name]
    p, q, drafts = _problem(name, B=8, V=300, shared=False, device="cuda")
    g = torch.Generator("cuda").manual_seed(0)
    v.sample(p, q, drafts, generator=g, validate=False)  # warm-up (allocations, lazy init)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = v.sample(p, q, drafts, generator=g, validate=False)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert out.token.shape == (8,)


@cuda
@pytest.mark.parametrize("sample", [token_sample, block_sample], ids=["token", "block"])
def test_cuda_chain_sample_never_syncs(sample):
    p, q, drafts = _chain_problem(8, 4, 300, "cuda")
    g = torch.Generator("cuda").manual_seed(0)
    sample(p, q, drafts, generator=g, validate=False)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = sample(p, q, drafts, generator=g, validate=False)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert out.accepted.shape == (8,)


def _tree(rule: str, B: int, device: str, seed: int = 0):
    """One small tree (k = 3 sequences, gamma = 2, V = 4) repeated over B rows; the i.i.d. rules
    (kseq, rrs) share a prefix (nodes with 2 and 1 alive drafts), rrs_wor has distinct first tokens."""
    rng = np.random.default_rng(seed)
    k, g, V = 3, 2, 4
    p = torch.tensor(rng.dirichlet(np.full(V, 1.0), size=(1, k, g + 1)), device=device)
    q = torch.tensor(rng.dirichlet(np.full(V, 1.0), size=(1, k, g)), device=device)
    x = [[0, 1], [0, 2], [3, 1]] if rule in ("kseq", "rrs") else [[0, 1], [2, 1], [3, 0]]
    drafts = torch.tensor([x] * B, device=device)
    return p.expand(B, -1, -1, -1).contiguous(), q.expand(B, -1, -1, -1).contiguous(), drafts


@pytest.mark.parametrize("rule", list(tree.MASKED))
def test_tree_masked_step_traces_whole(rule):
    p, q, drafts = _tree(rule, 6, "cpu")
    uni = tree.uniforms(p, q, drafts, torch.Generator().manual_seed(2))
    eager = tree.step(p, q, drafts, *uni, rule=rule)
    torch._dynamo.reset()
    traced = torch.compile(tree.step, fullgraph=True, backend="eager", dynamic=False)(p, q, drafts, *uni, rule=rule)
    for a, c in zip(eager, traced, strict=True):
        assert torch.equal(a, c)


@pytest.mark.parametrize("rule", list(tree.MASKED))
def test_tree_masked_step_draws_the_exact_conditional_law(rule):
    """Pearson chi-square of (index, tau, Y) from the masked walk against ``tree.conditional``:
    N = 20 000 rows of one tree, cells of expected count < 10 pooled, alpha = 1e-4 per test
    (2 tests), fixed seed; cells of probability 0 must be empty."""
    n = 20_000
    p, q, drafts = _tree(rule, n, "cpu", seed=3)
    out = tree.step(p, q, drafts, *tree.uniforms(p, q, drafts, torch.Generator().manual_seed(4)), rule=rule)
    law = tree.conditional(p[:1], q[:1], drafts[:1], rule=rule)[0].numpy()  # [k, g + 1, V]
    k, g1, V = law.shape
    cell = (out.index * g1 + out.accepted) * V + out.token
    counts = np.bincount(cell.numpy(), minlength=k * g1 * V)
    assert counts[law.reshape(-1) <= 0].sum() == 0
    stat, thr, df = pooled_chi_square(counts, law.reshape(-1), n, 1e-4)
    assert stat <= thr, f"chi-square {stat:.2f} > {thr:.2f} (df {df}, N {n})"


@cuda
@pytest.mark.parametrize("rule", list(tree.MASKED))
def test_cuda_tree_sample_never_syncs(rule):
    p, q, drafts = _tree(rule, 8, "cuda")
    g = torch.Generator("cuda").manual_seed(0)
    tree.sample(p, q, drafts, rule=rule, generator=g, validate=False)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = tree.sample(p, q, drafts, rule=rule, generator=g, validate=False)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert out.accepted.shape == (8,)


def test_a_failing_kernel_warns_and_turns_the_kernels_off(monkeypatch):
    """A kernel that fails to compile or launch must not break the verify step: try_kernel warns,
    returns None (the caller runs its torch step) and use_kernels is False from then on."""
    import otspec_gpu.kernels as kern

    monkeypatch.setattr(kern, "_FAILURE", [])

    def broken(*args):
        raise RuntimeError("no compiler for this device")

    with pytest.warns(RuntimeWarning, match="no compiler for this device"):
        assert kern.try_kernel(broken, 1) is None
    assert kern.failure() == "RuntimeError: no compiler for this device"
    assert not kern.use_kernels(torch.zeros(1, device="cuda" if torch.cuda.is_available() else "cpu"))
