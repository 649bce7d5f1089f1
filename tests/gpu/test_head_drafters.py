"""Drafts from the target's feature (``otspec_gpu.head_drafters``): the decoder hands each round the
target's hidden state before the last emitted token (checked against cache-free forwards of the
emitted prefix), the drafts' laws are the head's (Medusa's independent of earlier drafts, EAGLE's
fed back), the output law is the target's (chi-square), and the shipped names need built weights."""

import numpy as np
import pytest
import torch

from otspec.errors import IncompatibleModelsError, MissingModelPackageError, UnsupportedMethodError
from otspec_gpu import drafters, models
from otspec_gpu.decoding import decode, mode_for
from otspec_gpu.head_drafters import EagleDraft, MedusaDraft
from otspec_gpu.models.heads import EagleHead, MedusaHeads, save_head
from otspec_gpu.processing import probs_from_logits
from otspec_gpu.scoring import forward
from tests.gpu._stats import first_tokens_law, first_tokens_pvalue
from tests.gpu._tolerances import FALSE_ALARM, MODEL_FLOAT32_ATOL, MODEL_FLOAT32_RTOL

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: one intra-op thread per module


@pytest.fixture(scope="module")
def target():
    return models.tiny(seed=0, hidden_size=8, layers=1)


def _nonzero(head, seed):
    """Random weights everywhere (the zero-initialised ones included), so drafts differ from the target."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return head


def _sources():
    return [MedusaDraft("tiny-medusa", _nonzero(MedusaHeads(8, 3), 1)), EagleDraft("tiny-eagle", _nonzero(EagleHead(8), 2))]


class _Spy:
    """A head source that keeps every feature the decoder hands over and every emitted token."""

    needs_target_hidden = True
    model = None

    def __init__(self, inner):
        self.inner, self.name, self.modes = inner, inner.name, inner.modes
        self.seen, self.emitted = [], []

    def drafter(self, mode, prompts, V, device):
        inner, spy = self.inner.drafter(mode, prompts, V, device), self

        class _D:
            def see_target(self, hidden, target, transform):
                spy.seen.append(hidden.clone())
                inner.see_target(hidden, target, transform)

            def draft(self, *args):
                return inner.draft(*args)

            def observe(self, emitted):
                spy.emitted.append([list(e) for e in emitted])

            def record(self):
                return inner.record()

        return _D()


@pytest.mark.parametrize("verifier,k,gamma", [("token", 1, 3), ("rrs_wor", 2, 3), ("rrs", 3, 1)])
def test_decoder_hands_the_feature_before_the_last_token(target, verifier, k, gamma):
    """Round r's feature of every row of prompt b equals the cache-free hidden state of the emitted
    context without its last token, at its last position (zeros for a one-token prompt's first
    round): chains, trees (rows re-selected after the round) and single-token drafts."""
    prompts = [[1, 2, 3, 4], [5], [2, 3]]
    for src in _sources():
        spy = _Spy(src)
        decode(target, spy, prompts, verifier=verifier, drafts=k, gamma=gamma, max_new_tokens=7, seed=3, theory=False)
        contexts = [list(p) for p in prompts]
        for r, hidden in enumerate(spy.seen):
            for b, ctx in enumerate(contexts):
                rows = hidden[b * k : (b + 1) * k]
                if len(ctx) == 1:
                    assert torch.equal(rows, torch.zeros_like(rows))
                else:
                    ref = forward(target, torch.tensor([ctx[:-1]]), hidden=True)[1][0, -1]
                    torch.testing.assert_close(rows, ref.expand_as(rows), atol=MODEL_FLOAT32_ATOL, rtol=MODEL_FLOAT32_RTOL)
                ctx.extend(spy.emitted[r][b])
        assert len(spy.seen) == len(spy.emitted) >= 2


def _drafted(src, target, h, last, mode, seed):
    """One round drafted by hand: the drafter sees ``h`` and drafts after ``last``."""

    def transform(lg):
        return probs_from_logits(lg, temperature=1.0, dtype=torch.float64)

    d = src.drafter(mode, [[0]] * (h.shape[0] // mode.k), target.vocab_size, "cpu")
    d.see_target(h, target, transform)
    return d.draft(None, last.unsqueeze(1), torch.ones(len(last), 1, dtype=torch.bool), torch.Generator().manual_seed(seed))


def test_the_drafts_laws_are_the_heads(target):
    """Q holds exactly the head's laws: Medusa's row i is head i's law of the one feature (the same
    whatever the earlier drafts), EAGLE's row i is the head fed its own feature and draft i - 1."""
    medusa, eagle = _sources()
    lm_head, emb = target.model.get_output_embeddings(), target.model.get_input_embeddings()
    h = torch.randn(4, 8, generator=torch.Generator().manual_seed(5))
    last = torch.tensor([0, 1, 2, 3])
    X, Q, n = _drafted(medusa, target, h, last, mode_for("token", 1, 3), seed=6)
    assert X.shape == (4, 3) and Q.shape == (4, 3, 6) and n.tolist() == [1] * 4
    want = torch.softmax(lm_head(medusa.head.features(h)).double(), -1)
    torch.testing.assert_close(Q, want, atol=1e-6, rtol=0)
    X, Q, _ = _drafted(eagle, target, h, last, mode_for("token", 1, 3), seed=6)
    f, x = h, last
    for i in range(3):
        f = eagle.head.features(f, x, emb)
        torch.testing.assert_close(Q[:, i], torch.softmax(lm_head(f).double(), -1), atol=1e-6, rtol=0)
        x = X[:, i]


