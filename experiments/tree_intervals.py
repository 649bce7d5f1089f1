"""Certified intervals for the tree optimum T* at real vocabulary: their width on SmolLM2 pairs.

    python experiments/tree_intervals.py --seed 0 --out experiments/out/tree_intervals

At on-policy contexts (the target samples a continuation of each prompt; every position of it is a
context), the draft model drafts k i.i.d. sequences of length gamma, the target scores them, and
``otspec.tree_interval`` bounds T* at that context from the drafted trie plus the top-K children of
every drafted node, after 0, 1, 2 expansion levels (each one batched forward pass of both models
over the new nodes). One tree is drafted per context with the largest k and gamma; the smaller
settings use its first k drafts and first gamma tokens (i.i.d. sequences, truncated, are i.i.d.),
and the rows of a node scored once are reused. Also recorded: K-SEQ's exact E[tau] given the
drafted tree (SpecTr's tree verifier, for scale) and the milliseconds each interval costs beyond
the forward passes. ``--quick`` runs the harness's tiny models (V = 6), where full exploration
(K = V, gamma levels) gives the exact T* at each context, and checks that every interval holds it.

``--rules`` puts tree verifiers next to the interval, each with its exact E[tau | tree] on the same
drafted tree (coins integrated out): K-SEQ and RRS (``otspec.theory.tree_expected``), K-SEQ's BV
boost and nested optimal selection (``otspec.verifiers.tree_deployable``; nested at k = 2 only),
Traversal Verification (the emitted block's exact law, ``otspec.verifiers.traversal.tree_law``),
and ``topk``: sample-and-match on the deterministic top-k tree of the same size (the draft's top k
first tokens, each continued greedily to gamma tokens; EAGLE's static tree with branching
(k, 1, ..., 1)), whose E[tau] is the target mass of its nodes
(``otspec.verifiers.sample_match.expected_accepted_given_paths``). The ``verifiers`` table gives,
per cell, each rule's mean and its share of the mean certified lower bound on T* (a ratio of
means with a 95% cluster-bootstrap interval over prompts, :func:`otspec.stats.clustered_ratio`)
and its share of the mean upper bound.
A lossless i.i.d.-tree verifier averages to at most T*, so its share of the upper bound is at
most 1 up to sampling; the top-k tree is another draft law, not bounded by T*.
Drafts: ``--pairs`` takes ``int8``, ``t<T>`` or a trained early exit ``exit<L>`` (e.g. ``exit6``).
"""

from __future__ import annotations

import sys
import time

import numpy as np
from _output import experiment, fmt, markdown_table, save_figure

PAIRS = ("int8", "t0.7")
#: Tree verifiers scored per drafted tree (``topk``: sample-and-match on the top-k tree).
RULES = ("kseq", "rrs", "kseq_bv", "nested", "traversal", "topk")
RULE_NAMES = {
    "kseq": "K-SEQ",
    "rrs": "RRS",
    "kseq_bv": "K-SEQ + BV",
    "nested": "nested",
    "traversal": "Traversal",
    "topk": "top-k tree (sample-and-match)",
}


def arguments(ap):
    ap.add_argument("--pairs", default=",".join(PAIRS), help="draft models of the SmolLM2 target: int8, t<T>, exit<L> (default int8,t0.7)")
    ap.add_argument("--prompts", type=int, default=4, help="prompts (contexts are clustered by prompt; default 4)")
    ap.add_argument("--positions", type=int, default=5, help="contexts per prompt (default 5)")
    ap.add_argument("--ks", default="2,4", help="numbers of drafted sequences (default 2,4)")
    ap.add_argument("--gammas", default="2,3,4", help="draft lengths (default 2,3,4)")
    ap.add_argument("--levels", default="0,1,2", help="expansion levels (default 0,1,2)")
    ap.add_argument("--top-k", type=int, default=4, help="children kept per expanded node under each model (default 4)")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of both models (default 1)")
    ap.add_argument(
        "--rules", default="", help=f"tree verifiers next to the interval, comma-separated from {','.join(RULES)} (default none)"
    )
    ap.add_argument(
        "--merge",
        nargs="+",
        default=None,
        metavar="JSON",
        help="no computation: merge the rows of earlier runs (e.g. one per pair) and report",
    )


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _summary(rows: list, pairs, configs, levels) -> list:
    out = []
    for pair in pairs:
        for k, g in sorted(configs):
            for L in levels:
                sel = [r for r in rows if (r["pair"], r["k"], r["gamma"], r["levels"]) == (pair, k, g, L)]
                if not sel:
                    continue
                gap = np.array([r["gap"] for r in sel])
                out.append(
                    dict(
                        pair=pair, k=k, gamma=g, levels=L, n=len(sel), lower=float(np.mean([r["lower"] for r in sel])),
                        upper=float(np.mean([r["upper"] for r in sel])), gap=float(gap.mean()), gap_p90=float(np.quantile(gap, 0.9)),
                        rel_gap=float(np.mean([r["gap"] / r["upper"] for r in sel if r["upper"] > 0])),
                        kseq=float(np.mean([r["kseq"] for r in sel])), interval_ms=float(np.median([r["interval_ms"] for r in sel])),
                        nodes=float(np.mean([r["nodes"] for r in sel])),
                    )
                )  # fmt: skip
    return out


