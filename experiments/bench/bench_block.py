"""Benchmark of the block / tree layer: exact E[tau], the block optimum and its LP as V and gamma
grow, the per-path estimator E[tau | drafted path] at LLM scale, and the small-tree comparison.

    python experiments/bench/bench_block.py --out experiments/out/bench_block --seed 0

Baselines named in the output (same run, same machine):

* exact E[tau] of block verification: the vectorised W recursion (``closed_form``) against the
  straightforward per-path loop of Algorithm 2 (``kernel``: one (gamma+1, V) law per drafted path);
* the per-path estimator at gamma = 8, V = 262 144: the vectorised log-space implementation
  (``validate=True`` and the hot-path ``validate=False``) against a straightforward per-position
  loop (products of ratios, one fresh temporary per reduction).

The tree table compares, for k = 2 drafted sequences: the tree LP optimum (i.i.d. drafts, and
first tokens without replacement), SpecTr over sequences, recursive rejection over the tree (with
and without replacement), the best single chain (block verification = block optimum) and token
verification.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import markdown_table, median_time, write_report  # noqa: E402

import otspec  # noqa: E402
from otspec import models, prefixes  # noqa: E402
from otspec.bounds.sizing import lp_size  # noqa: E402
from otspec.bounds.tree import tree_optimum  # noqa: E402
from otspec.verifiers import block as bv  # noqa: E402
from otspec.verifiers import token_chain as tc  # noqa: E402
from otspec.verifiers import tree  # noqa: E402

GRID = [(2, g) for g in (2, 4, 6, 8)] + [(4, g) for g in (2, 4, 6)] + [(8, g) for g in (2, 3, 4)] + [(16, g) for g in (2, 3)] + [(64, 2)]
LP_MAX_NONZEROS = 3_000_000


def pair(V: int, seed: int, concentration: float = 1.0, noise: float = 0.3):
    p = models.dirichlet(V, concentration=concentration, seed=seed)
    return p, models.close_draft(p, noise=noise, seed=seed)


def exact_scaling(seed: int, quick: bool) -> list[dict]:
    rows = []
    for V, g in GRID[:6] if quick else GRID:
        p, q = pair(V, seed)
        t_enum, _ = median_time(lambda: prefixes.enumerate_prefixes(p, q, g), 1)  # first call fills the model caches
        t_enum_cached, _ = median_time(lambda: prefixes.enumerate_prefixes(p, q, g), 3)
        t_tok, e_tok = median_time(lambda: tc.expected_accepted(p, q, g), 3)
        t_cf, e_blk = median_time(lambda: bv.expected_accepted(p, q, g), 3)
        t_opt, opt = median_time(lambda: otspec.block_optimum(p, q, g), 3)
        n_paths = V**g
        t_kernel, e_kernel = median_time(lambda: bv.expected_accepted(p, q, g, method="kernel"), 1) if n_paths <= 70_000 else (None, None)
        _, _, nnz = lp_size(V, g, [V**g] * (g + 1), V**g)
        if nnz <= LP_MAX_NONZEROS:
            t_lp, lp = median_time(lambda: otspec.block_optimum(p, q, g, method="lp"), 1)
            lp_val, lp_status, lp_gap = lp.value, lp.status, lp.gap
        else:
            t_lp = lp_val = lp_status = lp_gap = None
        row = {
            "V": V,
            "gamma": g,
            "prefixes": prefixes.enumeration_size(V, g),
            "lp_nonzeros": nnz,
            "enumerate_first_s": t_enum,
            "enumerate_cached_s": t_enum_cached,
            "token_closed_form_s": t_tok,
            "block_closed_form_s": t_cf,
            "block_kernel_loop_s": t_kernel,
            "block_optimum_s": t_opt,
            "block_lp_s": t_lp,
            "E_token": e_tok,
            "E_block": e_blk,
            "E_block_kernel": e_kernel,
            "optimum": opt.value,
            "naive": opt.joint_coupling_bound,
            "lp_value": lp_val,
            "lp_status": lp_status,
            "lp_gap": lp_gap,
            "lp_minus_closed_form": None if lp_val is None else lp_val - opt.value,
        }
        rows.append(row)
        print(
            {k: row[k] for k in ("V", "gamma", "block_closed_form_s", "block_kernel_loop_s", "block_lp_s", "lp_minus_closed_form")},
            flush=True,
        )
    return rows


def naive_per_path(P: np.ndarray, Q: np.ndarray, x: np.ndarray) -> float:
    """Baseline: Algorithm 2's per-path expectation written the straightforward way."""
    g = x.shape[0]
    pi, h = 1.0, []
    for i in range(1, g + 1):
        pi = min(pi * P[i - 1, x[i - 1]] / Q[i - 1, x[i - 1]], 1.0)
        if i < g:
            z = float(np.maximum(pi * P[i] - Q[i], 0.0).sum())
            h.append(z / (z + 1.0 - pi) if z + 1.0 - pi > 0 else 1.0)
        else:
            h.append(pi)
    return float(sum(1.0 - np.prod([1.0 - hj for hj in h[i:]]) for i in range(g)))


