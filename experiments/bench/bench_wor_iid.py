"""Measure ``wor_iid`` (drafts without replacement verified at the i.i.d. optimum) against the optima.

For each (family, V, k) cell: alpha*_iid (its certified lower bound), its acceptance (exact bound
plus a Monte Carlo estimate of the residual term over ``--draws`` draft tuples, 99% interval),
alpha*_WOR (the prefix scan), the certified shortfall bound alpha*_WOR - alpha*_iid, rrs_wor's
acceptance (Monte Carlo over ``--draws`` tuples, exact per tuple), the preparation time (the optimal
i.i.d. state, once per pair) and the per-draw time of ``sample_batch`` once prepared.

    nice -n 10 python experiments/bench/bench_wor_iid.py --out experiments/bench/out
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import markdown_table, run_cells, write_report

import otspec
from otspec.synthetic import synthetic_pair
from otspec.verifiers import rrs_wor, wor_iid

CELLS = (("zipf", 1000, 4), ("dirichlet", 1000, 4), ("zipf", 5000, 4), ("zipf", 5000, 8), ("zipf", 49152, 4), ("zipf", 49152, 8))


def _cell(family: str, V: int, k: int, seed: int, draws: int) -> dict:
    p, q = synthetic_pair(V, family=family, seed=seed)
    law = otspec.without_replacement(q, k)
    a_wor = otspec.optimal_acceptance(p, law).value
    a_iid = otspec.optimal_acceptance(p, otspec.iid(q, k)).value
    t0 = time.perf_counter()
    wor_iid.state(p, law)
    t_prep = time.perf_counter() - t0
    est = wor_iid.acceptance(p, law, n_samples=draws, rng=np.random.default_rng(seed))
    tuples = law.sample(np.random.default_rng(seed + 1), draws)
    t0 = time.perf_counter()
    wor_iid.sample_batch(p, law, tuples, rng=np.random.default_rng(seed + 2))
    t_draw = (time.perf_counter() - t0) / draws
    rw = rrs_wor.acceptance(p, law, n_samples=draws, rng=np.random.default_rng(seed + 3)).value
    return {
        "family": family,
        "V": V,
        "k": k,
        "alpha_iid": a_iid,
        "acceptance": est.value,
        "ci_low": est.ci_low,
        "ci_high": est.ci_high,
        "how": est.how,
        "alpha_wor": a_wor,
        "certified_shortfall_bound": a_wor - a_iid,
        "rrs_wor_mc": rw,
        "prepare_s": t_prep,
        "draw_us": 1e6 * t_draw,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="experiments/bench/out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--cells", default="all", help="'all' or a comma list of indices into CELLS")
    args = ap.parse_args(argv)
    cells = CELLS if args.cells == "all" else [CELLS[int(i)] for i in args.cells.split(",")]
    rows, load0, load1 = run_cells(cells, lambda fam, V, k: _cell(fam, V, k, args.seed, args.draws))
    cols = [
        "family",
        "V",
        "k",
        "alpha*_iid",
        "wor_iid",
        "99% interval",
        "alpha*_WOR",
        "shortfall <=",
        "rrs_wor (MC)",
        "prepare s",
        "draw us",
    ]
    table = [
        [
            r["family"],
            r["V"],
            r["k"],
            f"{r['alpha_iid']:.8f}",
            f"{r['acceptance']:.8f}",
            f"[{r['ci_low']:.8f}, {r['ci_high']:.8f}]" if r["how"] == "monte_carlo" else "exact",
            f"{r['alpha_wor']:.8f}",
            f"{r['certified_shortfall_bound']:.2e}",
            f"{r['rrs_wor_mc']:.6f}",
            f"{r['prepare_s']:.3f}",
            f"{r['draw_us']:.1f}",
        ]
        for r in rows
    ]
    write_report(
        args.out,
        "bench_wor_iid",
        {"rows": rows, "load_before": load0, "load_after": load1},
        {
            "wor_iid against the optima": markdown_table(cols, table),
            "machine load": f"load average before {load0}, after {load1}",
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
