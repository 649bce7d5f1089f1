"""The claims ledger: rows gathered from experiment JSONs, Holm over the page, verdicts by rule."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))
import claims_ledger  # noqa: E402


def _row(claim, p, estimand="same", verdict=None):
    return {
        "paper": "SpecTr (Sun et al., NeurIPS 2023)",
        "claim": claim,
        "paper_value": "1",
        "source": "abstract",
        "ours": {"value": 1.0, "low": 0.5, "high": 1.5},
        "estimand": estimand,
        "pvalue": p,
        "verdict": verdict,
        "section": "section 3",
    }


def test_holm_over_the_page_decides_the_verdicts(tmp_path):
    # Holm by hand for p = (0.01, 0.02, 0.04) and one row without a p-value: 3 x 0.01 = 0.03,
    # max(0.03, 2 x 0.02) = 0.04, max(0.04, 0.04) = 0.04 -> all three excluded at 5%
    (tmp_path / "a.json").write_text(json.dumps({"quick": False, "ledger": [_row("a", 0.01), _row("b", 0.02)]}))
    (tmp_path / "b.json").write_text(json.dumps({"quick": False, "ledger": [_row("c", 0.04), _row("d", None, verdict="reproduced")]}))
    (tmp_path / "q.json").write_text(json.dumps({"quick": True, "ledger": [_row("quick", 0.5)]}))  # a CI run is no result
    out = claims_ledger.main(["--results", str(tmp_path), "--out", str(tmp_path / "o")])
    rows = {r["claim"]: r for r in out["rows"]}
    assert "quick" not in rows
    assert [round(rows[c]["holm_pvalue"], 12) for c in "abc"] == [0.03, 0.04, 0.04]
    assert {rows[c]["verdict"] for c in "abc"} == {"not reproduced"} and rows["d"]["verdict"] == "reproduced"
    assert any(r["verdict"] == "not measured" for r in out["rows"])  # the unmeasured claims are listed
    md = (tmp_path / "o" / "claims_ledger.md").read_text()
    assert md.count("\n|") >= 2 + len(out["rows"])


def test_large_p_is_consistent_and_a_different_estimand_is_not_comparable(tmp_path):
    (tmp_path / "a.json").write_text(
        json.dumps({"quick": False, "ledger": [_row("a", 0.3), _row("b", 0.001, estimand="different: B = 64")]})
    )
    rows = {r["claim"]: r for r in claims_ledger.main(["--results", str(tmp_path)])["rows"]}
    assert rows["a"]["verdict"] == "consistent" and rows["b"]["verdict"] == "not comparable"


def test_the_published_ledger_is_rebuilt_from_the_one_results_folder(tmp_path):
    """docs/_static/results is the one folder of results: the ledger the results page shows is what
    the script makes from the experiment JSONs there (benchmark JSONs beside them carry no rows)."""
    results = ROOT / "docs" / "_static" / "results"
    claims_ledger.main(["--results", str(results), "--out", str(tmp_path)])
    assert (tmp_path / "claims_ledger.md").read_text() == (results / "claims_ledger.md").read_text()
    assert not (ROOT / "docs" / "_generated").exists()
