"""Benchmark of the tree optimum T*: the node LP (cutting planes) against the trie LP, and the size
the node LP reaches.

    python experiments/bench/bench_tree_optimum.py --out experiments/out/bench_tree_optimum --seed 0

For each (V, gamma, k) cell a seeded Dirichlet target and an independent-noise close draft
(noise 0.5, temperature 1.3) are built; ``otspec.tree_optimum(method="node")`` is timed (one run:
the first call also fills the models' caches, which is part of the cost) with its certified gap,
cutting-plane rounds and blocks; where the trie LP is enumerable (V^(k gamma) <= --trie-max) it is
timed too (the baseline) and the two values compared. Cells run in order of size; a cell whose node
LP exceeds --budget seconds is stopped (SIGALRM, checked between cutting-plane rounds), recorded as
timed out, and ends its (gamma, k) row: the frontier is the last cell that finished.

``--separation`` also times one exact antichain separation (``tree_node.antichain_violation``, the
step each cutting-plane round runs) on the prefix table of each SEPARATION cell, at the node
variables A(u) = 0.9 M_b(u): median of interleaved repeats.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import markdown_table, write_report  # noqa: E402

import otspec  # noqa: E402
from otspec import models  # noqa: E402

GRID = {(2, 2): (4, 8, 16, 24, 32), (3, 2): (4, 6, 8, 10, 12, 16, 20), (3, 4): (4, 6, 8, 10, 12, 16, 20), (4, 2): (3, 4, 5, 6)}


#: (V, gamma) cells of the separation timing.
SEPARATION = ((8, 3), (12, 3), (20, 3), (32, 2), (6, 4))


def separation_rows(seed: int, repeats: int) -> list[dict]:
    """Median seconds of one exact antichain separation per SEPARATION cell (interleaved repeats)."""
    import numpy as np

    from otspec import prefixes
    from otspec.bounds import tree_node

    cells = []
    for V, g in SEPARATION:
        p, q = pair(V, seed)
        t = prefixes.enumerate_prefixes(p, q, g)
        cells.append((V, g, t, [np.ones(1)] + [0.9 * t.p_joint[d] for d in range(1, g + 1)]))
    times: dict = {(V, g): [] for V, g, _, _ in cells}
    cpu: dict = {(V, g): [] for V, g, _, _ in cells}
    for _ in range(repeats):
        for V, g, t, A in cells:
            t0, c0 = time.perf_counter(), time.process_time()
            tree_node.antichain_violation(t, A, 3, top=40)
            times[(V, g)].append(time.perf_counter() - t0)
            cpu[(V, g)].append(time.process_time() - c0)
    return [
        {
            "V": V,
            "gamma": g,
            "prefixes": sum(V**i for i in range(g + 1)),
            "separation_s": float(np.median(times[(V, g)])),
            "separation_cpu_s": float(np.median(cpu[(V, g)])),
        }
        for V, g in times
    ]


def _sep_table(sep: list[dict]) -> str:
    return markdown_table(
        ["V", "gamma", "prefixes", "wall (ms)", "CPU (ms)"],
        [[r["V"], r["gamma"], r["prefixes"], f"{1e3 * r['separation_s']:.1f}", f"{1e3 * r['separation_cpu_s']:.1f}"] for r in sep],
    )


def pair(V: int, seed: int):
    p = models.dirichlet(V, concentration=1.0, seed=seed)
    return p, models.close_draft(p, noise=0.5, temperature=1.3, seed=seed + 1)


class _Budget(Exception):
    pass


def _alarm(signum, frame):
    raise _Budget


def cell(V: int, gamma: int, k: int, seed: int, trie_max: int, budget: float) -> dict:
    p, q = pair(V, seed)
    t0, c0 = time.perf_counter(), time.process_time()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(budget))
    try:
        r = otspec.tree_optimum(p, q, k, gamma, method="node")
    except _Budget:
        return {"V": V, "gamma": gamma, "k": k, "prefixes": sum(V**i for i in range(gamma + 1)), "node_s": None, "timed_out": True}
    finally:
        signal.alarm(0)
    t_node, c_node = time.perf_counter() - t0, time.process_time() - c0
    row = {
        "V": V,
        "gamma": gamma,
        "k": k,
        "prefixes": sum(V**i for i in range(gamma + 1)),
        "node_s": t_node,
        "node_cpu_s": c_node,
        "value": r.value,
        "gap": r.gap,
        "status": r.status,
        "rounds": int(r.checks["rounds"]),
        "blocks": int(r.checks["cuts"]),
        "trie_s": None,
        "node_minus_trie": None,
        "timed_out": False,
    }
    if V ** (k * gamma) <= trie_max:
        t0, c0 = time.perf_counter(), time.process_time()
        t = otspec.tree_optimum(p, q, k, gamma, method="trie")
        row["trie_s"] = time.perf_counter() - t0
        row["trie_cpu_s"] = time.process_time() - c0
        row["node_minus_trie"] = r.value - t.value
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="experiments/out/bench_tree_optimum")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=float, default=60.0, help="seconds per cell before a row stops growing")
    ap.add_argument("--trie-max", type=int, default=5_000, help="largest V^(k gamma) the trie LP baseline is run at")
    ap.add_argument("--quick", action="store_true", help="the first two cells of each row (smoke test)")
    ap.add_argument("--separation", action="store_true", help="also time one exact separation per SEPARATION cell")
    ap.add_argument("--repeats", type=int, default=7, help="--separation: interleaved repeats (default 7)")
    ap.add_argument("--separation-only", action="store_true", help="only the separation timing (bench_tree_separation.json)")
    args = ap.parse_args()
    sep = separation_rows(args.seed, 2 if args.quick else args.repeats) if (args.separation or args.separation_only) else []
    if args.separation_only:
        write_report(args.out, "bench_tree_separation", {"seed": args.seed, "separation": sep}, {"one exact separation": _sep_table(sep)})
        return
    rows = []
    for (gamma, k), Vs in GRID.items():
        for V in Vs[:2] if args.quick else Vs:
            row = cell(V, gamma, k, args.seed, args.trie_max, args.budget)
            rows.append(row)
            print(row, flush=True)
            if row["timed_out"]:
                break

    def f(x, spec=".3g"):
        return "-" if x is None else format(x, spec)

    table = markdown_table(
        [
            "V",
            "gamma",
            "k",
            "prefixes",
            "node LP (s)",
            "node LP CPU (s)",
            "rounds",
            "blocks",
            "gap",
            "status",
            "trie LP (s)",
            "node - trie",
        ],
        [
            [r["V"], r["gamma"], r["k"], r["prefixes"], f(r["node_s"]) if not r["timed_out"] else f"> {args.budget:g} (wall)"]
            + (
                [
                    f(r["node_cpu_s"]),
                    r["rounds"],
                    r["blocks"],
                    f(r["gap"], ".1e"),
                    r["status"],
                    f(r["trie_s"]),
                    f(r["node_minus_trie"], ".1e"),
                ]
                if not r["timed_out"]
                else ["-"] * 7
            )
            for r in rows
        ],
    )
    tables = {"tree optimum": table}
    if sep:
        tables["one exact separation"] = _sep_table(sep)
    payload = {"seed": args.seed, "budget_s": args.budget, "rows": rows}
    if sep:
        payload["separation"] = sep
    write_report(args.out, "bench_tree_optimum", payload, tables)


if __name__ == "__main__":
    main()
