"""``wor_iid`` in the decoder: k single-token drafts without replacement, verified at the i.i.d. optimum.

End to end on a random-weight Llama with V = 6 tokens (the model of ``test_decode_lossless.py``):
N = 20 000 independent decodings of one prompt, the law of the first three generated tokens
(216 cells) against the target's exact joint law by Pearson chi-square (cells of expected count
below 5 pooled, cells of probability 0 must stay empty), false-alarm rate 1e-6. The torch rule
itself is checked against the numpy kernel in ``test_single_step_kernels.py`` (``wor_iid`` is in
the shared combinations).
"""

import numpy as np
import pytest
import torch
from scipy import stats

from otspec_gpu import models
from otspec_gpu.decoding import decode, mode_for
from otspec_gpu.processing import probs_from_logits
from tests.gpu._tolerances import FALSE_ALARM

N = 20_000
PROMPT = [1, 2, 3]
V = 6

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pair():
    target = models.tiny(seed=0, hidden_size=8, layers=1)
    return target, models.self_draft(target, 1.6)


def _exact_joint(target) -> np.ndarray:
    def law(seqs):
        return probs_from_logits(target.logits(torch.tensor(seqs))[:, -1], dtype=torch.float64, temperature=1.0).numpy()

    p1 = law([PROMPT])[0]
    p2 = law([PROMPT + [a] for a in range(V)])
    p3 = law([PROMPT + [a, b] for a in range(V) for b in range(V)]).reshape(V, V, V)
    return p1[:, None, None] * p2[:, :, None] * p3


def test_mode():
    m = mode_for("wor_iid", drafts=3, gamma=1)
    assert (m.mode, m.draft_law) == ("single", "without_replacement")


@pytest.mark.slow
def test_first_tokens_follow_the_target_law(pair):
    target, draft = pair
    res = decode(target, draft, [PROMPT] * N, verifier="wor_iid", drafts=3, gamma=1, max_new_tokens=3, seed=7, theory=False, top_k_trace=1)
    assert res.config["mode"] == "single"
    arr = np.asarray(res.tokens)
    assert arr.shape == (N, 3)
    counts = np.bincount(arr[:, 0] * V * V + arr[:, 1] * V + arr[:, 2], minlength=V**3).astype(float)
    expected = _exact_joint(target).reshape(-1) * N
    assert counts[expected == 0].sum() == 0
    big, small = expected >= 5, (expected > 0) & (expected < 5)
    obs, exp = counts[big], expected[big]
    if small.any():  # pool the cells of small positive expectation into one
        obs, exp = np.append(obs, counts[small].sum()), np.append(exp, expected[small].sum())
    stat = float(((obs - exp) ** 2 / exp).sum())
    assert stats.chi2.sf(stat, obs.size - 1) > FALSE_ALARM, stat
