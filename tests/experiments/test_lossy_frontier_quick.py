"""experiments/lossy_frontier.py runs in --quick mode (seconds) and writes JSON + markdown + PNG.

The numbers of a --quick run (4 pairs at V = 300) are not results; the checks are the script's own
invariants, each exact per pair: the frontier starts at alpha* and is min(1, alpha* + eps), token
attains alpha*, exact match of a sampled draft stays below it, every lossy rule's efficiency is <= 1;
the KL frontier starts at alpha*, rises, stays under Pinsker's ceiling, and bounds every lossy rule.
"""

import pytest

from tests.experiments.test_experiments_quick import run

pytest.importorskip("matplotlib", reason="install the [plots] extra")


def test_lossy_frontier_quick(tmp_path):
    d = run("lossy_frontier.py", tmp_path)
    assert d["V"] == 300 and d["pairs"] == 4 and d["eps"][0] == 0.0
    for rows in d["results"].values():
        assert len(rows) == 4
        for r in rows:
            assert abs(r["token"] - r["alpha_star"]) <= 1e-12
            assert r["exact_match"] <= r["alpha_star"] + 1e-12  # a sampled draft: below speculative sampling
            assert 0.0 <= r["one_hot_argmax"] <= 1.0  # a different (deterministic) draft law: p(argmax q), its own optimum
            assert all(abs(f - min(1.0, r["alpha_star"] + e)) <= 1e-12 for f, e in zip(r["frontier"], d["eps"], strict=True))
            for name in ("typical", "fuzzy"):
                assert r[f"{name}_efficiency"] is None or r[f"{name}_efficiency"] <= 1.0 + 1e-9
    # the KL part: the certified curve starts at alpha*, never falls, stays under Pinsker's TV ceiling,
    # and no lossy rule beats either frontier at its own TV and KL
    assert d["kl_V"] == 12 and len(d["kl"]) == len(d["temperatures"])
    for k in d["kl"].values():
        assert all(s == "optimal" for s in k["kl_status"]) and abs(k["kl_frontier"][0] - k["alpha_star"]) <= 1e-9
        assert all(b >= a - 1e-9 for a, b in zip(k["kl_frontier"], k["kl_frontier"][1:], strict=False))
        assert all(v <= c + 1e-6 for v, c in zip(k["kl_frontier"], k["tv_frontier_at_pinsker"], strict=True))
    assert len(d["kl_rules"]) == 6 * len(d["temperatures"]) and all(r["below_both"] for r in d["kl_rules"])


def test_lossy_frontier_real_mode_quick(tmp_path):
    """--real on the harness's tiny models (V = 6): on-policy positions, the same per-position
    invariants, and a cluster interval per column that holds its mean."""
    import json
    import subprocess
    import sys

    from tests.experiments.test_experiments_quick import ROOT

    r = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "lossy_frontier.py"), "--quick", "--real", "--seed", "0", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads((tmp_path / "lossy_frontier_smollm2.json").read_text())
    assert (tmp_path / "lossy_frontier_smollm2.png").stat().st_size > 0
    for row in d["summary"]:
        assert row["positions"] == sum(len(v) for k, v in d["results"].items() if float(k) == row["T"])
        lo, hi = (float(x) for x in row["exact_match_ci"].split("[")[1].rstrip("]").split(","))
        assert lo <= row["exact_match"] + 1e-9 and row["exact_match"] <= hi + 1e-9
    for rows in d["results"].values():
        for x in rows:
            assert abs(x["token"] - x["alpha_star"]) <= 1e-12 and x["exact_match"] <= x["alpha_star"] + 1e-12
