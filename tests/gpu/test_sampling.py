"""The one inverse-CDF sampler of the torch side (``otspec_gpu.sampling``): its zero-weight guard,
and the same tokens as the three samplers it replaced (the decoder's ``_multinomial``, the verifiers'
``categorical`` and the chains' ``sample_rows``) for the same generator."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from otspec_gpu.sampling import categorical, sample_weights, search_cdf


def _old_multinomial(probs, generator):
    """The decoder's former sampler (clamp_max guard only)."""
    u = torch.rand(probs.shape[0], dtype=torch.float64, generator=generator, device=probs.device)
    cdf = torch.cumsum(probs, -1)
    idx = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1), right=True).squeeze(-1)
    return idx.clamp_max(probs.shape[-1] - 1)


def _old_sample_rows(weights, u):
    """The chains' former sampler."""
    cdf = torch.cumsum(weights, dim=-1, dtype=torch.float64)
    target = u.to(torch.float64).unsqueeze(-1) * cdf[:, -1:]
    return torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp_max(weights.shape[-1] - 1)


def _rows(seed: int, B: int, V: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    w = rng.dirichlet(np.full(V, 0.5), size=B)
    w[rng.random((B, V)) < 0.3] = 0.0  # zero-weight tokens, trailing ones included
    w[:, -1] = 0.0
    w[np.arange(B), rng.integers(0, V - 1, size=B)] += 0.1  # every row of positive mass
    return torch.as_tensor(w / w.sum(1, keepdims=True))


@pytest.mark.parametrize("B,V", [(1, 3), (64, 7), (8, 5000)])
def test_same_tokens_as_the_samplers_it_replaced(B, V, device):
    w = _rows(B * V, B, V).to(device)
    for seed in range(5):
        new = categorical(w, torch.Generator(device).manual_seed(seed))
        old = _old_multinomial(w, torch.Generator(device).manual_seed(seed))
        assert torch.equal(new, old)
        u = torch.rand(B, dtype=torch.float64, device=device, generator=torch.Generator(device).manual_seed(seed))
        assert torch.equal(sample_weights(w, u), _old_sample_rows(w, u))
        assert torch.equal(sample_weights(w.float(), u), _old_sample_rows(w.float(), u))


def test_never_a_token_of_weight_zero_when_u_times_total_reaches_the_total(device):
    """u * S rounding up to S (here u = 1 exactly) returns the last token of positive weight; the
    decoder's former guard (clamp to V - 1) returned a trailing token of weight 0."""
    w = torch.tensor([[0.25, 0.75, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]], dtype=torch.float64, device=device)
    u = torch.ones(2, dtype=torch.float64, device=device)
    assert sample_weights(w, u).tolist() == [1, 1]
    assert _old_sample_rows(w, u).tolist() == [3, 3]  # the defect the guard removes
    cdf = torch.cumsum(w[:1], -1)
    assert search_cdf(cdf, torch.ones(3, dtype=torch.float64, device=device)).tolist() == [1, 1, 1]


def test_shared_row_draws(device):
    w = torch.tensor([[0.0, 0.5, 0.0, 0.5, 0.0]], dtype=torch.float64, device=device)
    tok = categorical(w, torch.Generator(device).manual_seed(0), n=4000)
    assert tok.shape == (4000,) and set(tok.tolist()) == {1, 3}
    # N = 4000 fair coin flips: |count - 2000| > 6 sigma (190) has probability < 2e-9
    assert abs(int((tok == 1).sum()) - 2000) < 190