def per_path(seed: int, quick: bool) -> list[dict]:
    rng = np.random.default_rng(seed)
    g, V = 8, 262_144
    rows = []
    for a, noise in [(0.05, 0.3), (0.5, 0.1)]:
        P = rng.dirichlet(np.full(V, a), size=g + 1)
        Q = (1 - noise) * P[:g] + noise * rng.dirichlet(np.full(V, a), size=g)
        x = np.array([rng.choice(V, p=Q[i]) for i in range(g)])
        reps = 11 if quick else 51
        t_fast, e_fast = median_time(lambda: bv.expected_accepted_given_path(P, Q, x, validate=False), reps)
        t_val, e_val = median_time(lambda: bv.expected_accepted_given_path(P, Q, x), reps)
        t_naive, e_naive = median_time(lambda: naive_per_path(P, Q, x), reps)
        t_tok, e_tok = median_time(lambda: tc.expected_accepted_given_path(P, Q, x, validate=False), reps)
        rows.append(
            {
                "gamma": g,
                "V": V,
                "dirichlet": a,
                "noise": noise,
                "block_vectorised_ms": 1e3 * t_fast,
                "block_vectorised_validated_ms": 1e3 * t_val,
                "baseline_loop_ms": 1e3 * t_naive,
                "token_ms": 1e3 * t_tok,
                "E_block_given_path": e_fast,
                "E_baseline": e_naive,
                "abs_diff": abs(e_fast - e_naive),
                "E_token_given_path": e_tok,
            }
        )
        print(rows[-1], flush=True)
    return rows


def tree_table(seed: int, quick: bool) -> list[dict]:
    cases = [(2, 2, 1.0), (2, 3, 1.0), (3, 2, 1.0), (3, 3, 1.0), (3, 3, 0.3), (4, 2, 1.0), (4, 3, 1.0)]
    if quick:
        cases = cases[:3]
    rows = []
    k = 2
    for V, g, a in cases:
        for s in range(seed, seed + (1 if quick else 3)):
            p, q = pair(V, s, concentration=a, noise=0.5)
            t0 = time.perf_counter()
            lp_iid = tree_optimum(p, q, k, g)
            lp_wor = tree_optimum(p, q, k, g, replacement=False)
            t_lp = time.perf_counter() - t0
            t0 = time.perf_counter()
            vals = {v: tree.expected_accepted(p, q, k, g, verifier=v) for v in tree.VERIFIERS}
            t_ver = time.perf_counter() - t0
            row = {
                "V": V,
                "gamma": g,
                "k": k,
                "concentration": a,
                "seed": s,
                "tree_lp_iid": lp_iid.value,
                "tree_lp_iid_status": lp_iid.status,
                "tree_lp_wor": lp_wor.value,
                "tree_lp_wor_status": lp_wor.status,
                "kseq_sequence": vals["kseq"],
                "rrs_tree": vals["rrs"],
                "rrs_tree_wor": vals["rrs_wor"],
                "block_single_chain": bv.expected_accepted(p, q, g),
                "token_single_chain": tc.expected_accepted(p, q, g),
                "lp_seconds": t_lp,
                "verifiers_seconds": t_ver,
            }
            rows.append(row)
            print({kk: (round(vv, 4) if isinstance(vv, float) else vv) for kk, vv in row.items()}, flush=True)
    return rows


