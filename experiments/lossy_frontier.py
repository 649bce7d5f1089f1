"""The rules engines run against the exact lossy frontier (MATH §16) on seeded LM-shaped pairs.

For each seeded pair ``otspec.synthetic.synthetic_pair(V, seed=s, temperature=T)`` (one draft,
k = 1) and each temperature T, the exact per-position numbers of every rule of
:doc:`engine_rules`: the lossless optimum alpha* = 1 - TV(p, q) (speculative sampling, ``token``),
strict exact match of a sampled draft (sum p q), the one-hot rule on an argmax draft (p(argmax q)),
Medusa's typical acceptance with vLLM's defaults, a fuzzy rule (JS <= 0.1 nats), and the lossy
frontier min(1, alpha* + eps). Lossy rules are placed by their exact TV to p and their excess
acceptance a - alpha*; the frontier is the line a - alpha* = TV (until a = 1), and a rule's
efficiency is its slope from the origin.

Under a KL budget (mentored decoding's KL(p' || p)) the frontier is a convex program
(otspec.bounds.lossy.kl_frontier, exact and certified at small V): on one seeded pair per
temperature at V = 50 the script traces it over budgets 0..0.5 nats and places every lossy rule
(typical, fuzzy, lossy_optimal at three budgets, a SPRINTER-style predicate) by its exact TV and KL
(files lossy_frontier_kl.png and the "kl" part of the JSON).

    python experiments/lossy_frontier.py --seed 0 --out docs/_static/results   # ~1 min, one core
    python experiments/lossy_frontier.py --quick                               # seconds, CI
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _output  # selects the Agg backend before pyplot is imported
import matplotlib.pyplot as plt
import numpy as np

import otspec
from otspec.bounds.lossy import kl_frontier, lossy_frontier
from otspec.synthetic import synthetic_pair
from otspec.verifiers import exact_match, fuzzy, one_hot, token, typical
from otspec.verifiers.lossy import efficiency, kl_divergence, tv_distance
from otspec.verifiers.step.approximate import ApproximateVerifier
from otspec.verifiers.step.lossy_optimal import LossyOptimalVerifier

NAME = "lossy_frontier"
TEMPERATURES = (0.3, 0.6, 1.0, 1.2)
EPS = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3)
#: The KL figure: vocabulary (exact cone program), budgets in nats, lossy_optimal's TV budgets.
KL_V = 50
KL_BUDGETS = (0.0, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
KL_RULE_EPS = (0.02, 0.05, 0.1)


def arguments(ap) -> None:
    ap.add_argument("--vocab", type=int, default=2000, help="vocabulary size V (default 2000)")
    ap.add_argument("--pairs", type=int, default=30, help="seeded pairs per temperature (default 30)")
    ap.add_argument(
        "--real",
        action="store_true",
        help="SmolLM2 target with its int8 copy as draft, on-policy positions of the experiment prompts (files lossy_frontier_smollm2.*)",
    )
    ap.add_argument("--new-tokens", type=int, default=32, help="--real: generated positions per prompt (default 32)")


def one_pair(p: np.ndarray, q: np.ndarray) -> dict:
    """Every rule's exact acceptance (and TV, efficiency for the lossy ones) on one pair, k = 1."""
    law = otspec.iid(q, 1)
    argmax = otspec.explicit([[int(np.argmax(q))]], [1.0], vocab_size=p.size)  # what an argmax drafter proposes
    row = {
        "alpha_star": otspec.optimal_acceptance(p, law).value,
        "token": token.acceptance(p, law).value,
        "exact_match": exact_match.acceptance(p, law).value,
        "one_hot_argmax": one_hot.acceptance(p, argmax).value,
    }
    for name, v in (("typical", typical), ("fuzzy", fuzzy)):
        row[name] = v.acceptance(p, law).value
        row[f"{name}_tv"] = v.tv_to_target(p, law)
        row[f"{name}_kl"] = v.kl_to_target(p, law)
        eff = efficiency(v, p, law)
        row[f"{name}_efficiency"] = None if eff != eff else eff
    row["frontier"] = [lossy_frontier(p, law, e).value for e in EPS]
    return row


