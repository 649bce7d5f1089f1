"""CUDA-graph capture of a verify step (:mod:`otspec_gpu.graphs`): a replay from a generator state
gives exactly the eager step's output from that state, advances the generator as the eager call does,
and capturing consumes no randomness. CPU: the cache falls back to the eager call."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from otspec_gpu.graphs import GraphedStep, VerifyGraphs
from otspec_gpu.verifiers import SINGLE_STEP, tree
from otspec_gpu.verifiers.chain import block_sample, token_sample

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: CUDA graphs capture device work")


def _chain(B, g, V, device, seed):
    rng = np.random.default_rng(seed)
    p = torch.tensor(rng.dirichlet(np.full(V, 0.5), size=(B, g + 1)), dtype=torch.float32, device=device)
    q = torch.tensor(rng.dirichlet(np.full(V, 0.5), size=(B, g)), dtype=torch.float32, device=device)
    d = torch.multinomial(q.reshape(-1, V), 1, generator=torch.Generator(device).manual_seed(seed)).reshape(B, g)
    return p, q, d


def test_cache_is_eager_on_cpu():
    graphs = VerifyGraphs()
    p, q, d = _chain(3, 2, 7, "cpu", 0)
    out = graphs("token", token_sample, p, q, d, generator=torch.Generator().manual_seed(1))
    ref = token_sample(p, q, d, generator=torch.Generator().manual_seed(1), validate=False)
    assert all(torch.equal(a, b) for a, b in zip(out, ref, strict=True))
    assert graphs.steps == {}


def test_graphed_step_refuses_cpu():
    p, q, d = _chain(2, 2, 5, "cpu", 0)
    with pytest.raises(ValueError, match="CUDA"):
        GraphedStep(token_sample, (p, q, d), torch.Generator())


def test_replay_helpers_stack_like_outputs_and_copy_in_one_call():
    """The replay's output packing (one clone when the outputs stack) and its input copy, on CPU tensors."""
    from otspec_gpu.graphs import _copy, _pack
    from otspec_gpu.verifiers.base import StepOutput

    out = StepOutput(torch.tensor([1, 2]), torch.tensor([3, 4]), torch.tensor([0, 0]))
    packed = _pack(out)
    assert packed.shape == (3, 2)
    assert all(torch.equal(a, b) for a, b in zip(StepOutput(*packed.unbind(0)), out, strict=True))
    assert _pack((torch.tensor([1]),)) is None  # one output: nothing to stack
    assert _pack((torch.tensor([1]), torch.tensor([1.0]))) is None  # mixed dtypes: one clone each
    dst = [torch.zeros(3), torch.zeros(2, dtype=torch.long)]
    _copy(dst, [torch.ones(3), torch.tensor([5, 6])])
    assert torch.equal(dst[0], torch.ones(3)) and dst[1].tolist() == [5, 6]


def _single(name, B, V, seed):
    rng = np.random.default_rng(seed)
    p = torch.tensor(rng.dirichlet(np.full(V, 0.5), size=B), device="cuda")
    q = torch.tensor(rng.dirichlet(np.full(V, 0.5), size=B), device="cuda")
    k = min(3, SINGLE_STEP[name].k_max or 3)  # spechub takes exactly 2
    d = torch.multinomial(q, k, replacement=SINGLE_STEP[name].draft_law == "iid", generator=torch.Generator("cuda").manual_seed(seed))
    return p, q, d


def _tree(rule, B, V, seed):
    p, q, _ = _chain(B * 3, 2, V, "cuda", seed)
    p, q = p.view(B, 3, 3, V), q.view(B, 3, 2, V)
    gen = torch.Generator("cuda").manual_seed(seed)
    first = torch.multinomial(q[:, :, 0].reshape(-1, V), 1, generator=gen).view(B, 3)
    if rule == "rrs_wor":  # distinct first tokens: drawn without replacement from the first sequence's law
        first = torch.multinomial(q[:, 0, 0], 3, replacement=False, generator=gen)
        q = q.clone()
        q[:, :, 0] = q[:, :1, 0]
    second = torch.multinomial(q[:, :, 1].reshape(-1, V), 1, generator=gen).view(B, 3)
    return p, q, torch.stack([first, second], dim=2)


#: Every verify step decoding can graph: the chains, every single-step rule and every tree rule.
GRAPHED = ["token", "block", *(f"single:{n}" for n in sorted(SINGLE_STEP)), *(f"tree:{r}" for r in tree.MASKED)]


@cuda
@pytest.mark.parametrize("key", GRAPHED)
def test_cuda_replay_equals_eager_for_the_same_generator_state(key):
    if key.startswith("tree:"):
        rule = key.split(":")[1]
        sample = lambda p, q, d, **kw: tree.sample(p, q, d, rule=rule, **kw)  # noqa: E731
        make = lambda s: _tree(rule, 8, 1000, s)  # noqa: E731
    elif key.startswith("single:"):
        name = key.split(":")[1]
        sample = SINGLE_STEP[name].sample
        make = lambda s: _single(name, 8, 1000, s)  # noqa: E731
    else:
        sample = token_sample if key == "token" else block_sample
        make = lambda s: _chain(8, 4, 1000, "cuda", s)  # noqa: E731
    gen = torch.Generator("cuda").manual_seed(5)
    graphs = VerifyGraphs()
    for s in range(3):  # the first call captures, the next ones replay with new inputs
        inputs = make(s)
        state = gen.get_state()
        out = graphs(key, sample, *inputs, generator=gen)
        after = gen.get_state()
        gen.set_state(state)
        ref = sample(*inputs, generator=gen, validate=False)
        for a, b in zip(out, ref, strict=True):
            assert torch.equal(a, b), (key, s)
        assert torch.equal(gen.get_state(), after)  # the replay advanced the generator as eager does
    assert len(graphs.steps) == 1


