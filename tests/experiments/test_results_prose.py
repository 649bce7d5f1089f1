"""The numbers the results page quotes in its prose are the committed JSON's.

Each expected string is recomputed here from ``docs/_static/results/*.json`` (and the ledger the
script builds from them) and looked up in the section of ``docs/results.rst`` that quotes it, so
the prose cannot drift from the tables. Reads JSON only (well under a second)."""

import functools
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


PAIRS = {
    "exp1_verifiers_vs_optimum": "results-exp1",
    "exp1_verifiers_vs_optimum_gemma3-270m_t0.7": "results-exp1",
    "exp1_verifiers_vs_optimum_t0.7": "results-exp1",
}


def _ci(iv, digits=3, sign=""):
    f = f"{sign}.{digits}f"
    return f"{iv['value']:{f}} [{iv['low']:{f}}, {iv['high']:{f}}]"


def _at(s, j):
    return {"value": s["mean"][j], "low": s["low"][j], "high": s["high"][j]}


def exp1_quotes() -> list[str]:
    """Experiment 1 (three pairs): single-draft acceptances, the gaps at T = 1 and k = 2 / 4 / 8,
    the smallest K-SEQ phase-1 ratio and the range of K-SEQ / alpha*_iid at T = 1."""
    out = []
    for name in PAIRS:
        d = _json(name)
        s, ks = d["summary"]["1.0"], d["ks"]
        k1 = ks.index(1)
        single = [d["summary"][T]["opt_iid"]["mean"][k1] for T in ("0.6", "1.0")]
        if name != "exp1_verifiers_vs_optimum":  # the int8 pair's is in the method section
            out += [f"{single[0]:.3f} at T = 0.6", f"{single[1]:.3f} at T = 1"]
        for v in ("gap_kseq", "gap_rrs"):
            out.append(" / ".join(_ci(_at(s[v], ks.index(k))) for k in (2, 4, 8)))
        out.append(f"at least {min(d['checks']['kseq_phase1_ratio_min_by_k'][1:]):.3f} of")
        r = s["kseq_over_opt_iid"]["mean"][1:]
        if name != "exp1_verifiers_vs_optimum_t0.7":  # the t0.7 paragraph quotes no ratio range
            out.append(f"{min(r):.3f}-{max(r):.3f} of")
    # the gap by per-step TV (thirds, k = 8) and per domain (k = 8, T = 1), and RRS w/o replacement's gap
    for name in ("exp1_verifiers_vs_optimum", "exp1_verifiers_vs_optimum_gemma3-270m_t0.7"):
        d = _json(name)
        lo, hi = d["gap_by_tv"][0], d["gap_by_tv"][-1]
        out.append(f"{lo['gap_kseq'][-1]:.3f} on the third of steps with the smallest")
        out.append(f"RRS {lo['gap_rrs'][-1]:.3f} and {hi['gap_rrs'][-1]:.3f}")
        dom = {k: _at(v["gap_kseq"], 0) for k, v in d["per_domain"]["1.0"].items()}
        if name == "exp1_verifiers_vs_optimum":
            out.append(f"{hi['gap_kseq'][-1]:.3f} on the third with the largest")
            low, high = min(dom, key=lambda k: dom[k]["value"]), max(dom, key=lambda k: dom[k]["value"])
            out.append(f"from {_ci(dom[low])} ({low}) to {_ci(dom[high])} ({high})")
            s6 = d["summary"]["0.6"]
            out.append(f"{_ci(_at(s6['gap_rrs_wor'], -1))} against RRS's {_ci(_at(s6['gap_rrs'], -1))}")
        else:
            out.append(f"{hi['gap_kseq'][-1]:.3f} on the largest")
            others = [v["value"] for k, v in dom.items() if k != "humaneval"]
            out.append(f"{_ci(dom['humaneval'])} against {min(others):.3f}-{max(others):.3f}")
    # K-SEQ minus RRS paired per step at T = 1, k = 2 and 8: the ledger's cells (the same bootstrap)
    order = next(r for r in _json("claims_ledger")["rows"] if r["claim"].startswith("SpecTr (K-SEQ) accepts more"))
    cells = {c["label"]: c for c in order["cells"]}
    for pair in ("SmolLM2 / int8", "Gemma 3 / t0.7"):
        out += [_ci(cells[f"{pair}, T = 1.0, k = {k}"], 3, "+") for k in (2, 8)]
    return out


