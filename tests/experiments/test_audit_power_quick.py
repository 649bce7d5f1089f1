"""experiments/audit_power.py runs in --quick mode (seconds) and writes JSON + markdown + PNG.

A --quick run's rates are not results; the checks are the script's invariants: the planted faults sit
at their stated TV (exact, from the kernels), every cell counts its runs, the sample size is the
library's, and the exact check detects every planted fault."""

import pytest

from otspec.testing.power import sample_size
from tests.experiments.test_experiments_quick import run

pytest.importorskip("matplotlib", reason="install the [plots] extra")


def test_audit_power_quick(tmp_path):
    d = run("audit_power.py", tmp_path)
    assert [r["delta"] for r in d["rows"]] == [0.1, 0.01]
    for r in d["rows"]:
        assert r["n"] == sample_size(r["delta"], alpha=d["alpha"], beta=d["beta"], V=len(d["p"]))
        for key, c in r["cells"].items():
            assert 0 <= c["detected"] <= c["reps"] and c["rate"] == c["detected"] / c["reps"]
            assert r[key] == f"{c['detected']}/{c['reps']}"
            want = 0.0 if key == "correct" else r["delta"] * (1.0 if key.endswith("_delta") else 0.5)
            assert c["planted_tv"] == pytest.approx(want, abs=1e-12)
    assert len(d["exact"]) == 2 * 2 * 2 and all(e["detected"] for e in d["exact"])
    assert all(abs(e["exact_tv"] - e["planted_tv"]) < 1e-12 for e in d["exact"])