@cuda
def test_replay_of_inputs_written_in_place_equals_eager():
    """A caller that writes its next inputs into the graph's static tensors passes those tensors (no
    copy is made); the outputs come back as one clone, unstacked into the StepOutput fields."""
    from otspec_gpu.verifiers.base import StepOutput

    gen = torch.Generator("cuda").manual_seed(5)
    gs = GraphedStep(token_sample, _chain(8, 4, 1000, "cuda", 0), gen, validate=False)
    assert gs.packed is not None and gs.packed.shape == (3, 8)
    nxt = _chain(8, 4, 1000, "cuda", 1)
    for dst, src in zip(gs.static, nxt, strict=True):
        dst.copy_(src)
    state = gen.get_state()
    out = gs(*gs.static)
    gen.set_state(state)
    ref = token_sample(*nxt, generator=gen, validate=False)
    assert isinstance(out, StepOutput)
    assert all(torch.equal(a, b) for a, b in zip(out, ref, strict=True))


def test_default_graphs_is_opt_in(monkeypatch):
    from otspec_gpu.graphs import default_graphs

    monkeypatch.delenv("OTSPEC_CUDA_GRAPHS", raising=False)
    assert default_graphs() is None
    monkeypatch.setenv("OTSPEC_CUDA_GRAPHS", "1")
    assert isinstance(default_graphs(), VerifyGraphs)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
@pytest.mark.parametrize("rule", ["token", "block"])
def test_decode_verifier_step_with_graphs_equals_eager(device, rule, monkeypatch):
    """decode's chain verify step (VerifierStep) replayed from graphs (opt-in: OTSPEC_CUDA_GRAPHS=1)
    gives the eager step's tokens round after round for the same generator state (CPU: no graphs)."""
    from otspec_gpu.verifying import VerifierStep

    monkeypatch.setenv("OTSPEC_CUDA_GRAPHS", "1")
    graphed_step = VerifierStep("chain", rule, 4, 1)
    assert isinstance(graphed_step.graphs, VerifyGraphs)
    monkeypatch.delenv("OTSPEC_CUDA_GRAPHS")
    eager_step = VerifierStep("chain", rule, 4, 1)
    assert eager_step.graphs is None
    g1, g2 = torch.Generator(device).manual_seed(3), torch.Generator(device).manual_seed(3)
    bonus = torch.Generator(device).manual_seed(4)
    for s in range(3):
        P, Q, X = _chain(4, 3, 500, device, s)
        P = P / P.sum(-1, keepdim=True)
        Q = Q / Q.sum(-1, keepdim=True)
        n = torch.ones(4, dtype=torch.long, device=device)
        a, b = graphed_step(P, Q, X, n, g1, bonus), eager_step(P, Q, X, n, g2, bonus)
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y), (rule, s)
    assert len(graphed_step.graphs.steps) == (1 if device == "cuda" else 0)


def _round(mode, B, k, g, V, device, seed):
    """One decode round's ``(P, Q, X)`` in the flattened ``[B * k, ...]`` layout of ``VerifierStep``."""
    P, Q, _ = _chain(B * k, g, V, device, seed)
    P, Q = P.double(), Q.double()
    P, Q = P / P.sum(-1, keepdim=True), Q / Q.sum(-1, keepdim=True)
    gen = torch.Generator(device).manual_seed(seed)
    if mode == "single":  # k drafts at the first position (the rows of one prompt share its laws)
        Q = Q.view(B, k, g, V)[:, :1].expand(B, k, g, V).reshape(B * k, g, V).contiguous()
        P = P.view(B, k, g + 1, V)[:, :1].expand(B, k, g + 1, V).reshape(B * k, g + 1, V).contiguous()
    X = torch.multinomial(Q.reshape(-1, V), 1, generator=gen).view(B * k, g)
    return P, Q, X


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
@pytest.mark.parametrize(
    ("mode", "rule"), [("single", "kseq"), ("single", "optimal_iid"), ("single", "rrs"), ("tree", "kseq"), ("tree", "rrs")]
)
def test_decode_single_and_tree_steps_with_graphs_equal_eager(device, mode, rule, monkeypatch):
    """decode's single-step and tree verify steps replayed from graphs (OTSPEC_CUDA_GRAPHS=1) give the
    eager step's output round after round for the same generator states (CPU: no graphs, same path)."""
    from otspec_gpu.verifying import VerifierStep

    B, k, g, V = 4, 3, 2, 300
    monkeypatch.setenv("OTSPEC_CUDA_GRAPHS", "1")
    graphed_step = VerifierStep(mode, rule, B, k)
    monkeypatch.delenv("OTSPEC_CUDA_GRAPHS")
    eager_step = VerifierStep(mode, rule, B, k)
    g1, g2 = torch.Generator(device).manual_seed(3), torch.Generator(device).manual_seed(3)
    b1, b2 = torch.Generator(device).manual_seed(4), torch.Generator(device).manual_seed(4)
    n = torch.full((B,), k, dtype=torch.long, device=device)
    for s in range(3):
        P, Q, X = _round(mode, B, k, g, V, device, s)
        a, b = graphed_step(P, Q, X, n, g1, b1), eager_step(P, Q, X, n, g2, b2)
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y), (mode, rule, s)
    assert len(graphed_step.graphs.steps) == (1 if device == "cuda" else 0)
