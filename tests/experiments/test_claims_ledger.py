"""The claims ledger: the verdict rules on constructed rows, Holm over one family, and the published
ledger rebuilt from the committed experiment JSON."""

import json
import sys
from pathlib import Path

import pytest

from otspec.errors import InvalidOptionError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))
import claims_ledger  # noqa: E402

RESULTS = ROOT / "docs" / "_static" / "results"


def _number(cells, setting="differs: models", estimand="same", reference=1.0, margin=0.1):
    """A numeric row; ``cells`` are (low, high, holm p) triples around the paper's number 1.0."""
    return {
        "claim": "x",
        "kind": "number",
        "estimand": estimand,
        "setting": setting,
        "reference": reference,
        "margin": margin,
        "cells": [
            {"label": f"c{i}", "value": (lo + hi) / 2, "low": lo, "high": hi, "holm_pvalue": p} for i, (lo, hi, p) in enumerate(cells)
        ],
    }


def _claim(kind, intervals, setting="differs: models", sense=">", tolerance=0.0):
    """A qualitative row: the statistic is above (``sense=">"``) or below 0."""
    return {
        "claim": "y",
        "kind": kind,
        "estimand": "same",
        "setting": setting,
        "bound": 0.0,
        "sense": sense,
        "tolerance": tolerance,
        "cells": [{"label": f"c{i}", "value": (lo + hi) / 2, "low": lo, "high": hi} for i, (lo, hi) in enumerate(intervals)],
    }


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        # matched setting, every interval inside 1.0 +- 0.1: equivalence
        (_number([(0.95, 1.05, 0.8), (0.92, 1.08, 0.6)], setting="matched"), "reproduced"),
        # the same intervals in another setting are only consistent
        (_number([(0.95, 1.05, 0.8), (0.92, 1.08, 0.6)]), "consistent / not excluded"),
        # matched but one interval reaches past the margin: not equivalent, not excluded
        (_number([(0.95, 1.15, 0.5)], setting="matched"), "consistent / not excluded"),
        # every cell excludes after the correction
        (_number([(1.2, 1.3, 0.001), (1.25, 1.35, 0.01)]), "not reproduced"),
        # one cell excludes, the other does not: the cells disagree, the excluding one does not decide
        (_number([(1.2, 1.3, 0.001), (0.9, 1.05, 0.7)]), "inconclusive"),
        # every interval wider than twice the margin (0.2): too wide to test
        (_number([(0.7, 1.3, 0.9), (0.8, 1.25, 0.4)]), "inconclusive"),
        # one testable cell among too-wide ones, none excluding: consistent
        (_number([(0.7, 1.3, 0.9), (0.95, 1.1, 0.4)]), "consistent / not excluded"),
        # different estimand: no test
        (_number([(1.2, 1.3, 0.001)], estimand="different: k = 4, not 8"), "not comparable"),
        # a theorem holds in any setting; unresolved cells do not refute it
        (_claim("theorem", [(0.1, 0.2), (-0.1, 0.3)]), "reproduced"),
        # one contradicting cell refutes a theorem
        (_claim("theorem", [(0.1, 0.2), (-0.3, -0.1)]), "not reproduced"),
        # an empirical claim in another setting: consistent at best
        (_claim("empirical", [(0.1, 0.2), (0.05, 0.3)]), "consistent / not excluded"),
        (_claim("empirical", [(0.1, 0.2)], setting="matched"), "reproduced"),
        (_claim("empirical", [(0.1, 0.2), (-0.3, -0.1)]), "inconclusive"),
        (_claim("empirical", [(-0.3, -0.1)]), "not reproduced"),
        (_claim("empirical", [(-0.1, 0.2)]), "inconclusive"),
        # below-the-bound claims with a rounding allowance (an exact check: low == high)
        (_claim("theorem", [(1e-13, 1e-13)], sense="<", tolerance=1e-9), "reproduced"),
        (_claim("theorem", [(1e-3, 1e-3)], sense="<", tolerance=1e-9), "not reproduced"),
    ],
)
def test_verdict_rules(row, expected):
    got, why = claims_ledger.verdict(row)
    assert got == expected, (got, why)
    assert got in claims_ledger.VERDICTS


