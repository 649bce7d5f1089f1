"""Benchmark the torch twin of ``optimal_wor``'s law oracle against the numba oracle, same machine.

For V in {1 000, 49 152} (zipf pairs from ``otspec.synthetic``, k = 4, A and b from the optimal
selection law: A the complement of the optimal cut, b = r*/q, the fit's starting point), steps
h = 0.5 (the fit's first phase) and 0.25 (the law of the accept step): wall time of one law
evaluation with the numba kernel (all CPU threads) and with torch on the GPU (after one warm-up
call each, median of ``--repeats``), the node count, and max |r_torch - r_numba| (the two evaluate the same
sums in different orders).

    python experiments/bench/bench_optimal_wor_torch.py --out experiments/bench/out
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import markdown_table, median_time, write_report

from otspec.synthetic import synthetic_pair
from otspec.verifiers.step._luce_law import luce_law_quadrature
from otspec.verifiers.step._wor_selection import wor_selection


def main(argv=None) -> int:
    import torch

    from otspec_gpu.verifiers.step._luce_law import luce_law_quadrature_torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="experiments/bench/out")
    ap.add_argument("--vocab", default="1000,49152")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    for V in [int(x) for x in args.vocab.split(",")]:
        p, q = synthetic_pair(V, family="zipf", seed=0)
        sel = wor_selection(p, q, 4)
        b = np.where(q > 0, sel.r / np.where(q > 0, q, 1.0), 0.0)
        for h in (0.5, 0.25):
            luce_law_quadrature(q, b, sel.in_A, 4, h=h)
            t_cpu, a = median_time(lambda h=h: luce_law_quadrature(q, b, sel.in_A, 4, h=h), args.repeats)
            luce_law_quadrature_torch(q, b, sel.in_A, 4, h=h, device=dev)
            if dev == "cuda":
                torch.cuda.synchronize()
            t_gpu, t = median_time(lambda h=h: luce_law_quadrature_torch(q, b, sel.in_A, 4, h=h, device=dev), args.repeats)
            diff = float(np.abs(a.r - t.r).max())
            rows.append(
                {"V": V, "h": h, "nodes": a.nodes, "numba_s": t_cpu, "torch_s": t_gpu, "max_abs_diff": diff, "error_estimate": a.error}
            )
            print(rows[-1], flush=True)
    name = torch.cuda.get_device_name(0) if dev == "cuda" else "cpu"
    table = markdown_table(
        ["V", "h", "nodes", "numba (CPU) s", f"torch ({name}) s", "speed-up", "max |diff|", "error estimate"],
        [
            [
                r["V"],
                r["h"],
                r["nodes"],
                f"{r['numba_s']:.3f}",
                f"{r['torch_s']:.3f}",
                f"{r['numba_s'] / r['torch_s']:.1f}x",
                f"{r['max_abs_diff']:.1e}",
                f"{r['error_estimate']:.1e}",
            ]
            for r in rows
        ],
    )
    write_report(
        args.out,
        "bench_optimal_wor_torch",
        {"rows": rows, "device": name, "cpu_threads": os.cpu_count()},
        {"law oracle: numba vs torch": table},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
