"""``experiments/_real.py``: the on-policy steps of experiments 1 and 4 on the tiny models (V = 6).

:func:`_real.real_steps_ids` scores the sequences that :func:`_real.continuations_ids` samples, and
the text-prompt functions are those two on the prompts' ids. The sampler's tokens are re-derived
here from the scored rows: the k-th token after all prompts is ``torch.multinomial`` of the k-th
p row with one ``torch.Generator`` seeded ``seed``. The scored rows come from one full forward and
the sampler's from the KV cache, so the two probability vectors may differ in their last bits; a
token flips only if the draw lands within ~1e-7 of a boundary (about 1e-6 per token, over the 30
tokens below a false-alarm rate under 1e-4). Runtime: about 4 s (torch import).
"""

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="install the [decode] extra (torch, transformers)")
pytest.importorskip("transformers", reason="install the [decode] extra (torch, transformers)")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))
import _real  # noqa: E402

IDS = [[1, 2, 3], [5], [0, 4, 4, 2, 1, 3, 5]]
N_NEW = 5


@pytest.fixture(scope="module")
def pair():
    return _real.load_pair("int8", quick=True)


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_steps_score_the_sampled_continuations(pair, temperature):
    import torch

    target, draft = pair
    seed = 7
    steps = _real.real_steps_ids(target, draft, IDS, N_NEW, temperature, seed)
    seqs = _real.continuations_ids(target, IDS, N_NEW, temperature, seed)
    assert steps.p.shape == steps.q.shape == (len(IDS) * N_NEW, target.vocab_size)
    np.testing.assert_array_equal(steps.prompt, np.repeat(np.arange(len(IDS)), N_NEW))
    assert [(seq[:n], n) for seq, n in seqs] == [(p, len(p)) for p in IDS]
    gen = torch.Generator().manual_seed(seed)
    drawn = [int(torch.multinomial(torch.from_numpy(row), 1, generator=gen)) for row in steps.p]
    assert drawn == [tok for seq, n in seqs for tok in seq[n:]]
    # the rows are the models' softmaxes (one deterministic forward: equal to the bit) at the temperature, on the sampled sequence
    seq, n = seqs[2]
    x = torch.tensor([seq[:-1]])
    rows = slice(2 * N_NEW, 3 * N_NEW)
    np.testing.assert_array_equal(steps.p[rows], _real.softmax64(target.logits(x)[0, n - 1 :].numpy(), temperature))
    np.testing.assert_array_equal(steps.q[rows], _real.softmax64(draft.logits(x)[0, n - 1 :].numpy(), temperature))


def test_text_prompts_are_their_seeded_ids(pair):
    target, draft = pair
    texts, seed = list(_real.PROMPTS[:3]), 3
    rng = np.random.default_rng(seed)  # tokenizer-less tiny model: 4 random ids per prompt
    ids = [[int(x) for x in rng.integers(0, target.vocab_size, size=4)] for _ in texts]
    a = _real.real_steps(target, draft, texts, N_NEW, 0.8, seed, quick=True)
    b = _real.real_steps_ids(target, draft, ids, N_NEW, 0.8, seed)
    assert a.p.tobytes() == b.p.tobytes() and a.q.tobytes() == b.q.tobytes()
    assert _real.sample_continuations(target, texts, N_NEW, 0.8, seed, quick=True) == _real.continuations_ids(target, ids, N_NEW, 0.8, seed)
    assert _real.decoder_prompts(target, 3, seed) == ids
