"""The refereed rules that decode, against the textbook ones at matched k and gamma, on SmolLM2 pairs.

    python experiments/referee_smollm2.py --seed 0 --out experiments/out/referee_smollm2

Target SmolLM2-135M at sampling temperature 1; drafts: its int8 copy and itself at logit
temperature 0.7 (``experiments/_real.py``). On-policy positions: the 8 experiment prompts, then
``--new-tokens`` tokens sampled from the target per prompt. Every value is an exact expectation
given the position's distributions (or the drafted tree), except where a row says Monte Carlo.

Single tokens (gamma = 1), E[tau] = P(accept) per position:

* k = 1: token verification (:math:`1 - d_{TV}`) and the Gumbel-max coupling (``gumbel``, closed
  form), with the coupling's guarantee :math:`(1 - d_{TV})/(1 + d_{TV})`;
* k = 2 i.i.d. drafts: K-SEQ and RRS (closed forms), the optimum :math:`\\alpha^*`, and GLS: its exact
  law at V = 49 152 is out of reach (the race law's work grows as :math:`(2V)^K`), so its acceptance
  is a Monte Carlo estimate with the torch twin (``--draws`` drafted rounds per position: fresh
  drafts from q, then the race given them) next to its exact own-copy lower bound. The same Monte
  Carlo of ``gumbel`` checks the twin against the closed form at the real vocabulary.

Trees (gamma = ``--gamma``, k = 2 i.i.d. drafted sequences, at every ``--tree-stride``-th position):
exact :math:`E[\\tau \\mid \\text{drafted tree}]` of K-SEQ and RRS (:func:`otspec.theory.tree_expected`)
and of Traversal Verification (:func:`otspec.verifiers.traversal.tree_law` on the tree's
conditionals), with block and token verification of the first sequence alone (k = 1; Traversal
Verification of that one chain equals block verification, a check the script records).

Intervals: 95% cluster bootstrap over prompts (:func:`otspec.stats.clustered_mean`; paired
differences by :func:`otspec.stats.clustered_difference`). ``--quick`` runs the harness's tiny
random-weight models (V = 6, where GLS's exact acceptance is also computed): not a result.
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _real  # noqa: E402
from _output import ci, experiment, markdown_table, save_figure  # noqa: E402

import otspec  # noqa: E402
from otspec import models  # noqa: E402
from otspec.errors import ProblemTooLargeError, UnsupportedMethodError  # noqa: E402
from otspec.stats import clustered_difference, clustered_mean  # noqa: E402
from otspec.theory import tree_expected  # noqa: E402
from otspec.verifiers import block, gls, gumbel, kseq, rrs, token_chain, traversal  # noqa: E402
from otspec.verifiers.step.gumbel_coupling import daliri_lower_bound, max_product_sums  # noqa: E402

DRAFTS = ("int8", "t0.7")
TEMPERATURE = 1.0
#: Single-token columns (k = 1, then k = 2), then tree columns (k = 1 chain, then k = 2 trees).
SINGLE = ("token", "gumbel", "gumbel_mc", "daliri_bound", "kseq", "rrs", "optimum", "gls_mc", "gls_own_copy_bound", "gls_exact")
TREE = ("token_chain", "block_chain", "traversal_chain", "kseq_tree", "rrs_tree", "traversal_tree")
#: Paired differences reported with intervals (rule, against).
DIFFS = (("gumbel", "token"), ("gls_mc", "rrs"), ("gls_mc", "kseq"), ("traversal_tree", "rrs_tree"), ("traversal_tree", "kseq_tree"))


def arguments(ap) -> None:
    ap.add_argument("--new-tokens", type=int, default=32, help="on-policy positions per prompt (default 32)")
    ap.add_argument("--gamma", type=int, default=3, help="drafted sequence length of the trees (default 3)")
    ap.add_argument("--tree-stride", type=int, default=4, help="draw a tree at every n-th position (default 4)")
    ap.add_argument("--draws", type=int, default=4000, help="Monte Carlo rounds per position for gls / gumbel (default 4000)")


def own_copy_bound(p: np.ndarray, q: np.ndarray, K: int) -> float:
    """GLS's own-copy lower bound for K i.i.d. drafts in O(V log V) (the library's form builds a V x V array)."""
    both = np.flatnonzero((p > 0) & (q > 0))
    return float(K * np.sum(p[both] * q[both] / (max_product_sums(p, q, both) + (K - 1) * q[both])))


def single_row(p: np.ndarray, q: np.ndarray, gen, draws: int) -> dict:
    """Every single-token column at one position (k = 1 and k = 2 i.i.d.)."""
    import torch

    from otspec_gpu.drafting import sample_drafts
    from otspec_gpu.verifiers import SINGLE_STEP

    law1, law2 = otspec.iid(q, 1), otspec.iid(q, 2)
    row = {
        "token": float(np.minimum(p, q).sum()),
        "gumbel": gumbel.acceptance(p, law1).value,
        "daliri_bound": daliri_lower_bound(p, q),
        "kseq": kseq.acceptance(p, law2, method="closed_form").value,
        "rrs": rrs.acceptance(p, law2, method="closed_form").value,
        "optimum": otspec.optimal_acceptance(p, law2).value,
        "gls_own_copy_bound": own_copy_bound(p, q, 2),
    }
    try:  # exact where the draft tuples can be enumerated (the tiny models of --quick)
        row["gls_exact"] = gls.acceptance(p, law2, method="closed_form").value
    except (ProblemTooLargeError, UnsupportedMethodError):  # no enumeration at a real vocabulary
        row["gls_exact"] = math.nan
    pt, qt = torch.as_tensor(p)[None], torch.as_tensor(q)[None]
    for name, k in (("gumbel", 1), ("gls", 2)):
        d = sample_drafts(qt, k, "iid", generator=gen, n=draws)
        out = SINGLE_STEP[name].sample(pt, qt, d, generator=gen, validate=False)
        row[f"{name}_mc"] = float(out.accepted.double().mean())
    return row


def tree_row(P: np.ndarray, Q: np.ndarray, X: np.ndarray) -> dict:
    """Exact E[tau | drafted tree] of the tree rules; P (k, gamma+1, V), Q (k, gamma, V), X (k, gamma)."""
    k, g = X.shape
    tp, tq = {}, {}
    for i in range(k):
        for t in range(g + 1):
            tp.setdefault(tuple(int(v) for v in X[i, :t]), P[i, t])
            if t < g:
                tq.setdefault(tuple(int(v) for v in X[i, :t]), Q[i, t])
    pm, qm = models.tabulated(tp), models.tabulated(tq)

    def trav(tree) -> float:
        return float(sum(w * (len(o) - 1) for o, w in traversal.tree_law(pm, qm, tree, replacement=True).items()))

    return {
        "token_chain": token_chain.expected_accepted_given_path(P[0], Q[0], X[0]),
        "block_chain": block.expected_accepted_given_path(P[0], Q[0], X[0]),
        "traversal_chain": trav(X[:1]),
        "kseq_tree": tree_expected(P, Q, X, "kseq"),
        "rrs_tree": tree_expected(P, Q, X, "rrs"),
        "traversal_tree": trav(X),
    }


def _summary(rows: list[dict], cols, clusters: np.ndarray, seed: int) -> dict:
    out = {}
    for c in cols:
        v = np.array([r[c] for r in rows], dtype=np.float64)
        out[c] = None if np.isnan(v).any() else clustered_mean(v, clusters, seed=seed).as_dict()
    return out


# long-function: one pass per draft model (positions, single-token columns, drafted trees, summaries); each stage is commented
def run(args) -> dict:
    import torch

    n_prompts = 2 if args.quick else len(_real.PROMPTS)
    n_new = 6 if args.quick else args.new_tokens
    draws = 400 if args.quick else args.draws
    results = {}
    for draft_name in DRAFTS:
        target, draft = _real.load_pair(draft_name, quick=args.quick)
        # on-policy positions: full p and q rows at every generated token
        steps = _real.real_steps(target, draft, _real.PROMPTS[:n_prompts], n_new, TEMPERATURE, args.seed, quick=args.quick)
        gen = torch.Generator().manual_seed(args.seed)
        single = [single_row(steps.p[i], steps.q[i], gen, draws) for i in range(steps.n)]
        print(draft_name, "single-token positions:", steps.n, flush=True)
        # drafted trees: k = 2 i.i.d. sequences at every tree_stride-th position of each prompt
        seqs = _real.sample_continuations(target, _real.PROMPTS[:n_prompts], n_new, TEMPERATURE, args.seed, quick=args.quick)
        contexts, tree_prompt = [], []
        for j, (seq, n_prompt) in enumerate(seqs):
            for i in range(0, n_new, args.tree_stride):
                contexts += [seq[: n_prompt + i]] * 2
                tree_prompt.append(j)
        paths = _real.draft_paths(target, draft, contexts, args.gamma, TEMPERATURE, args.seed + 1)
        trees = []
        for t in range(len(tree_prompt)):
            (p0, q0, x0), (p1, q1, x1) = paths[2 * t], paths[2 * t + 1]
            trees.append(tree_row(np.stack([p0, p1]), np.stack([q0, q1]), np.stack([x0, x1])))
        print(draft_name, "trees:", len(trees), flush=True)
        cl_s, cl_t = np.asarray(steps.prompt), np.asarray(tree_prompt)
        diffs = {}
        for a, b in DIFFS:
            rows, cl = (single, cl_s) if a in SINGLE else (trees, cl_t)
            diffs[f"{a} - {b}"] = clustered_difference([r[a] for r in rows], [r[b] for r in rows], cl, seed=args.seed).as_dict()
        results[draft_name] = {
            "target": steps.target,
            "draft": steps.draft,
            "positions": steps.n,
            "trees": len(trees),
            "single": _summary(single, SINGLE, cl_s, args.seed),
            "tree": _summary(trees, TREE, cl_t, args.seed),
            "differences": diffs,
            "checks": {
                "gumbel_minus_token_max": max(r["gumbel"] - r["token"] for r in single),
                "gumbel_minus_daliri_min": min(r["gumbel"] - r["daliri_bound"] for r in single),
                "traversal_chain_minus_block_max_abs": max(abs(r["traversal_chain"] - r["block_chain"]) for r in trees),
                "gls_exact_minus_own_copy_min": min((r["gls_exact"] - r["gls_own_copy_bound"] for r in single), default=math.nan),
                "gls_exact_minus_optimum_max": max((r["gls_exact"] - r["optimum"] for r in single), default=math.nan),
            },
            "_single": single,
            "_trees": trees,
        }
    res = {d: {key: val for key, val in r.items() if not key.startswith("_")} for d, r in results.items()}
    return {
        "table": table_rows(res, args.gamma),
        "differences_table": [
            {"difference": name, **{DRAFT_KEY[d]: ci(res[d]["differences"][name], signed=True) for d in DRAFTS}}
            for name in res[DRAFTS[0]]["differences"]
        ],
        "temperature": TEMPERATURE,
        "gamma": args.gamma,
        "new_tokens": n_new,
        "prompts": n_prompts,
        "draws": draws,
        "tree_stride": args.tree_stride,
        "results": res,
    }


#: The docs tables' column of each draft.
DRAFT_KEY = {"int8": "draft_int8", "t0.7": "draft_t07"}
#: k of each column.
K_OF = {c: (1 if c in ("token", "gumbel", "gumbel_mc", "daliri_bound") or c.endswith("_chain") else 2) for c in SINGLE + TREE}


def table_rows(res: dict, gamma: int) -> list[dict]:
    """One row per column: rule, k, gamma and ``value [low, high]`` per draft (the docs table)."""
    out = []
    for part, cols in (("single", SINGLE), ("tree", TREE)):
        for c in cols:
            cells = {DRAFT_KEY[d]: ci(res[d][part][c]) if res[d][part][c] is not None else None for d in DRAFTS}
            out.append({"rule": LABELS[c], "column": c, "k": K_OF[c], "gamma": 1 if part == "single" else gamma, **cells})
    return out


LABELS = {
    "token": "token",
    "gumbel": "gumbel (Gumbel-max coupling)",
    "gumbel_mc": "gumbel, Monte Carlo of the torch twin",
    "daliri_bound": "(1-TV)/(1+TV): gumbel's guarantee",
    "kseq": "K-SEQ",
    "rrs": "RRS",
    "optimum": "optimum alpha*",
    "gls_mc": "GLS, Monte Carlo of the torch twin",
    "gls_own_copy_bound": "GLS own-copy lower bound",
    "gls_exact": "GLS exact",
    "token_chain": "token verification (chain)",
    "block_chain": "block verification (chain)",
    "traversal_chain": "Traversal Verification (chain)",
    "kseq_tree": "K-SEQ tree",
    "rrs_tree": "RRS tree",
    "traversal_tree": "Traversal Verification tree",
}


def report(payload, args):
    import matplotlib.pyplot as plt

    res = payload["results"]
    tables = {
        "E[tau] per round, 95% cluster intervals over prompts": markdown_table(
            ["rule", "k", "gamma", *DRAFTS],
            [[r["rule"], r["k"], r["gamma"], *(r[DRAFT_KEY[d]] or "-" for d in DRAFTS)] for r in payload["table"]],
        ),
        "paired differences": markdown_table(
            ["difference", *DRAFTS], [[r["difference"], *(r[DRAFT_KEY[d]] for d in DRAFTS)] for r in payload["differences_table"]]
        ),
    }
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, (part, cols) in zip(axes, (("single", ("token", "gumbel", "kseq", "rrs", "gls_mc", "optimum")), ("tree", TREE)), strict=True):
        for i, d in enumerate(DRAFTS):
            vals = [res[d][part][c] for c in cols]
            x = np.arange(len(cols)) + 0.38 * i
            y = [v["value"] for v in vals]
            err = [[v["value"] - v["low"] for v in vals], [v["high"] - v["value"] for v in vals]]
            ax.bar(x, y, width=0.36, yerr=err, label=f"draft {d}", capsize=2)
        ax.set_xticks(np.arange(len(cols)) + 0.19, cols, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("E[tau] per round")
        ax.set_title("single tokens (gamma = 1)" if part == "single" else f"chains and trees (gamma = {payload['gamma']})", fontsize=9)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, args.out, "referee_smollm2")
    notes = [
        "E[tau] = accepted draft tokens per round; one round emits E[tau] + 1 tokens. Exact given each position's p and q "
        "(or the drafted tree) except the two Monte Carlo rows.",
        "GLS at V = 49 152: exact acceptance out of reach (race law work (2V)^K); Monte Carlo with the torch twin and the exact own-copy lower bound.",
        f"{payload['prompts']} prompts x {payload['new_tokens']} on-policy positions per draft; trees at every "
        f"{payload['tree_stride']}-th position; {payload['draws']} Monte Carlo rounds per position; sampling temperature {payload['temperature']}.",
    ]
    return tables, notes


def main(argv=None) -> dict:
    return experiment("referee_smollm2", __doc__, argv, run=run, report=report, arguments=arguments)


if __name__ == "__main__":
    main()
