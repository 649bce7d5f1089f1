"""Quick mode of experiments/bench/bench_luce_fit.py: one small cell, every oracle call recorded,
the law oracle's head / tail split against the full recursion at the fitted weights."""

from __future__ import annotations

import json

from tests.experiments._scripts import load_script


def test_quick_mode_records_the_fit_call_by_call(tmp_path):
    mod = load_script("bench/bench_luce_fit.py")
    assert mod.main(["--quick", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "bench_luce_fit.json").read_text())
    assert (tmp_path / "bench_luce_fit.md").read_text().count("|") > 10
    (cell,) = data["cells"]
    assert cell["V"] == 300 and cell["fit_iterations"] == len(cell["oracle_calls"])  # every evaluation is counted
    assert sum(x["calls"] for x in cell["oracle_by_step"].values()) == len(cell["oracle_calls"])
    assert 0.0 <= cell["oracle_cpu_s"] <= cell["state_cpu_s"] + 0.05
    assert -1e-12 <= cell["gap"] <= 1e-6  # the verifier's certified gap at this size
    assert cell["certified_shortfall"] == cell["gap"] + cell["law_error"] + cell["alpha_error"]
    pair = cell["oracle_split_vs_full"]  # the head / tail split against the full recursion, same weights
    assert pair["l1_distance"] <= 1e-13