def exp2_exp3_quotes() -> tuple[list[str], list[str]]:
    """Every experiment-2 cell's gain, its paired gains quoted, token's BE at gamma = 8; experiment 3's
    block efficiencies and between-run ratios."""
    exp2, exp3 = _json("exp2_block_vs_token"), _json("exp3_multidraft_sequences")
    cell = {(c["draft"], c["temperature"], c["gamma"]): c for c in exp2["cells"]}
    two = [_pct(c["gain_exact"]) for c in exp2["cells"]]
    two.append(_pct(cell[("t0.7", 1.0, 6)]["gain_paired_same_rounds"]))
    g8 = cell[("int8", 1.0, 8)]["gain_paired_same_rounds"]
    two.append(f"[{100 * g8['low']:+.1f}, {100 * g8['high']:+.1f}] at gamma = 8")
    be = {(dr, T): cell[(dr, T, 8)]["be_token_exact"]["value"] for dr in ("int8", "t0.7") for T in (0.6, 1.0)}
    two.append(
        f"{be[('int8', 0.6)]:.2f} int8 and {be[('t0.7', 0.6)]:.2f} t0.7, against {be[('int8', 1.0)]:.2f} and {be[('t0.7', 1.0)]:.2f}"
    )
    run = {(r["rule"], r["k"], r["gamma"]): r for r in exp3["runs"]}
    three = [f"{_ci(run[('kseq', 4, L)]['be_exact_own'])} against {_ci(run[('kseq', 1, L)]['be_exact_own'])}" for L in (4, 8)]
    for c in exp3["comparisons"]:
        three.append(_ci(c["exact"]))
        if c["k"] == 4:
            three.append(_ci(c["realized"]))
    return two, three


def _num(n: int) -> str:
    """65536 -> "65 536", as the page writes counts."""
    return f"{n:,}".replace(",", " ")


