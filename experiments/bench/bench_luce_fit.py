"""Where the optimal WOR verifier's preparation spends its time: the Luce weight fit, call by call.

``optimal_wor.state(p, law)`` (drafts without replacement) solves the WOR optimum's selection law
r*, fits the weights b of the two-level Luce rule whose selection law is r* (Sinkhorn / IPF steps
with Anderson acceleration on coarse quadrature oracles: step ``h_fit`` first, then a finer
middle step), and evaluates the final law on the fine oracle (step ``h``). This script times that
preparation on seeded synthetic pairs and records every oracle call (its quadrature step and
seconds), so the total splits into (number of oracle evaluations) x (seconds per evaluation),
the two levers of a faster fit; the certified gap alpha*_WOR - sum min(p, r~) and the oracle's
error are recorded with it. The floor of the same run is one stable ``np.argsort`` of the p/q
ratios (the sort the WOR optimum needs), timed in the same process.

    nice -n 10 python experiments/bench/bench_luce_fit.py --out docs/_static/results

``--quick``: one cell at V = 300 (the smoke test).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import markdown_table, write_report

import otspec
from otspec.synthetic import synthetic_pair
from otspec.verifiers.step import optimal_wor as optimal_wor_module
from otspec.verifiers.step.optimal_wor import OptimalWORVerifier

CELLS = (("zipf", 1000, 4), ("zipf", 49152, 4))
QUICK_CELLS = (("zipf", 300, 3),)


def _cell(family: str, V: int, k: int, seed: int) -> dict:
    p, q = synthetic_pair(V, family=family, seed=seed)
    law = otspec.without_replacement(q, k)
    calls: list[tuple[float, float]] = []
    oracle = optimal_wor_module.luce_law_quadrature

    def timed(qq, b, in_A, kk, *, h=0.25):
        t0 = time.perf_counter()
        out = oracle(qq, b, in_A, kk, h=h)
        calls.append((float(h), time.perf_counter() - t0))
        return out

    ratio = p / q
    t0 = time.perf_counter()
    np.argsort(ratio, kind="stable")
    floor = time.perf_counter() - t0
    optimal_wor_module.luce_law_quadrature = timed  # count the verifier's own oracle calls
    try:
        v = OptimalWORVerifier()
        c0, t0 = time.process_time(), time.perf_counter()
        st = v.state(p, law)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        optimal_wor_module.luce_law_quadrature = oracle
    per_h: dict = defaultdict(list)
    for h, s in calls:
        per_h[h].append(s)
    return {
        "family": family,
        "V": V,
        "k": k,
        "seed": seed,
        "state_wall_s": wall,
        "state_cpu_s": cpu,
        "stable_argsort_s": floor,
        "oracle_calls": [{"h": h, "seconds": s} for h, s in calls],
        "oracle_by_step": {str(h): {"calls": len(s), "seconds": float(sum(s)), "mean_s": float(np.mean(s))} for h, s in per_h.items()},
        "oracle_seconds": float(sum(s for _, s in calls)),
        "fit_iterations": st.fit_iterations,
        "fit_residual": st.fit_residual,
        "gap": st.gap,
        "law_error": st.law.error,
        "alpha_star": st.alpha_star,
        "acceptance": st.acceptance,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="experiments/out/bench_luce_fit")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="one cell at V = 300 (smoke test)")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()
    rows = [_cell(f, V, k, args.seed) for f, V, k in (QUICK_CELLS if args.quick else CELLS)]
    load1 = os.getloadavg()
    try:  # the law oracle's kernels are compiled exactly when numba imports
        import numba

        compiled, threads = True, numba.get_num_threads()
    except ImportError:
        compiled, threads = False, 1
    table = [
        (
            r["family"],
            r["V"],
            r["k"],
            f"{r['state_wall_s']:.1f} / {r['state_cpu_s']:.1f}",
            f"{r['oracle_seconds']:.1f}",
            " ".join(f"h={h}: {x['calls']} x {x['mean_s']:.2f} s" for h, x in r["oracle_by_step"].items()),
            f"{r['gap']:.1e}",
            f"{r['law_error']:.1e}",
            f"{r['fit_residual']:.1e}",
            f"{r['stable_argsort_s'] * 1e3:.1f}",
        )
        for r in rows
    ]
    cols = [
        "family",
        "V",
        "k",
        "state s (wall / CPU)",
        "oracle s",
        "oracle calls by step",
        "certified gap",
        "law error",
        "fit residual",
        "stable argsort ms",
    ]
    write_report(
        args.out,
        "bench_luce_fit",
        {"cells": rows, "numba_compiled": compiled, "numba_threads": threads, "load_before": load0, "load_after": load1},
        {
            "optimal_wor.state: the Luce weight fit by oracle call (seeded synthetic pairs)": markdown_table(cols, table),
            "machine load": f"load average before {tuple(round(x, 2) for x in load0)}, after {tuple(round(x, 2) for x in load1)}",
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