def _traversal(X, P, Q) -> float:
    """Traversal Verification's exact E[tau | tree]: the mean accepted length of its block law."""
    from otspec.verifiers import traversal

    rows_p, rows_q = {}, {}
    for j in range(X.shape[0]):
        for i in range(X.shape[1] + 1):
            u = tuple(int(x) for x in X[j, :i])
            rows_p[u] = P[j, i]
            if i < X.shape[1]:
                rows_q[u] = Q[j, i]
    law = traversal.tree_law(rows_p.__getitem__, rows_q.__getitem__, X)
    return float(sum(w * (len(o) - 1) for o, w in law.items()))


def _topk_tree(scorer, p_root, q_root, k: int, gamma: int) -> tuple:
    """``(X [k, gamma], P [k, gamma + 1, V])``: the draft's top-k first tokens, each continued greedily
    (branching (k, 1, ..., 1)), and the target rows along them. Its truncations are the smaller cells' trees."""
    X = np.zeros((k, gamma), dtype=np.int64)
    X[:, 0] = np.argsort(-q_root, kind="stable")[:k]
    for d in range(1, gamma):
        _, q = scorer([tuple(int(x) for x in X[j, :d]) for j in range(k)])
        X[:, d] = np.argmax(q, axis=1)
    P = np.empty((k, gamma + 1, p_root.shape[0]))
    P[:, 0] = p_root
    for d in range(1, gamma + 1):
        P[:, d] = scorer([tuple(int(x) for x in X[j, :d]) for j in range(k)])[0]
    return X, P


def _rule_values(rules, X, P, Q, topk) -> dict:
    """Exact E[tau | tree] of each rule on the drafted tree ``X`` (``topk``: on the top-k tree ``(Xt, Pt)``)."""
    from otspec.theory import tree_expected
    from otspec.verifiers import tree_deployable
    from otspec.verifiers.sample_match import expected_accepted_given_paths

    k = X.shape[0]
    out = {}
    for rule in rules:
        if rule in ("kseq", "rrs"):
            out[rule] = tree_expected(P, Q, X, rule)
        elif rule == "kseq_bv" or (rule == "nested" and k == 2):  # nested's closed form is measured at k = 2
            out[rule] = tree_deployable.expected_accepted_given_tree(X, P, Q, rule=rule)
        elif rule == "traversal":
            out[rule] = _traversal(X, P, Q)
        elif rule == "topk":
            out[rule] = expected_accepted_given_paths(topk[1], topk[0])
    return out


def _verifier_summary(rows: list, rules, seed: int) -> list:
    """Per (pair, k, gamma), at the deepest expansion level: each rule's mean and share of the mean lower bound."""
    from otspec.stats import clustered_ratio

    out = []
    top = max(r["levels"] for r in rows)
    cells = sorted({(r["pair"], r["k"], r["gamma"]) for r in rows if r["levels"] == top}, key=lambda c: (c[0], c[1], c[2]))
    for pair, k, g in cells:
        sel = [r for r in rows if (r["pair"], r["k"], r["gamma"], r["levels"]) == (pair, k, g, top)]
        lower, upper = np.array([r["lower"] for r in sel]), np.array([r["upper"] for r in sel])
        clusters = np.array([r["prompt"] for r in sel])
        cell = dict(pair=pair, k=k, gamma=g, levels=top, n=len(sel), prompts=int(np.unique(clusters).size),
                    lower=float(lower.mean()), upper=float(upper.mean()))  # fmt: skip
        for rule in rules:
            if all(rule in r for r in sel):
                v = np.array([r[rule] for r in sel])
                share = clustered_ratio(v, lower, clusters, seed=seed)
                of_upper = clustered_ratio(v, upper, clusters, seed=seed)
                cell[rule] = float(v.mean())
                cell[rule + "_share"], cell[rule + "_share_low"], cell[rule + "_share_high"] = share.value, share.low, share.high
                cell[rule + "_of_upper"], cell[rule + "_of_upper_low"], cell[rule + "_of_upper_high"] = (
                    of_upper.value,
                    of_upper.low,
                    of_upper.high,
                )
                cell[rule + "_above_upper"] = int(np.sum(v > upper + 1e-9))  # trees whose value exceeds the round's upper bound
        out.append(cell)
    return out