def test_a_range_reference_and_per_cell_references():
    row = _number([(5.5, 7.5, 0.9)], setting="matched", reference=(5.0, 8.0), margin=1.0)
    assert claims_ledger.verdict(row)[0] == "reproduced"
    row = _number([(0.95, 1.05, 0.9), (2.95, 3.05, 0.9)], setting="matched")
    row["cells"][1]["reference"] = 3.0  # each cell tested against its own paper number
    assert claims_ledger.verdict(row)[0] == "reproduced"


def test_holm_runs_over_the_paper_cells_only():
    # Holm by hand for p = (0.01, 0.02, 0.04): 3 x 0.01 = 0.03, max(0.03, 2 x 0.02) = 0.04,
    # max(0.04, 0.04) = 0.04; the internal check's p = 0.001 is not in the family
    rows = [_number([]), _number([])]
    for r, ps in zip(rows, [(0.01, 0.02), (0.04,)], strict=True):
        r["cells"] = [{"label": "c", "value": 1.3, "low": 1.2, "high": 1.4, "pvalue": p} for p in ps]
    internal = {**_claim("empirical", [(0.1, 0.2)]), "family": "internal"}
    internal["cells"][0]["pvalue"] = 0.001
    out = claims_ledger.decide(rows + [internal])
    assert [round(c["holm_pvalue"], 12) for r in out[:2] for c in r["cells"]] == [0.03, 0.04, 0.04]
    assert "holm_pvalue" not in out[2]["cells"][0] and out[0]["family_size"] == 3
    assert [r["verdict"] for r in out] == ["not reproduced", "not reproduced", "holds"]


def test_a_row_without_cells_is_refused():
    with pytest.raises(InvalidOptionError, match="cells=\\[\\]"):
        claims_ledger.verdict(_number([]))


def test_the_published_ledger_is_rebuilt_from_the_committed_json(tmp_path):
    """The ledger the results page shows is what the script makes from the experiment JSONs."""
    out = claims_ledger.main(["--results", str(RESULTS), "--out", str(tmp_path)])
    assert (tmp_path / "claims_ledger.md").read_text() == (RESULTS / "claims_ledger.md").read_text()
    # the JSON's verdicts and family are the same (its floats may differ in the last bits across CPUs)
    mine, published = (json.loads((f / "claims_ledger.json").read_text()) for f in (tmp_path, RESULTS))
    assert mine["family_size"] == published["family_size"] and mine["verdicts"] == published["verdicts"]
    assert [(r["claim"], r["verdict"]) for r in mine["rows"]] == [(r["claim"], r["verdict"]) for r in published["rows"]]
    rows = out["rows"]
    by = {r["claim"]: r for r in rows}
    # every cell of Khisti et al.'s ratio counts: L = 4 exact excludes, the other three do not
    kh = by["SpecTr's block efficiency relative to SpecInfer's (K = 4)"]
    assert [c["label"] for c in kh["cells"]] == ["L = 4, exact", "L = 4, realized", "L = 8, exact", "L = 8, realized"]
    assert kh["verdict"] == "inconclusive"
    # the temperature draft at T = 0.6 is in the ledger, and excludes the paper's gains
    assert by["relative BE gain of block over token, t0.7 draft, T = 0.6"]["verdict"] == "not reproduced"
    # the internal checks are listed apart and carry no Holm p-value
    internal = [r for r in rows if r["family"] == "internal"]
    assert len(internal) == 3 and not any("holm_pvalue" in c for r in internal for c in r["cells"])
    assert all(r["verdict"] in claims_ledger.VERDICTS or r["verdict"] == "not measured" for r in rows if r["family"] == "paper")
    assert not (ROOT / "docs" / "_generated").exists()
