"""K-SEQ's rho* in torch (histogram + safeguarded Newton, ``otspec_gpu.verifiers.step.kseq.rho_star``)
against the numpy core's bisection (``otspec.verifiers.step.kseq.kseq_rho_star``), on laws larger
than the enumerated kernels of test_single_step_kernels.py (V up to 3 000, so the histogram, the
working-set compaction and the Newton / grid stages all run), one row at a time ([1, V]: the
boolean-index path) and batched ([B, V]: the padded path). Runtime about 1 s."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from otspec.verifiers.step.kseq import kseq_beta, kseq_rho_star
from otspec_gpu.verifiers.step.kseq import rho_star
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


@pytest.mark.parametrize("k", [2, 3, 4, 8])
@pytest.mark.parametrize("V", [300, 3000])
def test_rho_star_matches_numpy_bisection(k, V):
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


def test_rho_star_edge_rows():
    """p == q gives 1 exactly; rows with every ratio outside (1, k] and k = 1 keep their values."""
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(400))
    q_far = np.roll(p, 1)
    P = torch.as_tensor(np.stack([p, p, p]))
    Q = torch.as_tensor(np.stack([p, q_far, p]))
    got = rho_star(P, Q, 4).numpy()
    assert got[0] == 1.0 and got[2] == 1.0
    assert got[1] == kseq_rho_star(p, q_far, 4) or abs(got[1] - kseq_rho_star(p, q_far, 4)) <= FLOAT64_KERNEL_ATOL * got[1]
    assert rho_star(P, Q, 1).tolist() == [1.0, 1.0, 1.0]


def test_rho_star_when_p_and_q_nearly_agree():
    """Every ratio p/q within ~1e-5 of 1 (V = 300, 2 000, k = 8): the sign of f beyond the largest
    ratio, -(1 - 1/rho)^k, is below float64 rounding of 1 - rho beta taken as 1 minus a sum, so f
    must be evaluated from the tokens above rho. The numpy core (checked against exact rationals in
    tests/verifiers/step/test_kseq.py) and torch must agree to 1e-12 (the previous torch solver was
    up to ~1.7% away on such rows), one row and batched."""
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
