"""The numbers the results page quotes in its prose are the committed JSON's.

Each expected string is recomputed here from ``docs/_static/results/*.json`` (and the ledger the
script builds from them) and looked up in the section of ``docs/results.rst`` that quotes it, so
the prose cannot drift from the tables. Reads JSON only (well under a second)."""

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "_static" / "results"
sys.path.insert(0, str(ROOT / "experiments"))
import claims_ledger  # noqa: E402


def _json(name):
    return json.loads((RESULTS / f"{name}.json").read_text())


def _flat(text: str) -> str:
    return " ".join(text.split())


def _section(rst: str, start: str, end: str) -> str:
    """The page's text from the label ``start`` to the label ``end``, whitespace collapsed."""
    return _flat(rst[rst.index(f".. _{start}:") : rst.index(f".. _{end}:")])


def _pct(iv, sign="+"):
    return f"{100 * iv['value']:{sign}.1f}% [{100 * iv['low']:+.1f}, {100 * iv['high']:+.1f}]"


WORDS = {12: "twelve"}


# long-function: one expected string per quoted number, each recomputed from the JSON beside it
def expected_quotes() -> dict[str, list[str]]:
    """Section label -> the strings that section must contain, recomputed from the JSON."""
    exp1, exp2, exp4 = _json("exp1_verifiers_vs_optimum"), _json("exp2_block_vs_token"), _json("exp4_calibration")
    ledger = _json("claims_ledger")
    rows = {r["claim"]: r for r in ledger["rows"]}
    cells = exp2["cells"]
    head = {c["gamma"]: c for c in cells if (c["draft"], c["temperature"]) == ("int8", 1.0)}
    sun_t1 = rows["relative BE gain of block over token, int8 draft, T = 1"]
    sun_t06 = rows["relative BE gain of block over token, t0.7 draft, T = 0.6"]
    sun_int8_06 = rows["relative BE gain of block over token, int8 draft, T = 0.6"]
    khisti = rows["SpecTr's block efficiency relative to SpecInfer's (K = 4)"]
    w = exp2["wallclock"]
    t_tok, t_blk = w["seconds_per_token"]["token"]["value"], w["seconds_per_token"]["block"]["value"]
    speed = w["block_speedup_over_token"]
    fracs = [c["frac_rounds_block_below_token"] for c in cells]
    k8 = exp4["families"]["kseq tree k=8 gamma=4 (smollm2-int8)"]
    single = {T: exp1["summary"][T]["opt_iid"]["mean"][exp1["ks"].index(1)] for T in ("0.6", "1.0")}
    holm = lambda r: " / ".join(f"{c['holm_pvalue']:.3f}" for c in r["cells"])  # noqa: E731
    g4 = next(c for c in sun_int8_06["cells"] if c["label"] == "gamma = 4")
    return {
        "results-ledger": [
            f"over the {ledger['family_size']} cells of the paper rows",
            *[f"**{k}**: {v}" for k, v in claims_ledger.VERDICTS.items()],
        ],
        "results-method": [f"single-draft acceptance {single['0.6']:.3f} at T = 0.6 and {single['1.0']:.3f} at T = 1"],
        "results-exp2": [
            *[_pct(head[g]["gain_exact"]) for g in (4, 6, 8)],
            "raw bootstrap p " + " / ".join(f"{head[g]['pvalue_vs_paper']:.2f}" for g in (4, 6, 8)),
            f"Holm-adjusted {holm(sun_t1)} in the ledger's family",
            f"verdict is **{sun_t1['verdict']}**",
            f"{100 * min(fracs):.0f}-{100 * max(fracs):.0f}% of a run's rounds (over all {WORDS[len(cells)]} cells)",
            f"by up to {-exp2['checks']['min_paired_block_minus_token']:.1f} tokens",
            f"{100 * (1 - t_blk / t_tok):.1f}% lower than token's ({t_tok:.4f} -> {t_blk:.4f} s per token)",
            f"speed-up of {_pct(speed, '')}",
            f"interval, {100 * (speed['high'] - speed['low']):.1f} points wide",
            f"is **{rows['wall-clock speed-up of block over token verification (gamma = 8)']['verdict']}**",
            f"(Holm-adjusted p {sun_t06['cells'][0]['holm_pvalue']:.3f} each), so that row is **{sun_t06['verdict']}**",
            f"draft's T = 0.6 row is {sun_int8_06['verdict']}",
            f"Holm-adjusted p {g4['holm_pvalue']:.3f})",
        ],
        "results-exp3": [
            f"Holm-adjusted {khisti['cells'][0]['holm_pvalue']:.3f} in the ledger's family",
            f"**{khisti['verdict']}**: the cells disagree",
        ],
        "results-exp4": [f"its first batch, {k8['n']} rounds on {k8['realized_minus_exact']['n_clusters']} prompts, had been traced"],
    }


SECTIONS = {
    "results-ledger": "results-method",
    "results-method": "results-exp1",
    "results-exp2": "results-exp3",
    "results-exp3": "results-exp4",
    "results-exp4": "results-exp4c",
}


def missing_quotes(rst: str) -> list[tuple[str, str]]:
    """Every (section, expected string) the page does not contain."""
    out = []
    for label, quotes in expected_quotes().items():
        text = _section(rst, label, SECTIONS[label])
        out += [(label, q) for q in quotes if _flat(q) not in text]
    return out


def test_the_prose_quotes_the_json():
    assert missing_quotes((ROOT / "docs" / "results.rst").read_text()) == []


@pytest.mark.parametrize(
    ("old", "new"),
    [("37-74%", "41-65%"), ("0.725 at T = 1", "0.74 at T = 1"), ("9.0% lower", "9.9% lower"), ("52 rounds", "50 rounds")],
)
def test_a_drifted_number_is_caught(old, new):
    rst = (ROOT / "docs" / "results.rst").read_text()
    assert old in rst
    assert missing_quotes(rst.replace(old, new, 1)), (old, new)


def test_the_landing_caption_states_its_setting():
    d = _json("exp1_verifiers_vs_optimum")
    caption = _flat((ROOT / "docs" / "index.rst").read_text())
    n_prompts = len(d["prompts"])
    positions = len(d["steps"]["prompt"])
    assert f"at {positions} positions" in caption and f"after each of {n_prompts} prompts" in caption
    assert (d["target"], d["draft"]) == ("smollm2", "smollm2-int8") and "SmolLM2-135M-Instruct as the target and its int8" in caption
    assert re.search(r"_static/landing_smollm2\.png", caption) and (ROOT / "docs" / "_static" / "landing_smollm2.png").is_file()
