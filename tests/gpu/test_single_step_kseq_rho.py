"""K-SEQ's rho* in torch against the numpy core's bisection (``otspec.verifiers.step.kseq.kseq_rho_star``),
on laws larger than the enumerated kernels of test_single_step_kernels.py (V up to 3 000), one row
at a time and batched, for both torch solvers: the host-driven one of eager CPU calls
(``otspec_gpu.verifiers.step.kseq.rho_star``: histogram + safeguarded Newton; [1, V] takes the
boolean-index path, [B, V] the padded one, so the histogram, the working-set compaction and the
Newton / grid stages all run) and the sync-free multisection of CUDA and traced calls
(``otspec_gpu.verifiers.step._kseq_root.rho_star_masked``). Runtime about 2 s."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from otspec.verifiers.step.kseq import kseq_beta, kseq_rho_star
from otspec_gpu.verifiers.step._kseq_root import bins_for, passes, rho_star_masked
from otspec_gpu.verifiers.step.kseq import rho_star

#: The two torch solvers of rho* (same contract up to summation order).
SOLVERS = {"host": rho_star, "masked": rho_star_masked}
solvers = pytest.mark.parametrize("solver", list(SOLVERS))
from tests.gpu._tolerances import FLOAT64_FEW_OPS_ATOL, FLOAT64_KERNEL_ATOL, FLOAT64_ULPS_ATOL


def _laws(seed: int, B: int, V: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of LLM-like laws (softmax of Gaussian logits, the draft a noisy copy), some tokens of
    zero draft and/or target probability, and one Dirichlet row (far from the target)."""
    rng = np.random.default_rng(seed)
    z = 3.0 * rng.standard_normal((B, V))
    p = np.exp(z - z.max(1, keepdims=True))
    q = np.exp(z + rng.standard_normal((B, V)) - z.max(1, keepdims=True))
    p[:, : V // 50] = 0.0  # target zeros
    q[:, V // 50 : V // 25] = 0.0  # draft zeros (ratio inf)
    q[0] = rng.dirichlet(np.full(V, 0.5))
    return p / p.sum(1, keepdims=True), q / q.sum(1, keepdims=True)


def _f(p: np.ndarray, q: np.ndarray, rho: float, k: int) -> float:
    b = kseq_beta(p, q, rho)
    return float(-np.expm1(k * np.log1p(-min(b, 1.0)))) - rho * b if b < 1.0 else 1.0 - rho * b


@solvers
@pytest.mark.parametrize("k", [2, 3, 4, 8])
@pytest.mark.parametrize("V", [300, 3000])
def test_rho_star_matches_numpy_bisection(k, V, solver):
    rho_star = SOLVERS[solver]
    p, q = _laws(k * V, 5, V)
    P, Q = torch.as_tensor(p), torch.as_tensor(q)
    batched = rho_star(P, Q, k).numpy()
    for b in range(p.shape[0]):
        ref = kseq_rho_star(p[b], q[b], k)
        one = float(rho_star(P[b : b + 1], Q[b : b + 1], k))
        # the two torch paths (boolean-index / padded working set) sum in different orders
        assert abs(one - batched[b]) <= FLOAT64_ULPS_ATOL * one
        # same root as the numpy bisection up to summation order (these rows are well conditioned:
        # |f'| >= 1e-3, so 1e-16 noise in f moves the root by < 1e-13)
        assert abs(one - ref) <= FLOAT64_KERNEL_ATOL * ref, (b, one, ref)
        # lossless side: f <= 0 at the returned value and > 0 one float64 below it, up to the
        # difference of numpy's and torch's evaluations of f: beta is summed in another order
        # (a few ulps, < 5e-16) and f' in beta is at most k + rho <= 16, so < 1e-14
        assert 1.0 <= one <= k
        assert _f(p[b], q[b], one, k) <= FLOAT64_FEW_OPS_ATOL
        if one > 1.0:
            assert _f(p[b], q[b], np.nextafter(one, 0.0), k) > -FLOAT64_FEW_OPS_ATOL


@solvers
def test_rho_star_edge_rows(solver):
    """p == q gives 1 exactly; rows with every ratio outside (1, k] and k = 1 keep their values."""
    rho_star = SOLVERS[solver]
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(400))
    q_far = np.roll(p, 1)
    P = torch.as_tensor(np.stack([p, p, p]))
    Q = torch.as_tensor(np.stack([p, q_far, p]))
    got = rho_star(P, Q, 4).numpy()
    assert got[0] == 1.0 and got[2] == 1.0
    assert got[1] == kseq_rho_star(p, q_far, 4) or abs(got[1] - kseq_rho_star(p, q_far, 4)) <= FLOAT64_KERNEL_ATOL * got[1]
    assert rho_star(P, Q, 1).tolist() == [1.0, 1.0, 1.0]


@solvers
def test_rho_star_when_p_and_q_nearly_agree(solver):
    """Every ratio p/q within ~1e-5 of 1 (V = 300, 2 000, k = 8): the sign of f beyond the largest
    ratio, -(1 - 1/rho)^k, is below float64 rounding of 1 - rho beta taken as 1 minus a sum, so f
    must be evaluated from the tokens above rho. The numpy core (checked against exact rationals in
    tests/verifiers/step/test_kseq.py) and torch must agree to 1e-12 (the previous torch solver was
    up to ~1.7% away on such rows), one row and batched."""
    rho_star = SOLVERS[solver]
    rows = []
    for seed, V in ((2, 300), (17, 300), (24, 2000)):
        rng = np.random.default_rng(seed)
        z = 3.0 * rng.standard_normal(V)
        p = np.exp(z) / np.exp(z).sum()
        q = np.exp(z + 1e-5 * rng.standard_normal(V))
        rows.append((p, q / q.sum()))
    for p, q in rows:
        ref = kseq_rho_star(p, q, 8)
        one = float(rho_star(torch.as_tensor(p)[None], torch.as_tensor(q)[None], 8))
        assert abs(one - ref) <= FLOAT64_KERNEL_ATOL * ref, (one, ref)
    P = torch.as_tensor(np.stack([r[0] for r in rows[:2]]))
    Q = torch.as_tensor(np.stack([r[1] for r in rows[:2]]))
    batched = rho_star(P, Q, 8).numpy()
    for b in range(2):
        ref = kseq_rho_star(rows[b][0], rows[b][1], 8)
        assert abs(batched[b] - ref) <= FLOAT64_KERNEL_ATOL * ref


def test_masked_rho_star_per_row_k_equals_one_k_per_call():
    """A tensor k (a tree node's alive drafts per row) gives, bitwise, what one call per k gives:
    on CPU each row's bins are summed in token order whatever the other rows hold, and the passes
    (set by k_max) leave adjacent float64 values for every k <= k_max (asserted below)."""
    p, q = _laws(11, 6, 500)
    P, Q = torch.as_tensor(p), torch.as_tensor(q)
    k = torch.tensor([1, 2, 3, 4, 2, 4])
    assert passes(4) == passes(2) == passes(3)
    got = rho_star_masked(P, Q, k, k_max=4)
    for b in range(6):
        assert got[b] == rho_star_masked(P[b : b + 1], Q[b : b + 1], int(k[b]))[0], b
    assert got[0] == 1.0  # k = 1: one draft, token verification
    with pytest.raises(ValueError, match="k_max"):
        rho_star_masked(P, Q, k)


@pytest.mark.parametrize("M", [16, 512, 1024])
@pytest.mark.parametrize("k", [2, 8, 1000])
def test_masked_passes_leave_adjacent_values(k, M):
    """The pass count is the smallest n with ceil(W0 / M^n) = 1 (W0: float64 values in [1, k]);
    one pass fewer leaves a bracket wider than one step (the count is not padded)."""
    import struct

    def bits(x):
        return struct.unpack("<q", struct.pack("<d", float(x)))[0]

    w0 = bits(k) - bits(1.0)
    n = passes(k, M)
    assert -(-w0 // M**n) == 1
    assert -(-w0 // M ** (n - 1)) > 1


def test_bins_follow_the_vocabulary():
    """M is the power of two at or above V within [16, 1024], and small vocabularies (fewer candidates,
    more passes) give the same root as the largest M up to summation order, lossless side kept."""
    assert [bins_for(V) for V in (1, 4, 16, 17, 300, 1024, 1025, 262_144)] == [16, 16, 16, 32, 512, 1024, 1024, 1024]
    for V in (3, 6, 40):
        p, q = _laws(V, 4, V)
        got = rho_star_masked(torch.as_tensor(p), torch.as_tensor(q), 4).numpy()
        for b in range(4):
            ref = kseq_rho_star(p[b], q[b], 4)
            assert abs(got[b] - ref) <= FLOAT64_KERNEL_ATOL * ref, (V, b, got[b], ref)
            assert _f(p[b], q[b], got[b], 4) <= FLOAT64_FEW_OPS_ATOL
