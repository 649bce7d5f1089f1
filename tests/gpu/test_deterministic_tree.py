"""Deterministic top-k trees in torch (otspec_gpu.deterministic) and in decoding (``draft_tree="topk"``).

* the torch drafts of a static tree are the numpy law's nodes (``otspec.laws.top_k_tree`` on the
  same context-dependent draft model), and ``draw_top_k`` is the ``top_k`` law's tuple;
* the walk's step on hand-picked uniforms takes the path they select; its sampled block law over
  M = 200 000 batched walks matches the exact numpy block law
  (:func:`otspec.verifiers.sample_match.block_law`), Pearson chi-square at false alarm 1e-6;
* end to end: N = 3 000 decodings of one prompt with a tree of branching (2, 2) (k = 4, gamma = 2)
  on the random-weight V = 6 Llama; the first three tokens against the target's exact joint law
  (216 cells, pooled Pearson chi-square, false alarm 1e-6); and the mode's checks.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy import stats

from otspec import models as np_models
from otspec.errors import InvalidDraftCountError, UnsupportedMethodError
from otspec.laws import top_k, top_k_tree
from otspec.verifiers import sample_match
from otspec_gpu import models
from otspec_gpu.decoding import decode, mode_for
from otspec_gpu.deterministic import draw_top_k, top_k_tree_drafts, walk_sample, walk_step
from tests.gpu._stats import first_tokens_law, first_tokens_pvalue
from tests.gpu._tolerances import FALSE_ALARM

pytestmark = pytest.mark.usefixtures("one_thread")


class _ModelCache:
    """``next_q`` of a numpy draft model: each row remembers the tokens fed to it."""

    def __init__(self, model, rows: int):
        self.model, self.prefix = model, [() for _ in range(rows)]

    def __call__(self, ids, valid):
        for r in range(ids.shape[0]):
            self.prefix[r] = self.prefix[r] + tuple(int(t) for t, ok in zip(ids[r], valid[r], strict=True) if ok)
        return torch.tensor(np.stack([self.model(p[1:]) for p in self.prefix]), dtype=torch.float64)  # drop the context token


@pytest.mark.parametrize("branching", [(3,), (2, 2), (2, 1, 2)])
def test_torch_tree_drafts_are_the_laws_nodes(branching):
    q_model = np_models.dirichlet(5, seed=4)
    k, B = int(np.prod(branching)), 2
    first = torch.zeros(B * k, 1, dtype=torch.long)  # one context token per row
    X, Q, n = top_k_tree_drafts(_ModelCache(q_model, B * k), first, torch.ones_like(first, dtype=torch.bool), branching)
    law = top_k_tree(q_model, branching)
    for b in range(B):
        rows = X[b * k : (b + 1) * k].tolist()
        prefixes = {tuple(r[: i + 1]) for r in rows for i in range(len(branching))}
        assert prefixes == set(law.nodes) and len({tuple(r) for r in rows}) == k
    assert n.tolist() == [k] * B and Q.shape == (B * k, len(branching), 5)
    q = torch.tensor(q_model(())[None], dtype=torch.float64)
    assert draw_top_k(q, 3).tolist()[0] == top_k(q_model(()), 3).drafted.tolist()


def test_walk_step_follows_its_uniforms():
    # k = 2 sequences (0, 1) and (1, 0) over V = 2, uniform target rows: u < 0.5 draws 0, else 1
    p = torch.full((1, 2, 3, 2), 0.5, dtype=torch.float64)
    drafts = torch.tensor([[[0, 1], [1, 0]]])
    cases = {(0.2, 0.7, 0.1): (2, 0, 0), (0.7, 0.2, 0.9): (2, 1, 1), (0.2, 0.2, 0.5): (1, 0, 0), (0.9, 0.9, 0.5): (1, 1, 1)}
    for u, (tau, token, row) in cases.items():
        out = walk_step(p, drafts, torch.tensor([u], dtype=torch.float64))
        assert (out.accepted.item(), out.token.item(), out.index.item()) == (tau, token, row), u


def test_walk_sampler_matches_the_exact_block_law():
    p_model, law = np_models.dirichlet(4, seed=2), top_k_tree(np_models.dirichlet(4, seed=3), (2, 2))
    leaves = [u for u in law.nodes if len(u) == 2]
    X = torch.tensor([leaves])  # [1, 4, 2]
    P = torch.tensor(np.array([[p_model(u[:i]) for i in range(3)] for u in leaves])[None], dtype=torch.float64)
    M = 200_000
    out = walk_sample(P.expand(M, -1, -1, -1), X.expand(M, -1, -1), generator=torch.Generator().manual_seed(0))
    tau, tok, row = out.accepted.numpy(), out.token.numpy(), out.index.numpy()
    blocks = sample_match.block_law(p_model, law)
    keys = list(blocks)
    where = {o: i for i, o in enumerate(keys)}
    got = np.zeros(len(keys))
    for t, y, r in zip(tau, tok, row, strict=True):
        got[where[tuple(leaves[r][:t]) + (int(y),)]] += 1
    assert stats.chisquare(got, M * np.array([blocks[o] for o in keys])).pvalue > FALSE_ALARM


def test_mode_checks():
    assert mode_for("sample_match", 4, 2, draft_tree="topk", branching=(2, 2)).branching == (2, 2)
    assert mode_for("sample_match", 3, 2, draft_tree="topk").branching == (3, 1)
    with pytest.raises(InvalidDraftCountError, match="product"):
        mode_for("sample_match", 3, 2, draft_tree="topk", branching=(2, 2))
    with pytest.raises(UnsupportedMethodError, match="sample-and-match"):
        mode_for("kseq", 2, 2, draft_tree="topk")
    with pytest.raises(UnsupportedMethodError, match="draft_tree='topk'"):
        mode_for("sample_match", 2, 2)


def test_decoding_a_top_k_tree_is_lossless():
    target = models.tiny(seed=0, hidden_size=8, layers=1)
    draft = models.self_draft(target, 1.6)
    n, prompt = 3_000, [1, 2, 3]
    res = decode(
        target, draft, [prompt] * n, verifier="sample_match", drafts=4, gamma=2, draft_tree="topk", branching=(2, 2),
        max_new_tokens=3, seed=7, theory=False, top_k_trace=1,
    )  # fmt: skip
    assert res.config["mode"] == "tree" and res.config["branching"] == [2, 2]
    assert first_tokens_pvalue(res.tokens, first_tokens_law(target, prompt, temperature=1.0)) > FALSE_ALARM


def test_cli_draft_tree_flags(capsys):
    from otspec.cli import main

    base = ["decode", "--target", "tiny", "--draft", "tiny-draft", "--prompt-ids", "1,2,3", "-n", "3", "--no-theory"]
    assert main([*base, "--branching", "2,2"]) == 2
    assert "--draft-tree topk" in capsys.readouterr().err
    assert main([*base, "--draft-tree", "topk", "--verifier", "kseq"]) == 2
    assert "sample-and-match" in capsys.readouterr().err
    assert main([*base, "--draft-tree", "topk", "--branching", "2,1", "--json"]) == 0
    out = capsys.readouterr().out
    assert len(json.loads(out)["tokens"][0]) == 3 and "sample_match" in out


def test_walk_step_traces_whole_without_host_sync():
    """``torch.compile(fullgraph=True)`` refuses a graph break (a ``.item()``, ``bool(tensor)``, ...)."""
    g = torch.Generator().manual_seed(3)
    p = torch.rand(5, 3, 3, 4, dtype=torch.float64, generator=g)
    p = p / p.sum(-1, keepdim=True)
    drafts = torch.randint(0, 4, (5, 3, 2), generator=g)
    u = torch.rand(5, 3, dtype=torch.float64, generator=g)
    eager = walk_step(p, drafts, u)
    traced = torch.compile(walk_step, fullgraph=True, backend="eager")(p, drafts, u)
    for a, b in zip(eager, traced, strict=True):
        assert torch.equal(a, b)
