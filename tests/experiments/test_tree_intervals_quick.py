"""experiments/tree_intervals.py runs in --quick mode (tiny models, V = 6) and writes JSON + markdown + PNG.

The numbers of a --quick run are not results; the check is exact per context: full exploration
(K = V, gamma levels) closes the interval on the context's T*, and every interval of that context
(0 and 1 expansion levels, K = 4) holds it. Every tree verifier's exact E[tau | tree] lies in
[0, gamma], is the same at both levels of one tree, and the verifiers table's share is the ratio of
the row means at the deepest level.
"""

import numpy as np
import pytest

from tests.experiments.test_experiments_quick import run

pytest.importorskip("matplotlib", reason="install the [plots] extra")


def test_tree_intervals_quick(tmp_path):
    d = run("tree_intervals.py", tmp_path)
    assert d["quick"] and d["levels"] == [0, 1] and len(d["rows"]) == 2 * 2 * 2  # 2 prompts x 2 contexts x 2 levels
    for r in d["rows"]:
        assert r["exact_upper"] - r["exact_lower"] < 1e-7
        assert r["lower"] <= r["exact_upper"] + 1e-9 and r["exact_lower"] <= r["upper"] + 1e-9
    assert {s["levels"] for s in d["summary"]} == {0, 1} and all(s["n"] == 4 for s in d["summary"])

    rules = ["kseq", "rrs", "kseq_bv", "nested", "traversal", "topk"]
    assert d["rules"] == rules
    for r in d["rows"]:
        assert all(-1e-12 <= r[rule] <= r["gamma"] + 1e-12 for rule in rules)
    by_tree = {}
    for r in d["rows"]:
        by_tree.setdefault((r["prompt"], r["position"]), []).append(tuple(r[rule] for rule in rules))
    assert all(len(set(v)) == 1 for v in by_tree.values())  # rules do not depend on the interval's level
    (cell,) = d["verifiers"]
    top = [r for r in d["rows"] if r["levels"] == 1]
    for rule in rules:
        share = np.mean([r[rule] for r in top]) / np.mean([r["lower"] for r in top])
        assert abs(cell[rule + "_share"] - share) < 1e-9
        assert cell[rule + "_share_low"] <= cell[rule + "_share"] <= cell[rule + "_share_high"]