# long-function: a linear script: run, write, report in order (experiments/README.md); splitting only moves lines
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="experiments/out/bench_block")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a small subset (smoke test)")
    args = ap.parse_args()

    scaling = exact_scaling(args.seed, args.quick)
    paths = per_path(args.seed, args.quick)
    trees = tree_table(args.seed, args.quick)

    def fmt(x, spec=".3g"):
        return "-" if x is None else format(x, spec)

    t1 = markdown_table(
        [
            "V",
            "gamma",
            "prefixes",
            "token closed form (s)",
            "block closed form (s)",
            "baseline: per-path Alg. 2 loop (s)",
            "block_optimum (s)",
            "block LP (s)",
            "LP - closed form",
        ],
        [
            [
                r["V"],
                r["gamma"],
                r["prefixes"],
                fmt(r["token_closed_form_s"]),
                fmt(r["block_closed_form_s"]),
                fmt(r["block_kernel_loop_s"]),
                fmt(r["block_optimum_s"]),
                fmt(r["block_lp_s"]),
                fmt(r["lp_minus_closed_form"], ".1e"),
            ]
            for r in scaling
        ],
    )
    t2 = markdown_table(
        [
            "gamma",
            "V",
            "Dirichlet a",
            "noise",
            "vectorised (ms)",
            "vectorised + validation (ms)",
            "baseline loop (ms)",
            "token (ms)",
            "|vectorised - baseline|",
        ],
        [
            [
                r["gamma"],
                r["V"],
                r["dirichlet"],
                r["noise"],
                f"{r['block_vectorised_ms']:.2f}",
                f"{r['block_vectorised_validated_ms']:.2f}",
                f"{r['baseline_loop_ms']:.2f}",
                f"{r['token_ms']:.3f}",
                f"{r['abs_diff']:.1e}",
            ]
            for r in paths
        ],
    )
    t3 = markdown_table(
        [
            "V",
            "gamma",
            "a",
            "seed",
            "tree LP (iid)",
            "SpecTr seq.",
            "RRS tree",
            "tree LP (w/o repl.)",
            "RRS tree w/o repl.",
            "best chain (block)",
            "token",
        ],
        [
            [
                r["V"],
                r["gamma"],
                r["concentration"],
                r["seed"],
                f"{r['tree_lp_iid']:.4f}",
                f"{r['kseq_sequence']:.4f}",
                f"{r['rrs_tree']:.4f}",
                f"{r['tree_lp_wor']:.4f}",
                f"{r['rrs_tree_wor']:.4f}",
                f"{r['block_single_chain']:.4f}",
                f"{r['token_single_chain']:.4f}",
            ]
            for r in trees
        ],
    )
    write_report(
        args.out,
        "bench_block",
        {"seed": args.seed, "exact_scaling": scaling, "per_path": paths, "trees": trees},
        {
            "Exact E[tau] and the block optimum (seconds, median; models cached after a first enumeration)": t1,
            "Per-path E[tau | drafted path], gamma = 8, V = 262 144 (milliseconds, median)": t2,
            "Small trees, k = 2 drafted sequences: expected accepted tokens E[tau]": t3,
        },
    )


if __name__ == "__main__":
    main()
