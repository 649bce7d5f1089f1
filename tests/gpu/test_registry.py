"""The torch registry is derived from the modules and complete: every public module of
``otspec_gpu.verifiers.step`` registers the verifier named like it (``wor_iid`` included), every
core single-step verifier has a torch twin or a stated reason, the masked tree rules are the tree
rules, and the contract's default ``sample`` is the checks, the uniforms and the pure step."""

from __future__ import annotations

import pkgutil

import pytest
import torch

import otspec
from otspec_gpu.verifiers import SINGLE_STEP, TREE, TorchVerifier, registry, step, tree
from tests.gpu._single_step import COMBOS


def test_step_all_is_every_rule_module():
    files = sorted(m.name for m in pkgutil.iter_modules(step.__path__) if not m.name.startswith("_"))
    assert step.__all__ == files
    assert "wor_iid" in step.__all__
    for name in step.__all__:
        assert getattr(step, name).__name__ == f"otspec_gpu.verifiers.step.{name}"
    with pytest.raises(AttributeError):
        step.no_such_rule  # noqa: B018


def test_twins_are_read_from_the_modules():
    assert set(registry._twins()) == set(step.__all__)
    for name in step.__all__:
        assert registry._twins()[name] is getattr(getattr(step, name), name)


def test_every_core_verifier_has_a_twin_or_a_reason():
    core = {v.name for v in otspec.verifiers.ALL}
    twins, reasons = set(SINGLE_STEP), set(registry.NO_TORCH_TWIN)
    assert twins | reasons == core, f"no twin and no reason: {sorted(core - twins - reasons)}"
    assert not twins & reasons, f"a twin and a reason: {sorted(twins & reasons)}"
    assert all(len(r) > 20 for r in registry.NO_TORCH_TWIN.values())


def test_masked_tree_rules_are_the_tree_rules():
    assert tuple(tree.MASKED) == tuple(TREE)


def test_test_table_covers_every_twin():
    assert {name for name, _, _ in COMBOS} == set(SINGLE_STEP)
    assert ("wor_iid", "without_replacement", 2) in COMBOS
    assert ("kseq", "without_replacement", 2) not in COMBOS  # kseq's twin is for i.i.d. drafts


def test_default_sample_is_checks_uniforms_step():
    gen = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.5, 0.3, 0.2]] * 4, dtype=torch.float64)
    q = torch.tensor([[0.2, 0.3, 0.5]] * 4, dtype=torch.float64)
    drafts = torch.multinomial(q, 2, replacement=True, generator=gen)
    rrs = SINGLE_STEP["rrs"]
    out = rrs.sample(p, q, drafts, generator=torch.Generator().manual_seed(3))
    ref = rrs.step(p, q, drafts, *rrs.uniforms(p, q, drafts, torch.Generator().manual_seed(3)))
    assert all(torch.equal(a, b) for a, b in zip(out, ref, strict=True))
    with pytest.raises(otspec.errors.InvalidDraftsError, match="distinct"):  # rrs_wor's own check
        SINGLE_STEP["rrs_wor"].sample(p, q, torch.tensor([[1, 1]] * 4), generator=gen)
    with pytest.raises(otspec.errors.InvalidDraftCountError, match="'token'"):  # k bounds and the name
        SINGLE_STEP["token"].sample(p, q, drafts, generator=gen)


def test_a_verifier_without_sample_needs_a_pure_step():
    with pytest.raises(TypeError, match="needs a sample"):
        TorchVerifier("x", "iid", True, lambda *a: None)


#: rules added after 0.1.0: they never had a module-level sample to deprecate
NEW_SINCE_0_1_0 = ("exact_match", "gls", "gumbel", "one_hot")


@pytest.mark.parametrize(
    "name", [n for n in step.__all__ if SINGLE_STEP[n].sample == SINGLE_STEP[n]._default_sample and n not in NEW_SINCE_0_1_0]
)
def test_module_sample_of_0_1_0_warns_and_is_the_verifiers(name):
    module = getattr(step, name)
    with pytest.warns(DeprecationWarning, match=rf"SINGLE_STEP\['{name}'\]\.sample"):
        assert module.sample == SINGLE_STEP[name].sample
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018
