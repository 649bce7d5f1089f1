"""Benchmark of one tree verification round at V = 49 152: K-SEQ against the deployable select-then-BV rules.

    python experiments/bench/bench_tree_boost.py --out experiments/out/bench_tree_boost --seed 0

A round without a model: every node of a tree of k i.i.d. sequences of length gamma gets a seeded
target row (Dirichlet(0.05) over V tokens) and a draft row (0.6 of it plus 0.4 of an independent
Dirichlet row); sequences share their root. Timed, median of --repeats interleaved runs after
three warm-ups:

* torch (``otspec_gpu.verifiers.tree.sample``, the decoder's call; on CUDA when available): ``kseq``
  and ``kseq_bv`` on B copies of the tree (B in {1, 16});
* numpy (``otspec.verifiers.tree_deployable.sample``, one round on one tree, host CPU): ``kseq_bv``
  and ``nested`` (k = 2 only, its deployable case).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import markdown_table, write_report  # noqa: E402


def round_arrays(rng, V: int, k: int, g: int):
    """``(X [k, g], P [k, g + 1, V], Q [k, g, V])`` float64, one shared root."""
    P = rng.dirichlet(np.full(V, 0.05), size=(k, g + 1))
    Q = 0.6 * P[:, :g] + 0.4 * rng.dirichlet(np.full(V, 0.05), size=(k, g))
    P[1:, 0], Q[1:, 0] = P[0, 0], Q[0, 0]
    X = np.array([[int(rng.choice(V, p=Q[j, i])) for i in range(g)] for j in range(k)])
    return X, P, Q


def _median_ms(fn, reps: int, sync) -> float:
    for _ in range(3):
        fn()
    ts = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)) * 1e3


def main() -> None:
    import torch

    from otspec.verifiers import tree_deployable
    from otspec_gpu.verifiers import tree

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="experiments/out/bench_tree_boost")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--V", type=int, default=49_152)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="V = 2 000, 2 repeats (smoke test)")
    args = ap.parse_args()
    V, reps = (2_000, 2) if args.quick else (args.V, args.repeats)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    rng = np.random.default_rng(args.seed)
    rows = []
    for k in (2, 4):
        for g in (2, 3):
            X, P, Q = round_arrays(rng, V, k, g)
            for B in (1, 16):
                args_t = [torch.from_numpy(a)[None].expand(B, *a.shape).contiguous().to(dev) for a in (P, Q, X)]
                gen = torch.Generator(device=dev).manual_seed(args.seed)
                for rule in ("kseq", "kseq_bv"):
                    ms = _median_ms(lambda r=rule: tree.sample(*args_t, rule=r, generator=gen, validate=False), reps, sync)
                    rows.append(dict(engine=f"torch ({dev})", rule=rule, k=k, gamma=g, B=B, V=V, median_ms=ms))
                    print(rows[-1], flush=True)
            for rule in ("kseq_bv", "nested") if k == 2 else ("kseq_bv",):
                g_np = np.random.default_rng(args.seed)
                ms = _median_ms(lambda r=rule: tree_deployable.sample(X, P, Q, rule=r, rng=g_np), reps, lambda: None)
                rows.append(dict(engine="numpy (host)", rule=rule, k=k, gamma=g, B=1, V=V, median_ms=ms))
                print(rows[-1], flush=True)
    table = markdown_table(
        ["engine", "rule", "k", "gamma", "B", "V", "median ms per round"],
        [[r["engine"], r["rule"], r["k"], r["gamma"], r["B"], r["V"], f"{r['median_ms']:.2f}"] for r in rows],
    )
    device = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
    write_report(
        args.out,
        "bench_tree_boost",
        {"seed": args.seed, "quick": args.quick, "device": device, "rows": rows},
        {"one verification round": table},
    )


if __name__ == "__main__":
    main()
