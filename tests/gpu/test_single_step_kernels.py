"""Every torch single-step verifier's ``conditional`` equals the numpy core's exact kernel row, for
every drafted tuple of random small laws (V <= 6, k <= 3, exact zeros in p and q), in float64
(1e-12) and float32 (1e-5), batched (many problems stacked in one call) and with a shared
``[1, V]`` law; plus the numerical edge cases and the input checks."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

import otspec
from otspec.errors import (
    InvalidDistributionError,
    InvalidDraftCountError,
    InvalidDraftsError,
    OtspecInputError,
    ShapeMismatchError,
)
from otspec_gpu.verifiers import SINGLE_STEP, StepOutput
from tests.gpu._single_step import (
    COMBOS,
    LAWS,
    extra_for,
    numpy_kernel,
    random_law_pair,
)
from tests.gpu._tolerances import FLOAT32_KERNEL_ATOL, FLOAT32_ROUNDING_RTOL, FLOAT64_KERNEL_ATOL, FLOAT64_ULPS_ATOL

TOL = {torch.float64: FLOAT64_KERNEL_ATOL, torch.float32: FLOAT32_KERNEL_ATOL}
N_LAWS = 15  # random (p, q) pairs per combination


def _t(x, dtype, device):
    return torch.as_tensor(np.asarray(x), dtype=dtype, device=device)


def test_registry_names_are_the_numpy_names():
    numpy_names = {v.name for v in otspec.verifiers.ALL}
    assert set(SINGLE_STEP) <= numpy_names
    assert set(SINGLE_STEP) >= {"token", "kseq", "rrs", "rrs_wor", "greedy_optimal", "spechub", "nss", "naive", "approximate"}
    assert {c[0] for c in COMBOS} == set(SINGLE_STEP)  # every registered verifier is tested
    for name, v in SINGLE_STEP.items():
        assert v.name == name and v.draft_law in LAWS
        assert v.lossless == otspec.verifiers.by_name(name).lossless


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name,law,k", COMBOS, ids=[f"{n}-{l}-k{k}" for n, l, k in COMBOS])
def test_conditional_equals_numpy_kernel(name, law, k, dtype, device):
    v = SINGLE_STEP[name]
    rng = np.random.default_rng(zlib.crc32(f"{name}-{law}-{k}".encode()))
    P, Q, D, want, extras = [], [], [], [], []
    for i in range(N_LAWS):
        V = int(rng.integers(max(2, k), 7))
        p, q = random_law_pair(rng, V, k, law)
        if i == 0 and (p > 0).sum() >= k:
            q = p.copy()  # p == q
        extra = extra_for(name, law, V, rng if i % 2 else None)
        K = numpy_kernel(name, p, q, law, k, extra)
        M = K.tuples.shape[0]
        if i == 0 and name == "kseq" and np.array_equal(p, q):
            # the numpy core finds rho* = 1 + O(1e-16 ** (1/k)) here (its 1 - beta is a rounding
            # residue); the exact kernel at p == q keeps the first draft: rho* = 1, accept 1
            K = type(K)(tuples=K.tuples, weights=K.weights, pi=np.eye(V)[K.tuples[:, 0]], verifier="kseq")
        # one shared-law call per problem
        got = v.conditional(
            _t(p[None], dtype, device),
            _t(q[None], dtype, device),
            torch.as_tensor(K.tuples, device=device),
            **_tensors(extra, dtype, device),
        )
        assert got.dtype == dtype and got.shape == (M, V)
        np.testing.assert_allclose(got.cpu().double().numpy(), K.pi, rtol=0, atol=TOL[dtype])
        if name != "approximate" or "pass_prob" not in extra:  # stacked below (pass_prob is per problem)
            P.append(np.broadcast_to(np.pad(p, (0, 6 - V)), (M, 6)))
            Q.append(np.broadcast_to(np.pad(q, (0, 6 - V)), (M, 6)))
            D.append(K.tuples)
            want.append(np.pad(K.pi, ((0, 0), (0, 6 - V))))
            extras.append(extra)
    # every problem stacked into one batch: rows never leak into each other
    got = v.conditional(
        _t(np.concatenate(P), dtype, device),
        _t(np.concatenate(Q), dtype, device),
        torch.as_tensor(np.concatenate(D), device=device),
        **extras[0],
    )
    np.testing.assert_allclose(got.cpu().double().numpy(), np.concatenate(want), rtol=0, atol=TOL[dtype])


def _tensors(extra, dtype, device):
    return {key: (_t(val, dtype, device) if isinstance(val, np.ndarray) else val) for key, val in extra.items()}


LOSSLESS = [c for c in COMBOS if SINGLE_STEP.get(c[0]) is not None and SINGLE_STEP[c[0]].lossless and c[2] >= 1]


@pytest.mark.parametrize("name,law,k", LOSSLESS, ids=[f"{n}-{l}-k{k}" for n, l, k in LOSSLESS])
def test_lossless_by_enumeration(name, law, k, device):
    """sum_x Q(x) pi(. | x) == p with the torch kernel rows and the law's exact tuple weights."""
    v = SINGLE_STEP[name]
    rng = np.random.default_rng(7)
    for _ in range(10):
        V = int(rng.integers(max(2, k), 7))
        p, q = random_law_pair(rng, V, k, law)
        T, W = LAWS[law](q, k).enumerate()
        pi = v.conditional(
            _t(p[None], torch.float64, device),
            _t(q[None], torch.float64, device),
            torch.as_tensor(T, device=device),
            **extra_for(name, law, V),
        )
        np.testing.assert_allclose(W @ pi.cpu().numpy(), p, rtol=0, atol=FLOAT64_KERNEL_ATOL)


