"""Where the optimal WOR verifier's preparation spends its time: the Luce weight fit, call by call.

``optimal_wor.state(p, law)`` (drafts without replacement) solves the WOR optimum's selection law
r*, fits the weights b of the two-level Luce rule whose selection law is r* (Sinkhorn / IPF steps
with Anderson acceleration on coarse quadrature oracles: step ``h_fit`` first, then a finer
middle step), and evaluates the final law on the fine oracle (step ``h``). This script times that
preparation on seeded synthetic pairs and records every oracle call (its quadrature step and
seconds), so the total splits into (number of oracle evaluations) x (seconds per evaluation),
the two levers of a faster fit; the certified gap alpha*_WOR - sum min(p, r~) and the oracle's
error are recorded with it. The floor of the same run is one stable ``np.argsort`` of the p/q
ratios (the sort the WOR optimum needs), timed in the same process. Times are CPU seconds of the
process (numba's threads included) and wall seconds; the compiled kernels are loaded once
before the first cell (``warmup_s``), so no cell pays it. For the largest cell the law oracle is
also timed at the fitted weights without the head / tail split (``tail_rho=0``, every token
recursed at every node), the same-run ratio of the split.

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

CELLS = (("zipf", 1000, 4), ("zipf", 49152, 4), ("zipf", 49152, 2), ("zipf", 49152, 8))
#: (family, V, k, tol): the fit stopped at a looser tolerance, the fit residual of an earlier
#: run's default fit on this pair (2.2e-7, certified gap 1.1e-7), for a same-gap comparison.
TOL_CELLS = (("zipf", 49152, 4, 2.2e-7),)
#: The cell whose fitted law is also evaluated without the head / tail split.
SPLIT_CELL = ("zipf", 49152, 4)
QUICK_CELLS = (("zipf", 300, 3),)


def _warmup() -> float:
    """Load (or compile) the law oracle's kernels once: a small pair through the split and the
    full recursion."""
    p, q = synthetic_pair(400, family="zipf", seed=1)
    t0 = time.perf_counter()
    OptimalWORVerifier(max_iter=2).state(p, otspec.without_replacement(q, 3))
    b = np.where(q > 0, 1.0, 0.0)
    optimal_wor_module.luce_law_quadrature(q, b, q > np.median(q), 3, h=0.5, tail_rho=0.0)
    return time.perf_counter() - t0


def _oracle_pair(q: np.ndarray, st, k: int) -> dict:
    """The fitted law at step h = 0.25 with and without the head / tail split (CPU seconds, L1
    distance)."""
    out = {}
    for name, rho in (("split", None), ("full_recursion", 0.0)):
        kw = {} if rho is None else {"tail_rho": rho}
        c0, t0 = time.process_time(), time.perf_counter()
        lw = optimal_wor_module.luce_law_quadrature(q, st.b, st.in_A, k, h=0.25, **kw)
        out[name] = {"cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0, "error": lw.error}
        out[name + "_r"] = lw.r
    out["l1_distance"] = float(np.abs(out.pop("split_r") - out.pop("full_recursion_r")).sum())
    return out


def _cell(family: str, V: int, k: int, seed: int, tol: float | None = None) -> dict:
    p, q = synthetic_pair(V, family=family, seed=seed)
    law = otspec.without_replacement(q, k)
    calls: list[tuple[float, float]] = []
    oracle = optimal_wor_module.luce_law_quadrature

    def timed(qq, b, in_A, kk, *, h=0.25):
        c0 = time.process_time()
        out = oracle(qq, b, in_A, kk, h=h)
        calls.append((float(h), time.process_time() - c0))
        return out

    ratio = p / q
    t0 = time.perf_counter()
    np.argsort(ratio, kind="stable")
    floor = time.perf_counter() - t0
    optimal_wor_module.luce_law_quadrature = timed  # count the verifier's own oracle calls
    try:
        v = OptimalWORVerifier() if tol is None else OptimalWORVerifier(tol=tol)
        c0, t0 = time.process_time(), time.perf_counter()
        st = v.state(p, law)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        optimal_wor_module.luce_law_quadrature = oracle
    per_h: dict = defaultdict(list)
    for h, s in calls:
        per_h[h].append(s)
    extra = {"oracle_split_vs_full": _oracle_pair(q, st, k)} if tol is None and (family, V, k) in (SPLIT_CELL, *QUICK_CELLS) else {}
    return extra | {
        "family": family,
        "V": V,
        "k": k,
        "seed": seed,
        "tol": v.tol,
        "state_wall_s": wall,
        "state_cpu_s": cpu,
        "stable_argsort_s": floor,
        "oracle_calls": [{"h": h, "cpu_s": s} for h, s in calls],
        "oracle_by_step": {str(h): {"calls": len(s), "cpu_s": float(sum(s)), "mean_cpu_s": float(np.mean(s))} for h, s in per_h.items()},
        "oracle_cpu_s": float(sum(s for _, s in calls)),
        "fit_iterations": st.fit_iterations,
        "fit_residual": st.fit_residual,
        "gap": st.gap,
        "law_error": st.law.error,
        "alpha_error": st.alpha_error,
        "certified_shortfall": st.gap + st.law.error + st.alpha_error,
        "alpha_star": st.alpha_star,
        "acceptance": st.acceptance,
    }


# long-function: a linear script: parse, run every cell, write its report in order; splitting only moves lines
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="experiments/out/bench_luce_fit")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="one cell at V = 300 (smoke test)")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()
    warmup = _warmup()
    rows = [_cell(f, V, k, args.seed) for f, V, k in (QUICK_CELLS if args.quick else CELLS)]
    rows += [] if args.quick else [_cell(f, V, k, args.seed, tol) for f, V, k, tol in TOL_CELLS]
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
            f"{r['tol']:.1e}",
            f"{r['state_cpu_s']:.2f} / {r['state_wall_s']:.2f}",
            f"{r['oracle_cpu_s']:.2f}",
            " ".join(f"h={h}: {x['calls']} x {x['mean_cpu_s']:.2f} s" for h, x in r["oracle_by_step"].items()),
            f"{r['gap']:.1e}",
            f"{r['law_error']:.1e}",
            f"{r['certified_shortfall']:.1e}",
            f"{r['fit_residual']:.1e}",
            f"{r['stable_argsort_s'] * 1e3:.1f}",
            f"{r['state_cpu_s'] / r['stable_argsort_s']:.0f}",
        )
        for r in rows
    ]
    cols = [
        "family",
        "V",
        "k",
        "tol",
        "state s (CPU / wall)",
        "oracle CPU s",
        "oracle calls by step (CPU)",
        "gap",
        "law error",
        "certified shortfall",
        "fit residual",
        "stable argsort ms",
        "CPU / argsort",
    ]
    pairs = [r for r in rows if "oracle_split_vs_full" in r]
    split_text = (
        "\n".join(
            f"{r['family']} V = {r['V']}, k = {r['k']}, fitted weights, h = 0.25: split {x['split']['cpu_s']:.2f} s CPU, "
            f"full recursion {x['full_recursion']['cpu_s']:.2f} s CPU "
            f"(ratio {x['full_recursion']['cpu_s'] / x['split']['cpu_s']:.0f}x), L1 distance of the laws {x['l1_distance']:.1e}, "
            f"error estimates {x['split']['error']:.1e} / {x['full_recursion']['error']:.1e}"
            for r in pairs
            for x in [r["oracle_split_vs_full"]]
        )
        or "(not in this run)"
    )
    write_report(
        args.out,
        "bench_luce_fit",
        {
            "cells": rows,
            "warmup_s": warmup,
            "numba_compiled": compiled,
            "numba_threads": threads,
            "load_before": load0,
            "load_after": load1,
        },
        {
            "optimal_wor.state: the Luce weight fit by oracle call (seeded synthetic pairs)": markdown_table(cols, table),
            "the law oracle with and without the head / tail split (same run)": split_text,
            "kernels": f"compiled: {compiled}, numba threads: {threads}; kernels loaded before the first cell in {warmup:.1f} s (wall)",
            "machine load": f"load average before {tuple(round(x, 2) for x in load0)}, after {tuple(round(x, 2) for x in load1)}",
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
