"""The claims ledger of the results page: every seed paper's claims, ours beside them, one verdict each.

Each experiment's JSON carries a ``"ledger"`` list, one row per claim it measures (the paper, the
claim, the paper's number and where it comes from, our estimate with its prompt-clustered 95%
interval, whether the estimands match, and the two-sided bootstrap p-value of "our estimand equals
the paper's number"). This script gathers the rows of every JSON in a folder, applies **Holm's
correction over all numeric comparisons of the page** (family-wise error 5%), and gives the verdicts:

* *not reproduced* -- the paper's number is excluded after the correction (same estimand);
* *consistent* -- not excluded: the interval is compatible with it (a weak statement when wide);
* *reproduced* -- a qualitative claim (an inequality, a direction) that holds with its interval or
  exact check, as the experiment reports;
* *not comparable* -- different estimands (the row says why); *not measured* -- with why.

Rows of claims that no experiment measures are listed in :data:`UNMEASURED`.

    python experiments/claims_ledger.py                         # docs/_static/results -> ledger md/json
    python experiments/claims_ledger.py --results DIR --out DIR
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench._report import markdown_table

from otspec import stats

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_RESULTS = os.path.join(HERE, "..", "docs", "_static", "results")
NAME = "claims_ledger"
#: Seed papers in the ledger's order.
PAPERS = (
    "Block Verification (Sun et al., ICLR 2025)",
    "SpecTr (Sun et al., NeurIPS 2023)",
    "Hu et al. (ICLR 2025)",
    "Khisti et al. (ICLR 2025)",
    "SPRINTER",
    "otspec",
)
#: Claims no experiment here measures, and why.
UNMEASURED = (
    {
        "paper": "SpecTr (Sun et al., NeurIPS 2023)",
        "claim": "wall-clock speed-up 2.13x over autoregressive decoding, 1.37x over speculative decoding",
        "paper_value": "2.13x / 1.37x",
        "source": "abstract",
        "verdict": "not measured",
        "why": "needs a draft much cheaper than the target on a serving stack; on this CPU no SmolLM2 self-draft is "
        "faster than plain decoding (section 6 measures what is possible here)",
    },
)


def load_rows(folder: str) -> list[dict]:
    """Every ``"ledger"`` row of every JSON in ``folder`` (files without one are skipped)."""
    rows = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json") or name.startswith(NAME):
            continue
        with open(os.path.join(folder, name)) as f:
            try:
                d = json.load(f)
            except json.JSONDecodeError:
                continue
        if isinstance(d, dict) and d.get("quick") is not True:
            rows += [{**r, "file": name} for r in d.get("ledger", [])]
    return rows


def decide(rows: list[dict], alpha: float = 0.05) -> list[dict]:
    """Holm over the rows with a p-value, then each row's verdict."""
    pv = [r["pvalue"] if r.get("pvalue") is not None else math.nan for r in rows]
    adj, rej = stats.holm(pv, alpha) if rows else ([], [])
    out = []
    for r, a, x in zip(rows, adj, rej, strict=True):
        r = dict(r)
        r["holm_pvalue"] = None if math.isnan(a) else float(a)
        if r.get("verdict") is None:
            if r["holm_pvalue"] is None or not str(r.get("estimand", "same")).startswith("same"):
                r["verdict"] = "not comparable"
            else:
                r["verdict"] = "not reproduced" if x else "consistent"
        out.append(r)
    order = {p: i for i, p in enumerate(PAPERS)}
    return sorted(out, key=lambda r: order.get(r["paper"], len(PAPERS)))


def ours_cell(o) -> str:
    if o is None:
        return "-"
    if isinstance(o, str):
        return o
    unit = o.get("unit", "")
    d = o.get("digits", 3)
    return f"{o['value']:.{d}f}{unit} [{o['low']:.{d}f}, {o['high']:.{d}f}]"


def table(rows: list[dict]) -> str:
    return markdown_table(
        ["paper", "claim", "paper's number", "source", "ours (95% CI, clustered by prompt)", "estimand", "Holm p", "verdict", "section"],
        [
            [
                r["paper"],
                r["claim"],
                r.get("paper_value") or "-",
                r.get("source", "-"),
                ours_cell(r.get("ours")),
                r.get("estimand", "-"),
                f"{r['holm_pvalue']:.3f}" if r.get("holm_pvalue") is not None else "-",
                r["verdict"] + (f" ({r['why']})" if r.get("why") else ""),
                r.get("section") or "-",
            ]
            for r in rows
        ],
    )


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog=NAME, description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=DEFAULT_RESULTS, help="folder of experiment JSONs (default docs/_static/results)")
    ap.add_argument("--out", default=None, help="output folder (default: --results)")
    args = ap.parse_args(argv)
    out = args.out or args.results
    os.makedirs(out, exist_ok=True)
    rows = decide(load_rows(args.results)) + [dict(r) for r in UNMEASURED]
    payload = {"alpha": 0.05, "correction": "Holm over all rows with a p-value", "rows": rows}
    with open(os.path.join(out, f"{NAME}.json"), "w") as f:
        json.dump(payload, f, indent=1)
    with open(os.path.join(out, f"{NAME}.md"), "w") as f:
        f.write(f"# {NAME}\n\n" + table(rows) + "\n")
    return payload


if __name__ == "__main__":
    main()
