"""Experiment 4c (the decoder's tree samplers replayed on drafted trees) runs in --quick mode.

The numbers of a --quick run are not results; the checks are the replay's own invariants: the
decoder's recorded E[tau | tree] equals the torch walk's, the samplers' z-scores are N(0, 1) under
a correct sampler, the negative control is detected, and the payload holds what the claims ledger reads.
"""

from pathlib import Path

import pytest

from otspec._tolerances import FLOAT64_ATOL
from tests.experiments._scripts import run_quick

pytest.importorskip("matplotlib", reason="install the [plots] extra")
pytest.importorskip("torch", reason="install the [decode] extra (torch, transformers)")
pytest.importorskip("transformers", reason="install the [decode] extra (torch, transformers)")
pytest.importorskip("otspec_gpu.decoding", reason="the decoding harness is not available")

NAME = "exp4c_tree_replay"


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> tuple[dict, Path]:
    """One --quick run (seed 0) of the script, in process (:func:`tests.experiments._scripts.run_quick`)."""
    out = tmp_path_factory.mktemp(NAME)
    _, data = run_quick(f"{NAME}.py", out)
    return data, out


def test_outputs_and_fields(quick):
    d, out = quick
    md = (out / f"{NAME}.md").read_text()
    assert "Command: `" in md and "Revision: `" in md and "Run time" in md
    assert d["seconds"] > 0 and d["png"] == f"{NAME}.png"
    assert {r["rule"] for r in d["results"]} == {"kseq", "rrs", "rrs_wor"}
    for r in d["results"]:
        assert r["theory"] == r["rule"] and r["k"] == d["k"] == 4
        assert r["draws"] > 0 and r["trees"] == len(r["trees_detail"]["prompt"]) == len(r["trees_detail"]["exact"])
        assert 0 <= r["mean_exact"] <= r["gamma"] and 0 <= r["mean_realized"] <= r["gamma"]
        # equal draws per tree: the prompt-clustered mean of the per-tree biases is the row's bias
        assert abs(r["bias_clustered"]["value"] - r["bias"]) < 1e-9 and r["bias_clustered"]["n"] == r["trees"]
        assert r["tau_law"]["dof"] >= 1 and 0 <= r["tau_law"]["pvalue"] <= 1


def test_recorded_expectation_is_the_exact_law_mean(quick):
    """The decoder's recorded E[tau | tree] (numpy walk) and the torch walk's law agree on every tree."""
    d, _ = quick
    for r in d["results"] + d["negative_controls"]:
        assert r["recorded_vs_torch_max_abs"] < FLOAT64_ATOL, r


def test_samplers_match_their_exact_law(quick):
    """Each row's z is N(0, 1) for a correct sampler (draws independent given the trees, exact
    variance): |z| < 4 has false-alarm rate 6.3e-5 per row. The pooled tau-law chi-square is
    conservative: p >= 1e-4 fails with probability at most 1e-4 per row. Three rows: < 5e-4 together."""
    d, _ = quick
    for r in d["results"]:
        assert abs(r["z"]) < 4, r
        assert r["tau_law"]["pvalue"] >= 1e-4, r


def test_negative_control_detected(quick):
    """The RRS sampler's draws scored against K-SEQ's law (a wrong node rule). Its expected z (from the
    exact laws of the same trees) is at least 8 in size, so |z| > 3 misses with probability below
    P(N(0, 1) > 5) = 3e-7; the observed z must be past 3 on the expected side."""
    d, _ = quick
    (c,) = d["negative_controls"]
    assert (c["rule"], c["theory"]) == ("rrs", "kseq")
    assert abs(c["z_expected"]) >= 8, c["z_expected"]
    assert c["detected"] and c["z"] * c["z_expected"] > 0 and abs(c["z"]) > 3