def _merged(args) -> dict:
    """The payload of several earlier runs (their rows concatenated, the summary recomputed)."""
    import json
    from pathlib import Path

    parts = [json.loads(Path(path).read_text()) for path in args.merge]
    rows = [r for p in parts for r in p["rows"]]
    pairs = [x for p in parts for x in p["pairs"]]
    ks = sorted({r["k"] for r in rows})
    gammas = sorted({r["gamma"] for r in rows})
    levels = sorted({r["levels"] for r in rows})
    configs = [(k, g) for k in ks for g in gammas]
    first = parts[0]
    return {
        "pairs": pairs, "ks": ks, "gammas": gammas, "levels": levels, "top_k": first["top_k"], "temperature": first["temperature"],
        "prompts": first["prompts"], "positions": first["positions"], "seconds": {k: v for p in parts for k, v in p["seconds"].items()},
        "merged_from": [{"pairs": p["pairs"], "git_revision_at_start": p.get("git_revision_at_start"), "seed": p.get("seed")} for p in parts],
        "rules": first.get("rules", []), "rows": rows, "summary": _summary(rows, pairs, configs, levels),
        "verifiers": _verifier_summary(rows, first.get("rules", []), first.get("seed", 0)) if first.get("rules") else [],
    }  # fmt: skip


# long-function: one loop over pairs, contexts, levels and settings whose records share the drafted tree
def run(args):
    import _real
    import torch

    from otspec import tree_interval
    from otspec.theory import tree_expected
    from otspec_gpu.corpus.scoring import Processing
    from otspec_gpu.corpus.trees import NodeScorer, draft_tree

    if args.merge:
        return _merged(args)
    ks, gammas, levels = _ints(args.ks), _ints(args.gammas), _ints(args.levels)
    rules = list(RULES) if args.quick else [x for x in args.rules.split(",") if x]
    if set(rules) - set(RULES):
        raise ValueError(f"--rules must be drawn from {','.join(RULES)} (got {args.rules!r}); drop the others")
    pairs = ("int8",) if args.quick else tuple(x for x in args.pairs.split(",") if x)
    n_prompts, n_pos = (2, 2) if args.quick else (args.prompts, args.positions)
    if args.quick:
        ks, gammas, levels = [2], [2], [0, 1]
    proc = Processing(temperature=args.temperature)
    gen = torch.Generator().manual_seed(args.seed)
    configs = sorted(((k, g) for k in ks for g in gammas), key=lambda c: (-c[0], -c[1]))  # big first: its nodes serve the rest
    rows, wall = [], {}
    for pair in pairs:
        t_pair = time.perf_counter()
        target, draft = _real.load_pair(pair, quick=args.quick)
        prompts = _real._text_ids(target, _real.PROMPTS[:n_prompts], args.seed, args.quick)
        conts = _real.continuations_ids(target, prompts, n_pos, args.temperature, args.seed)
        for j, (seq, n0) in enumerate(conts):
            for t in range(n_pos):
                ctx = seq[: n0 + t]
                X, P, Q = draft_tree(target, draft, ctx, max(ks), max(gammas), proc, gen)
                scorer = NodeScorer(target, draft, ctx, proc)
                first = len(rows)
                exact = {}
                if args.quick:  # full exploration: the closed interval is T* at this context
                    for k, g in configs:
                        full = tree_interval(X[:k, :g], P[:k, : g + 1], Q[:k, :g], top_k=target.vocab_size, levels=g, expand=scorer)
                        exact[(k, g)] = (full.lower, full.upper)
                for L in levels:
                    for k, g in configs:
                        s0, p0, t0 = scorer.seconds, scorer.passes, time.perf_counter()
                        r = tree_interval(X[:k, :g], P[:k, : g + 1], Q[:k, :g], top_k=args.top_k, levels=L, expand=scorer)
                        cost = time.perf_counter() - t0 - (scorer.seconds - s0)
                        row = dict(
                            pair=pair, prompt=j, position=t, k=k, gamma=g, levels=L, lower=r.lower, upper=r.upper, gap=r.gap,
                            nodes=r.n_nodes, expanded=r.n_expanded, status=r.status, interval_ms=1e3 * cost,
                            new_passes=scorer.passes - p0, kseq=tree_expected(P[:k, : g + 1], Q[:k, :g], X[:k, :g], "kseq"),
                        )  # fmt: skip
                        if (k, g) in exact:
                            row["exact_lower"], row["exact_upper"] = exact[(k, g)]
                        rows.append(row)
                    print(f"  level {L}: {time.perf_counter() - t_pair:.0f} s, {scorer.scored} nodes scored", file=sys.stderr, flush=True)
                # after the intervals, so the top-k tree's nodes do not pre-fill the scorer's memo for them
                topk = _topk_tree(scorer, P[0, 0], Q[0, 0], max(ks), max(gammas)) if "topk" in rules else None
                for k, g in configs:
                    cut = topk and (topk[0][:k, :g], topk[1][:k, : g + 1])
                    values = _rule_values(rules, X[:k, :g], P[:k, : g + 1], Q[:k, :g], cut)
                    for row in rows[first:]:
                        if (row["k"], row["gamma"]) == (k, g):
                            row.update(values)
                print(f"{pair} prompt {j} position {t}: {time.perf_counter() - t_pair:.0f} s", file=sys.stderr, flush=True)
        wall[pair] = time.perf_counter() - t_pair
    summary = _summary(rows, pairs, configs, levels)
    return {
        "pairs": list(pairs),
        "ks": ks,
        "gammas": gammas,
        "levels": levels,
        "top_k": args.top_k,
        "temperature": args.temperature,
        "prompts": n_prompts,
        "positions": n_pos,
        "seconds": wall,
        "rules": rules,
        "rows": rows,
        "summary": summary,
        "verifiers": _verifier_summary(rows, rules, args.seed) if rules else [],
    }


