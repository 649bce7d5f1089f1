"""Benchmark Global Resolution (our reading: a convex program over softmax selection weights, solved to
a tolerance) against the exact optimal i.i.d. verifier ``optimal_iid``, in the same run.

For each cell (V, k, tol) on an LM-shaped pair (``otspec.synthetic``, family "zipf", seed
``--seed``): the fit's wall time (r*, then L-BFGS and minorise-maximise steps on the convex program
until :math:`\\|r_\\theta - r^*\\|_1 \\le` tol), its number of objective evaluations and variables,
its acceptance :math:`\\sum \\min(p, r_\\theta)` and the gap to :math:`\\alpha^*`; beside it the
exact rule's preparation (``optimal_iid.prepare``: r*, super-tokens, threshold tree) and one draw,
each the median of ``--repeats`` runs, and the ratio of the two times (same run, same pair). The
machine is shared: run it with ``nice -n 10``; the load average before and after is recorded.

    nice -n 10 python experiments/bench/bench_global_resolution.py --out experiments/bench/out --seed 0
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import markdown_table, median_time, run_cells, write_report

from otspec.synthetic import synthetic_pair
from otspec.verifiers.step.global_resolution import fit
from otspec.verifiers.step.optimal_iid import prepare

#: (V, k, tol): tighter tolerances where a fit takes seconds, the loosest at V = 262 144
CELLS = (
    (4096, 4, 1e-3),
    (4096, 4, 1e-6),
    (4096, 4, 1e-9),
    (4096, 8, 1e-3),
    (4096, 8, 1e-6),
    (4096, 8, 1e-9),
    (32768, 8, 1e-3),
    (32768, 8, 1e-6),
    (262144, 8, 1e-3),
)
QUICK = ((512, 4, 1e-3), (512, 4, 1e-6))


def cell(V: int, k: int, tol: float, seed: int, repeats: int) -> dict:
    p, q = synthetic_pair(V, seed=seed)
    t_exact, st = median_time(lambda: prepare(p, q, k), repeats)
    rng = np.random.default_rng(seed)
    drafts = rng.choice(V, size=k, p=q)
    t_draw, _ = median_time(lambda: st.sample(drafts, rng=rng), repeats)
    t0 = time.perf_counter()
    g = fit(p, q, k, tol=tol)
    t_gr = time.perf_counter() - t0
    alpha = float(st.alpha)
    return {
        "V": V,
        "k": k,
        "tol": tol,
        "gr_fit_s": t_gr,
        "gr_evaluations": g.evaluations,
        "gr_variables": g.variables,
        "gr_converged": g.converged,
        "gr_l1": g.l1,
        "gr_value": g.value,
        "alpha_star": g.alpha_star,
        "alpha_star_exact_rule": alpha,
        "gap": g.alpha_star - g.value,
        "optimal_iid_prepare_s": t_exact,
        "optimal_iid_draw_s": t_draw,
        "ratio_fit_to_prepare": t_gr / t_exact,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="experiments/bench/out")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="two small cells (seconds), for the test suite")
    a = ap.parse_args(argv)
    cells = QUICK if a.quick else CELLS
    p0, q0 = synthetic_pair(64, seed=a.seed)
    prepare(p0, q0, 2).sample(np.array([0, 1]), rng=np.random.default_rng(0))  # compile before timing
    rows, load0, load1 = run_cells([(V, k, tol, a.seed, a.repeats) for V, k, tol in cells], cell)
    cols = ["V", "k", "tol", "GR fit (s)", "evals", "variables", "alpha* - GR", "optimal_iid prepare (s)", "one draw (ms)", "fit / prepare"]
    table = markdown_table(
        cols,
        [
            [
                r["V"],
                r["k"],
                f"{r['tol']:.0e}",
                f"{r['gr_fit_s']:.3g}",
                r["gr_evaluations"],
                r["gr_variables"],
                f"{r['gap']:.2e}",
                f"{r['optimal_iid_prepare_s']:.3g}",
                f"{1e3 * r['optimal_iid_draw_s']:.3g}",
                f"{r['ratio_fit_to_prepare']:.0f}x",
            ]
            for r in rows
        ],
    )
    name = "bench_global_resolution_quick" if a.quick else "bench_global_resolution"
    write_report(
        a.out,
        name,
        {"seed": a.seed, "quick": a.quick, "load_before": load0, "load_after": load1, "rows": rows},
        {"Global Resolution vs optimal_iid": table},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
