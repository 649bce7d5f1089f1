"""Deployable tree verifiers on real drafted trees: exact E[tau | tree] of K-SEQ, RRS, K-SEQ's BV boost and nested optimal selection.

    python experiments/tree_deployable.py --seed 0 --out experiments/out/tree_deployable
    python experiments/tree_deployable.py --quick      # tiny random models (V = 6), CI

Target SmolLM2-135M at T = 1; drafts its int8 copy and the target itself at T = 0.7. For every
context (a prompt plus an on-policy continuation sampled from the target) one tree of 4 i.i.d.
drafted sequences of length 3 is drafted with the decoder's own drafter and scorer (float64
processed rows). The cells k in {2, 4}, gamma in {2, 3} read the first k sequences truncated to
gamma tokens (each is an i.i.d. tree of that size), so every rule of a cell is scored on the same
trees. Per tree and rule the exact E[tau | tree] (coins integrated out; zero variance given the
tree) is computed: K-SEQ and RRS by the torch tree walk (``otspec_gpu.verifiers.tree``), the
deployable rules by :mod:`otspec.verifiers.tree_deployable` (closed-form selection conditionals,
no enumeration). Means get 95% cluster-bootstrap intervals over prompts (:mod:`otspec.stats`) and
each rule a paired difference to K-SEQ on the same trees. The numpy cost per tree of each
deployable rule is recorded (this machine, shared; not a benchmark).
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _output  # selects the Agg backend and one math thread before torch is imported
import _real
import numpy as np

from otspec.stats import clustered_difference, clustered_mean
from otspec.verifiers import tree_deployable

NAME = "tree_deployable"
K_MAX, G_MAX = 4, 3
#: (k, rules) of the measured cells; every gamma in GAMMAS.
CELLS = ((2, ("kseq", "rrs", "kseq_bv", "nested")), (4, ("kseq", "rrs", "kseq_bv")))
GAMMAS = (2, 3)
TORCH_RULES = ("kseq", "rrs")


def arguments(ap) -> None:
    ap.add_argument("--drafts-models", default="int8,t0.7", help="draft models of SmolLM2 (default int8,t0.7)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--prompts", type=int, default=16, help="a domain-stratified subset of the own prompts (default 16)")
    ap.add_argument("--positions", type=int, default=4, help="contexts (one tree each) per prompt (default 4)")


def _trees(target, draft, contexts, T: float, seed: int):
    """``(P [n, 4, 4, V], Q [n, 4, 3, V], X [n, 4, 3])`` float64 numpy: one drafted tree per context."""
    import torch
    from exp4c_tree_replay import draft_trees

    gen = torch.Generator().manual_seed(seed + 11)
    P, Q, X = draft_trees(target, draft, contexts, K_MAX, G_MAX, "iid", T, gen)
    return P.numpy(), Q.numpy(), X.numpy()


def _exact(P, Q, X) -> tuple[dict, dict]:
    """Exact E[tau | tree] per tree for every (k, gamma, rule) cell (the first k sequences truncated
    to gamma tokens) and the mean seconds per tree of each. Tree-major, so the deployable rules'
    per-node quantities are shared by the cells of one tree."""
    import torch

    from otspec_gpu.verifiers import tree

    n = X.shape[0]
    vals, secs = {}, {}
    for k, rules in CELLS:
        for g in GAMMAS:
            for rule in rules:
                if rule in TORCH_RULES:
                    t0 = time.perf_counter()
                    args = [torch.from_numpy(np.ascontiguousarray(a)) for a in (P[:, :k, : g + 1], Q[:, :k, :g], X[:, :k, :g])]
                    vals[k, g, rule] = tree.expected_accepted_given_drafts(*args, rule=rule).numpy()
                    secs[k, g, rule] = (time.perf_counter() - t0) / n
                else:
                    vals[k, g, rule], secs[k, g, rule] = np.zeros(n), 0.0
    for i in range(n):
        for k, rules in CELLS:
            for g in GAMMAS:
                for rule in rules:
                    if rule not in TORCH_RULES:
                        t0 = time.perf_counter()
                        vals[k, g, rule][i] = tree_deployable.expected_accepted_given_tree(
                            X[i, :k, :g], P[i, :k, : g + 1], Q[i, :k, :g], rule=rule
                        )
                        secs[k, g, rule] += (time.perf_counter() - t0) / n
    return vals, secs


def run(args) -> dict:
    T = args.temperature
    n_pos = 2 if args.quick else args.positions
    chosen = _real.select_prompts("own")[::32] if args.quick else _real.select_prompts("own", args.prompts, seed=args.seed)
    draft_names = ["int8"] if args.quick else [d for d in args.drafts_models.split(",") if d]
    rows, t_start = [], time.perf_counter()
    for dname in draft_names:
        target, draft = _real.load_pair(dname, quick=args.quick)
        ids = _real.prompt_token_ids(target, chosen, args.seed, quick=args.quick)
        seqs = _real.continuations_ids(target, ids, n_pos * 3, T, args.seed)
        contexts = [s[: n0 + 3 * j] for s, n0 in seqs for j in range(n_pos)]
        clusters = np.array([i for i in range(len(seqs)) for _ in range(n_pos)])
        t1 = time.perf_counter()
        P, Q, X = _trees(target, draft, contexts, T, args.seed)
        print(f"[{NAME}] {draft.name}: {X.shape[0]} trees drafted in {time.perf_counter() - t1:.0f} s (V = {P.shape[-1]})", flush=True)
        t1 = time.perf_counter()
        cell_vals, cell_secs = _exact(P, Q, X)
        print(f"[{NAME}] {draft.name}: exact expectations in {time.perf_counter() - t1:.0f} s", flush=True)
        for k, rules in CELLS:
            for g in GAMMAS:
                vals = {rule: cell_vals[k, g, rule] for rule in rules}
                secs = {rule: cell_secs[k, g, rule] for rule in rules}
                for rule in rules:
                    m = clustered_mean(vals[rule], clusters, seed=args.seed)
                    d = clustered_difference(vals[rule], vals["kseq"], clusters, seed=args.seed)
                    rows.append(
                        {
                            "draft": draft.name,
                            "k": k,
                            "gamma": g,
                            "rule": rule,
                            "trees": int(vals[rule].size),
                            "prompts": int(np.unique(clusters).size),
                            "E_tau": m.value,
                            "E_tau_low": m.low,
                            "E_tau_high": m.high,
                            "minus_kseq": d.value,
                            "minus_kseq_low": d.low,
                            "minus_kseq_high": d.high,
                            "trees_above_kseq": int(np.sum(vals[rule] > vals["kseq"] + 1e-12)),
                            "trees_below_kseq": int(np.sum(vals[rule] < vals["kseq"] - 1e-12)),
                            "seconds_per_tree": secs[rule],
                        }
                    )
                    r = rows[-1]
                    print(
                        f"[{NAME}] {draft.name} k={k} gamma={g} {rule:8s} E[tau] {r['E_tau']:.4f} "
                        f"[{r['E_tau_low']:.4f}, {r['E_tau_high']:.4f}]  - kseq {r['minus_kseq']:+.4f} "
                        f"[{r['minus_kseq_low']:+.4f}, {r['minus_kseq_high']:+.4f}]  {secs[rule] * 1e3:.0f} ms/tree",
                        flush=True,
                    )
        del P, Q, X
    return {
        "target": "tiny" if args.quick else "smollm2",
        "temperature": T,
        "prompts": [p.id for p in chosen],
        "positions_per_prompt": n_pos,
        "rows": rows,
        "seconds": time.perf_counter() - t_start,
    }


def _figure(payload: dict, out: str) -> None:
    """Each rule's paired difference to K-SEQ per cell, with its 95% interval over prompts."""
    import matplotlib.pyplot as plt

    rows = [r for r in payload["rows"] if r["rule"] != "kseq"]
    cells = list(dict.fromkeys((r["draft"], r["k"], r["gamma"]) for r in rows))
    fig, ax = plt.subplots(figsize=(8, 3.8), layout="constrained")
    offsets = {"rrs": (-0.2, "C1"), "kseq_bv": (0.0, "C0"), "nested": (0.2, "C2")}
    for rule, (off, colour) in offsets.items():
        sel = [r for r in rows if r["rule"] == rule]
        if not sel:
            continue
        x = np.array([cells.index((r["draft"], r["k"], r["gamma"])) for r in sel]) + off
        d = np.array([r["minus_kseq"] for r in sel])
        lo = np.array([r["minus_kseq_low"] for r in sel], float)
        hi = np.array([r["minus_kseq_high"] for r in sel], float)
        ax.errorbar(x, d, yerr=np.nan_to_num(np.stack([d - lo, hi - d])), fmt="o", color=colour, capsize=3, label=rule)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(cells)), [f"{d.replace('smollm2-', '')}\nk={k} g={g}" for d, k, g in cells], fontsize="small")
    ax.set_ylabel("E[tau] minus K-SEQ (same trees)")
    ax.set_title(f"deployable tree verifiers on {payload['target']} trees, 95% CI over prompts", fontsize="medium")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    _output.save_figure(fig, out, NAME)