def report(payload, args):
    import matplotlib.pyplot as plt

    pairs, levels = payload["pairs"], payload["levels"]
    fig, axes = plt.subplots(1, len(pairs), figsize=(5.2 * len(pairs), 3.8), squeeze=False)
    for ax, pair in zip(axes[0], pairs, strict=True):
        for k in payload["ks"]:
            for L in levels:
                sel = [s for s in payload["summary"] if s["pair"] == pair and s["k"] == k and s["levels"] == L]
                g = [s["gamma"] for s in sel]
                ax.plot(g, [s["gap"] for s in sel], marker="o", ls=("-", "--", ":")[L % 3], label=f"k={k}, {L} level(s)")
        ax.set_xlabel("gamma")
        ax.set_ylabel("mean width upper - lower (tokens)")
        ax.set_title(f"SmolLM2 / {pair}" if not payload.get("quick") else f"tiny / {pair}")
        ax.set_xticks(payload["gammas"])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, args.out, "tree_intervals")
    table = markdown_table(
        ["pair", "k", "gamma", "levels", "n", "mean lower", "mean upper", "mean width", "p90 width", "width / upper", "K-SEQ E[tau given tree]", "nodes", "ms"],
        [
            [s["pair"], s["k"], s["gamma"], s["levels"], s["n"], fmt(s["lower"], 3), fmt(s["upper"], 3), fmt(s["gap"], 3),
             fmt(s["gap_p90"], 3), fmt(s["rel_gap"], 3), fmt(s["kseq"], 3), f"{s['nodes']:.0f}", f"{s['interval_ms']:.0f}"]
            for s in payload["summary"]
        ],
    )  # fmt: skip
    notes = [
        f"{payload['prompts']} prompts x {payload['positions']} on-policy contexts per pair, K = {payload['top_k']}, T = {payload['temperature']:g}.",
        "lower <= T* <= upper at every context (certified); K-SEQ's E[tau | tree] is one drafted tree's value (it averages to K-SEQ's E[tau] <= T*).",
        "ms: median time of one interval beyond the forward passes (the LP, the separation, the bounds); levels >= 1 add one batched pass of both models per level.",
    ]
    tables = {"interval width": table}
    rules = [r for r in payload.get("rules", []) if any(r in c for c in payload.get("verifiers", []))]
    if rules:

        def share(c, rule):
            if rule not in c:
                return "-"
            lo, hi = c[rule + "_share_low"], c[rule + "_share_high"]
            return f"{fmt(c[rule], 3)} ({fmt(c[rule + '_share'], 3)} [{fmt(lo, 3)}, {fmt(hi, 3)}]; {fmt(c[rule + '_of_upper'], 3)})"

        tables["verifiers"] = markdown_table(
            ["pair", "k", "gamma", "n (prompts)", "T* lower", "T* upper"] + [RULE_NAMES[r] for r in rules],
            [[c["pair"], c["k"], c["gamma"], f"{c['n']} ({c['prompts']})", fmt(c["lower"], 3), fmt(c["upper"], 3)]
             + [share(c, r) for r in rules] for c in payload["verifiers"]],
        )  # fmt: skip
        notes.append(
            "verifiers: mean exact E[tau | tree] per rule (its share of the mean certified lower bound on T* with a 95% cluster-bootstrap "
            f"interval over prompts; its share of the mean upper bound), at {payload['verifiers'][0]['levels']} expansion level(s); all rules on the same drafted trees except top-k "
            "(sample-and-match on the draft's top-k first tokens continued greedily, a deterministic tree of the same size)."
        )
    return tables, notes


def main(argv=None) -> dict:
    return experiment("tree_intervals", __doc__, argv, run=run, report=report, arguments=arguments)


if __name__ == "__main__":
    main()
