"""The torch verifiers' rows of the bad-input table: each bad input raises a specific
:mod:`otspec.errors` error whose message names the problem (``validate=True``, the default), and an
empty batch (B = 0) gives an empty result from every verifier."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from otspec.errors import InvalidDistributionError, InvalidDraftsError  # noqa: E402
from otspec_gpu.verifiers import SINGLE_STEP, TREE, chain, tree  # noqa: E402

P = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64)
Q = torch.tensor([[0.2, 0.3, 0.5]], dtype=torch.float64)
#: q's top token is 2, so a greedy drafter never draws 2 again as its last (random) draft
REPEATED_TOP = torch.tensor([[2, 2]])


def _chain_inputs(g: int = 2, V: int = 4):
    p = torch.full((1, g + 1, V), 1.0 / V, dtype=torch.float64)
    q = torch.full((1, g, V), 1.0 / V, dtype=torch.float64)
    return p, q, torch.zeros((1, g), dtype=torch.long)


def _tree_inputs(k: int = 2, g: int = 2, V: int = 4):
    p = torch.full((1, k, g + 1, V), 1.0 / V, dtype=torch.float64)
    q = torch.full((1, k, g, V), 1.0 / V, dtype=torch.float64)
    return p, q, torch.arange(k)[None, :, None].expand(1, k, g).clone()


def _spoil(x: torch.Tensor, how: str) -> torch.Tensor:
    """A copy of ``x`` with one row made invalid away from the drafted tokens (token 0 is drafted)."""
    x = x.clone()
    row = x.reshape(-1, x.shape[-1])[-1]
    if how == "nan elsewhere":
        row[-1] = float("nan")
    elif how == "all zero":
        row.zero_()
    elif how == "sums to 2":
        row.mul_(2.0)
    elif how == "negative entry":
        row[-1], row[-2] = -0.1, row[-2] + 0.1
    return x


SPOILS = ("nan elsewhere", "all zero", "sums to 2", "negative entry")
FRAGMENT = {"nan elsewhere": "finite", "all zero": "sum to 1", "sums to 2": "sum to 1", "negative entry": "non-negative"}


def _chain_cases():
    for rule in ("token", "block"):
        for which in ("p", "q"):
            for how in SPOILS:
                yield rule, which, how


@pytest.mark.parametrize("rule,which,how", list(_chain_cases()), ids=lambda x: str(x))
@pytest.mark.parametrize("fn", ["sample", "conditional"])
def test_chain_rejects_bad_rows(rule, which, how, fn):
    p, q, drafts = _chain_inputs()
    p, q = (_spoil(p, how), q) if which == "p" else (p, _spoil(q, how))
    call = getattr(chain, f"{rule}_{fn}")
    kw = {"generator": torch.Generator().manual_seed(0)} if fn == "sample" else {}
    with pytest.raises(InvalidDistributionError, match=FRAGMENT[how]):
        call(p, q, drafts, **kw)
    call(p, q, drafts, validate=False, **kw)  # documented: validate=False skips the value checks


@pytest.mark.parametrize("rule", TREE)
@pytest.mark.parametrize("which", ["p", "q"])
@pytest.mark.parametrize("how", SPOILS)
def test_tree_rejects_bad_rows(rule, which, how):
    p, q, drafts = _tree_inputs()
    p, q = (_spoil(p, how), q) if which == "p" else (p, _spoil(q, how))
    with pytest.raises(InvalidDistributionError, match=FRAGMENT[how]):
        tree.sample(p, q, drafts, rule=rule, generator=torch.Generator().manual_seed(0))
    with pytest.raises(InvalidDistributionError, match=FRAGMENT[how]):
        tree.conditional(p, q, drafts, rule=rule)


@pytest.mark.parametrize("name", ["greedy_optimal", "spechub"])
def test_greedy_rules_reject_a_repeated_top_token(name):
    """The numpy twin raises for drafts a greedy drafter cannot produce; so must the torch rules
    (before, their conditional returned [0, 0, 1] / [0.1, 0, 0.9], not p)."""
    v = SINGLE_STEP[name]
    with pytest.raises(InvalidDraftsError, match="never draws again"):
        v.conditional(P, Q, REPEATED_TOP)
    with pytest.raises(InvalidDraftsError, match="never draws again"):
        v.sample(P, Q, REPEATED_TOP, generator=torch.Generator().manual_seed(0))


def test_naive_with_greedy_law_rejects_a_repeated_top_token():
    with pytest.raises(InvalidDraftsError, match="never draws again"):
        SINGLE_STEP["naive"].conditional(P, Q, REPEATED_TOP, law="greedy")


@pytest.mark.parametrize("name", sorted(SINGLE_STEP))
@pytest.mark.parametrize("rows", [0, 1], ids=["p_B0", "p_shared"])
def test_empty_batch_gives_empty_results(name, rows):
    v = SINGLE_STEP[name]
    k = max(v.k_min, 2 if v.k_max is None else v.k_max)
    p = torch.full((rows, 4), 0.25, dtype=torch.float64)
    drafts = torch.zeros((0, k), dtype=torch.long)
    law = v.conditional(p, p, drafts)
    out = v.sample(p, p, drafts, generator=torch.Generator().manual_seed(0))
    assert law.shape == (0, 4) and law.dtype == p.dtype
    assert out.token.shape == out.accepted.shape == out.index.shape == (0,)


def test_empty_batch_chain_and_tree():
    p, q, drafts = _chain_inputs()
    out = chain.block_sample(p[:0], q[:0], drafts[:0], generator=torch.Generator())
    assert out.token.shape == (0,) and chain.token_conditional(p[:0], q[:0], drafts[:0]).shape == (0, 3, 4)
    p, q, drafts = _tree_inputs()
    assert tree.sample(p[:0], q[:0], drafts[:0], rule="kseq", generator=torch.Generator()).token.shape == (0,)