# long-function: one expected string per quoted number of sections 4, 4b, 4c and 6
def exp4_and_speed_quotes() -> dict[str, list[str]]:
    """Calibration (4), the chain replay (4b), the tree replay (4c) and the decoding benchmark (6)."""
    e4, e4b, e4c, bench = _json("exp4_calibration"), _json("exp4b_chain_replay"), _json("exp4c_tree_replay"), _json("bench_decode")
    fam = e4["families"]
    zs = [f["z_overall"] for f in fam.values()]
    pooled, nc = e4["chain_tree_pooled"], e4["negative_control"]
    ks4 = [fam[f"kseq tree k=4 gamma={g} (smollm2-int8)"]["realized_minus_exact"] for g in (4, 8)]
    four = [
        f"for all {len(fam)} families",
        f"z between {min(zs):+.2f} and {max(zs):+.2f}",
        f"all {_num(pooled['rounds'])} chain and tree rounds pooled, realized minus exact is {_ci(pooled['realized_minus_exact'], 3, '+')}",
        f"{_ci(ks4[0], 2, '+')} (gamma 4) and {_ci(ks4[1], 2, '+')} (gamma 8)",
        f"K-SEQ accepts {nc['wrong_q']:.3f} against the {nc['promised']:.3f} the theory promises, z = {nc['z_wrong_q']:.1f}",
        f"interval [{nc['realized_minus_promised_wrong_q']['low']:.3f}, {nc['realized_minus_promised_wrong_q']['high']:.3f}]",
        f"(the correct run: z = {nc['z_correct']:.1f}, interval [{nc['realized_minus_promised_correct']['low']:.3f}, "
        f"{nc['realized_minus_promised_correct']['high']:+.3f}])",
    ]
    r = {(x["gamma"], x["rule"]): x for x in e4b["results"]}
    four += [
        f"z = {r[(4, 'token')]['z']:+.2f} / {r[(4, 'block')]['z']:+.2f} (gamma = 4, token / block) and "
        f"{r[(8, 'token')]['z']:+.2f} / {r[(8, 'block')]['z']:+.2f} (gamma = 8), combined {e4b['z_combined']:+.2f} over "
        f"{_num(sum(x['draws'] for x in e4b['results']))} draws",
        "Realized minus exact tau is "
        + ", ".join(f"{x['bias']:+.3f}" for x in e4b["results"][:3])
        + f" and {e4b['results'][3]['bias']:+.3f}",
    ]
    t = {(x["rule"], x["gamma"]): x for x in e4c["results"]}
    zc = [x["z"] for x in e4c["results"]]
    ctl = {c["gamma"]: c for c in e4c["negative_controls"]}
    four_c = [
        f"between {min(zc):+.2f} and {max(zc):+.2f} (combined {e4c['z_combined']:+.2f} over the {len(zc)} rows, "
        f"{_num(sum(x['draws'] for x in e4c['results']))} draws)",
        f"all at least {min(x['tau_law']['pvalue'] for x in e4c['results']):.2f}",
        f"{_ci(t[('kseq', 4)]['bias_clustered'], 4, '+')} at L = 4 and {_ci(t[('kseq', 8)]['bias_clustered'], 4, '+')} at L = 8",
        f"standard errors of {t[('kseq', 4)]['bias_se']:.4f} and {t[('kseq', 8)]['bias_se']:.4f}",
        f"z = {ctl[4]['z']:.1f} at L = 4 (expected {ctl[4]['z_expected']:.1f}) and {ctl[8]['z']:.1f} at L = 8 "
        f"(expected {ctl[8]['z_expected']:.1f})",
    ]
    a = bench["summary"]["all"]
    x = lambda iv, d: f"{iv['value']:.{d}f}x [{iv['low']:.{d}f}, {iv['high']:.{d}f}]"  # noqa: E731
    lk = a["lookup"]
    six = [
        f"prompt lookup is the slowest: {x(lk['speed_vs_plain'], 3)}",
        f"(HumanEval {x(bench['summary']['humaneval']['lookup']['speed_vs_plain'], 2)})",
        f"the int8 self-draft {x(a['int8']['speed_vs_plain'], 2)}",
        f"same draft {x(a['hf-int8']['speed_vs_plain'], 2)}",
        f"prompt lookup {x(a['hf-lookup']['speed_vs_plain'], 2)}",
        f"costs {x(bench['forward_cost']['block_over_one'], 2)} a one-position forward",
        f"emits {_ci(lk['block_efficiency'], 2)} tokens per round (a match in {100 * lk['match_rate']['value']:.0f}% of rounds)",
        f"round, {_ci(lk['accepted_per_round'])}, matches the exact per-round expectation with one-hot q, {lk['expected_per_round']['value']:.3f}",
    ]
    sp = _json("sprinter")
    by = {(x["kind"], x["threshold"]): x["intervals"] for x in sp["runs"]}
    exact, oracle = by[("exact", None)], by[("oracle", None)]
    seven = [
        f"exact SD (token, gamma 4) {_ci(exact['target_calls_per_token'])}",
        f"1{{p >= q}} {_ci(oracle['target_calls_per_token'])}, {_ci(oracle['calls_vs_exact_sd'], 2)} times SD's",
        "Held-out AUC " + " (logistic regression) and ".join(f"{sp['classifier'][f'{m}@0.297549']['auc']:.2f}" for m in ("logreg", "head")),
    ]
    for pass_pct, digits in ((30, 3), (90, 3)):
        th = next(t for (kind, t) in by if kind == "logreg" and round(100 * sp["classifier"][f"logreg@{t:.6f}"]["pass_rate"]) == pass_pct)
        iv = by[("logreg", th)]
        seven.append(
            f"passing {pass_pct}% of positions {_ci(iv['target_calls_per_token'], digits)} ({_ci(iv['calls_vs_exact_sd'], 2)} x SD)"
        )
    return {"results-exp4": four, "results-exp4c": four_c, "results-speed": six, "results-sprinter": seven}


