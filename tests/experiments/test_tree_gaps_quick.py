"""experiments/tree_gaps.py runs in --quick mode (seconds): every tree rule, Traversal Verification
included, is at or below the tree optimum of its draft law, the optimal tree verifier attains it,
and Traversal Verification is never below RRS over the same trees (exact values, per case)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-9  # the LP's certified optimum against exact enumeration sums


def test_tree_gaps_quick(tmp_path):
    r = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "tree_gaps.py"), "--quick", "--seed", "0", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = json.loads((tmp_path / "tree_gaps.json").read_text())
    assert d["quick"] is True and len(d["cases"]) == 4
    for c in d["cases"]:
        for rule in ("kseq", "kseq_bv", "rrs", "rrs_bv", "traversal", "selj_bv", "nested", "optimal", "block_single_chain"):
            assert c[rule] <= c["T_star"] + TOL
        assert abs(c["optimal"] - c["T_star"]) <= TOL
        assert c["traversal"] >= c["rrs"] - TOL
        if "T_star_wor" in c:
            assert c["rrs_wor"] - TOL <= c["traversal_wor"] <= c["T_star_wor"] + TOL
    assert {r["rule"] for r in d["summary"]} >= {"traversal", "traversal_wor"}
