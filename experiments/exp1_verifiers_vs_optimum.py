"""Experiment 1: multi-draft verifiers against the exact optimum on real next-token distributions.

Claims re-measured (Hu et al. ICLR 2025; Khisti et al. ICLR 2025; SpecTr NeurIPS 2023):
the optimum without replacement is at least the optimum with replacement; the greedy draft law's
verifier attains that law's optimum; K-SEQ accepts at least (1 - (1 - 1/k)^k) alpha* (and how far
above it is in practice); RRS and K-SEQ leave a gap to alpha* -- where do they lose most?

Data: SmolLM2-135M-Instruct target with its int8 draft (``--draft int8``, default) or a
temperature self-draft (``--draft t0.7``), or Gemma 3 270M with a temperature self-draft; prompts
from the standard set (``experiments/_prompts.py``: otspec's own chat / maths / summarising / code
prompts and HumanEval, a domain-stratified seeded subset); the target samples continuations at
T = 1 and, at every generated position, the full target and draft distributions are taken at each
temperature of the sweep (float64 softmax of the same logits). Per step and k the script computes
alpha* for i.i.d., without-replacement and greedy draft laws, and each verifier's exact acceptance
(closed forms; RRS without replacement and ``wor_iid`` -- drafts without replacement verified at the
i.i.d. optimum -- by Rao-Blackwellised Monte Carlo over draft tuples at full vocabulary).

**Positions along whole generations** (``--positions along``): the target samples a continuation of
``--gen-tokens`` tokens at T = 1 after each prompt, and ``--tokens`` positions per prompt are drawn
uniformly without replacement (one numpy stream from ``--seed``) among the positions up to the
continuation's first EOS (or all of them); the full p and q rows are taken there at every
temperature. This mode adds the optimal verifier for drafts without replacement (``optimal_wor``,
whose exact acceptance is alpha*_WOR by construction: what is measured is that its Luce-weight fit
runs at real V and how long it takes, on a seeded subsample of ``--wor-fit-steps`` steps at the
draft counts ``--wor-fit-ks``), and the share of alpha*_WOR - alpha*_iid each rule recovers,
(alpha_rule - alpha*_iid) / (alpha*_WOR - alpha*_iid), a ratio of means over steps.

Every interval is a 95% cluster bootstrap over prompts (:mod:`otspec.stats`, BCa): the positions of
one prompt are one cluster. The JSON records the prompt of every step.

    python experiments/exp1_verifiers_vs_optimum.py              # 48 prompts x 2 positions, T 0.6 and 1.0
    python experiments/exp1_verifiers_vs_optimum.py --positions along --prompts 16 --tokens 3 \\
        --ks 1,2,4,8 --temperatures 0.3,0.6,1.0,1.2              # positions along 128-token generations
    python experiments/exp1_verifiers_vs_optimum.py --quick      # tiny random models (V = 6), CI
"""

from __future__ import annotations

import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _output  # selects the Agg backend before pyplot is imported
import _real
import matplotlib.pyplot as plt
import numpy as np

import otspec
from otspec import plot
from otspec import verifiers as vs
from otspec.stats import clustered_difference, clustered_mean, clustered_ratio

NAME = "exp1_verifiers_vs_optimum"
LAWS = {"iid": otspec.iid, "wor": otspec.without_replacement, "greedy": otspec.greedy}
#: (verifier, draft law whose optimum it is measured against)
VERIFIERS = (
    ("kseq", "iid"),
    ("rrs", "iid"),
    ("khisti", "iid"),
    ("rrs_wor", "wor"),
    ("wor_iid", "wor"),
    ("greedy_optimal", "greedy"),
    ("spechub", "greedy"),
)
#: verifiers whose acceptance at full vocabulary is a Monte Carlo estimate (excluded from the exact checks)
MONTE_CARLO = ("rrs_wor", "wor_iid")
LABELS = {
    "kseq": "K-SEQ (SpecTr)",
    "rrs": "RRS (SpecInfer)",
    "khisti": "Khisti et al.",
    "rrs_wor": "RRS w/o repl.",
    "wor_iid": "w/o repl. at i.i.d. opt.",
    "greedy_optimal": "greedy (Hu et al.)",
    "spechub": "SpecHub (k=2)",
}