GRID_KS = (1, 2, 4, 8)
GRID_GAMMAS = (4, 8)


def _width(iv):
    return f"{100 * (iv['high'] - iv['low']):.1f} points wide"


# long-function: one expected string per quoted number, each recomputed from the JSON beside it
def section4_quotes() -> dict[str, list[str]]:
    """Experiment 2's temperature curve and stop-at-EOS count, experiment 3's grid estimate and
    experiment 1 along whole generations, recomputed from their JSON."""
    curve = _json("exp2_temperature_curve")
    rows = {(r["draft"], r["gamma"], r["temperature"]): r for r in curve["rows"]}
    cold, mid, warm, hot = (rows[("int8", 8, T)] for T in (0.3, 0.6, 1.0, 1.2))
    raw = _json("exp2_runs/int8_T03_g8_16prompts")["cells"][0]
    raw_hot = _json("exp2_runs/int8_T12_g8_16prompts")["cells"][0]
    paired = [r["gain_paired_same_rounds"]["value"] for r in (cold, mid, warm, hot)]
    own = [r["gain_exact"]["value"] for r in (mid, warm, hot)]
    pairs = {(r["draft"], r["gamma"]) for r in curve["rows"]}
    below = [rows[(d, g, 0.6)]["gain_exact"]["value"] < rows[(d, g, 1.0)]["gain_exact"]["value"] for d, g in pairs]
    words = {6: "six"}
    two = [
        f"In all {words[len(pairs)]} (draft, gamma) pairs" if all(below) else "NOT ALL PAIRS",
        f"With {cold['prompts']} prompts the own-runs gain is {_pct(cold['gain_exact'])} at T = 0.3",
        f"its interval {_width(cold['gain_exact'])} against {_width(mid['gain_exact']).split()[0]} for the {mid['prompts']}-prompt cell",
        f"T = 0.6 ({_pct(mid['gain_exact'])})",
        f"paired gain on the same rounds is {_pct(cold['gain_paired_same_rounds'])}",
        f"smaller than at T = 0.6 ({100 * mid['gain_paired_same_rounds']['value']:+.1f}%) and T = 1 ({100 * warm['gain_paired_same_rounds']['value']:+.1f}%)",
        f"token's BE {cold['be_token_exact']['value']:.2f} at T = 0.3, against {mid['be_token_exact']['value']:.2f} at T = 0.6 "
        f"and {warm['be_token_exact']['value']:.2f} at T = 1",
        f"{cold['prompts_stopped_at_eos']['token']} of {cold['prompts']} prompts (token's run) and {cold['prompts_stopped_at_eos']['block']} (block's)",
        f"keeps {sum(raw['runs']['token']['rounds_eos'])} of its {sum(raw['runs']['token']['rounds'])} rounds for token",
        f"stopped at EOS the gain is {_pct(cold['gain_exact_eos'])}",
        f"{sum(r['seconds'] for r in raw['runs'].values()) / 60:.1f} and "
        f"{sum(r['seconds'] for r in raw_hot['runs'].values()) / 60:.1f} minutes for their two runs",
        f"the largest measured**: {_pct(hot['gain_exact'])} with {hot['prompts']} prompts",
        f"on the same rounds {_pct(hot['gain_paired_same_rounds'])})",
        "paired gain rises in every step, and the own-runs gain from T = 0.6 on"
        if all(a < b for a, b in zip(paired[:-1], paired[1:], strict=True)) and all(a < b for a, b in zip(own[:-1], own[1:], strict=True))
        else "NOT MONOTONE",
        f"fewer prompts end ({hot['prompts_stopped_at_eos']['token']} and {hot['prompts_stopped_at_eos']['block']} of {hot['prompts']})",
        f"stopped at EOS the gain is {_pct(hot['gain_exact_eos'])}",
    ]
    # experiment 3's grid at 128 tokens: the measured runs' seconds per (draft sequence x token x prompt)
    exp3 = _json("exp3_multidraft_sequences")
    rate = sorted(r["seconds"] / (r["k"] * r["tokens"] * r["prompts"]) for r in exp3["runs"])
    units = sum(k * (1 if k == 1 else 2) for k in GRID_KS) * len(GRID_GAMMAS) * 128 * exp3["n_prompts"]
    med = rate[len(rate) // 2]
    three = [
        f"K-SEQ and RRS: {sum(1 if k == 1 else 2 for k in GRID_KS) * len(GRID_GAMMAS)} runs on the {exp3['n_prompts']}",
        f"median over the {len(rate)}",
        f"about {units * med / 3600:.0f} hours ({units * rate[0] / 3600:.0f}-{units * rate[-1] / 3600:.0f} h",
    ]
    return {"results-exp2": two, "results-exp3": three}


def along_quotes() -> list[str]:
    """Experiment 1 along whole generations: setting, the optimal_wor fits, the shares at k = 4."""
    d = _json("exp1_verifiers_vs_optimum_along")
    fits = [(T, f) for T, fs in d["optimal_wor_fits"].items() for f in fs]
    failed = [(T, f) for T, f in fits if f["error"]]
    ran = sorted(f["cpu_seconds"] for _, f in fits if not f["error"])
    short = [f for _, f in fits if not f["error"] and f["opt_wor"] - f["acceptance"] > 1e-3]
    by_t = {T: sum(1 for t, _ in failed if t == T) for T in d["optimal_wor_fits"]}
    j = d["ks"].index(4)
    out = [
        f"{len(d['prompts'])} prompts x {d['positions']['per_prompt']} positions",
        f"mean position {sum(d['positions']['index']) / len(d['positions']['index']):.1f}, the largest {max(d['positions']['index'])}",
        f"{len(failed)} of the {len(fits)} fits raised {failed[0][1]['error'].split(':')[0]}" if failed else "no fit failed",
        " and ".join(f"{n} at T = {float(T):g}" for T, n in by_t.items() if n),
        f"median {ran[len(ran) // 2]:.1f} s CPU per fit ({ran[0]:.1f}-{ran[-1]:.1f} s",
        f"{len(short)} of the {len(ran)} fits that ran accept less than alpha*_WOR by more than 0.001 ("
        + ", ".join(f"{f['opt_wor'] - f['acceptance']:.3f}" for f in short)
        + ")",
        f"{d['seconds']['total'] / 60:.1f} minutes wall",
        "all on steps where :math:`\\alpha^*_{WOR}` is 1 to six digits" if all(f["opt_wor"] > 1 - 1e-6 for f in short) else "NOT ALL AT 1",
    ]
    for T in d["temperatures"]:
        sh = d["share_of_wor_gain"][str(T)]
        out.append(
            f"T = {T:g}: gain {_ci(_at(sh['wor_minus_iid'], j), 3)}, RRS w/o {_ci(_at(sh['rrs_wor'], j), 2)}, "
            f"w/o at i.i.d. opt. {_ci(_at(sh['wor_iid'], j), 2)}"
        )
    return out


def exit_quotes() -> list[str]:
    """Experiment 1 along whole generations with the trained early-exit draft: its weights and numbers."""
    d = _json("exp1_verifiers_vs_optimum_exit6_along")
    info, s = d["trained_draft"], d["summary"]
    j1, j4 = d["ks"].index(1), d["ks"].index(4)
    fits = [f for fs in d["optimal_wor_fits"].values() for f in fs]
    sh = {T: d["share_of_wor_gain"][T] for T in ("0.6", "1.0")}
    return [
        f"``{info['name']}``: the first {info['layers']} layers of SmolLM2 and an exit head trained for {info['training']['steps']} steps",
        f"SHA-256 ``{info['weights_sha256'][:12]}``",
        f"{len(d['prompts'])} prompts x {d['positions']['per_prompt']} positions",
        f"single-draft acceptance {s['0.6']['opt_iid']['mean'][j1]:.3f} at T = 0.6 and {s['1.0']['opt_iid']['mean'][j1]:.3f} at T = 1",
        f"gain at k = 4 is {_ci(_at(sh['0.6']['wor_minus_iid'], j4), 3)} at T = 0.6 and {_ci(_at(sh['1.0']['wor_minus_iid'], j4), 3)} at T = 1",
        f"RRS without replacement keeps {_ci(_at(sh['0.6']['rrs_wor'], j4), 2)} of it at T = 0.6 and {_ci(_at(sh['1.0']['rrs_wor'], j4), 2)} at T = 1",
        f"all {len(fits)} optimal_wor fits ran" if not any(f["error"] for f in fits) else "SOME FIT FAILED",
        f"within {max(abs(f['acceptance'] - f['opt_wor']) for f in fits):.0e} of alpha*_WOR",
        f"({d['seconds']['total'] / 60:.1f} minutes wall)",
    ]


SECTIONS = {
    "results-ledger": "results-method",
    "results-method": "results-exp1",
    "results-exp1": "results-exp2",
    "results-exp2": "results-exp3",
    "results-exp3": "results-exp4",
    "results-exp4": "results-exp4c",
    "results-exp4c": "results-exp5",
    "results-speed": "results-sprinter",
    "results-sprinter": "results-status",
}


@functools.cache
def all_quotes() -> dict[str, tuple[str, ...]]:
    """Section label -> every expected string of that section (computed once per test run)."""
    quotes_by = expected_quotes()
    two, three = exp2_exp3_quotes()
    quotes_by["results-exp1"] = exp1_quotes() + along_quotes() + exit_quotes()
    quotes_by["results-exp2"] += two
    quotes_by["results-exp3"] += three
    for label, quotes in [*exp4_and_speed_quotes().items(), *section4_quotes().items()]:
        quotes_by.setdefault(label, []).extend(quotes)
    return {label: tuple(quotes) for label, quotes in quotes_by.items()}


def missing_quotes(rst: str) -> list[tuple[str, str]]:
    """Every (section, expected string) the page does not contain."""
    out = []
    for label, quotes in all_quotes().items():
        text = _section(rst, label, SECTIONS[label])
        out += [(label, q) for q in quotes if _flat(q) not in text]
    return out


def test_the_prose_quotes_the_json():
    assert missing_quotes((ROOT / "docs" / "results.rst").read_text()) == []


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("37-74%", "41-65%"),
        ("0.725 at T = 1", "0.74 at T = 1"),
        ("9.0% lower", "9.9% lower"),
        ("52 rounds", "50 rounds"),
        ("0.049 [0.042, 0.055]", "0.049 [0.042, 0.056]"),
        ("+3.8% [-0.6, +7.6]", "+3.8% [-0.5, +7.6]"),
        ("1.087 [1.044, 1.134]", "1.087 [1.044, 1.135]"),
        ("z between -1.44 and +1.31", "z between -1.44 and +1.30"),
        ("0.695x [0.667, 0.720]", "0.695x [0.667, 0.72]"),
        ("(expected -21.8)", "(expected -21.9)"),
        ("-2.6% [-8.3, +4.8]", "-2.6% [-8.3, +4.9]"),
        ("RRS w/o 0.94 [0.89, 0.97]", "RRS w/o 0.94 [0.89, 0.98]"),
        ("about 22 hours", "about 21 hours"),
    ],
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
