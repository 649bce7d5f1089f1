"""experiments/referee_smollm2.py runs in --quick mode (the harness's tiny models, V = 6, seconds)
and writes JSON + markdown + PNG. Its numbers are not results; the checks are exact per position or
tree: the Gumbel-max coupling lies between its guarantee (1 - TV)/(1 + TV) and 1 - TV, GLS's exact
acceptance (computable at V = 6) lies between its own-copy bound and the optimum, and Traversal
Verification of one chain is block verification.

The Monte Carlo columns (the torch twins of gumbel and gls) are compared with the exact means:
N = 2 prompts x 6 positions x 400 rounds = 4 800 independent Bernoulli rounds per column, so by
Hoeffding P(|mean - exact| >= 0.05) <= 2 exp(-2 N 0.05^2) < 1e-10 (the false-alarm rate), fixed seeds.
"""

import pytest

from tests.experiments.test_experiments_quick import run

pytest.importorskip("matplotlib", reason="install the [plots] extra")
pytest.importorskip("torch")

EXACT = 1e-12
MC = 0.05


def test_referee_smollm2_quick(tmp_path):
    d = run("referee_smollm2.py", tmp_path)
    assert d["prompts"] == 2 and d["new_tokens"] == 6 and d["draws"] == 400
    for r in d["results"].values():
        c = r["checks"]
        assert c["gumbel_minus_token_max"] <= EXACT and c["gumbel_minus_daliri_min"] >= -EXACT
        assert c["traversal_chain_minus_block_max_abs"] <= EXACT
        assert c["gls_exact_minus_own_copy_min"] >= -EXACT and c["gls_exact_minus_optimum_max"] <= EXACT
        s = r["single"]
        assert abs(s["gumbel_mc"]["value"] - s["gumbel"]["value"]) < MC
        assert abs(s["gls_mc"]["value"] - s["gls_exact"]["value"]) < MC
        assert r["positions"] == 12 and r["trees"] == 4
        for part in ("single", "tree"):
            for iv in r[part].values():
                assert iv["low"] <= iv["value"] <= iv["high"]