def _sprinter_style(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """A lenient learned-acceptor stand-in: pass a drafted token unchecked when p(x) >= q(x) / 2."""
    return (p >= 0.5 * q).astype(np.float64)


def kl_pair(p: np.ndarray, q: np.ndarray, budgets=KL_BUDGETS) -> dict:
    """The KL frontier over ``budgets`` and every lossy rule's (acceptance, TV, KL) on one pair, k = 1."""
    law = otspec.iid(q, 1)
    curve = [kl_frontier(p, law, b) for b in budgets]
    rules = [typical, fuzzy, *(LossyOptimalVerifier(e, name=f"lossy_optimal eps={e:g}") for e in KL_RULE_EPS)]
    rules.append(ApproximateVerifier(_sprinter_style, name="sprinter-style (p >= q/2)"))
    points = []
    for v in rules:
        P = v.output_law(p, law) if hasattr(v, "output_law") else v.kernel(p, law).output_law()
        kl = kl_divergence(P, p)
        points.append(
            {
                "rule": v.name,
                "acceptance": v.acceptance(p, law).value,
                "tv": tv_distance(P, p),
                "kl": kl,
                # the most any rule with this KL could accept (inf KL: no constraint)
                "kl_frontier_at_kl": kl_frontier(p, law, kl).upper_bound if np.isfinite(kl) else 1.0,
            }
        )
    return {
        "alpha_star": curve[0].optimum.value,
        "budgets": list(budgets),
        "kl_frontier": [c.value for c in curve],
        "kl_frontier_upper": [c.upper_bound for c in curve],
        "kl_status": [c.status for c in curve],
        "tv_frontier_at_pinsker": [lossy_frontier(p, law, min(1.0, (b / 2.0) ** 0.5)).value for b in budgets],
        "rules": points,
    }


def _interval(values: list[float], clusters: list[int]) -> str:
    """``mean [low, high]``: the 95% cluster bootstrap interval over prompts (otspec.stats)."""
    import warnings

    from otspec.stats import clustered_mean

    with warnings.catch_warnings():  # few prompts: the note under the table says the interval is approximate
        warnings.simplefilter("ignore")
        iv = clustered_mean(np.asarray(values, dtype=np.float64), np.asarray(clusters))
    return f"{iv.value:.3f} [{iv.low:.3f}, {iv.high:.3f}]"


def run_real(args) -> dict:
    """Every rule at the on-policy positions of SmolLM2 (target) and its int8 copy (draft), per temperature."""
    import _real

    target, draft = _real.load_pair("int8", quick=args.quick)
    prompts = _real.PROMPTS[:2] if args.quick else _real.PROMPTS
    n_new = 3 if args.quick else args.new_tokens
    temps, summary = {}, []
    keys = ("alpha_star", "exact_match", "one_hot_argmax", "typical", "typical_tv", "fuzzy", "fuzzy_tv")
    for T in TEMPERATURES:
        st = _real.real_steps(target, draft, prompts, n_new, T, args.seed, quick=args.quick)
        rows = [{**one_pair(st.p[i], st.q[i]), "prompt": int(st.prompt[i])} for i in range(st.n)]
        temps[str(T)] = rows
        cl = [r["prompt"] for r in rows]
        summary.append({"T": float(T), "positions": len(rows), **{f"{key}_ci": _interval([r[key] for r in rows], cl) for key in keys}})
        summary[-1].update({key: _mean(rows, key) for key in (*keys, "typical_efficiency")})
        summary[-1].update({f"frontier_{round(100 * e):02d}": float(np.mean([r["frontier"][i] for r in rows])) for i, e in enumerate(EPS)})
    return {
        "_name": f"{NAME}_smollm2",
        "target": target.name,
        "draft": draft.name,
        "V": int(st.p.shape[1]),
        "pairs": len(prompts),
        "new_tokens": n_new,
        "k": 1,
        "temperatures": list(TEMPERATURES),
        "eps": list(EPS),
        "summary": summary,
        "results": temps,
    }


def run(args) -> dict:
    if args.real:
        return run_real(args)
    V, n = (300, 4) if args.quick else (args.vocab, args.pairs)
    temps = {}
    for T in TEMPERATURES:
        rows = [one_pair(*synthetic_pair(V, seed=args.seed + i, temperature=T)) for i in range(n)]
        temps[str(T)] = rows
    keys = ("alpha_star", "exact_match", "one_hot_argmax", "typical", "typical_tv", "typical_kl", "typical_efficiency", "fuzzy", "fuzzy_tv")
    summary = [{"T": float(T), **{key: _mean(rows, key) for key in keys}} for T, rows in zip(TEMPERATURES, temps.values(), strict=True)]
    for row, rows in zip(summary, temps.values(), strict=True):  # the frontier at each budget, mean over pairs
        row.update(
            {f"frontier_{round(100 * e):02d}": float(np.mean([r["frontier"][i] for r in rows])) for i, e in enumerate(EPS)}
        )  # eps in 1/100
    kl_V = 12 if args.quick else KL_V
    budgets = KL_BUDGETS[::3] if args.quick else KL_BUDGETS
    kl = {str(T): kl_pair(*synthetic_pair(kl_V, seed=args.seed, temperature=T), budgets=budgets) for T in TEMPERATURES}
    kl_summary = [  # flat rows for the docs tables: the KL frontier at each budget (budget in 1e-4 nats)
        {
            "T": float(T),
            "alpha_star": d["alpha_star"],
            **{f"kl_{round(10000 * b):04d}": v for b, v in zip(d["budgets"], d["kl_frontier"], strict=True)},
        }
        for T, d in kl.items()
    ]
    kl_rules = [
        {
            "T": float(T),
            **r,
            "tv_frontier_at_tv": min(1.0, d["alpha_star"] + r["tv"]),
            "below_both": r["acceptance"] <= min(1.0, d["alpha_star"] + r["tv"], r["kl_frontier_at_kl"]) + 1e-9,
        }
        for T, d in kl.items()
        for r in d["rules"]
    ]
    return {
        "V": V,
        "pairs": n,
        "k": 1,
        "temperatures": list(TEMPERATURES),
        "eps": list(EPS),
        "summary": summary,
        "results": temps,
        "kl_V": kl_V,
        "kl": kl,
        "kl_summary": kl_summary,
        "kl_rules": kl_rules,
    }


def _mean(rows: list[dict], key: str) -> float:
    vals = [r[key] for r in rows if r[key] is not None]
    return float(np.mean(vals)) if vals else float("nan")


def report(payload: dict, args) -> tuple[dict[str, str], list[str]]:
    res, eps = payload["results"], np.array(payload["eps"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    top = max(max(r["typical_tv"], r["fuzzy_tv"]) for rows in res.values() for r in rows)
    line = np.linspace(0.0, max(top, eps[-1]), 50)
    ax1.plot(line, line, "k-", lw=1.2, label="frontier: a - alpha* = TV (lossy_optimal)")
    markers = dict(zip(res, "os^D", strict=False))
    for T, rows in res.items():
        ax1.scatter(
            [r["typical_tv"] for r in rows], [r["typical"] - r["alpha_star"] for r in rows], marker=markers[T], c="C3", s=14, alpha=0.6
        )
        ax1.scatter([r["fuzzy_tv"] for r in rows], [r["fuzzy"] - r["alpha_star"] for r in rows], marker=markers[T], c="C0", s=14, alpha=0.6)
    ax1.scatter([], [], c="C3", marker="o", label="typical (vLLM defaults)")
    ax1.scatter([], [], c="C0", marker="o", label="fuzzy (JS <= 0.1)")
    ax1.axhline(0.0, color="0.6", lw=0.8)
    ax1.set_xlabel("TV(output law, p)")
    ax1.set_ylabel("acceptance - alpha* (lossless optimum)")
    ax1.set_title(f"lossy rules vs the exact frontier (V = {payload['V']}, k = 1)\nmarkers: T = " + ", ".join(res))
    ax1.legend(fontsize=7, loc="lower right")
    Ts = [float(t) for t in res]
    for key, label in (
        ("alpha_star", "optimum = speculative sampling"),
        ("exact_match", "exact match (sampled draft)"),
        ("one_hot_argmax", "one-hot (argmax draft)"),
        ("typical", "typical (lossy)"),
    ):
        ax2.plot(Ts, [_mean(res[t], key) for t in res], "o-", label=label)
    ax2.set_xlabel("temperature T (applied to p and q)")
    ax2.set_ylabel("mean acceptance per position" + (" (SmolLM2 / int8)" if args.real else f" ({payload['pairs']} pairs)"))
    ax2.set_ylim(0, 1.02)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    _output.save_figure(fig, args.out, f"{NAME}_smollm2" if args.real else NAME)
    header = ["T", "alpha* (token)", "exact_match", "one_hot (argmax)", "typical", "typical TV", "typical eff.", "fuzzy", "fuzzy TV"]
    body = []
    for t, rows in res.items():
        body.append(
            [t]
            + [
                _output.fmt(_mean(rows, k), 3)
                for k in ("alpha_star", "exact_match", "one_hot_argmax", "typical", "typical_tv", "typical_efficiency", "fuzzy", "fuzzy_tv")
            ]
        )
    frontier = [
        [t] + [_output.fmt(float(np.mean([r["frontier"][i] for r in rows])), 3) for i in range(len(eps))] for t, rows in res.items()
    ]
    tables = {
        "Mean exact acceptance per position (k = 1)": _output.markdown_table(header, body),
        "Mean frontier min(1, alpha* + eps)": _output.markdown_table(["T"] + [f"eps = {e:g}" for e in eps], frontier),
    }
    if "kl" in payload:
        tables.update(_kl_report(payload, args))
    source = (
        f"on-policy positions of {payload.get('target')} (target) and {payload.get('draft')} (draft), {payload['pairs']} prompts x "
        f"{payload.get('new_tokens')} tokens per temperature; intervals: 95% cluster bootstrap over prompts (few clusters: approximate)"
        if args.real
        else "seeded synthetic pairs"
    )
    notes = [
        f"Every number is exact for its position (closed forms and exact output laws), averaged over {source}; no sampling of the rules.",
        "The mean of per-position efficiencies is dominated by positions of tiny TV; the ratio of the mean gain to the mean TV "
        "((typical - alpha*) / typical TV, from the table) is the aggregate efficiency.",
        "Efficiency (a - alpha*) / TV is at most 1 (MATH §16); fuzzy sits on the frontier (slope 1) where it fires.",
    ]
    return tables, notes


def _kl_report(payload: dict, args) -> dict[str, str]:
    """The KL figure (both frontiers, the rules as points, one column per temperature) and its tables."""
    kl = payload["kl"]
    fig, axes = plt.subplots(2, len(kl), figsize=(3.2 * len(kl), 6.4), squeeze=False)
    marks = "os^v<D"
    for j, (T, d) in enumerate(kl.items()):
        a0, b = d["alpha_star"], np.array(d["budgets"])
        top_tv = max([r["tv"] for r in d["rules"]] + [0.3])
        tv = np.linspace(0.0, top_tv, 50)
        axes[0, j].plot(tv, np.minimum(1.0, a0 + tv), "k-", lw=1.2, label="TV frontier min(1, a* + eps)")
        axes[1, j].plot(b, d["kl_frontier"], "k-", lw=1.2, label="KL frontier (cone program)")
        axes[1, j].plot(b, d["tv_frontier_at_pinsker"], "k--", lw=0.8, label="TV frontier at sqrt(b/2) (Pinsker)")
        for m, r in zip(marks, d["rules"], strict=False):
            axes[0, j].scatter([r["tv"]], [r["acceptance"]], marker=m, s=30, label=r["rule"])
            if np.isfinite(r["kl"]) and r["kl"] <= b[-1]:
                axes[1, j].scatter([r["kl"]], [r["acceptance"]], marker=m, s=30)
        axes[0, j].set_title(f"T = {T} (V = {payload['kl_V']}, k = 1)")
        axes[0, j].set_xlabel("TV(output law, p)")
        axes[1, j].set_xlabel("KL(output law || p), nats")
        axes[1, j].set_xlim(-0.005, 0.2)  # the curve's bend; it is flat at 1 beyond
        for ax in axes[:, j]:
            ax.axhline(a0, color="0.6", lw=0.8)
            ax.set_ylim(min(a0, *(r["acceptance"] for r in d["rules"])) - 0.05, 1.02)
    axes[0, 0].set_ylabel("acceptance")
    axes[1, 0].set_ylabel("acceptance")
    axes[0, 0].legend(fontsize=6, loc="lower right")
    axes[1, 0].legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    _output.save_figure(fig, args.out, f"{NAME}_kl")
    budgets = next(iter(kl.values()))["budgets"]
    curve = [[T] + [_output.fmt(v, 4) for v in d["kl_frontier"]] for T, d in kl.items()]
    rules = [
        [f"{r['T']:g}", r["rule"], _output.fmt(r["acceptance"], 4), _output.fmt(r["tv"], 4), _output.fmt(r["kl"], 4)]
        + [_output.fmt(r["tv_frontier_at_tv"], 4), _output.fmt(r["kl_frontier_at_kl"], 4)]
        for r in payload["kl_rules"]
    ]
    return {
        f"KL frontier on one pair per temperature (V = {payload['kl_V']}), by budget in nats": _output.markdown_table(
            ["T"] + [f"b = {b:g}" for b in budgets], curve
        ),
        "Lossy rules against both frontiers (same pairs)": _output.markdown_table(
            ["T", "rule", "acceptance", "TV", "KL", "TV frontier at its TV", "KL frontier at its KL"], rules
        ),
    }


def main(argv: list[str] | None = None) -> dict:
    return _output.experiment(NAME, __doc__, argv, run=run, report=report, arguments=arguments)


if __name__ == "__main__":
    main()
