"""Benchmark the single-step verifiers (public API only).

1. Closed-form acceptance time of each verifier at V in {5000, 49152, 262144}, k in {2, 4, 8}
   (median of repeated calls, input validation included).
2. Sampling throughput (draws/s) of each verifier at V = 49152 with ``sample_batch`` (vectorised)
   and with ``sample`` (one call per draw).

Writes ``<out>/bench_verifiers.json``, ``<out>/bench_verifiers.md`` and ``<out>/bench_verifiers.rst``
(the tables for docs/verifiers.rst), each with the exact command and ``git rev-parse HEAD``.

    python experiments/bench/bench_verifiers.py --out experiments/bench/out --seed 0
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import command_line, git_revision  # noqa: E402

import otspec  # noqa: E402
from otspec.verifiers import ALL  # noqa: E402

VS = (5000, 49152, 262144)
KS = (2, 4, 8)
SAMPLE_V = 49152
SAMPLE_K = 4


def _pair(rng, V):
    """An LLM-like target and a correlated draft: softmax of Gaussian logits (scale 3)."""
    z = rng.normal(scale=3.0, size=V)
    zq = z + rng.normal(scale=1.5, size=V)
    p = np.exp(z - z.max())
    q = np.exp(zq - zq.max())
    return p / p.sum(), q / q.sum()


def _law_for(v, q, k):
    """The law a verifier is benchmarked on at draft count k (None: not applicable)."""
    if v.name in ("token", "approximate"):
        return otspec.iid(q, 1) if k == KS[0] else None  # k = 1 verifiers: one row per V
    if v.name in ("greedy_optimal",):
        return otspec.greedy(q, k)
    if v.name == "spechub":
        return otspec.greedy(q, 2) if k == 2 else None
    if v.name == "rrs_wor":
        return otspec.without_replacement(q, k)
    return otspec.iid(q, k)


def _time(fn, min_total=0.3, max_reps=25):
    """(min wall, median wall, min CPU) seconds over repeated calls. The minimum is the usual
    microbenchmark statistic (timeit); CPU time is immune to other processes on a shared machine."""
    wall, cpu = [], []
    t_start = time.perf_counter()
    while len(wall) < 5 or (time.perf_counter() - t_start < min_total and len(wall) < max_reps):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return float(np.min(wall)), float(np.median(wall)), float(np.min(cpu))


def bench_acceptance(rng):
    rows = []
    for V in VS:
        p, q = _pair(rng, V)
        for k in KS:
            for v in ALL:
                law = _law_for(v, q, k)
                if law is None:
                    continue
                try:
                    est = v.acceptance(p, law, method="closed_form")
                except otspec._validation.OtspecInputError as exc:
                    rows.append({"verifier": v.name, "V": V, "k": law.k, "law": law.kind, "ms": None, "note": type(exc).__name__})
                    continue
                wmin, wmed, cmin = _time(lambda: v.acceptance(p, law, method="closed_form"))
                rows.append(
                    {
                        "verifier": v.name,
                        "V": V,
                        "k": law.k,
                        "law": law.kind,
                        "ms": 1e3 * wmin,
                        "ms_median": 1e3 * wmed,
                        "cpu_ms": 1e3 * cmin,
                        "acceptance": est.value,
                    }
                )
            print(f"acceptance V={V} k={k} done", file=sys.stderr)
    return rows


def bench_sampling(rng, n_batch=2000, n_single=200):
    rows = []
    p, q = _pair(rng, SAMPLE_V)
    for v in ALL:
        law = _law_for(v, q, SAMPLE_K) or _law_for(v, q, KS[0]) or otspec.greedy(q, 2)
        drafts = law.sample(rng, n_batch)
        gen = np.random.default_rng(1)
        try:
            t0 = time.perf_counter()
            v.sample_batch(p, law, drafts, rng=gen)
            tb = time.perf_counter() - t0
            t0 = time.perf_counter()
            for d in drafts[:n_single]:
                v.sample(p, law, d, rng=gen)
            ts = time.perf_counter() - t0
            rows.append(
                {
                    "verifier": v.name,
                    "V": SAMPLE_V,
                    "k": law.k,
                    "law": law.kind,
                    "batch_draws_per_s": n_batch / tb,
                    "single_draws_per_s": n_single / ts,
                }
            )
        except otspec._validation.OtspecInputError as exc:
            rows.append(
                {
                    "verifier": v.name,
                    "V": SAMPLE_V,
                    "k": law.k,
                    "law": law.kind,
                    "batch_draws_per_s": None,
                    "single_draws_per_s": None,
                    "note": type(exc).__name__,
                }
            )
        print(f"sampling {v.name} done", file=sys.stderr)
    return rows


def _row_keys(acc):
    """Distinct (verifier, law, k) rows of the acceptance results, in first-seen order."""
    return list(dict.fromkeys((r["verifier"], r["law"], r["k"]) for r in acc))


def _fmt(x, spec):
    return "n/a" if x is None else format(x, spec)


def markdown(result):
    lines = [
        f"Command: `{result['command']}`  ",
        f"Revision: `{result['git_rev']}`; machine: {result['machine']}",
        "",
        "Closed-form acceptance time (ms; minimum wall time over >= 5 calls, input validation included;",
        "`n/a`: no closed form for that law -- kernel or Monte Carlo instead):",
        "",
        "| verifier | law | k | " + " | ".join(f"V={V}" for V in VS) + " |",
        "|---|---|---|" + "---|" * len(VS),
    ]
    acc = result["acceptance"]
    keys = _row_keys(acc)
    for key in keys:
        cells = []
        for V in VS:
            hit = [r for r in acc if (r["verifier"], r["law"], r["k"]) == key and r["V"] == V]
            cells.append(_fmt(hit[0]["ms"], ".2f") if hit and hit[0]["ms"] is not None else ("n/a" if hit else ""))
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Sampling throughput at V = {SAMPLE_V} (draws/s):",
        "",
        "| verifier | law | k | sample_batch | sample (one call per draw) |",
        "|---|---|---|---|---|",
    ]
    for r in result["sampling"]:
        note = f" ({r['note']})" if r.get("note") else ""
        lines.append(
            f"| {r['verifier']} | {r['law']} | {r['k']} | {_fmt(r['batch_draws_per_s'], ',.0f')}{note} | {_fmt(r['single_draws_per_s'], ',.0f')} |"
        )
    return "\n".join(lines) + "\n"


def rst(result):
    """The same two tables as reStructuredText grid-free ``list-table`` directives (for the docs)."""
    acc = result["acceptance"]
    keys = _row_keys(acc)
    out = [
        f"Command: ``{result['command']}``; revision ``{result['git_rev']}``; {result['machine']}.",
        "",
        ".. list-table:: Closed-form acceptance time (ms, minimum wall time, validation included)",
        "   :header-rows: 1",
        "",
        "   * - verifier",
        "     - law",
        "     - k",
    ] + [f"     - V = {V}" for V in VS]
    for key in keys:
        out += [f"   * - {key[0]}", f"     - {key[1]}", f"     - {key[2]}"]
        for V in VS:
            hit = [r for r in acc if (r["verifier"], r["law"], r["k"]) == key and r["V"] == V]
            out.append(f"     - {_fmt(hit[0]['ms'], '.2f') if hit and hit[0]['ms'] is not None else 'n/a'}")
    out += [
        "",
        f".. list-table:: Sampling throughput at V = {SAMPLE_V} (draws/s)",
        "   :header-rows: 1",
        "",
        "   * - verifier",
        "     - law",
        "     - k",
        "     - sample_batch",
        "     - sample (one call per draw)",
    ]
    for r in result["sampling"]:
        note = f" ({r['note']})" if r.get("note") else ""
        out += [
            f"   * - {r['verifier']}",
            f"     - {r['law']}",
            f"     - {r['k']}",
            f"     - {_fmt(r['batch_draws_per_s'], ',.0f')}{note}",
            f"     - {_fmt(r['single_draws_per_s'], ',.0f')}",
        ]
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="experiments/bench/out")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    result = {
        "command": command_line(),
        "git_rev": git_revision(),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, numpy {np.__version__}",
        "seed": args.seed,
        "acceptance": bench_acceptance(rng),
        "sampling": bench_sampling(rng),
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_verifiers.json"), "w") as fh:
        json.dump(result, fh, indent=2)
    md = markdown(result)
    with open(os.path.join(args.out, "bench_verifiers.md"), "w") as fh:
        fh.write(md)
    with open(os.path.join(args.out, "bench_verifiers.rst"), "w") as fh:
        fh.write(rst(result))
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
