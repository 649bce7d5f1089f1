"""The claims ledger of the results page: every seed paper's claims, ours beside them, one verdict each.

Every row is computed here from the experiments' committed JSON in ``docs/_static/results/`` (no
number is transcribed by hand): the paper, the claim, the paper's number and where it comes from,
and our estimate as one or more *cells* (one per setting the experiment ran: draft, temperature,
gamma, L, exact or realized), each with its prompt-clustered 95% interval and, for a comparison
with a paper's number, the two-sided bootstrap p-value of "our estimand equals the paper's number".

**One family.** Holm's correction runs once, over every cell of every paper row that compares with
a paper's number (family-wise error 5%). Internal checks of otspec's own code and of this
machine (sampler replays, prompt lookup against plain sampling) are not claims of a paper: they are
listed in a second table and are not in the family.

**The verdict** of a row is a function of its fields (:func:`verdict`), with the vocabulary
:data:`VERDICTS`:

* the *setting* of a row is the population it is measured on: models, data, temperature and
  hardware. It is ``"matched"`` only when all four are the paper's; every row here runs other
  models than the papers', so no numeric row is matched and none can be *reproduced*;
* the *estimand* is the quantity at the paper's own parameters (k, L, gamma): the same quantity at
  other parameters is a different estimand;
* a numeric cell *excludes* the paper's number when its Holm-adjusted p-value is below 5%; it is
  *too wide to test* when its interval is wider than twice the row's equivalence margin (it could
  then neither establish equivalence nor, unless far off, exclude); it is *equivalent* when the
  setting is matched and the interval lies within the margin of the paper's number;
* a qualitative cell (an inequality, a direction) *holds* when its interval (or exact check) lies on
  the claimed side, *contradicts* the claim when it lies on the other side, and is *unresolved*
  otherwise.

Every cell of a comparison counts: a row whose cells disagree (some exclude the paper's number,
some do not) is inconclusive, never decided by the cell that excludes.

    python experiments/claims_ledger.py                         # docs/_static/results -> ledger md/json
    python experiments/claims_ledger.py --results DIR --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np
from bench._report import markdown_table

from otspec import stats
from otspec.errors import InvalidOptionError

__all__ = [
    "VERDICTS",
    "ALPHA",
    "cell_status",
    "verdict",
    "decide",
    "build_rows",
    "paper_table",
    "internal_table",
    "main",
]

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_RESULTS = os.path.join(HERE, "..", "docs", "_static", "results")
NAME = "claims_ledger"
#: Family-wise error of the one Holm family.
ALPHA = 0.05
#: The verdict vocabulary, in the order the results page defines it.
VERDICTS = {
    "reproduced": "same estimand, matched setting, and every cell within the stated equivalence margin of the paper's "
    "number; for a qualitative claim, it holds in the cells that resolve it and no cell contradicts it (a theorem "
    "holds in every setting, so its setting always matches)",
    "consistent / not excluded": "same estimand; no cell excludes the paper's number (or contradicts the qualitative "
    "claim) and at least one cell is narrow enough to test it, but the setting differs (other models, data, "
    "temperature or hardware), so this is not a reproduction",
    "inconclusive": "the data cannot decide: every interval is too wide to test (wider than twice the margin; e.g. "
    "wall-clock [-1.4, +20.2]%), no cell resolves the qualitative claim, or the cells of one comparison disagree",
    "not reproduced": "same estimand, and every cell excludes the paper's number after the correction (a qualitative "
    "claim: a cell contradicts it)",
    "not comparable": "different estimands (the row says why); no test is made",
}
#: A check of a row that no experiment measures.
NOT_MEASURED = "not measured"

SUN = "Block Verification (Sun et al., ICLR 2025)"
SPECTR = "SpecTr (Sun et al., NeurIPS 2023)"
HU = "Hu et al. (ICLR 2025)"
KHISTI = "Khisti et al. (ICLR 2025)"
SPRINTER = "SPRINTER"
#: Seed papers in the ledger's order.
PAPERS = (SUN, SPECTR, HU, KHISTI, SPRINTER)

#: Where each paper number comes from. "secondary" marks a number taken from a third party's
#: summary of the paper that could not be checked against the paper's own table here.
SOURCES = {
    "sun_abstract": "abstract (arXiv 2403.10444, ICLR 2025)",
    "sun_ablation": "secondary: the gamma ablation of arXiv 2403.10444v2 (Figure 3: average BE over its datasets, "
    "PaLM-2-S target, PaLM-2-XXS drafter) as summarised by a third party",
    "sun_theorem": "theorem (arXiv 2403.10444: block verification is optimal and never worse than token verification)",
    "spectr_theorem": "theorem (SpecTr: K-SEQ's approximation guarantee)",
    "spectr_be": "secondary: an unchecked extraction of SpecTr's block efficiencies; numerically equal to its "
    "abstract's 1.37x wall-clock figure",
    "spectr_abstract": "abstract (SpecTr, NeurIPS 2023)",
    "spectr_direction": "secondary: the direction of SpecTr's block-efficiency tables as extracted by a third party",
    "hu_abstract": "abstract and theorems (Hu et al., ICLR 2025)",
    "khisti_t1": "secondary: Khisti et al. Table 1 as extracted by a third party",
    "khisti_t3": "secondary: Khisti et al. Table 3 as extracted by a third party",
    "sprinter_abstract": "abstract (SPRINTER)",
}
#: Equivalence margin of a relative gain (block over token, K-SEQ over RRS), in percentage points.
GAIN_MARGIN_PCT = 3.0
GAIN_MARGIN_WHY = (
    "3 points: the spacing of the paper's own gamma ablation (+3.46 / +6.19 / +8.30%); an interval wider than "
    "6 points cannot tell its gammas apart"
)
WALL_MARGIN_WHY = "3 points, as for the BE gains (the claim's own range, 5-8%, is 3 points wide)"
#: Rounding allowance of an exact check (sums over a 49 152- or 262 144-token vocabulary in float64).
EXACT_TOL = 1e-9


# --- the verdict rules ------------------------------------------------------------------------------


def _reference_range(reference) -> tuple[float, float]:
    lo, hi = (reference, reference) if isinstance(reference, (int, float)) else reference
    return float(lo), float(hi)


def cell_status(cell: dict, row: dict, alpha: float = ALPHA) -> str:
    """One cell's status under the row's rule.

    A numeric row (``kind == "number"``): ``"excludes"`` (Holm-adjusted p below ``alpha``),
    ``"too wide"`` (interval wider than twice ``row["margin"]``), ``"equivalent"`` (matched setting,
    interval within ``margin`` of the paper's number or range) or ``"not excluded"``.

    A qualitative row (``kind`` ``"theorem"`` or ``"empirical"``; claim: the statistic is above
    ``row["bound"]``, or below it with ``row["sense"] == "<"``, up to ``row.get("tolerance", 0)``):
    ``"holds"``, ``"contradicts"`` or ``"unresolved"``.
    """
    lo, hi = float(cell["low"]), float(cell["high"])
    if row["kind"] == "number":
        p = cell.get("holm_pvalue")
        if p is not None and p < alpha:
            return "excludes"
        if hi - lo > 2 * row["margin"]:
            return "too wide"
        r_lo, r_hi = _reference_range(cell.get("reference", row.get("reference")))
        if row["setting"] == "matched" and lo >= r_lo - row["margin"] and hi <= r_hi + row["margin"]:
            return "equivalent"
        return "not excluded"
    tol = row.get("tolerance", 0.0)
    b = row["bound"]
    if row.get("sense", ">") == "<":
        lo, hi, b = -hi, -lo, -b
    if lo > b - tol:
        return "holds"
    if hi < b - tol:
        return "contradicts"
    return "unresolved"


def _count(statuses: list[str], labels: list[str]) -> str:
    parts = []
    for s in dict.fromkeys(statuses):
        who = [lab for lab, t in zip(labels, statuses, strict=True) if t == s]
        parts.append(f"{s} in {len(who)} of {len(statuses)}" + (f" ({', '.join(who)})" if len(who) <= 2 and len(statuses) > 1 else ""))
    return "; ".join(parts)


def verdict(row: dict, alpha: float = ALPHA) -> tuple[str, str]:
    """The row's verdict (a key of :data:`VERDICTS`) and the reason, from its fields and cells.

    The row's cells must carry their Holm-adjusted p-values (:func:`decide` sets them). Rules: a
    different estimand is *not comparable*; a numeric row is *not reproduced* when every cell
    excludes the paper's number, *inconclusive* when some do and some do not or when every cell is
    too wide, *reproduced* when the setting is matched and every cell is equivalent, else
    *consistent / not excluded*. A qualitative row is *not reproduced* when a cell contradicts a
    theorem or every cell contradicts an empirical claim, *inconclusive* when no cell holds (or cells
    disagree), *reproduced* when it is a theorem or the setting is matched, else *consistent / not
    excluded*.
    """
    if row.get("measured", True) is False:
        return NOT_MEASURED, row["why"]
    if not str(row["estimand"]).startswith("same"):
        return "not comparable", str(row["estimand"]).removeprefix("different: ")
    cells = row["cells"]
    if not cells:
        raise InvalidOptionError(
            f"row {row['claim']!r} has cells=[]: a measured row with the same estimand needs at least one cell; "
            "add the experiment's cells, or mark the row measured=False with a why"
        )
    st = [cell_status(c, row, alpha) for c in cells]
    why = _count(st, [c["label"] for c in cells])
    if row["kind"] == "number":
        if all(s == "excludes" for s in st):
            return "not reproduced", why
        if "excludes" in st or all(s == "too wide" for s in st):
            return "inconclusive", why
        if row["setting"] == "matched" and all(s == "equivalent" for s in st):
            return "reproduced", why
        return "consistent / not excluded", why
    if "contradicts" in st and (row["kind"] == "theorem" or all(s == "contradicts" for s in st)):
        return "not reproduced", why
    if "holds" not in st or "contradicts" in st:
        return "inconclusive", why
    if row["kind"] == "theorem" or row["setting"] == "matched":
        return "reproduced", why
    return "consistent / not excluded", why


def decide(rows: list[dict], alpha: float = ALPHA) -> list[dict]:
    """Holm over every p-value of the paper rows' cells (one family), then each row's verdict."""
    rows = [dict(r, cells=[dict(c) for c in r.get("cells", [])]) for r in rows]
    family = [(r, c) for r in rows if r.get("family", "paper") == "paper" for c in r["cells"] if c.get("pvalue") is not None]
    adj, _ = stats.holm([c["pvalue"] for _, c in family], alpha) if family else ([], [])
    for (_, c), a in zip(family, adj, strict=True):
        c["holm_pvalue"] = float(a)
    for r in rows:
        r["verdict"], r["why"] = verdict(r, alpha) if r.get("family", "paper") == "paper" else _internal_result(r)
        r["family_size"] = len(family)
    return rows


def _internal_result(row: dict) -> tuple[str, str]:
    st = [cell_status(c, row) for c in row["cells"]]
    why = _count(st, [c["label"] for c in row["cells"]])
    if "contradicts" in st:
        return "does not hold", why
    return ("holds", why) if "holds" in st else ("unresolved", why)


# --- the rows, computed from the experiments' JSON ---------------------------------------------------


def _load(folder: str, name: str) -> dict | None:
    path = os.path.join(folder, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        d = json.load(f)
    return None if d.get("quick") is True else d


def _cell(label: str, iv: dict, scale: float = 1.0, pvalue=None, unit: str = "", digits: int = 3) -> dict:
    c = {"label": label, "value": scale * iv["value"], "low": scale * iv["low"], "high": scale * iv["high"], "unit": unit, "digits": digits}
    if pvalue is not None:
        c["pvalue"] = float(pvalue)
    return c


def _exact(label: str, value: float, digits: int = 2) -> dict:
    return {"label": label, "value": value, "low": value, "high": value, "exact": True, "unit": "", "digits": digits}


EXP1 = {
    "exp1_verifiers_vs_optimum": "SmolLM2 / int8",
    "exp1_verifiers_vs_optimum_t0.7": "SmolLM2 / t0.7",
    "exp1_verifiers_vs_optimum_gemma3-270m_t0.7": "Gemma 3 / t0.7",
}


def _paired(d: dict, a: str, b: str, T: str, k: int) -> dict:
    """``a - b`` paired per step at temperature ``T`` and ``k`` drafts, clustered by prompt (experiment 1's seed)."""
    v, j = d["steps"]["values"][T], d["ks"].index(k)
    iv = stats.clustered_difference(
        np.asarray(v[a], float)[:, j], np.asarray(v[b], float)[:, j], np.asarray(d["steps"]["prompt"]), seed=d["seed"]
    )
    return iv.as_dict()


def _exp1_paired(d: dict, a: str, b: str) -> list[tuple[str, int, dict]]:
    """``a - b`` paired per step, clustered by prompt, for every T and k >= 2: (T, k, interval)."""
    return [(str(T), k, _paired(d, a, b, str(T), k)) for T in d["temperatures"] for k in d["ks"] if k >= 2]


# long-function: one row per claim of the three exp1 pairs; the rows are data, each a few lines
def rows_exp1(folder: str) -> list[dict]:
    """Hu et al.'s and SpecTr's theorems and Khisti et al.'s ordering, from experiment 1's three pairs."""
    ds = {lab: d for name, lab in EXP1.items() if (d := _load(folder, name)) is not None}
    if not ds:
        return []
    head = ds.get("SmolLM2 / int8", next(iter(ds.values())))
    s1 = head["summary"]["1.0"]
    common = {"family": "paper", "setting": "differs: models (SmolLM2, Gemma 3), our prompts, T = 0.6 and 1", "section": "section 1"}
    ksr = [(lab, d) for lab, d in ds.items()]
    gaps = []
    for lab, d in ksr:
        for T in d["temperatures"]:
            s = d["summary"][str(T)]
            for v in ("kseq", "rrs"):
                for j, k in enumerate(d["ks"]):
                    if k >= 2:
                        iv = {"value": s[f"gap_{v}"]["mean"][j], "low": s[f"gap_{v}"]["low"][j], "high": s[f"gap_{v}"]["high"][j]}
                        gaps.append(_cell(f"{lab}, T = {T}, {v}, k = {k}", iv))
    order = []
    for lab, d in ksr:
        order += [_cell(f"{lab}, T = {T}, k = {k}", iv) for T, k, iv in _exp1_paired(d, "kseq", "rrs")]
    k2 = head["ks"].index(2)
    kseq_rrs_k2 = _paired(head, "kseq", "rrs", "1.0", 2)
    ratio_min = min(min(d["checks"]["kseq_phase1_ratio_min_by_k"][1:]) for d in ds.values())
    return [
        {
            **common,
            "paper": HU,
            "claim": "the optimum without replacement is at least the optimum with replacement",
            "paper_value": "inequality (every p, q, k)",
            "source": SOURCES["hu_abstract"],
            "kind": "theorem",
            "estimand": "same (the inequality per step)",
            "bound": 0.0,
            "tolerance": EXACT_TOL,
            "cells": [_exact(f"{lab}: smallest alpha*_wor - alpha*_iid", d["checks"]["min_wor_minus_iid"]) for lab, d in ksr],
            "detail": f"mean advantage, paired per step, at T = 1, k = 2: {_fmt_iv(_paired(head, 'opt_wor', 'opt_iid', '1.0', 2), 3, '+')} "
            "(SmolLM2 / int8)",
        },
        {
            **common,
            "paper": HU,
            "claim": "the greedy law's verifier attains that law's optimum",
            "paper_value": "equality",
            "source": SOURCES["hu_abstract"],
            "kind": "theorem",
            "estimand": "same (the equality per step)",
            "bound": 0.0,
            "sense": "<",
            "tolerance": EXACT_TOL,
            "cells": [
                _exact(f"{lab}: largest abs(greedy verifier - alpha*_greedy)", d["checks"]["max_abs_greedy_verifier_minus_optimum"])
                for lab, d in ksr
            ],
        },
        {
            **common,
            "paper": HU,
            "claim": "K-SEQ and RRS leave a gap to the optimum",
            "paper_value": "gap > 0",
            "source": SOURCES["hu_abstract"],
            "kind": "theorem",
            "estimand": "same (the optimum minus the verifier's exact acceptance)",
            "bound": 0.0,
            "cells": gaps,
            "detail": f"T = 1, k = 2 (SmolLM2 / int8): K-SEQ {_fmt_iv(_iv(s1['gap_kseq'], k2), 3)}, RRS {_fmt_iv(_iv(s1['gap_rrs'], k2), 3)}",
        },
        {
            **common,
            "paper": SPECTR,
            "claim": "K-SEQ accepts at least (1 - (1 - 1/k)^k) alpha*_iid",
            "paper_value": "0.656-0.750 x alpha* (k = 2..8)",
            "source": SOURCES["spectr_theorem"],
            "kind": "theorem",
            "estimand": "same (the bound per step)",
            "bound": 0.0,
            "tolerance": EXACT_TOL,
            "cells": [
                _exact(
                    f"{lab}: smallest K-SEQ phase-1 / alpha*_iid minus the guarantee", d["checks"]["min_kseq_phase1_ratio_minus_guarantee"]
                )
                for lab, d in ksr
            ],
            "detail": f"smallest per-step ratio {ratio_min:.3f} over all pairs and k >= 2",
        },
        {
            **common,
            "paper": KHISTI,
            "claim": "SpecTr (K-SEQ) accepts more than SpecInfer (RRS); both below the optimum",
            "paper_value": ".6384 > .6246 > .6202 at K = 2 (OPT, Dolly)",
            "source": SOURCES["khisti_t3"],
            "kind": "empirical",
            "estimand": "same (the ordering of exact acceptances per step)",
            "bound": 0.0,
            "cells": order + [c for c in gaps if ", kseq," in c["label"]],
            "detail": f"K-SEQ minus RRS, paired per step, T = 1, k = 2 (SmolLM2 / int8): {_fmt_iv(kseq_rrs_k2, 3, '+')}",
        },
    ]


def _iv(s: dict, j: int) -> dict:
    return {"value": s["mean"][j], "low": s["low"][j], "high": s["high"][j]}


def _fmt_iv(iv: dict, digits: int = 3, sign: str = "", unit: str = "") -> str:
    f = f"{sign}.{digits}f"
    return f"{iv['value']:{f}}{unit} [{iv['low']:{f}}, {iv['high']:{f}}]"


def _exp2_label(c: dict) -> str:
    return f"{c['draft']}, T = {c['temperature']:g}, gamma = {c['gamma']}"


def rows_exp2(folder: str) -> list[dict]:
    """Block verification: the theorem over all twelve cells, the gamma ablation per setting, wall-clock."""
    d = _load(folder, "exp2_block_vs_token")
    if d is None:
        return []
    cells = sorted(d["cells"], key=lambda c: (-c["temperature"], c["draft"], c["gamma"]))
    models = "models (SmolLM2-135M and its int8 / t0.7 drafts vs PaLM-2-S / XXS), data (our 64 prompts vs the paper's datasets)"
    rows = [
        {
            "family": "paper",
            "paper": SUN,
            "claim": "block verification's block efficiency is at least token verification's",
            "paper_value": "never worse (theorem)",
            "source": SOURCES["sun_theorem"],
            "kind": "theorem",
            "estimand": "same (BE in each rule's own runs)",
            "setting": "differs: " + models,
            "bound": 0.0,
            "cells": [_cell(_exp2_label(c), c["gain_exact"], 100, unit="%", digits=1) for c in cells],
            "section": "section 2",
        }
    ]
    for draft, T in dict.fromkeys((c["draft"], c["temperature"]) for c in cells):
        group = [c for c in cells if (c["draft"], c["temperature"]) == (draft, T) and c["paper_gain_pct"] is not None]
        if not group:
            continue
        rows.append(
            {
                "family": "paper",
                "paper": SUN,
                "claim": f"relative BE gain of block over token, {draft} draft, T = {T:g}",
                "paper_value": " / ".join(f"+{c['paper_gain_pct']:.2f}%" for c in group)
                + " at gamma = "
                + " / ".join(str(c["gamma"]) for c in group),
                "source": SOURCES["sun_ablation"],
                "kind": "number",
                "reference": None,
                "references": [c["paper_gain_pct"] for c in group],
                "margin": GAIN_MARGIN_PCT,
                "margin_why": GAIN_MARGIN_WHY,
                "estimand": "same (relative BE gain, each rule in its own runs)",
                "setting": f"differs: {models}, T = {T:g}",
                "cells": [
                    _cell(f"gamma = {c['gamma']}", c["gain_exact"], 100, pvalue=c["pvalue_vs_paper"], unit="%", digits=1)
                    | {"reference": c["paper_gain_pct"]}
                    for c in group
                ],
                "section": "section 2",
            }
        )
    w = d.get("wallclock")
    if w:
        rows.append(
            {
                "family": "paper",
                "paper": SUN,
                "claim": f"wall-clock speed-up of block over token verification (gamma = {w['gamma']})",
                "paper_value": "+5-8% (PaLM-2 on TPU)",
                "source": SOURCES["sun_abstract"],
                "kind": "number",
                "reference": d["paper_wallclock_pct"],
                "margin": GAIN_MARGIN_PCT,
                "margin_why": WALL_MARGIN_WHY,
                "estimand": "same (speed-up: token's time per generated token over block's, minus 1)",
                "setting": f"differs: hardware (B = 1 on a 2-core CPU vs TPU), {models}",
                "cells": [
                    _cell(
                        f"int8, T = 1, {w['prompts']} prompts",
                        w["block_speedup_over_token"],
                        100,
                        pvalue=w["pvalue_vs_paper_range"],
                        unit="%",
                        digits=1,
                    )
                ],
                "section": "section 2",
            }
        )
    return rows


KHISTI_RATIO = 1.96 / 1.95  # Table 1 (secondary): SpecTr 1.96 against SpecInfer 1.95 at K = 4, OPT, Dolly, T = 1.2


def rows_exp3(folder: str) -> list[dict]:
    """SpecTr's more-sequences direction and number, Khisti et al.'s K-SEQ / RRS ratio (every L, exact and realized)."""
    d = _load(folder, "exp3_multidraft_sequences")
    if d is None:
        return []
    import _output

    pids = [p["id"] for p in d["prompts"]]
    by = {(r["rule"], r["k"], r["gamma"]): r for r in d["runs"]}

    def vals(r, which):
        s = r["samples"]
        e = np.asarray(s["e_kseq"] if r["rule"] == "kseq" else s["e_rrs"]) if which == "exact" else np.asarray(s["tau"], float)
        return 1.0 + e, np.array([pids[i] for i in s["prompt"]])

    khisti = []
    for g in sorted({L for (rule, k, L) in by if rule == "rrs" and k == 4}):
        for which in ("exact", "realized"):
            a, ga = vals(by[("kseq", 4, g)], which)
            b, gb = vals(by[("rrs", 4, g)], which)
            iv = _output.clustered_between_runs(a, ga, b, gb, kind="ratio", reference=KHISTI_RATIO, seed=d["seed"])
            khisti.append(_cell(f"L = {g}, {which}", iv, pvalue=iv["p_value"], unit="x"))
    more = [
        _cell(f"k = {c['k']}, L = {c['gamma']}, {which}", c[which], unit="x")
        for c in d["comparisons"]
        if "one chain" in c["comparison"]
        for which in ("exact", "realized")
    ]
    ks = sorted({r["k"] for r in d["runs"]})
    setting = f"differs: models (SmolLM2-135M / int8 vs the papers'), data (our 64 prompts), T = {d['temperature']:g}"
    return [
        {
            "family": "paper",
            "paper": SPECTR,
            "claim": "k drafted sequences raise block efficiency over one chain",
            "paper_value": "ratio > 1",
            "source": SOURCES["spectr_direction"],
            "kind": "empirical",
            "estimand": "same (BE ratio, each rule in its own runs)",
            "setting": setting,
            "bound": 1.0,
            "cells": more,
            "section": "section 3",
        },
        {
            "family": "paper",
            "paper": SPECTR,
            "claim": "block efficiency of k = 8 sequences against one chain at L = 8",
            "paper_value": "~4.0 / ~2.9 = 1.38 (PaLM-2, LM1B, T = 1)",
            "source": SOURCES["spectr_be"],
            "kind": "number",
            "estimand": f"different: the paper's ratio is at k = 8, L = 8; ours at k = {', '.join(str(k) for k in ks if k > 1)} "
            "(the k = 8 runs were stopped unfinished)",
            "setting": setting,
            "cells": [],
            "section": "section 3",
        },
        {
            "family": "paper",
            "paper": KHISTI,
            "claim": "SpecTr's block efficiency relative to SpecInfer's (K = 4)",
            "paper_value": f"1.96 / 1.95 = {KHISTI_RATIO:.3f} (OPT, Dolly, T = 1.2; L not stated in the source)",
            "source": SOURCES["khisti_t1"],
            "kind": "number",
            "reference": KHISTI_RATIO,
            "margin": GAIN_MARGIN_PCT / 100,
            "margin_why": "0.03: the gains' 3-point margin on the ratio scale",
            "estimand": "same (each rule's BE in its own runs)",
            "setting": setting + " vs 1.2",
            "cells": khisti,
            "section": "section 3",
        },
    ]


def rows_sprinter(folder: str) -> list[dict]:
    """SPRINTER's headline: a different estimand here (target calls per token is a latency proxy)."""
    d = _load(folder, "sprinter")
    if d is None:
        return []
    oracle = next(r for r in d["runs"] if r["kind"] == "oracle")["intervals"]["calls_vs_exact_sd"]
    aucs = sorted({round(v["auc"], 2) for v in d["classifier"].values()}, reverse=True)
    return [
        {
            "family": "paper",
            "paper": SPRINTER,
            "claim": "1.7x latency speed-up and 8.3x fewer FLOPs than speculative decoding",
            "paper_value": "1.7x / 8.3x (GPT-2 small -> XL, Wiki-Summaries)",
            "source": SOURCES["sprinter_abstract"],
            "kind": "number",
            "estimand": "different: target calls per token is a latency proxy on another pair and data; FLOPs and wall-clock not measured",
            "setting": "differs: models and data",
            "cells": [_cell("oracle 1{p >= q}: calls per token / exact SD's", oracle, unit="x", digits=2)],
            "detail": "trained classifiers near chance (AUC " + " / ".join(f"{a:.2f}" for a in aucs) + ")",
            "section": "SPRINTER page",
        }
    ]


UNMEASURED = (
    {
        "family": "paper",
        "paper": SPECTR,
        "claim": "wall-clock speed-up 2.13x over autoregressive decoding, 1.37x over speculative decoding",
        "paper_value": "2.13x / 1.37x",
        "source": SOURCES["spectr_abstract"],
        "kind": "number",
        "measured": False,
        "estimand": "-",
        "setting": "-",
        "cells": [],
        "why": "needs a draft much cheaper than the target on a serving stack; on this CPU no SmolLM2 draft is faster "
        "than plain decoding (section 6)",
        "section": "-",
    },
)


def rows_internal(folder: str) -> list[dict]:
    """Checks of otspec's own code and of this machine: not claims of a paper, not in the Holm family."""
    rows = []
    if (d := _load(folder, "exp4b_chain_replay")) is not None:
        rows.append(
            {
                "family": "internal",
                "claim": "the decoder's chain samplers draw tau from the exact law (replay on real paths)",
                "kind": "theorem",
                "bound": 3.0,
                "sense": "<",
                "cells": [_exact(f"gamma = {r['gamma']}, {r['rule']}: abs(z)", abs(r["z"])) for r in d["results"]],
                "detail": f"combined z = {d['z_combined']:+.2f} over {sum(r['draws'] for r in d['results'])} draws; abs(z) > 3 flags a bias",
                "section": "section 4",
            }
        )
    if (d := _load(folder, "exp4c_tree_replay")) is not None:
        ctl = [c for c in d["negative_controls"]]
        rows.append(
            {
                "family": "internal",
                "claim": "the decoder's tree samplers draw tau from the exact law (replay on real trees)",
                "kind": "theorem",
                "bound": 3.0,
                "sense": "<",
                "cells": [_exact(f"{r['rule']}, L = {r['gamma']}: abs(z)", abs(r["z"])) for r in d["results"]],
                "detail": f"combined z = {d['z_combined']:+.2f}, smallest tau-law p {d['tau_law_pvalue_min']:.2f}; negative controls z = "
                + ", ".join(f"{c['z']:+.1f}" for c in ctl)
                + " (detected)",
                "section": "section 4",
            }
        )
    if (d := _load(folder, "bench_decode")) is not None:
        lk = d["summary"]["all"]["lookup"]["speed_vs_plain"]
        rows.append(
            {
                "family": "internal",
                "claim": "prompt-lookup drafts make decoding faster than plain sampling on this CPU",
                "kind": "empirical",
                "bound": 1.0,
                "cells": [_cell(f"tokens per CPU-second vs plain, {d['summary']['all']['lookup']['n_prompts']} prompts", lk, unit="x")],
                "section": "section 6",
            }
        )
    return rows


def build_rows(folder: str) -> list[dict]:
    """Every row of the ledger, computed from the JSON files in ``folder``."""
    rows = rows_exp2(folder) + rows_exp1(folder) + rows_exp3(folder) + rows_sprinter(folder) + [dict(r) for r in UNMEASURED]
    order = {p: i for i, p in enumerate(PAPERS)}
    rows = sorted(rows, key=lambda r: order.get(r["paper"], len(PAPERS)))
    return rows + rows_internal(folder)


# --- tables ------------------------------------------------------------------------------------------


def _cell_text(c: dict) -> str:
    d, u = c.get("digits", 3), c.get("unit", "")
    if c.get("exact"):
        return f"{c['label']} {c['value']:.{d}g}"
    return f"{c['label']}: {c['value']:.{d}f}{u} [{c['low']:.{d}f}, {c['high']:.{d}f}]"


def _ours(r: dict) -> str:
    cells = r.get("cells", [])
    if not cells:
        return "-"
    if len(cells) <= 4:
        text = "; ".join(_cell_text(c) for c in cells)
    else:
        vals = [c["value"] for c in cells]
        text = f"{len(cells)} cells, estimates {min(vals):.3g} to {max(vals):.3g}{cells[0].get('unit', '')}"
    return text + (f"; {r['detail']}" if r.get("detail") else "")


def _holm(r: dict) -> str:
    ps = [c["holm_pvalue"] for c in r.get("cells", []) if c.get("holm_pvalue") is not None]
    return " / ".join(f"{p:.3f}" for p in ps) or "-"


def paper_table(rows: list[dict]) -> str:
    """The ledger's table of paper claims: ``#`` and the verdict first (split on the page into two tables)."""
    paper = [r for r in rows if r.get("family", "paper") == "paper"]
    return markdown_table(
        ["#", "verdict", "paper", "claim", "paper's number", "ours (95% CI)", "source", "estimand", "setting", "Holm p", "why", "section"],
        [
            [
                str(i),
                r["verdict"],
                r["paper"],
                r["claim"],
                r.get("paper_value") or "-",
                _ours(r),
                r.get("source", "-"),
                r.get("estimand", "-"),
                r.get("setting", "-"),
                _holm(r),
                r["why"] + (f"; margin {r['margin_why']}" if r.get("margin_why") else ""),
                r.get("section") or "-",
            ]
            for i, r in enumerate(paper, 1)
        ],
    )


def internal_table(rows: list[dict]) -> str:
    """Internal checks (not in the Holm family): otspec's samplers and this machine's speed."""
    return markdown_table(
        ["#", "result", "check", "ours", "section"],
        [
            [f"i{i}", r["verdict"], r["claim"], _ours(r) + f" ({r['why']})", r["section"]]
            for i, r in enumerate((r for r in rows if r.get("family") == "internal"), 1)
        ],
    )


def _jsonable(rows: list[dict]) -> list[dict]:
    return json.loads(json.dumps(rows, default=float))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog=NAME, description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=DEFAULT_RESULTS, help="folder of experiment JSONs (default docs/_static/results)")
    ap.add_argument("--out", default=None, help="output folder (default: --results)")
    args = ap.parse_args(argv)
    out = args.out or args.results
    os.makedirs(out, exist_ok=True)
    rows = decide(build_rows(args.results))
    family = rows[0]["family_size"] if rows else 0
    payload = {
        "alpha": ALPHA,
        "correction": f"Holm over the {family} cells of the paper rows with a p-value (one family); internal checks are not in it",
        "family_size": family,
        "verdicts": VERDICTS,
        "rows": _jsonable(rows),
    }
    with open(os.path.join(out, f"{NAME}.json"), "w") as f:
        json.dump(payload, f, indent=1)
    with open(os.path.join(out, f"{NAME}.md"), "w") as f:
        f.write(
            f"# {NAME}\n\n## Paper claims\n\n{paper_table(rows)}\n\n## Internal checks (not in the Holm family)\n\n{internal_table(rows)}\n"
        )
    return payload


if __name__ == "__main__":
    main()
