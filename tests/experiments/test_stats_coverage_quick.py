"""experiments/stats_coverage.py runs in --quick mode (seconds) and writes JSON + markdown + PNG.

The numbers of a --quick run (20 data sets per cell) are not results; the checks are the script's
own invariants: every cell is counted over its data sets and its Wilson interval holds its
coverage.
"""

import pytest

from tests.experiments.test_experiments_quick import run

pytest.importorskip("matplotlib", reason="install the [plots] extra")


def test_stats_coverage_quick(tmp_path):
    d = run("stats_coverage.py", tmp_path)
    assert d["clusters"] == [10, 40] and d["reps_per_cell"] == 20
    assert len(d["cells"]) == 2 * 2 * 2  # models x sizes x cluster counts
    for c in d["cells"]:
        assert 0 <= c["hits"] <= c["reps"] == 20
        assert c["coverage"] == c["hits"] / c["reps"]
        assert c["coverage_ci95"][0] <= c["coverage"] <= c["coverage_ci95"][1]
        assert c["mean_width"] > 0