def report(payload, args):
    _figure(payload, args.out)
    table = _output.markdown_table(
        ["draft", "k", "gamma", "rule", "trees", "E[tau] (95% CI)", "minus K-SEQ (95% CI)", "trees above / below K-SEQ", "ms per tree"],
        [
            [
                r["draft"],
                r["k"],
                r["gamma"],
                r["rule"],
                r["trees"],
                f"{r['E_tau']:.4f} [{r['E_tau_low']:.4f}, {r['E_tau_high']:.4f}]",
                f"{r['minus_kseq']:+.4f} [{r['minus_kseq_low']:+.4f}, {r['minus_kseq_high']:+.4f}]",
                f"{r['trees_above_kseq']} / {r['trees_below_kseq']}",
                f"{r['seconds_per_tree'] * 1e3:.0f}",
            ]
            for r in payload["rows"]
        ],
    )
    notes = [
        "E[tau]: mean over drafted trees of the exact E[tau | tree]; intervals: 95% BCa cluster bootstrap over prompts.",
        "minus K-SEQ: paired difference on the same trees (the first k drafted sequences, truncated to gamma).",
        "ms per tree: numpy/torch on this shared CPU, the exact expectation (selection law + block verification), not a benchmark.",
    ]
    return {"deployable tree verifiers vs K-SEQ": table}, notes


def main(argv=None) -> dict:
    return _output.experiment(NAME, __doc__, argv, run=run, report=report, arguments=arguments)


if __name__ == "__main__":
    main()
