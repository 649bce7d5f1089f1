"""End-to-end losslessness of the shared-exponential rules in the decoding harness (``otspec decode
--verifier gumbel | gls --gamma 1``): the drafts are ordinary draws from the draft model and the
verifier samples the race given them.

Random-weight Llama, V = 6 (one layer, hidden size 8), draft = the target at logit temperature 1.6;
N = 100 000 decodings of one prompt as one batch, 3 generated tokens each (216 cells) against the
target's exact joint law by enumeration. Pearson chi-square (cells of expected count < 5 pooled),
false alarm 1e-6 per case (the negative control of the same test is typical acceptance, in
``test_decode_engine_rules.py``).
"""

import pytest

from otspec_gpu import models
from otspec_gpu.decoding import decode
from tests.gpu._stats import first_tokens_law, first_tokens_pvalue
from tests.gpu._tolerances import FALSE_ALARM

N = 100_000
PROMPT = [1, 2, 3]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.slow
@pytest.mark.parametrize("verifier,k", [("gumbel", 1), ("gls", 2)])
def test_race_rules_decode_the_target_law(verifier, k):
    target = models.tiny(seed=0, hidden_size=8, layers=1)
    res = decode(
        target,
        models.self_draft(target, 1.6),
        [PROMPT] * N,
        verifier=verifier,
        drafts=k,
        gamma=1,
        max_new_tokens=3,
        seed=13,
        theory=False,
        top_k_trace=1,
    )
    assert res.config["mode"] == "single"
    assert first_tokens_pvalue(res.tokens, first_tokens_law(target, PROMPT, temperature=1.0)) > FALSE_ALARM
