"""Draft heads on the target's features (``otspec_gpu.models.heads``): shapes, the untrained heads'
laws, EAGLE's autoregression, only trainable parameters saved, and the weights round trip."""

import json

import pytest
import torch

from otspec.errors import InvalidOptionError, MissingModelPackageError, ShapeMismatchError
from otspec_gpu import models
from otspec_gpu.models.heads import EagleHead, MedusaHeads, head_from_architecture, load_head, save_head
from otspec_gpu.scoring import forward

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: one intra-op thread per module


@pytest.fixture(scope="module")
def target():
    return models.tiny(seed=0, vocab_size=7, hidden_size=16)


def _features(target, ids):
    """The target's logits and last hidden layer of one sequence, cache-free."""
    lg, hid = forward(target, torch.tensor([ids]), hidden=True)
    return lg[0], hid[0]


def _nonzero(head, seed):
    """Random weights everywhere (the zero-initialised output weights included)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return head


def test_the_target_feature_gives_its_logits_through_the_output_layer(target):
    """The convention the heads rest on: logits = lm_head(h) / T0 bit for bit (h after the final norm)."""
    lg, h = _features(target, [1, 2, 3, 4, 5])
    assert torch.equal(target.model.get_output_embeddings()(h) / target.logit_temperature, lg)


def test_untrained_medusa_heads_are_the_targets_own_next_law(target):
    lm_head = target.model.get_output_embeddings()
    lg, h = _features(target, [3, 1, 4, 1, 5])
    heads = MedusaHeads(16, 3, generator=torch.Generator().manual_seed(0))
    out = heads(h, lm_head)
    assert out.shape == (5, 3, 7)
    for i in range(3):  # every head returns the logits of the feature it was given
        torch.testing.assert_close(out[:, i], lg, rtol=0, atol=1e-6)
    assert sorted(heads.state_dict()) == ["w1", "w2"]  # the output layer is not the head's


def test_medusa_heads_are_independent_residual_blocks(target):
    heads = _nonzero(MedusaHeads(16, 2), 1)
    h = torch.randn(4, 16, generator=torch.Generator().manual_seed(2))
    u = heads.features(h)
    for i in range(2):  # u_i = h + W_i2 SiLU(W_i1 h), head by head
        ref = h + torch.nn.functional.silu(h @ heads.w1[i].T) @ heads.w2[i].T
        torch.testing.assert_close(u[:, i], ref)
    with pytest.raises(ShapeMismatchError, match="hidden size 16"):
        heads.features(torch.zeros(2, 8))


def test_eagle_head_shapes_untrained_identity_and_saved_parameters(target):
    emb = target.model.get_input_embeddings()
    head = EagleHead(16, emb, generator=torch.Generator().manual_seed(0))
    f = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(1))
    x = torch.tensor([[0, 1, 2, 3, 4]] * 3)
    f_hat, logits = head(f, x, target.model.get_output_embeddings())
    assert f_hat.shape == (3, 5, 16) and logits.shape == (3, 5, 7)
    assert torch.equal(f_hat, f)  # W_down = 0: the untrained head predicts f_hat = f
    assert sorted(head.state_dict()) == ["down.weight", "fc.bias", "fc.weight", "up.weight"]
    with pytest.raises(InvalidOptionError, match="token embedding"):
        EagleHead(16).features(f, x)


def test_eagle_head_drafts_autoregressively_in_its_own_features(target):
    """Two steps by hand equal the head applied twice: step 2 reads step 1's predicted feature and
    the token drafted from it, and a different first token changes the second law."""
    emb, lm_head = target.model.get_input_embeddings(), target.model.get_output_embeddings()
    head = _nonzero(EagleHead(16, emb, intermediate=8), 3)
    _, h = _features(target, [2, 5, 1])
    f0, last = h[-1:], torch.tensor([1])
    z = head.fc.weight @ torch.cat([f0[0], emb.weight[1]]) + head.fc.bias
    f1_ref = f0[0] + head.down.weight @ torch.nn.functional.silu(head.up.weight @ z)
    f1, lg1 = head(f0, last, lm_head)
    torch.testing.assert_close(f1[0], f1_ref)
    f2a, _ = head(f1, torch.tensor([0]), lm_head)
    f2b, _ = head(f1, torch.tensor([4]), lm_head)
    assert not torch.allclose(f2a, f2b)
    torch.testing.assert_close(lg1[0], lm_head(f1_ref))


@pytest.mark.parametrize("make", [lambda: MedusaHeads(16, 3), lambda: EagleHead(16, intermediate=12)])
def test_weights_round_trip_with_their_sidecar(tmp_path, make):
    head = _nonzero(make(), 4)
    save_head(head, "tiny-head", {"target": "tiny", "seed": 4}, directory=tmp_path)
    info = json.loads((tmp_path / "tiny-head.json").read_text())
    assert info["name"] == "tiny-head" and info["seed"] == 4 and "otspec_version" in info
    back, meta = load_head("tiny-head", directory=tmp_path)
    assert type(back) is type(head) and meta["architecture"] == head.architecture()
    for (k, v), (k2, v2) in zip(head.state_dict().items(), back.state_dict().items(), strict=True):
        assert k == k2 and torch.equal(v, v2)
    assert not any(p.requires_grad for p in back.parameters())


def test_missing_weights_name_the_build_command(tmp_path):
    with pytest.raises(MissingModelPackageError, match="build them with `otspec train-draft smollm2-medusa`"):
        load_head("smollm2-medusa", directory=tmp_path)
    with pytest.raises(InvalidOptionError, match="kind must be one of"):
        head_from_architecture({"kind": "lstm"})