# ---------------------------------------------------------------------------------------------
# numerical edge cases, float32 and float64

EPS = 2.0**-23  # a residual mass of ~1.2e-7: one float32 ulp at 1.0, exactly representable below
EDGE = {
    # p == q: every draft is kept, the residual is never reached
    "equal": ([0.5, 0.25, 0.125, 0.125], [0.5, 0.25, 0.125, 0.125]),
    # p and q differ by 2**-23 at two tokens (residual mass 1.2e-7 in float32)
    "tiny": ([0.5, 0.25 - EPS, 0.125 + EPS, 0.125], [0.5, 0.25, 0.125, 0.125]),
    # p and q differ in one token's mass, moved to one other token
    "one_token": ([0.5, 0.25, 0.25, 0.0], [0.5, 0.25, 0.125, 0.125]),
    # disjoint supports: nothing can be accepted, the output law is p
    "disjoint": ([0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.75, 0.25]),
}


# only the (verifier, law, k, case) cells whose q has k tokens of positive mass to draw from
EDGE_COMBOS = [(n, l, k, c) for n, l, k in COMBOS for c in sorted(EDGE) if (np.array(EDGE[c][1]) > 0).sum() >= k]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name,law,k,case", EDGE_COMBOS, ids=[f"{n}-{l}-k{k}-{c}" for n, l, k, c in EDGE_COMBOS])
def test_edge_cases(name, law, k, case, dtype, device):
    """Dyadic laws (identical in float32 and float64): no NaN, rows on the simplex, equal to the
    numpy kernel; with disjoint supports every lossless rule outputs exactly p."""
    p, q = (np.array(x) for x in EDGE[case])
    v = SINGLE_STEP[name]
    extra = extra_for(name, law, 4)
    K = numpy_kernel(name, p, q, law, k, extra)
    got = v.conditional(_t(p[None], dtype, device), _t(q[None], dtype, device), torch.as_tensor(K.tuples, device=device), **extra)
    g = got.cpu().double().numpy()
    assert np.isfinite(g).all()
    np.testing.assert_allclose(g.sum(axis=1), 1.0, rtol=0, atol=TOL[dtype])
    np.testing.assert_allclose(g, K.pi, rtol=0, atol=TOL[dtype] if dtype == torch.float32 else FLOAT64_ULPS_ATOL)
    if case == "disjoint" and v.lossless:
        np.testing.assert_allclose(g, np.broadcast_to(p, g.shape), rtol=0, atol=FLOAT64_ULPS_ATOL)
    gen = torch.Generator(device).manual_seed(0)
    out = v.sample(_t(p[None], dtype, device), _t(q[None], dtype, device), torch.as_tensor(K.tuples, device=device), generator=gen, **extra)
    assert isinstance(out, StepOutput)
    assert bool((g[np.arange(len(g)), out.token.cpu().numpy()] > 0).all())  # only tokens of positive probability


def test_tiny_residual_float32_is_exact(device):
    """A residual of mass 2**-23 built from float32 inputs is the right law (accumulated in float64),
    not NaN or rounding noise: the rejected row of token verification puts mass on token 2 only."""
    p = torch.tensor([[0.5, 0.25 - EPS, 0.125 + EPS, 0.125]], dtype=torch.float32, device=device)
    q = torch.tensor([[0.5, 0.25, 0.125, 0.125]], dtype=torch.float32, device=device)
    pi = SINGLE_STEP["token"].conditional(p, q, torch.tensor([[1]], device=device)).double().cpu().numpy()[0]
    a = (0.25 - EPS) / 0.25
    np.testing.assert_allclose(pi, [0.0, a, 1.0 - a, 0.0], rtol=FLOAT32_ROUNDING_RTOL, atol=0)


