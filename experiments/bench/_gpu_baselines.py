"""Same-run baselines of the torch verifier benchmarks: what one verify step costs when written
minimally from the formula, eager and replayed as a CUDA graph, so every row reads as a ratio.

* ``formula_token``: single-step token verification from the formula, no host synchronisation, no
  checks: ``Y = x`` if ``U < min(1, p(x)/q(x))`` else inverse CDF of ``(p - q)_+`` (float32 cumsum,
  one ``searchsorted``), uniforms drawn from the generator inside the call;
* ``formula_token_chain``: the same per position of a ``gamma`` chain (first rejection, then one
  draw from the residual at tau or from the bonus row).

``cuda_time`` times with CUDA events around up to ``reps`` back-to-back calls after warm-up (fewer
for a step slower than 1 ms; median of ``rounds`` such blocks, per call); on CPU ``perf_counter``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def formula_token(p, q, drafts, *, generator, validate=False):
    """Single-step token verification written from the formula (returns the ``[B]`` tokens)."""
    B, V = drafts.shape[0], p.shape[-1]
    x = drafts[:, :1]
    coin = torch.rand((B, 1), generator=generator, device=p.device, dtype=p.dtype)
    u = torch.rand((B, 1), generator=generator, device=p.device, dtype=p.dtype)
    acc = coin * q.gather(1, x) < p.gather(1, x)
    cdf = (p - q).clamp_min_(0.0).cumsum_(-1)
    y = torch.searchsorted(cdf, u * cdf[:, -1:]).clamp_max_(V - 1)
    return (torch.where(acc, x, y).squeeze(1),)


def formula_token_chain(p, q, drafts, *, generator, validate=False):
    """Token-chain verification written from the formula (returns ``(tau, token)``)."""
    B, g = drafts.shape
    V = p.shape[-1]
    coin = torch.rand((B, g), generator=generator, device=p.device, dtype=p.dtype)
    u = torch.rand((B, 1), generator=generator, device=p.device, dtype=p.dtype)
    idx = drafts[:, :, None]
    rej = coin * q.gather(2, idx).squeeze(2) >= p[:, :g].gather(2, idx).squeeze(2)
    tau = torch.where(rej.any(1), rej.to(torch.int8).argmax(1), g)
    rows = torch.arange(B, device=p.device)
    w = torch.where((tau < g)[:, None], (p[rows, tau] - q[rows, tau.clamp_max(g - 1)]).clamp_min_(0.0), p[rows, tau])
    cdf = w.cumsum_(-1)
    y = torch.searchsorted(cdf, u * cdf[:, -1:]).clamp_max_(V - 1).squeeze(1)
    return tau, y


def cuda_time(fn: Callable[[], object], device: str, reps: int = 20, rounds: int = 5) -> float:
    """Median seconds per call of ``fn`` (CUDA: events around ``reps`` calls, synchronised; CPU:
    ``perf_counter`` per block), after two warm-up calls."""
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    reps = max(1, min(reps, int(0.02 / max(time.perf_counter() - t0, 1e-9))))  # slow steps: fewer calls per block
    times = []
    if device == "cuda":
        for _ in range(rounds):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(reps):
                fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3 / reps)
    else:
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            times.append((time.perf_counter() - t0) / reps)
    return statistics.median(times)


def graphed(sample, inputs, generator, **extra):
    """A replayable CUDA graph of ``sample(*inputs, generator=generator)`` (``None`` off CUDA, or
    the capture error's text when capture fails, so a benchmark row records it instead of aborting)."""
    if inputs[0].device.type != "cuda":
        return None
    from otspec_gpu.graphs import GraphedStep

    try:
        return GraphedStep(sample, tuple(inputs), generator, **extra)
    except Exception as e:  # noqa: BLE001 - recorded in the row
        return f"capture failed: {type(e).__name__}: {e}"
