"""Quick mode of experiments/bench/bench_tree_interval.py: every cell, the compiled passes equal to
the numpy reference, the early cutting-plane stop beside the full loop on the same rounds."""

from __future__ import annotations

import json

from tests.experiments._scripts import load_script


def test_quick_mode_times_every_cell_on_the_same_rounds(tmp_path):
    mod = load_script("bench/bench_tree_interval.py")
    assert mod.main(["--quick", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "bench_tree_interval.json").read_text())
    assert (tmp_path / "bench_tree_interval.md").read_text().count("|") > 10
    rows = data["rows"]
    assert [(r["k"], r["gamma"]) for r in rows] == [(k, g) for k in (2, 4) for g in (2, 3, 4)]
    for r in rows:
        assert r["V"] == 2000 and r["max_abs_diff_numpy"] == 0.0  # the compiled passes are the reference's bits
        assert r["mean_gap"] == r["compiled_mean_width"] == r["numpy_mean_width"] > 0
        assert r["full_loop_mean_width"] > 0 and r["rounds"] >= 1
        assert r["row_passes_cpu_ms"] > 0
        assert r["lp_free_upper_excess"] >= -1e-9  # weak duality: the dual point 0 bounds the LP too
