"""Decoding draws a draft law through the law's own torch sampler hook (``DraftLaw.torch_sampler``),
not through a switch on its name: the drawable laws are exactly the registered laws with a hook, each
hook resolves to this package's sampler, and a law without one is refused by name."""

import importlib

import numpy as np
import pytest
import torch

from otspec.errors import UnsupportedMethodError
from otspec.laws import ALL
from otspec_gpu import drafting


def test_the_drawable_laws_are_the_registered_laws_with_a_hook():
    assert tuple(cls.kind for cls in ALL if cls.torch_sampler is not None) == drafting.LAWS
    assert {"iid", "without_replacement", "greedy"} <= set(drafting.LAWS)


@pytest.mark.parametrize("cls", [c for c in ALL if c.torch_sampler is not None], ids=lambda c: c.kind)
def test_each_hook_resolves_and_is_what_sample_drafts_calls(cls, monkeypatch):
    module, name = cls.torch_sampler.split(":")
    fn = getattr(importlib.import_module(module), name)
    calls = []

    def spy(*args, **kwargs):
        calls.append(cls.kind)
        return fn(*args, **kwargs)

    monkeypatch.setattr(importlib.import_module(module), name, spy)
    q = torch.tensor([[0.4, 0.3, 0.2, 0.1]], dtype=torch.float64)
    got = drafting.sample_drafts(q, 2, cls.kind, generator=torch.Generator().manual_seed(0))
    assert calls == [cls.kind] and got.shape == (1, 2)
    # the same uniforms give the same drafts through the hook called directly
    direct = fn(q, 2, generator=torch.Generator().manual_seed(0), n=None, validate=True)
    assert torch.equal(got, direct)


@pytest.mark.parametrize("kind", [c.kind for c in ALL if c.torch_sampler is None])
def test_a_law_without_a_hook_is_refused_by_name(kind):
    q = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    with pytest.raises(UnsupportedMethodError, match=kind):
        drafting.sample_drafts(q, 1, kind, generator=torch.Generator().manual_seed(0))


def test_shared_row_draws_follow_the_hook_too():
    q = torch.tensor([[0.5, 0.25, 0.25]], dtype=torch.float64)
    out = drafting.sample_drafts(q, 2, "without_replacement", generator=torch.Generator().manual_seed(1), n=500)
    assert out.shape == (500, 2) and bool((out[:, 0] != out[:, 1]).all())
    assert np.isclose((out[:, 0] == 0).double().mean().item(), 0.5, atol=0.1)  # P(first = 0) = 0.5; 5 sd at n = 500
