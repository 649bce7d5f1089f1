"""Benchmark of the real-vocabulary tree interval: milliseconds per decoding round beyond the forward passes.

    python experiments/bench/bench_tree_interval.py --out experiments/out/bench_tree_interval --seed 0

A round at V = 49 152 without a model: every drafted node gets its own seeded target row (softmax
of Zipf-like logits plus noise, temperature 1) and a draft row (the same logits plus independent
noise), k i.i.d. sequences of length gamma are drafted from the draft rows, and
``otspec.tree_interval`` (drafted trie + top-K children, no expansion) is timed on them: median of
--repeats interleaved runs per (k, gamma), each on a fresh round, with the compiled per-node passes
(``jit_policy.ENGINE = "compiled"``, after an untimed warm-up call) and the numpy reference on the
same round, and with the compiled passes and the cutting planes run to convergence
(``TREE_INTERVAL_CUT_ROOM = 0``, the previous stopping rule: the width the early stop is judged
against); wall time and the process's CPU time (on a loaded shared machine the wall time also
counts the time other jobs hold the cores). The floor beside them is one pass over the round's
rows (their sum), the least any use of the rows costs; the "row passes" column times the compiled
path's input check, top-K and per-node statistics alone (building the explored tree and the LP's
data, no LP), the part of the interval's cost that reads the rows. Untimed, on the same rounds: how
much the LP adds to each side (the LP-free upper bound at the dual point 0, i.e. the columns'
bounds, minus the LP's; the LP's lower bound minus the drafts' own bucket law's). This is the work a decoder adds
per round with ``otspec decode --tree-interval K`` (the rows are already on the host there).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import markdown_table, write_report  # noqa: E402

import otspec  # noqa: E402
from otspec.bounds import jit_policy  # noqa: E402
from otspec.bounds import tree_interval as ti_module  # noqa: E402


def _rows(rng: np.random.Generator, V: int, base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    logits = base[rng.permutation(V)] + rng.normal(0.0, 1.0, V)
    p = np.exp(logits - logits.max())
    q_logits = logits + rng.normal(0.0, 0.7, V)
    q = np.exp(q_logits - q_logits.max())
    return p / p.sum(), q / q.sum()


def round_arrays(rng: np.random.Generator, V: int, k: int, gamma: int) -> tuple:
    """One drafted round: drafts ``(k, gamma)`` and their rows along each path, a fresh row per node."""
    base = -1.2 * np.log1p(np.arange(V, dtype=np.float64))  # Zipf-like logits: a few likely tokens, a long tail
    memo: dict = {}
    X = np.zeros((k, gamma), dtype=np.int64)
    P = np.zeros((k, gamma, V))
    Q = np.zeros((k, gamma, V))
    for t in range(k):
        for d in range(gamma):
            u = tuple(X[t, :d].tolist())
            if u not in memo:
                memo[u] = _rows(rng, V, base)
            P[t, d], Q[t, d] = memo[u]
            X[t, d] = rng.choice(V, p=Q[t, d])
    return X, P, Q


def _lp_free_bounds(tree, arr) -> tuple[float, float]:
    """The interval without the LP: the dual point 0 (the columns' bounds) above, the drafts' own
    bucket law below (untimed; how much the LP adds to each side)."""
    lp = ti_module._BucketLP(tree, arr)
    upper = lp.dual_bound(np.zeros(lp.A.shape[0]))
    law = ti_module._realise(arr["sb"], arr["sb"], tree.k)[0]
    return upper, ti_module._lower(tree, arr, [law])[0]


# long-function: one interleaved measuring loop over cells and engines, then the table, in the order they run
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="experiments/out/bench_tree_interval")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--V", type=int, default=49_152)
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--quick", action="store_true", help="V = 2 000, 2 repeats (smoke test)")
    args = ap.parse_args(argv)
    V, reps = (2_000, 2) if args.quick else (args.V, args.repeats)
    rng = np.random.default_rng(args.seed)
    cells = [(k, g) for k in (2, 4) for g in (2, 3, 4)]
    engines = ("compiled", "numpy", "full_loop")
    room = ti_module.TREE_INTERVAL_CUT_ROOM
    times: dict = {(c, e): [] for c in cells for e in engines}
    cpu: dict = {(c, e): [] for c in cells for e in engines}
    floor: dict = {c: [] for c in cells}
    passes: dict = {c: [] for c in cells}
    cheap: dict = {c: [] for c in cells}
    gaps: dict = {(c, e): [] for c in cells for e in engines}
    info: dict = {}
    last: dict = {}
    diff: dict = {c: 0.0 for c in cells}
    X, P, Q = round_arrays(rng, V, 2, 2)
    for e in engines:  # warm-up: numba's start-up and the cached kernels' loading are not timed
        jit_policy.ENGINE = "numpy" if e == "numpy" else "compiled"
        otspec.tree_interval(X, P, Q, top_k=args.top_k)
    for _ in range(reps):  # interleaved: a burst of machine noise hits every cell alike
        for k, g in cells:
            X, P, Q = round_arrays(rng, V, k, g)
            c0 = time.process_time()
            float(P.sum() + Q.sum())  # the floor: one pass over the round's rows
            floor[(k, g)].append(time.process_time() - c0)
            got = {}
            for e in engines:
                jit_policy.ENGINE = "numpy" if e == "numpy" else "compiled"
                ti_module.TREE_INTERVAL_CUT_ROOM = 0.0 if e == "full_loop" else room
                t0, c0 = time.perf_counter(), time.process_time()
                got[e] = otspec.tree_interval(X, P, Q, top_k=args.top_k)
                times[((k, g), e)].append(time.perf_counter() - t0)
                cpu[((k, g), e)].append(time.process_time() - c0)
                gaps[((k, g), e)].append(got[e].gap)
            ti_module.TREE_INTERVAL_CUT_ROOM = room
            jit_policy.ENGINE = "compiled"
            c0 = time.process_time()
            tree = ti_module._drafted_tree(X, P, Q, args.top_k)
            arr = tree.arrays()  # the row passes alone
            passes[(k, g)].append(time.process_time() - c0)
            cheap[(k, g)].append(_lp_free_bounds(tree, arr))
            r = got["compiled"]
            diff[(k, g)] = max(diff[(k, g)], abs(r.lower - got["numpy"].lower), abs(r.upper - got["numpy"].upper))
            info.setdefault((k, g), []).append((r.gap, r.n_nodes, r.checks["rounds"]))
            last.setdefault((k, g), []).append(r)
    jit_policy.ENGINE = "auto"
    rows = []
    for k, g in cells:
        gap, nodes, rounds = np.array(info[(k, g)]).T
        row = dict(k=k, gamma=g, V=V, top_k=args.top_k, repeats=reps, nodes=float(nodes.mean()), rounds=float(rounds.mean()),
                   mean_gap=float(gap.mean()), rows_floor_cpu_ms=float(np.median(floor[(k, g)]) * 1e3),
                   row_passes_cpu_ms=float(np.median(passes[(k, g)]) * 1e3),
                   max_abs_diff_numpy=float(diff[(k, g)]))  # fmt: skip
        for e in engines:
            row[f"{e}_mean_width"] = float(np.mean(gaps[((k, g), e)]))
        up0, low0 = np.array(cheap[(k, g)]).T
        up, low = np.array([(r.upper, r.lower) for r in last[(k, g)]]).T
        row["lp_free_upper_excess"] = float((up0 - up).mean())  # the dual point 0 against the LP's bound
        row["drafts_law_lower_shortfall"] = float((low - low0).mean())  # the drafts' own law against the LP's
        for e in engines:
            t = np.array(times[((k, g), e)]) * 1e3
            tc = np.array(cpu[((k, g), e)]) * 1e3
            row[f"{e}_median_ms"] = float(np.median(t))
            row[f"{e}_p90_ms"] = float(np.quantile(t, 0.9))
            row[f"{e}_median_cpu_ms"] = float(np.median(tc))
        rows.append(row)
        print(rows[-1], flush=True)
    table = markdown_table(
        ["k", "gamma", "V", "K", "compiled ms", "compiled CPU ms", "row passes CPU ms", "numpy ms", "numpy CPU ms", "full loop CPU ms", "rows floor CPU ms",
         "nodes", "LP rounds", "mean width", "full-loop width", "max |compiled - numpy|", "LP-free upper - upper", "lower - drafts' law lower"],
        [
            [r["k"], r["gamma"], r["V"], r["top_k"], f"{r['compiled_median_ms']:.1f}", f"{r['compiled_median_cpu_ms']:.1f}", f"{r['row_passes_cpu_ms']:.1f}",
             f"{r['numpy_median_ms']:.1f}", f"{r['numpy_median_cpu_ms']:.1f}", f"{r['full_loop_median_cpu_ms']:.1f}", f"{r['rows_floor_cpu_ms']:.2f}",
             f"{r['nodes']:.0f}", f"{r['rounds']:.1f}", f"{r['mean_gap']:.4f}", f"{r['full_loop_mean_width']:.4f}", f"{r['max_abs_diff_numpy']:.1e}",
             f"{r['lp_free_upper_excess']:.4f}", f"{r['drafts_law_lower_shortfall']:.4f}"]
            for r in rows
        ],
    )  # fmt: skip
    write_report(
        args.out,
        "bench_tree_interval",
        {"seed": args.seed, "quick": args.quick, "rows": rows},
        {"tree interval per round (medians; compiled, numpy and the full cutting-plane loop on the same rounds, interleaved)": table},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