@pytest.mark.parametrize("src", _sources(), ids=["medusa", "eagle"])
def test_decoded_output_follows_the_target_law(target, src):
    """N = 4 000 decodings of [1, 2, 3] (one batch), block verification with gamma = 3 (Medusa) and
    token verification with gamma = 2 (EAGLE): the law of the first three generated tokens (216
    cells) against the target's exact joint law by Pearson chi-square (cells of expected count
    below 5 pooled), false alarm 1e-6 per test."""
    verifier, gamma = ("block", 3) if isinstance(src, MedusaDraft) else ("token", 2)
    res = decode(target, src, [[1, 2, 3]] * 4000, verifier=verifier, gamma=gamma, max_new_tokens=3, seed=11, theory=False, top_k_trace=1)
    assert res.config["draft"] == src.name and res.config["draft_head"]["architecture"] == src.head.architecture()
    accepted = np.asarray(res.trace.columns["tau"])
    assert 0 < accepted.mean() < gamma  # drafts both accepted and rejected: the heads are not the target
    assert first_tokens_pvalue(res.tokens, first_tokens_law(target, [1, 2, 3], temperature=1.0)) > FALSE_ALARM


def test_head_sources_refuse_what_they_cannot_draft(target):
    medusa, eagle = _sources()
    with pytest.raises(UnsupportedMethodError, match="has 3 heads, so it drafts at most 3 tokens per round"):
        decode(target, medusa, [1, 2], gamma=4, max_new_tokens=2)
    with pytest.raises(UnsupportedMethodError, match="deterministic top-k tree"):
        decode(target, eagle, [1, 2], verifier="sample_match", drafts=2, gamma=2, draft_tree="topk", max_new_tokens=2)
    wide = models.tiny(seed=0, hidden_size=16)
    with pytest.raises(IncompatibleModelsError, match="features of width 8 but target 'tiny-s0' has hidden size 16"):
        decode(wide, eagle, [1, 2], max_new_tokens=2)


def test_shipped_names_need_built_weights(target, tmp_path, monkeypatch, capsys):
    """The registered heads load their weights by name; without them the error (and the CLI's exit
    status 2) names the command that builds them."""
    from otspec.cli import main

    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path))
    assert drafters.needs_target_hidden(drafters.DRAFTERS["smollm2-eagle"]) and not drafters.needs_target_hidden(
        drafters.ModelDraft(target)
    )
    for name in ("smollm2-medusa", "smollm2-eagle"):
        with pytest.raises(MissingModelPackageError, match=f"build them with `otspec train-draft {name}`"):
            drafters.by_name(name)
        assert main(["decode", "--target", "tiny", "--draft", name, "--prompt-ids", "1,2", "-n", "2"]) == 2
        assert f"otspec train-draft {name}" in capsys.readouterr().err
    save_head(MedusaHeads(8, 2), "smollm2-medusa", {"seed": 9, "target": "tiny", "training": {"steps": 1}}, directory=tmp_path / "drafts")
    src = drafters.by_name("smollm2-medusa")  # built weights: loaded by name, recorded in the config
    res = decode(target, src, [1, 2], gamma=2, max_new_tokens=2, theory=False)
    assert res.config["draft_head"] == {
        "weights": "smollm2-medusa",
        "architecture": src.head.architecture(),
        "seed": 9,
        "target": "tiny",
        "steps": 1,
    }
