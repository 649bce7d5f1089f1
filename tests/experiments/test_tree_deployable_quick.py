"""The deployable tree verifiers' real-tree measurement runs in --quick mode (tiny random models, V = 6).

The numbers of a --quick run are not results; the checks are the payload's invariants: every cell
has its rules, K-SEQ's difference to itself is 0, every mean lies in [0, gamma] with its interval
around it, and the paired difference is the difference of the means (same trees).
"""

from pathlib import Path

import pytest

from tests.experiments._scripts import load_script, run_quick

pytest.importorskip("matplotlib", reason="install the [plots] extra")
pytest.importorskip("torch", reason="install the [decode] extra (torch, transformers)")
pytest.importorskip("transformers", reason="install the [decode] extra (torch, transformers)")

NAME = "tree_deployable"
#: Means of the same trees, each a float64 sum over a handful of trees.
SUM_ATOL = 1e-12


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp(NAME)
    _, data = run_quick(f"{NAME}.py", out)
    return data, out


def test_cells_and_invariants(quick):
    d, out = quick
    assert "Command: `" in (out / f"{NAME}.md").read_text()
    mod = load_script(f"{NAME}.py")
    want = {(k, g, rule) for k, rules in mod.CELLS for g in mod.GAMMAS for rule in rules}
    assert {(r["k"], r["gamma"], r["rule"]) for r in d["rows"]} == want
    means = {(r["k"], r["gamma"], r["rule"]): r["E_tau"] for r in d["rows"]}
    for r in d["rows"]:
        assert 0.0 <= r["E_tau"] <= r["gamma"] and r["E_tau_low"] <= r["E_tau"] <= r["E_tau_high"]
        assert abs(r["minus_kseq"] - (r["E_tau"] - means[r["k"], r["gamma"], "kseq"])) <= SUM_ATOL
        if r["rule"] == "kseq":
            assert r["minus_kseq"] == 0.0 and r["trees_above_kseq"] == r["trees_below_kseq"] == 0
