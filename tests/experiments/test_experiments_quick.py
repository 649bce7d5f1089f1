"""Every experiment script runs in --quick mode (seconds) and writes JSON + markdown + PNG.

The scripts are run as a user runs them (a subprocess, headless), so argument parsing, the output
helper and the plots cannot rot. The numbers of a --quick run are not results; the checks below
are the experiment's own invariants (which hold at any size).
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from otspec._tolerances import EXACT_ATOL, FLOAT64_ATOL
from tests.experiments._scripts import load_script, run_quick

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("matplotlib", reason="install the [plots] extra")


def run(script: str, out: Path, *extra: str) -> dict:
    r = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / script), "--quick", "--seed", "0", "--out", str(out), *extra],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**__import__("os").environ, "MPLBACKEND": "Agg"},
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    name = script.removesuffix(".py")
    for ext in ("json", "md", "png"):
        assert (out / f"{name}.{ext}").stat().st_size > 0, ext
    md = (out / f"{name}.md").read_text()
    assert "Command: `python experiments/" in md and "Revision: `" in md
    data = json.loads((out / f"{name}.json").read_text())
    assert data["quick"] is True and data["seed"] == 0
    return data


def test_exp5_bound_landscape(tmp_path):
    d = run("exp5_bound_landscape.py", tmp_path)
    c = d["checks"]
    assert c["wor_minus_iid_min"] >= -EXACT_ATOL and c["sweep_wor_minus_iid_min"] >= -EXACT_ATOL
    assert c["kseq_ratio_minus_guarantee_min"] >= -EXACT_ATOL
    assert c["k1_equals_one_minus_tv"] < FLOAT64_ATOL


def _needs_harness():
    pytest.importorskip("torch", reason="install the [decode] extra (torch, transformers)")
    pytest.importorskip("transformers", reason="install the [decode] extra (torch, transformers)")
    pytest.importorskip("otspec_gpu.decoding", reason="the decoding harness is not available")


def test_exp1_verifiers_vs_optimum(tmp_path):
    _needs_harness()
    _, d = run_quick("exp1_verifiers_vs_optimum.py", tmp_path)
    c = d["checks"]
    assert c["min_wor_minus_iid"] >= -EXACT_ATOL  # alpha*_wor >= alpha*_iid on every step
    assert c["max_abs_greedy_verifier_minus_optimum"] < EXACT_ATOL  # the greedy verifier attains its law's optimum
    assert c["min_kseq_phase1_ratio_minus_guarantee"] >= -EXACT_ATOL  # SpecTr's guarantee
    assert c["max_verifier_above_optimum"] < EXACT_ATOL  # no exact acceptance above the optimum
    assert c["min_wor_iid_minus_opt_iid"] >= -EXACT_ATOL  # wor_iid accepts at least alpha*_iid
    s = d["summary"]["1.0"]
    assert abs(s["opt_iid"]["mean"][0] - s["kseq"]["mean"][0]) < FLOAT64_ATOL  # k = 1: every rule is 1 - TV
    # every step carries its prompt; the intervals resample those prompts and contain their estimate
    steps, ids = d["steps"], [p["id"] for p in d["prompts"]]
    assert len(steps["prompt"]) == d["steps_per_temperature"] and set(steps["prompt"]) == set(range(len(ids)))
    kseq = np.asarray(steps["values"]["1.0"]["kseq"])
    assert np.allclose(kseq.mean(0), s["kseq"]["mean"], atol=1e-6)
    for key in ("kseq", "gap_rrs", "kseq_over_opt_iid"):
        lo, mu, hi = (np.asarray(s[key][x]) for x in ("low", "mean", "high"))
        assert np.all((lo <= mu + 1e-12) & (mu <= hi + 1e-12)), key


def test_exp2_block_vs_token(tmp_path):
    """Each rule's own runs: BE in [1, gamma + 1], the gain is the ratio of the two BEs, every run has
    its own seed, Holm-adjusted p-values are never below the raw ones, the wall-clock part ran."""
    _needs_harness()
    _, d = run_quick("exp2_block_vs_token.py", tmp_path)
    seeds = set()
    for c in d["cells"]:
        for rule in ("token", "block"):
            for kind in ("exact", "realized"):
                r = c[f"be_{rule}_{kind}"]
                assert 1 <= r["value"] <= c["gamma"] + 1 and r["n_clusters"] == c["prompts"]
            seeds.add(c["runs"][rule]["seed"])
        ratio = c["be_block_exact"]["value"] / c["be_token_exact"]["value"] - 1
        assert abs(c["gain_exact"]["value"] - ratio) < EXACT_ATOL
        assert c["gain_exact"]["low"] <= c["gain_exact"]["value"] <= c["gain_exact"]["high"]
        if c["paper_gain_pct"] is not None:
            assert c["holm_pvalue"] >= c["pvalue_vs_paper"]
    assert len(seeds) == 2 * len(d["cells"])
    assert d["wallclock"]["prompts"] > 0 and d["wallclock"]["block_speedup_over_token"]["n_clusters"] == d["wallclock"]["prompts"]
    assert len(list(tmp_path.glob("trace_chain_*.safetensors"))) == 2 * len(d["cells"])  # exp4's input
    # runs made in separate processes merge into one report (no models): the same cells and Holm
    mod = load_script("exp2_block_vs_token.py")
    m = mod.main(["--quick", "--out", str(tmp_path / "merged"), "--merge", str(tmp_path / "exp2_block_vs_token.json")])
    assert [c["gain_exact"] for c in m["cells"]] == [c["gain_exact"] for c in d["cells"]]
    assert [c["holm_pvalue"] for c in m["cells"]] == [c["holm_pvalue"] for c in d["cells"]]
    # the stop-at-EOS count: never more rounds than the full run, its BE the ratio of its totals
    for c in d["cells"]:
        for rule in ("token", "block"):
            r = c["runs"][rule]
            assert all(a <= b for a, b in zip(r["rounds_eos"], r["rounds"], strict=True))
            assert abs(c[f"be_{rule}_exact_eos"]["value"] - sum(r[f"exact_{rule}_eos"]) / sum(r["rounds_eos"])) < EXACT_ATOL
    # the gain-against-temperature report reads the finished cells (no models)
    curve = mod.main(["--quick", "--out", str(tmp_path / "curve"), "--temperature-curve", str(tmp_path / "exp2_block_vs_token.json")])
    assert {r["gamma"]: r["gain_exact"]["value"] for r in curve["rows"]} == {c["gamma"]: c["gain_exact"]["value"] for c in d["cells"]}
    assert all(r["gain_exact_eos"] is not None for r in curve["rows"])


def test_exp3_multidraft_sequences(tmp_path):
    _needs_harness()
    _, d = run_quick("exp3_multidraft_sequences.py", tmp_path)
    runs = {(r["rule"], r["k"], r["gamma"], r["tokens"]): r for r in d["runs"]}
    one = runs[("kseq", 1, 2, 8)]
    assert one["kseq_minus_rrs_same_trees"]["value"] == 0.0  # one sequence: both rules are token verification
    assert all(r["be_exact_own"]["value"] >= 1 and r["records"] > 0 for r in d["runs"])
    assert len(list(tmp_path.glob("trace_tree_*.safetensors"))) == len({(r["rule"], r["k"], r["gamma"]) for r in d["runs"]})
    ids = [p["id"] for p in d["prompts"]]
    for r in d["runs"]:  # every round carries its prompt; intervals are over those prompts
        s = r["samples"]
        assert len(s["prompt"]) == len(s["tau"]) == r["records"] and set(s["prompt"]) == set(range(len(ids)))
        assert r["be_exact_own"]["n_clusters"] == len(ids) and r["be_exact_own"]["n"] == r["records"]
        own = np.asarray(s["e_kseq"] if r["rule"] == "kseq" else s["e_rrs"])
        assert abs(r["be_exact_own"]["value"] - (1 + own.mean())) < 1e-5  # the run's own rule, its own rounds
        lo, hi = r["be_exact_own"]["low"], r["be_exact_own"]["high"]
        assert lo <= r["be_exact_own"]["value"] <= hi
    comps = {c["comparison"]: c for c in d["comparisons"]}
    c = comps["K-SEQ / RRS, k=2, L=2"]
    ratio = runs[("kseq", 2, 2, 8)]["be_exact_own"]["value"] / runs[("rrs", 2, 2, 8)]["be_exact_own"]["value"]
    assert abs(c["exact"]["value"] - ratio) < 1e-5 and c["exact"]["low"] <= ratio <= c["exact"]["high"]
    # runs on independent seeds: K-SEQ and RRS at the same (k, L) draft different trees
    assert runs[("kseq", 2, 2, 8)]["samples"]["e_kseq"] != runs[("rrs", 2, 2, 8)]["samples"]["e_kseq"]


def test_exp4_calibration(tmp_path):
    _needs_harness()
    _, d = run_quick("exp4_calibration.py", tmp_path)
    modes = {f["mode"] for f in d["families"].values()}
    assert modes == {"single", "chain", "tree"}
    nc = d["negative_control"]
    assert nc["draws"] > 0 and 0 <= nc["promised"] <= 1
    for f in d["families"].values():  # every round carries its (run, prompt) cluster; the interval is over those
        s = f["samples"]
        assert len(s["cluster"]) == len(s["realized"]) == f["n"]
        iv = f["realized_minus_exact"]
        assert iv["n_clusters"] == len(set(s["cluster"])) and iv["n"] == f["n"]
        assert abs(iv["value"] - (f["mean_realized"] - f["mean_expected"])) < 1e-9


def test_exp4b_chain_replay(tmp_path):
    """The decoder's chain samplers replayed on drafted paths of the tiny models: N = 800 draws per
    rule, z against the exact law's variance; |z| < 4 has false-alarm rate ~6e-5 per rule."""
    _needs_harness()
    _, d = run_quick("exp4b_chain_replay.py", tmp_path)
    assert {r["rule"] for r in d["results"]} == {"token", "block"}
    for r in d["results"]:
        assert r["draws"] > 0 and 0 <= r["mean_exact"] <= r["gamma"]
        assert abs(r["z"]) < 4, r
        # equal draws per path: the prompt-clustered mean of the per-path biases is the row's bias
        assert abs(r["bias_clustered"]["value"] - r["bias"]) < 1e-9 and r["bias_clustered"]["n"] == r["paths"]
        assert len(r["paths_detail"]["prompt"]) == r["paths"]


def test_clustered_between_runs():
    """The between-run ratio of experiments 3 and SPRINTER: a statistic every prompt shares has a
    zero-width interval (no degenerate-data warning from scipy); otherwise the interval holds the
    estimate, and a reference far outside it gets the smallest p-value (1 / 2000 resamples, doubled)."""
    import warnings

    if str(ROOT / "experiments") not in sys.path:
        sys.path.insert(0, str(ROOT / "experiments"))
    import _output

    g = np.repeat(np.arange(30), 3)
    rng = np.random.default_rng(0)
    a = rng.uniform(1, 5, g.size)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = _output.clustered_between_runs(a, g, a / 2, g)
    assert r["value"] == r["low"] == r["high"] == 2.0 and r["n_clusters"] == 30
    b = rng.uniform(1, 5, g.size)
    r = _output.clustered_between_runs(a, g, b, g[::-1], reference=10.0)
    assert r["low"] < r["value"] < r["high"] and r["p_value"] == 0.001
    assert abs(r["value"] - a.mean() / b.mean()) < 1e-12
