"""Quick mode of experiments/bench/bench_global_resolution.py: two small cells, JSON and markdown."""

from __future__ import annotations

import json

from tests.experiments._scripts import load_script


def test_quick_mode_writes_the_same_run_comparison(tmp_path):
    mod = load_script("bench/bench_global_resolution.py")
    assert mod.main(["--quick", "--seed", "0", "--repeats", "1", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "bench_global_resolution_quick.json").read_text())
    assert (tmp_path / "bench_global_resolution_quick.md").read_text().count("|") > 10
    assert data["quick"] and data["seed"] == 0 and len(data["rows"]) == 2
    for row in data["rows"]:
        assert row["gr_converged"]
        assert -1e-12 <= row["gap"] <= row["tol"]
        assert abs(row["alpha_star"] - row["alpha_star_exact_rule"]) <= 1e-12
        assert row["ratio_fit_to_prepare"] > 0
