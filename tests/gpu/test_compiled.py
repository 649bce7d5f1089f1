"""The compiled pure steps (:mod:`otspec_gpu.compiled`): ``compiled_sample`` draws the same uniforms
as ``sample`` and gives its tokens; a compilation failure warns once and falls back to the eager
step with the uniforms already drawn; decoding's verify step takes the compiled path on request.

The wiring is checked with the ``eager`` backend (it traces the whole step, ``fullgraph=True``, without
generating code: seconds); one test compiles ``optimal_iid``'s tree-free step with Inductor on CPU
(about a minute: Inductor's C++ code generation) and compares every output with the eager step's.
On CUDA the same test compiles Triton kernels instead."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from otspec_gpu import compiled
from otspec_gpu.drafting import sample_drafts
from otspec_gpu.verifiers import SINGLE_STEP

pytestmark = pytest.mark.usefixtures("one_thread")

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))]


def _problem(name, B, V, device, seed=0):
    rng = np.random.default_rng(seed)
    z = 3.0 * rng.standard_normal((B, V))
    p = torch.softmax(torch.tensor(z), 1).to(device)
    q = torch.softmax(torch.tensor(z + 1.5 * rng.standard_normal((B, V))), 1).to(device)
    d = sample_drafts(q, 4, SINGLE_STEP[name].draft_law, generator=torch.Generator(device).manual_seed(seed))
    return p, q, d


@pytest.fixture
def fresh(monkeypatch):
    """A clean compile cache and failure record (the module keeps both per process)."""
    monkeypatch.setattr(compiled, "_STEPS", {})
    monkeypatch.setattr(compiled, "_FAILURE", [])
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", sorted(compiled.COMPILABLE))
def test_compiled_sample_equals_sample_eager_backend(name, fresh, monkeypatch):
    monkeypatch.setenv("OTSPEC_COMPILE_BACKEND", "eager")
    v = SINGLE_STEP[name]
    p, q, d = _problem(name, 6, 300, "cpu")
    ref = v.sample(p, q, d, generator=torch.Generator().manual_seed(3))
    got = compiled.compiled_sample(v)(p, q, d, generator=torch.Generator().manual_seed(3))
    for a, b in zip(ref, got, strict=True):
        assert torch.equal(a, b)
    assert compiled.failure() is None


def test_compile_failure_warns_once_and_falls_back(fresh, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(torch, "compile", broken)
    v = SINGLE_STEP["optimal_iid"]
    p, q, d = _problem("optimal_iid", 4, 200, "cpu")
    ref = v.sample(p, q, d, generator=torch.Generator().manual_seed(5))
    f = compiled.compiled_sample(v)
    with pytest.warns(RuntimeWarning, match="no compiler here"):
        got = f(p, q, d, generator=torch.Generator().manual_seed(5))
    assert torch.equal(got.token, ref.token)
    assert "RuntimeError" in compiled.failure()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second call neither compiles nor warns
        again = f(p, q, d, generator=torch.Generator().manual_seed(5))
    assert torch.equal(again.token, ref.token)


def test_only_compilable_rules_are_compiled():
    with pytest.raises(ValueError, match="not compiled"):
        compiled.compiled_sample(SINGLE_STEP["token"])


def test_decode_step_takes_the_compiled_path_on_request(fresh, monkeypatch):
    """VerifierStep(compile_steps=True) gives the eager step's output round after round; the default
    follows OTSPEC_COMPILE."""
    from otspec_gpu.verifying import VerifierStep

    monkeypatch.setenv("OTSPEC_COMPILE_BACKEND", "eager")
    monkeypatch.setenv("OTSPEC_COMPILE", "1")
    assert VerifierStep("single", "optimal_iid", 3, 4).compile_steps
    monkeypatch.delenv("OTSPEC_COMPILE")
    assert not VerifierStep("single", "optimal_iid", 3, 4).compile_steps
    B, k, V = 3, 4, 250
    a_step = VerifierStep("single", "optimal_iid", B, k, compile_steps=True)
    b_step = VerifierStep("single", "optimal_iid", B, k, compile_steps=False)
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    h1, h2 = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    n = torch.full((B,), k)
    for s in range(2):
        p, q, _ = _problem("optimal_iid", B, V, "cpu", seed=s)
        P = p[:, None, None].expand(B, k, 2, V).reshape(B * k, 2, V).contiguous()
        Q = q[:, None, None].expand(B, k, 1, V).reshape(B * k, 1, V).contiguous()
        X = torch.multinomial(q, k, replacement=True, generator=torch.Generator().manual_seed(s)).reshape(B * k, 1)
        x, y = a_step(P, Q, X, n, g1, h1), b_step(P, Q, X, n, g2, h2)
        for u, w in zip(x, y, strict=True):
            assert torch.equal(u, w)
    assert len(compiled._STEPS) == 1  # one rule, one backend


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_inductor_compiled_bridge_step_equals_the_eager_step(device, fresh, monkeypatch):
    """Inductor's code for optimal_iid's tree-free step (CPU: C++; CUDA: Triton) against the eager
    step on the same uniforms: tokens equal on these seeded rows (a reordered reduction could move a
    draw only for a uniform within rounding of a boundary: about 1e-13 per row here)."""
    monkeypatch.delenv("OTSPEC_COMPILE_BACKEND", raising=False)
    v = SINGLE_STEP["optimal_iid"]
    p, q, d = _problem("optimal_iid", 8, 400, device, seed=7)
    uni = v.uniforms(p, q, d, torch.Generator(device).manual_seed(9))
    ref = v.step(p, q, d, *uni)
    try:
        got = compiled._compiled(v.step)(p, q, d, *uni)
    except Exception as exc:
        # torch 2.11's Triton code generator failed on a split scan of this step at B > 1 on an H200
        # (docs/benchmarks.rst, "GPU at serving speed"); decoding then falls back to the eager step with
        # a warning. Only that failure is expected: any other error, or wrong tokens, fails the test.
        if device == "cuda" and type(exc).__name__ == "InductorError":
            pytest.xfail(f"Inductor could not generate CUDA code for this step: {str(exc)[:160]}")
        raise
    for a, b in zip(ref, got, strict=True):
        assert torch.equal(a, b)