@pytest.mark.parametrize("name", sorted(SINGLE_STEP))
def test_zero_draft_probability_is_rejected(name):
    """A draft the drafter cannot produce (q = 0) raises, as the numpy ``sample`` does."""
    v = SINGLE_STEP[name]
    p = torch.tensor([[0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
    q = torch.tensor([[0.5, 0.5, 0.0, 0.0]], dtype=torch.float64)
    k = v.k_min if v.k_max == v.k_min else 2
    drafts = torch.tensor([[2] if k == 1 else [0, 2]])
    with pytest.raises(InvalidDraftsError, match="draft probability q = 0"):
        v.conditional(p, q, drafts)
    with pytest.raises(InvalidDraftsError):
        v.sample(p, q, drafts, generator=torch.Generator().manual_seed(0))


def test_validate_false_keeps_rows_defined():
    """With the checks off, a q = 0 draft gets accept probability 1 (numpy's convention): no NaN."""
    p = torch.tensor([[0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
    q = torch.tensor([[0.5, 0.5, 0.0, 0.0]], dtype=torch.float64)
    for name in ("token", "kseq", "rrs", "naive"):
        pi = SINGLE_STEP[name].conditional(p, q, torch.tensor([[2]]), validate=False)
        assert torch.isfinite(pi).all() and abs(float(pi.sum()) - 1.0) < FLOAT64_KERNEL_ATOL


BAD = [
    ("p not a tensor", lambda p, q, d: ([0.5, 0.5], q, d), InvalidDistributionError),
    ("p of int dtype", lambda p, q, d: (p.long(), q, d), InvalidDistributionError),
    ("p 1-d", lambda p, q, d: (p[0], q, d), ShapeMismatchError),
    ("p not on the simplex", lambda p, q, d: (p * 0.9, q, d), InvalidDistributionError),
    ("p with NaN", lambda p, q, d: (torch.full_like(p, float("nan")), q, d), InvalidDistributionError),
    ("q negative", lambda p, q, d: (p, torch.tensor([[1.5, -0.5]], dtype=p.dtype), d), InvalidDistributionError),
    ("dtype mismatch", lambda p, q, d: (p, q.float(), d), ShapeMismatchError),
    ("V mismatch", lambda p, q, d: (p, torch.tensor([[0.5, 0.25, 0.25]], dtype=p.dtype), d), ShapeMismatchError),
    ("drafts int32", lambda p, q, d: (p, q, d.int()), InvalidDraftsError),
    ("drafts out of range", lambda p, q, d: (p, q, d + 5), InvalidDraftsError),
    ("drafts rows mismatch", lambda p, q, d: (p.expand(2, -1), q.expand(2, -1), d.expand(3, -1)), ShapeMismatchError),
]


@pytest.mark.parametrize("what,make,err", BAD, ids=[b[0] for b in BAD])
def test_bad_inputs(what, make, err):
    p = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    q = torch.tensor([[0.25, 0.75]], dtype=torch.float64)
    d = torch.tensor([[0]])
    args = make(p, q, d)
    with pytest.raises(err) as info:
        SINGLE_STEP["token"].conditional(*args)
    assert isinstance(info.value, OtspecInputError) and len(str(info.value)) > 20


def test_bad_draft_structure():
    p = torch.tensor([[0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
    q = torch.tensor([[0.4, 0.3, 0.2, 0.1]], dtype=torch.float64)
    with pytest.raises(InvalidDraftCountError):
        SINGLE_STEP["token"].conditional(p, q, torch.tensor([[0, 1]]))
    with pytest.raises(InvalidDraftCountError):
        SINGLE_STEP["spechub"].conditional(p, q, torch.tensor([[0, 1, 2]]))
    with pytest.raises(InvalidDraftsError, match="distinct"):
        SINGLE_STEP["rrs_wor"].conditional(p, q, torch.tensor([[1, 1]]))
    with pytest.raises(InvalidDraftsError, match="top-1"):
        SINGLE_STEP["greedy_optimal"].conditional(p, q, torch.tensor([[1, 2]]))
    with pytest.raises(InvalidDistributionError):
        SINGLE_STEP["approximate"].conditional(p, q, torch.tensor([[1]]), pass_prob=torch.full((4,), 2.0))