def step_metrics(p: np.ndarray, q: np.ndarray, ks: list[int], n_mc: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Exact per-step quantities for every k (NaN where a verifier does not apply)."""
    m = {name: np.full(len(ks), np.nan) for name in ["opt_iid", "opt_wor", "opt_greedy", "kseq_phase1"] + [v for v, _ in VERIFIERS]}
    for i, k in enumerate(ks):
        laws = {name: f(q, k) for name, f in LAWS.items()}
        for name, law in laws.items():
            r = otspec.optimal_acceptance(p, law)
            if not r.ok:
                raise RuntimeError(f"alpha* ({name}, k={k}) has status {r.status!r}")
            m[f"opt_{name}"][i] = r.value
        m["kseq_phase1"][i] = vs.kseq.details(p, q, k).phase1
        for v, lawname in VERIFIERS:
            ver, law = vs.by_name(v), laws[lawname]
            if not ver.applies_to(law):
                continue
            try:
                est = ver.acceptance(p, law, n_samples=n_mc, rng=rng)
            except ValueError:  # otspec raises ValueError subclasses, e.g. a law too large to enumerate
                continue
            m[v][i] = est.value
    return m


def interval(a: np.ndarray, g: np.ndarray, seed: int, b: np.ndarray | None = None, how: str = "mean", sel=None) -> dict[str, list[float]]:
    """Per column of ``a`` (one per k): the mean, difference ``a - b`` or ratio ``a / b`` over steps with
    its prompt-clustered bootstrap interval (``g``: the prompt of every step); NaN where the verifier
    does not apply."""
    out = {"mean": [], "low": [], "high": []}
    sel = np.ones(a.shape[0], bool) if sel is None else sel
    for j in range(a.shape[1]):
        ok = sel & np.isfinite(a[:, j]) & (np.isfinite(b[:, j]) if b is not None else True)
        if not ok.any():
            iv = {"value": math.nan, "low": math.nan, "high": math.nan}
        elif how == "mean":
            iv = clustered_mean(a[ok, j], g[ok], seed=seed).as_dict()
        elif how == "difference":
            iv = clustered_difference(a[ok, j], b[ok, j], g[ok], seed=seed).as_dict()
        else:
            iv = clustered_ratio(a[ok, j], b[ok, j], g[ok], seed=seed).as_dict()
        out["mean"].append(iv["value"])
        out["low"].append(iv["low"])
        out["high"].append(iv["high"])
    return out


def aggregate(per_t: dict, tv: dict, g: np.ndarray, dom: np.ndarray, seed: int) -> tuple[dict, dict]:
    """Summary per temperature (every quantity, gaps, K-SEQ / alpha*) and, at the largest k, per domain."""
    summary = {}
    for T, d in per_t.items():
        summary[str(T)] = {key: interval(a, g, seed) for key, a in d.items()}
        for v, lawname in VERIFIERS:
            summary[str(T)][f"gap_{v}"] = interval(d[f"opt_{lawname}"], g, seed, d[v], "difference")
        summary[str(T)]["kseq_over_opt_iid"] = interval(d["kseq"], g, seed, d["opt_iid"], "ratio")
        summary[str(T)]["tv_mean"] = float(tv[T].mean())
    per_domain = {}
    for T, d in per_t.items():
        for dname in dict.fromkeys(dom.tolist()):
            sel = dom == dname
            gaps = {
                f"gap_{v}": interval(d[f"opt_{law}"][:, -1:], g, seed, d[v][:, -1:], "difference", sel=sel)
                for v, law in (("kseq", "iid"), ("rrs", "iid"), ("rrs_wor", "wor"))
            }
            per_domain.setdefault(str(T), {})[dname] = {
                "prompts": int(len(set(g[sel].tolist()))),
                "opt_iid": interval(d["opt_iid"][:, -1:], g, seed, sel=sel),
                **gaps,
            }
    return summary, per_domain


def shares(per_t: dict, g: np.ndarray, seed: int) -> dict:
    """Per T and rule, per k: (alpha_rule - alpha*_iid) / (alpha*_WOR - alpha*_iid), a ratio of means
    over steps with its prompt-clustered interval (NaN at k = 1, where the two optima agree)."""
    out = {}
    for T, d in per_t.items():
        den = d["opt_wor"] - d["opt_iid"]
        # k = 1 (and any k where the draft law makes the optima agree): no gain to share
        den = np.where(den.sum(0, keepdims=True) > NO_WOR_GAIN, den, np.nan)
        out[str(T)] = {v: interval(d[v] - d["opt_iid"], g, seed, den, "ratio") for v in SHARE_RULES}
        out[str(T)]["wor_minus_iid"] = interval(d["opt_wor"] - d["opt_iid"], g, seed)
    return out


def arguments(ap) -> None:
    ap.add_argument("--target", default="smollm2", choices=_real.TARGETS, help="target model (default smollm2)")
    ap.add_argument(
        "--draft",
        default="int8",
        help="'int8' (default; smollm2 only), a temperature self-draft 't<T>', e.g. t0.7, or a trained early exit 'exit<L>'",
    )
    ap.add_argument("--prompt-set", default="all", choices=("own", "humaneval", "all"), help="experiments/_prompts.py set (default all)")
    ap.add_argument("--prompts", type=int, default=48, help="a seeded, domain-stratified subset of this many prompts (default 48)")
    ap.add_argument("--tokens", type=int, default=2, help="generated positions per prompt (default 2)")
    ap.add_argument("--mc", type=int, default=16, help="Monte Carlo draft tuples per step for RRS w/o replacement")
    ap.add_argument("--ks", default="1,2,3,4,6,8", help="numbers of drafts (default 1,2,3,4,6,8)")
    ap.add_argument("--temperatures", default="0.6,1.0", help="sampling temperatures (default 0.6,1.0)")
    ap.add_argument(
        "--positions",
        default="first",
        choices=("first", "along"),
        help="'first': the first --tokens generated positions (default); 'along': --tokens positions drawn uniformly along a whole generation",
    )
    ap.add_argument("--gen-tokens", type=int, default=128, help="with --positions along: tokens of each generation (default 128)")
    ap.add_argument(
        "--wor-fit-steps",
        type=int,
        default=6,
        help="with --positions along: steps (seeded subsample) where optimal_wor is fitted (default 6)",
    )
    ap.add_argument("--wor-fit-ks", default="4", help="with --positions along: draft counts of the optimal_wor fits (default 4)")


#: A summed alpha*_WOR - alpha*_iid below this is rounding of two equal optima (e.g. k = 1): no share.
NO_WOR_GAIN = 1e-9
#: Rules whose share of alpha*_WOR - alpha*_iid is reported with ``--positions along``.
SHARE_RULES = ("kseq", "rrs", "khisti", "rrs_wor", "wor_iid")


def along_steps(target, draft, ids: list[list[int]], n_gen: int, n_pos: int, seed: int, eos: int | None):
    """Full p and q rows (T = 1) at ``n_pos`` positions per prompt drawn uniformly without replacement
    along a ``n_gen``-token target generation (up to and including its first ``eos``).

    Returns ``(Steps, positions)``: ``positions[i]`` is step i's index in its generation (0 = first
    generated token)."""
    import torch

    rng = np.random.default_rng([seed, 1])  # the positions' own stream (the generation has torch's)
    ps, qs, pr, pos = [], [], [], []
    for j, (seq, n_prompt) in enumerate(_real.continuations_ids(target, ids, n_gen, 1.0, seed)):
        gen = seq[n_prompt:]
        n_ok = gen.index(eos) + 1 if eos is not None and eos in gen else len(gen)
        at = np.sort(rng.choice(n_ok, size=min(n_pos, n_ok), replace=False))
        x = torch.tensor([seq[:-1]])
        with torch.no_grad():
            lt = target.logits(x)[0, n_prompt - 1 :]  # row i predicts gen[i]
            ld = draft.logits(x)[0, n_prompt - 1 :]
        ps.append(_real.softmax64(lt.numpy()[at], 1.0))
        qs.append(_real.softmax64(ld.numpy()[at], 1.0))
        pr.append(np.full(len(at), j))
        pos.append(at)
    steps = _real.Steps(np.concatenate(ps), np.concatenate(qs), np.concatenate(pr), 1.0, target.name, draft.name)
    return steps, np.concatenate(pos)


def _trained_sidecar(draft: str) -> dict:
    """The JSON sidecar of a trained draft's weights and the weights' SHA-256 (which weights ran)."""
    import hashlib
    import json as _json

    from otspec_gpu.models.gguf import cache_dir

    base = cache_dir() / "drafts" / f"smollm2-{draft}"
    info = _json.loads(base.with_suffix(".json").read_text())
    info["weights_sha256"] = hashlib.sha256(base.with_suffix(".safetensors").read_bytes()).hexdigest()
    return info


def wor_fits(P: np.ndarray, Q: np.ndarray, steps: np.ndarray, ks: list[int], keep_failures: str | None = None) -> list[dict]:
    """``optimal_wor`` fitted at each of ``steps`` and ``ks``: its acceptance, alpha*_WOR and the
    fit's CPU seconds (a fresh verifier per fit: nothing cached between them).

    A fit that raises is recorded (``error``: the exception's type and message, acceptance NaN) and
    the run goes on; with ``keep_failures`` (a folder) its (p, q, k) is saved there as ``.npz`` so it
    can be replayed."""
    out = []
    for s in steps:
        for k in ks:
            law = otspec.without_replacement(Q[s], k)
            opt = otspec.optimal_acceptance(P[s], law).value
            t0 = time.process_time()
            try:
                value, error = float(vs.by_name("optimal_wor").acceptance(P[s], law).value), None
            except Exception as exc:  # noqa: BLE001 -- a failed fit is a measured outcome, kept in the JSON
                value, error = math.nan, f"{type(exc).__name__}: {exc}"
                if keep_failures:
                    os.makedirs(keep_failures, exist_ok=True)
                    np.savez(os.path.join(keep_failures, f"step{int(s)}_k{k}_{len(out)}.npz"), p=P[s], q=Q[s], k=k)
            sec = time.process_time() - t0
            out.append({"step": int(s), "k": int(k), "acceptance": value, "opt_wor": float(opt), "cpu_seconds": sec, "error": error})
    return out


def _sizes(args) -> tuple[list[int], list[float], int]:
    """The draft counts, temperatures and positions per prompt (tiny with ``--quick``)."""
    ks = [1, 2, 3] if args.quick else [int(k) for k in args.ks.split(",")]
    temps = [0.8, 1.0] if args.quick else [float(t) for t in args.temperatures.split(",")]
    return ks, temps, 4 if args.quick else args.tokens


def _gap_by_tv(per_t: dict, tv: dict, temps: list[float], n_ks: int) -> list[dict]:
    """Where K-SEQ / RRS lose most: the mean gap by TV tercile of the steps, per k."""
    all_d = {key: np.concatenate([per_t[T][key] for T in temps]) for key in per_t[temps[0]]}
    all_tv = np.concatenate([tv[T] for T in temps])
    edges = np.quantile(all_tv, [0, 1 / 3, 2 / 3, 1])
    bins = np.clip(np.searchsorted(edges, all_tv, side="right") - 1, 0, 2)
    by_tv = []
    for b in range(3):
        sel = bins == b
        row = {"tv_low": float(edges[b]), "tv_high": float(edges[b + 1]), "n": int(sel.sum())}
        for v, law in (("kseq", "iid"), ("rrs", "iid"), ("rrs_wor", "wor")):
            row[f"gap_{v}"] = (np.nanmean(all_d[f"opt_{law}"][sel] - all_d[v][sel], 0)).tolist() if sel.any() else [math.nan] * n_ks
        by_tv.append(row)
    return by_tv


def _checks(per_t: dict, temps: list[float], ks: list[int]) -> dict:
    """The invariants every step must satisfy (exact ones to rounding)."""
    all_d = {key: np.concatenate([per_t[T][key] for T in temps]) for key in per_t[temps[0]]}
    ratio = all_d["kseq_phase1"] / all_d["opt_iid"]
    return {
        "min_wor_minus_iid": float(np.nanmin(all_d["opt_wor"] - all_d["opt_iid"])),
        "max_abs_greedy_verifier_minus_optimum": float(np.nanmax(np.abs(all_d["greedy_optimal"] - all_d["opt_greedy"]))),
        "min_kseq_phase1_ratio_minus_guarantee": float(np.nanmin(ratio - plot.kseq_guarantee(ks))),
        "kseq_phase1_ratio_min_by_k": np.nanmin(ratio, 0).tolist(),
        "kseq_phase1_ratio_mean_by_k": np.nanmean(ratio, 0).tolist(),
        "kseq_membership_ratio_mean_by_k": np.nanmean(all_d["kseq"] / all_d["opt_iid"], 0).tolist(),
        # wor_iid: between the i.i.d. and the without-replacement optimum (exact bound: >= alpha*_iid)
        "min_wor_iid_minus_opt_iid": float(np.nanmin(all_d["wor_iid"] - all_d["opt_iid"])),
        "max_verifier_above_optimum": float(
            max(np.nanmax(all_d[v] - all_d[f"opt_{law}"]) for v, law in VERIFIERS if v not in MONTE_CARLO and np.isfinite(all_d[v]).any())
        ),
    }


def run(args) -> dict:
    """Real next-token distributions at every temperature, every verifier and optimum at every step."""
    ks, temps, n_tok = _sizes(args)
    prompts = _real.select_prompts("own")[::16][:3] if args.quick else _real.select_prompts(args.prompt_set, args.prompts, seed=args.seed)
    t0 = time.perf_counter()
    # outputs of a non-default pair get their own file names (same folder): exp1_..._t0.7, exp1_..._gemma3-270m_t0.7
    tag = [] if args.quick else ([args.target] if args.target != "smollm2" else []) + ([args.draft] if args.draft != "int8" else [])
    name = "_".join([NAME, *tag])
    target, draft = _real.load_pair(args.draft, quick=args.quick, target=args.target)
    t_load = time.perf_counter() - t0
    # contexts sampled once from the target at T = 1; logits kept, softmaxed at every temperature
    ids = _real.prompt_token_ids(target, prompts, args.seed, quick=args.quick)
    along = args.positions == "along"
    if along:
        n_gen = 12 if args.quick else args.gen_tokens
        eos = None if args.quick else target.eos_token_id
        base, positions = along_steps(target, draft, ids, n_gen, n_tok, args.seed, eos)
        name += "_along"
    else:
        base = _real.real_steps_ids(target, draft, ids, n_tok, 1.0, args.seed)
    g = np.array([prompts[j].id for j in base.prompt])  # the cluster of every step
    dom = np.array([prompts[j].domain for j in base.prompt])
    t_models = time.perf_counter() - t0
    # logits are recovered as log-probabilities at T = 1 (softmax is shift-invariant)
    with np.errstate(divide="ignore"):
        lp, lq = np.log(base.p), np.log(base.q)
    rng = np.random.default_rng(args.seed)
    per_t: dict[float, dict[str, np.ndarray]] = {}
    tv: dict[float, np.ndarray] = {}
    fits: dict[str, list[dict]] = {}
    fit_steps = np.sort(np.random.default_rng([args.seed, 2]).choice(base.n, size=min(args.wor_fit_steps, base.n), replace=False))
    fit_ks = [2] if args.quick else [int(k) for k in args.wor_fit_ks.split(",")]
    for T in temps:
        P, Q = _real.softmax64(lp, T), _real.softmax64(lq, T)
        rows = [step_metrics(P[s], Q[s], ks, args.mc, rng) for s in range(base.n)]
        per_t[T] = {key: np.stack([r[key] for r in rows]) for key in rows[0]}  # (n_steps, len(ks))
        tv[T] = 0.5 * np.abs(P - Q).sum(1)
        if along:
            fits[str(T)] = wor_fits(P, Q, fit_steps, fit_ks, os.path.join(args.out, f"optimal_wor_failures_T{T:g}"))
    t_total = time.perf_counter() - t0
    summary, per_domain = aggregate(per_t, tv, g, dom, args.seed)
    extra = {}
    if along:
        extra = {
            "trained_draft": _trained_sidecar(args.draft) if args.draft.startswith("exit") else None,
            "positions": {"mode": "along", "generation_tokens": n_gen, "per_prompt": n_tok, "index": positions.tolist()},
            "share_of_wor_gain": shares(per_t, g, args.seed),
            "optimal_wor_fits": fits,
        }
    return {
        "target": base.target,
        "draft": base.draft,
        "vocab": int(base.p.shape[1]),
        "steps_per_temperature": base.n,
        "ks": ks,
        "temperatures": temps,
        "summary": summary,
        "checks": _checks(per_t, temps, ks),
        "gap_by_tv": _gap_by_tv(per_t, tv, temps, len(ks)),
        "per_domain": per_domain,
        "prompts": [{"id": p.id, "domain": p.domain} for p in prompts],
        "steps": {
            "prompt": [int(j) for j in base.prompt],  # index into "prompts": the cluster of every step
            "values": {str(T): {key: [_output.rounded(row) for row in a] for key, a in per_t[T].items()} for T in temps},
        },
        **extra,
        "seconds": {"load": t_load, "models": t_models, "total": t_total},
        "png": [f"{name}.png", f"{name}_gaps.png"],
        "_name": name,
        "_per_t": per_t,
    }


#: Verifiers whose curve equals an optimum (Khisti et al.'s rule attains alpha*_iid, Hu et al.'s greedy
#: verifier alpha*_greedy): drawn as large open markers over that optimum's line, so neither hides the other.
ON_AN_OPTIMUM = {"khisti": ("D", "i.i.d."), "greedy_optimal": ("v", "greedy")}


def _figures(d: dict, out: str) -> None:
    """Acceptance against k per temperature, and the gaps (by k, and by step TV at the largest k).

    One legend under the panels (not inside a narrow panel, where it covered the curves), and the
    verifiers that attain an optimum drawn as open markers on its line."""
    ks, temps, summary, by_tv = d["ks"], d["temperatures"], d["summary"], d["gap_by_tv"]
    nT = len(temps)
    fig, axes = plt.subplots(1, nT, figsize=(4.6 * nT, 5.2), layout="constrained", sharey=True)
    for ax, T in zip(np.atleast_1d(axes), temps, strict=False):
        s = summary[str(T)]
        curves = {LABELS[v]: s[v]["mean"] for v, _ in VERIFIERS if v not in ("spechub",)}
        rw = np.array(s["rrs_wor"]["low"]), np.array(s["rrs_wor"]["high"])
        plot.acceptance_vs_k(
            ks,
            curves,
            optimum={"i.i.d.": s["opt_iid"]["mean"], "w/o repl.": s["opt_wor"]["mean"], "greedy": s["opt_greedy"]["mean"]},
            ci={LABELS["rrs_wor"]: rw},
            e_line="i.i.d.",
            ax=ax,
            title=f"T = {T}  (mean TV {s['tv_mean']:.2f})",
        )
        for line in ax.get_lines():
            for v, (marker, law) in ON_AN_OPTIMUM.items():
                if line.get_label() == LABELS[v]:
                    line.set(marker=marker, ms=9, mfc="none", mew=1.6, ls="none", zorder=5, label=f"{LABELS[v]} (= $\\alpha^*$ {law})")
        ax.get_legend().remove()
        ax.tick_params(labelsize=10)
    handles, labels = np.atleast_1d(axes)[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=10, frameon=False)
    _output.save_figure(fig, out, d["_name"])

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.6), layout="constrained")
    Tref = 1.0 if 1.0 in temps else temps[-1]
    s = summary[str(Tref)]
    # Khisti et al.'s rule and the greedy verifier attain their optima: their gap is 0 (the title says so)
    gaps = {LABELS[v]: s[f"gap_{v}"]["mean"] for v, _ in VERIFIERS if v not in ("khisti", "spechub", "greedy_optimal")}
    ci = {LABELS[v]: (np.array(s[f"gap_{v}"]["low"]), np.array(s[f"gap_{v}"]["high"])) for v in ("kseq", "rrs", "rrs_wor")}
    plot.verifier_gaps(
        gaps,
        groups=[f"k={k}" for k in ks],
        ci=ci,
        ax=a1,
        title=f"mean gap to the law's optimum, T = {Tref} (95% CI by prompt)\nKhisti et al. and greedy (Hu et al.): 0 at every k",
    )
    kk = len(ks) - 1
    plot.verifier_gaps(
        {LABELS[v]: [row[f"gap_{v}"][kk] for row in by_tv] for v in ("kseq", "rrs", "rrs_wor")},
        groups=[f"TV {row['tv_low']:.2f}-{row['tv_high']:.2f}" for row in by_tv],
        ax=a2,
        title=f"gap by per-step TV(p, q), k = {ks[kk]}, all T",
    )
    for ax in (a1, a2):
        ax.get_legend().remove()
    handles, labels = a1.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=len(labels), fontsize=10, frameon=False)
    _output.save_figure(fig, out, d["_name"] + "_gaps")


def _cell(d: dict, i: int, digits: int) -> str:
    return _output.ci({"value": d["mean"][i], "low": d["low"][i], "high": d["high"][i]}, digits)


def _acceptance_table(d: dict) -> str:
    cols = ["T", "k", "alpha* iid", "alpha* w/o", "alpha* greedy", "K-SEQ", "RRS", "Khisti", "RRS w/o (MC)", "w/o at i.i.d. opt."]
    cols += ["greedy verifier", "SpecHub"]
    keys = ("opt_iid", "opt_wor", "opt_greedy", "kseq", "rrs", "khisti", "rrs_wor", "wor_iid", "greedy_optimal", "spechub")
    rows = []
    for T in d["temperatures"]:
        s = d["summary"][str(T)]
        rows += [[T, k] + [_output.fmt(s[key]["mean"][i]) for key in keys] for i, k in enumerate(d["ks"])]
    return _output.markdown_table(cols, rows)


def _gap_table(d: dict) -> str:
    gcols = ["T", "k", "K-SEQ gap", "RRS gap", "RRS w/o gap", "w/o at i.i.d. opt. gap", "greedy gap", "K-SEQ / alpha* iid"]
    gcols += ["K-SEQ phase-1 / alpha* (min)", "guarantee"]
    guarantee = plot.kseq_guarantee(d["ks"])
    grows = []
    for T in d["temperatures"]:
        s, per = d["summary"][str(T)], d["_per_t"][T]
        rmin = np.nanmin(per["kseq_phase1"] / per["opt_iid"], 0)
        for i, k in enumerate(d["ks"]):
            grows.append(
                [T, k]
                + [_cell(s[f"gap_{v}"], i, 4) for v in ("kseq", "rrs", "rrs_wor", "wor_iid", "greedy_optimal")]
                + [_cell(s["kseq_over_opt_iid"], i, 3), _output.fmt(rmin[i], 3), _output.fmt(guarantee[i], 3)]
            )
    return _output.markdown_table(gcols, grows)


def _tv_and_domain_tables(d: dict) -> tuple[str, str]:
    ks, temps, per_domain = d["ks"], d["temperatures"], d["per_domain"]
    kk = len(ks) - 1
    tv_rows = [
        [f"{r['tv_low']:.3f}-{r['tv_high']:.3f}", r["n"]] + [_output.fmt(r[f"gap_{v}"][kk]) for v in ("kseq", "rrs", "rrs_wor")]
        for r in d["gap_by_tv"]
    ]
    table_tv = _output.markdown_table(
        ["step TV", "steps", f"K-SEQ gap k={ks[kk]}", f"RRS gap k={ks[kk]}", f"RRS w/o gap k={ks[kk]}"], tv_rows
    )
    dnames = list(per_domain[str(temps[0])])
    table_dom = _output.markdown_table(
        ["T", f"quantity (k = {ks[-1]})", *[f"{dn} ({per_domain[str(temps[0])][dn]['prompts']} prompts)" for dn in dnames]],
        [
            [T, label] + [_cell(per_domain[str(T)][dn][key], 0, 4) for dn in dnames]
            for T in temps
            for key, label in (("opt_iid", "alpha* iid"), ("gap_kseq", "K-SEQ gap"), ("gap_rrs", "RRS gap"), ("gap_rrs_wor", "RRS w/o gap"))
        ],
    )
    return table_tv, table_dom


def _along_tables(d: dict) -> dict[str, str]:
    """The share of alpha*_WOR - alpha*_iid per rule, and the optimal_wor fits (acceptance, time)."""
    ks = d["ks"]
    rows = []
    for T in d["temperatures"]:
        sh = d["share_of_wor_gain"][str(T)]
        for i, k in enumerate(ks):
            if k == 1:
                continue
            rows.append([T, k, _cell(sh["wor_minus_iid"], i, 4)] + [_cell(sh[v], i, 3) for v in SHARE_RULES])
    share = _output.markdown_table(["T", "k", "alpha*_WOR - alpha*_iid"] + [f"share {LABELS[v]}" for v in SHARE_RULES], rows)
    frows = []
    for T in d["temperatures"]:
        fs = d["optimal_wor_fits"][str(T)]
        for k in sorted({f["k"] for f in fs}):
            every = [f for f in fs if f["k"] == k]
            sel = [f for f in every if not f.get("error")] or every
            sec = np.array([f["cpu_seconds"] for f in sel])
            dev = max(abs(f["acceptance"] - f["opt_wor"]) for f in sel)
            frows.append(
                [
                    T,
                    k,
                    len(every),
                    sum(bool(f.get("error")) for f in every),
                    _output.fmt(float(np.mean([f["acceptance"] for f in sel]))),
                    f"{dev:.1e}",
                    f"{np.median(sec):.1f}",
                    f"{sec.min():.1f}-{sec.max():.1f}",
                ]
            )
    fits = _output.markdown_table(
        [
            "T",
            "k",
            "steps",
            "fits that failed",
            "mean acceptance (fits that ran)",
            "max abs(acceptance - alpha*_WOR)",
            "median CPU s per fit",
            "range s",
        ],
        frows,
    )
    return {"Share of the without-replacement gain each rule recovers": share, "optimal_wor at real V (fresh fit per step)": fits}


def report(d: dict, args) -> tuple[dict[str, str], list[str]]:
    """The two figures, the four tables and the notes, from the payload."""
    _figures(d, args.out)
    table_tv, table_dom = _tv_and_domain_tables(d)
    checks, prompts, sec = d["checks"], d["prompts"], d["seconds"]
    n_tok = _sizes(args)[2]
    notes = [
        f"{d['steps_per_temperature']} steps per temperature: {len(prompts)} prompts x {n_tok} positions ("
        + ", ".join(f"{dn} {len({p['id'] for p in prompts if p['domain'] == dn})}" for dn in dict.fromkeys(p["domain"] for p in prompts))
        + f" prompts), contexts sampled from the target at T = 1; V = {d['vocab']}.",
        "Gaps are optimum minus acceptance, mean over steps (exact per step except RRS w/o replacement and w/o at i.i.d. opt.: Monte Carlo); "
        "[low, high]: 95% BCa cluster-bootstrap interval over prompts (otspec.stats, 2000 resamples); K-SEQ / alpha* is a ratio of "
        "means with the denominator resampled with it.",
        f"Checks over all steps: min(alpha*_wor - alpha*_iid) = {checks['min_wor_minus_iid']:.3g}; "
        f"max |greedy verifier - alpha*_greedy| = {checks['max_abs_greedy_verifier_minus_optimum']:.3g}; "
        f"min(K-SEQ phase-1 / alpha*_iid - (1-(1-1/k)^k)) = {checks['min_kseq_phase1_ratio_minus_guarantee']:.3g}; "
        f"max(exact verifier - its optimum) = {checks['max_verifier_above_optimum']:.3g}.",
        f"Time: load {sec['load']:.0f} s, models {sec['models'] - sec['load']:.0f} s, total {sec['total']:.0f} s.",
    ]
    if "share_of_wor_gain" in d:
        pos = d["positions"]
        notes.insert(
            1,
            f"Positions along whole generations: {pos['per_prompt']} per prompt, uniform without replacement over the positions "
            f"of a {pos['generation_tokens']}-token target generation at T = 1 up to its first EOS (seed {args.seed}); "
            f"mean position {np.mean(pos['index']):.1f}, max {max(pos['index'])}.",
        )
    tables = {
        **(_along_tables(d) if "share_of_wor_gain" in d else {}),
        "Acceptance (mean over steps)": _acceptance_table(d),
        "Gap to the optimum": _gap_table(d),
        "Gap per domain (largest k)": table_dom,
        "Where the gap is largest": table_tv,
    }
    return tables, notes


def main(argv: list[str] | None = None) -> dict:
    return _output.experiment(NAME, __doc__, argv, arguments=arguments, run=run, report=report)


if __name__ == "__main__":
    main()
