"""Trained drafts: the early-exit model, feature extraction, training end to end on a tiny model,
determinism given the seed, and the missing-weights error."""

import pytest
import torch

from otspec.cli import main as cli_main
from otspec_gpu import models
from otspec_gpu.models.early_exit import ExitHead, early_exit, load_early_exit, load_exit_head
from otspec_gpu.scoring import forward
from otspec_gpu.training.build import build_draft
from otspec_gpu.training.features import extract, load_features

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: one intra-op thread per module


def _target():
    return models.tiny(seed=0, vocab_size=9, layers=3)


def _random_head(target, seed=0):
    g = torch.Generator().manual_seed(seed)
    cfg = target.model.config
    head = ExitHead(cfg.hidden_size, eps=cfg.rms_norm_eps, norm_weight=target.model.model.norm.weight, generator=g)
    with torch.no_grad():
        head.down.normal_(generator=g)
        head.pre.normal_(generator=g)
    return head


def test_early_exit_is_the_truncated_forward_and_the_head():
    target = _target()
    head = _random_head(target)
    draft = early_exit(target, 2, head)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1]])
    logits, hidden = forward(draft, ids, hidden=True)
    with torch.no_grad():
        x2 = target.model(input_ids=ids, output_hidden_states=True).hidden_states[2]  # after layer 2
        torch.testing.assert_close(hidden, head(x2), rtol=0, atol=0)
        torch.testing.assert_close(logits, target.model.lm_head(head(x2)), rtol=0, atol=0)
    # untrained (W_down = 0): the plain truncated model with the target's final norm
    plain = early_exit(target, 2, ExitHead(16, eps=target.model.config.rms_norm_eps, norm_weight=target.model.model.norm.weight))
    with torch.no_grad():
        ref = target.model.lm_head(target.model.model.norm(x2))
    torch.testing.assert_close(plain.logits(ids), ref, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="early-exit layers must be in 1..2"):
        early_exit(target, 3, head)


def test_features_are_the_targets_hidden_states(tmp_path):
    target = _target()
    seqs = [[1, 2, 3, 4], [4, 3, 2, 1], [5, 6, 7]]
    man = extract(target, seqs, layers=(1, 2), out_dir=tmp_path)
    f = load_features(tmp_path)
    assert man["tokens"] == 11 and man["done"]
    assert f["seq"].tolist() == [0] * 4 + [1] * 4 + [2] * 3
    with torch.no_grad():
        out = target.model(input_ids=torch.tensor([seqs[2]]), output_hidden_states=True)
    torch.testing.assert_close(torch.from_numpy(f["h_last"][8:]).float(), out.hidden_states[-1][0].half().float(), rtol=0, atol=0)
    torch.testing.assert_close(torch.from_numpy(f["h_1"][8:]).float(), out.hidden_states[1][0].half().float(), rtol=0, atol=0)
    # the stored last layer gives the target's logits through its output layer
    torch.testing.assert_close(target.model.lm_head(out.hidden_states[-1]), out.logits, rtol=0, atol=0)


@pytest.fixture(scope="module")
def features(tmp_path_factory):
    target = _target()
    g = torch.Generator().manual_seed(1)
    seqs = torch.randint(0, 9, (60, 20), generator=g).tolist()
    d = tmp_path_factory.mktemp("feats")
    extract(target, seqs, layers=(1,), out_dir=d)
    return target, d


@pytest.mark.parametrize("name", ["tiny-exit1", "tiny-medusa", "tiny-eagle"])
def test_training_lowers_the_held_out_kl_and_the_draft_decodes(features, tmp_path, name):
    target, feats = features
    info = build_draft(name, target, feats, steps=40, batch=32, seed=0, directory=tmp_path)
    val = info["training"]["validation"]
    assert sum(val["after"]["kl"]) < sum(val["before"]["kl"])
    assert info["training_data"]["tokens"] == 1200 and info["seed"] == 0
    if name == "tiny-exit1":
        draft = load_early_exit(name, lambda: target, directory=tmp_path)
        from otspec_gpu.decoding import decode

        res = decode(target, draft, [[1, 2, 3]], verifier="token", gamma=2, max_new_tokens=6, seed=0)
        assert len(res.tokens[0]) == 6


def test_training_is_deterministic_given_the_seed(features, tmp_path):
    target, feats = features
    weights = []
    for seed, sub in ((0, "a"), (0, "b"), (1, "c")):
        build_draft("tiny-exit1", target, feats, steps=5, batch=16, seed=seed, directory=tmp_path / sub)
        weights.append(load_exit_head("tiny-exit1", tmp_path / sub)[0].state_dict())
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert not torch.equal(weights[0]["up"], weights[2]["up"])


def test_missing_weights_name_the_build_command(monkeypatch, tmp_path):
    with pytest.raises(models.MissingModelPackageError, match="otspec train-draft smollm2-exit8"):
        load_exit_head("smollm2-exit8", tmp_path)
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path))
    with pytest.raises(models.MissingModelPackageError, match="build them with `otspec train-draft smollm2-exit6`"):
        models.load("smollm2-exit6")  # fails on the weights before loading the target


def test_cli_rejects_unknown_drafts(capsys):
    assert cli_main(["train-draft", "smollm2-exit40"]) == 2
    assert "early-exit depth must be in 1..29" in capsys.readouterr().err
    assert cli_main(["train-draft", "gpt9-medusa"]) == 2
    assert "SmolLM2 drafts only" in capsys.readouterr().err


def test_training_prompts_drop_the_evaluation_prompts(monkeypatch):
    import numpy as np

    from otspec_gpu.training import corpus

    held_out = corpus._evaluation_texts()
    assert len(held_out) == 64 and "Explain why the sky is blue to a ten-year-old." in held_out
    # a builder that happens to produce an evaluation prompt: it is dropped, the rest kept in order
    monkeypatch.setattr(corpus, "_docstring_tasks", lambda rng, n: [held_out[0], "Write a Python function `f` that adds."][:n])
    monkeypatch.setattr(corpus, "_paragraphs", lambda rng, n: ["Summarise the following text in two sentences.\n\nA text."] * n)
    got = corpus.training_prompts(np.random.default_rng(0), 8)
    assert held_out[0] not in got and "Write a Python function `f` that adds." in got
    assert not set(got) & set(held_out)
    assert got == corpus.training_prompts(np.random.default_rng(0), 8)  # seeded
