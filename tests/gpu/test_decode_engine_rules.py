"""End-to-end losslessness of the engine rules in the decoding harness (``otspec decode --verifier
exact_match | one_hot``), as ``tests/gpu/test_decode_lossless.py`` does for the textbook rules.

Random-weight Llama, V = 6 (one layer, hidden size 8), draft = the target at logit temperature 1.6;
N = 100 000 decodings of one prompt as one batch, 3 generated tokens each (216 cells) against the
target's exact joint law by enumeration. Pearson chi-square (cells of expected count < 5 pooled),
false alarm 1e-6 per case. Control: typical acceptance (lossy) decoded the same way is rejected by the
same test.
"""

import pytest

from otspec_gpu import models
from otspec_gpu.decoding import decode
from tests.gpu._stats import first_tokens_law, first_tokens_pvalue
from tests.gpu._tolerances import FALSE_ALARM

N = 100_000
PROMPT = [1, 2, 3]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pair():
    target = models.tiny(seed=0, hidden_size=8, layers=1)
    return target, models.self_draft(target, 1.6)


def _pvalue(pair, verifier, k):
    target, draft = pair
    res = decode(target, draft, [PROMPT] * N, verifier=verifier, drafts=k, gamma=1, max_new_tokens=3, seed=11, theory=False, top_k_trace=1)
    assert res.config["mode"] == "single"
    return first_tokens_pvalue(res.tokens, first_tokens_law(target, PROMPT, temperature=1.0))


@pytest.mark.slow
@pytest.mark.parametrize("verifier,k", [("exact_match", 1), ("exact_match", 3), ("one_hot", 1), ("one_hot", 2)])
def test_engine_rules_decode_the_target_law(pair, verifier, k):
    assert _pvalue(pair, verifier, k) > FALSE_ALARM


@pytest.mark.slow
def test_typical_acceptance_is_caught_as_lossy(pair):
    assert _pvalue(pair, "typical", 1) < FALSE_ALARM
