"""``wor_iid`` in the decoder: k single-token drafts without replacement, verified at the i.i.d. optimum.

End to end on a random-weight Llama with V = 6 tokens (the model of ``test_decode_lossless.py``):
N = 20 000 independent decodings of one prompt, the law of the first three generated tokens
(216 cells) against the target's exact joint law by Pearson chi-square (cells of expected count
below 5 pooled, cells of probability 0 must stay empty), false-alarm rate 1e-6. The torch rule
itself is checked against the numpy kernel in ``test_single_step_kernels.py`` (``wor_iid`` is in
the shared combinations). Decoding hands the verifier a fresh ``[B, V]`` law per row, so
``sample(method="auto")`` takes the device path (``step`` on ``uniforms``: the hits, then the
tree-free i.i.d. draw); that path's law is checked in ``test_iid_bridge_torch.py``, its tracing in
``test_step_nosync.py``, and its hit stream against the numpy core's, exactly, below.
"""

import numpy as np
import pytest
import torch

from otspec_gpu import models
from otspec_gpu.decoding import decode, mode_for
from tests.gpu._stats import first_tokens_law, first_tokens_pvalue
from tests.gpu._tolerances import FALSE_ALARM

N = 20_000
PROMPT = [1, 2, 3]
V = 6

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pair():
    target = models.tiny(seed=0, hidden_size=8, layers=1)
    return target, models.self_draft(target, 1.6)


def test_decoding_takes_the_device_path():
    """Per-row laws (what the decoder passes) at any batch size take the pure step."""
    from otspec_gpu.verifiers.step.optimal_iid import BRIDGE_ROWS, uses_bridge

    assert uses_bridge("auto", torch.full((N, V), 1.0 / V), N) and N > BRIDGE_ROWS


def test_rebuild_hits_equals_the_numpy_core():
    """The device hit stream equals the numpy core's on the same uniforms, position by position
    (k = 1..5, 2 000 rows of random distinct drafts each, ordered-draft q with zeros excluded)."""
    from otspec.verifiers.step.wor_iid import rebuild_hits as np_rebuild
    from otspec_gpu.verifiers.step.wor_iid import rebuild_hits

    rng = np.random.default_rng(3)
    for k in range(1, 6):
        q = rng.dirichlet(np.full(8, 0.7), size=2_000)
        qd = np.stack([row[rng.choice(8, size=k, replace=False, p=row)] for row in q])
        u = rng.random((2_000, k - 1))
        got = rebuild_hits(torch.as_tensor(qd), torch.as_tensor(u)).numpy()
        np.testing.assert_array_equal(got, np_rebuild(qd, u))
        assert k == 1 or (got[:, 1:] < np.arange(1, k)[None, :] + 1).all()  # hit i is an earlier draft or the next new one


def test_mode():
    m = mode_for("wor_iid", drafts=3, gamma=1)
    assert (m.mode, m.draft_law) == ("single", "without_replacement")


@pytest.mark.slow
def test_first_tokens_follow_the_target_law(pair):
    target, draft = pair
    res = decode(target, draft, [PROMPT] * N, verifier="wor_iid", drafts=3, gamma=1, max_new_tokens=3, seed=7, theory=False, top_k_trace=1)
    assert res.config["mode"] == "single"
    assert np.asarray(res.tokens).shape == (N, 3)
    assert first_tokens_pvalue(res.tokens, first_tokens_law(target, PROMPT, temperature=1.0)) > FALSE_ALARM
