"""Stated against measured power of otspec's losslessness check (the pytest plugin's test) on planted faults.

For each TV tolerance delta the check draws n(delta, alpha, beta, V) outputs
(:func:`otspec.testing.power.sample_size`) and must detect any output law at TV >= delta from p with
probability >= 1 - beta, with false alarm <= alpha. Seeded faulty verifiers are planted at a known
TV from p (computed exactly from their kernel), and the check is run many times on fresh seeds:

* ``residual_mix`` -- speculative sampling (k = 1) whose residual draw comes, with probability eps,
  from p instead of (p - q)+ (a residual built from the wrong distribution);
* ``raw_q`` -- speculative sampling whose accept ratio p/q' and residual (p - q')+ use a sharper
  q' = (1 - eps) q + eps e_m (m the mode of q) while the drafts come from q: "processed vs raw q";
* ``correct`` -- the same rule without a fault (TV 0): the measured false-alarm rate.

eps is solved so that the exact TV of the output law equals the planted TV. Faults are planted at
TV = delta (the guarantee applies) and TV = delta / 2 (below the tolerance: nothing is promised; it
shows how conservative the sample size is). The same faults given by their kernels
(:func:`otspec.testing.batched.batched_conditional`) are checked exactly: one run each, TV compared
with the planted value.

    python experiments/audit_power.py --seed 0 --out docs/_static/results   # ~5-10 min, one core
    python experiments/audit_power.py --quick                               # seconds, CI
"""

from __future__ import annotations

import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _output  # selects the Agg backend before pyplot is imported
import matplotlib.pyplot as plt
import numpy as np

import otspec
from otspec.testing import VerifierAssertionError
from otspec.testing.batched import batched_conditional, batched_sampler
from otspec.testing.power import assert_output_law, sample_size

NAME = "audit_power"
P = np.array([0.4, 0.3, 0.2, 0.1])
Q = np.array([0.1, 0.2, 0.3, 0.4])
FAULTS = ("residual_mix", "raw_q")


def _rule(p, q_ratio, x):
    """Accept probabilities and the residual of speculative sampling with the ratio's q."""
    acc = np.minimum(1.0, p[x] / q_ratio[x])
    r = np.maximum(p - q_ratio, 0.0)
    return acc, (r / r.sum() if r.sum() > 0 else p)


def _parts(fault: str, eps: float, q: np.ndarray):
    """(q used in the ratio, residual law) of a fault at strength eps."""
    V = q.size
    if fault == "raw_q":
        q_ratio = (1 - eps) * q + eps * np.eye(V)[int(np.argmax(q))]
        _, r = _rule(P, q_ratio, np.arange(V))
        return q_ratio, r
    _, r = _rule(P, q, np.arange(V))
    return q, (1 - eps) * r + eps * P if fault == "residual_mix" else r


def exact_output_law(fault: str, eps: float) -> np.ndarray:
    """Sum over drafts x ~ q of the fault's conditional law (exact)."""
    q_ratio, r = _parts(fault, eps, Q)
    x = np.arange(P.size)
    acc = np.minimum(1.0, P[x] / q_ratio[x])
    return Q * acc + float(np.dot(Q, 1 - acc)) * r


def planted_tv(fault: str, eps: float) -> float:
    return 0.5 * float(np.abs(exact_output_law(fault, eps) - P).sum())


def eps_for(fault: str, tv: float) -> float:
    """The strength at which the fault's exact TV equals ``tv`` (TV grows with eps; bisection)."""
    lo, hi = 0.0, 0.99  # raw_q's q' must stay positive where q is
    if planted_tv(fault, hi) < tv:
        raise ValueError(f"fault {fault} cannot reach TV {tv}")
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if planted_tv(fault, mid) < tv else (lo, mid)
    return 0.5 * (lo + hi)


def make_sampler(fault: str, eps: float):
    @batched_sampler(k=1, kinds="iid", name=f"{fault}@{eps:.3g}")
    def sample(p, q, drafts, rng):
        coin, res = rng.spawn(2)  # accept coins and residual draws on independent streams
        q_ratio, r = _parts(fault, eps, q)
        x = drafts[:, 0]
        acc = coin.random(x.size) < np.minimum(1.0, p[x] / q_ratio[x])
        return np.where(acc, x, res.choice(p.size, size=x.size, p=r))

    return sample


def make_kernel(fault: str, eps: float):
    @batched_conditional(k=1, kinds="iid", name=f"{fault}@{eps:.3g}")
    def pi(p, q, drafts):
        q_ratio, r = _parts(fault, eps, q)
        x = drafts[:, 0]
        acc = np.minimum(1.0, p[x] / q_ratio[x])
        out = (1 - acc)[:, None] * r[None, :]
        out[np.arange(x.size), x] += acc
        return out

    return pi


def wilson(hits: int, n: int, z: float = 1.959963984540054) -> list:
    if n == 0:
        return [0.0, 1.0]
    ph = hits / n
    den = 1 + z * z / n
    mid = (ph + z * z / (2 * n)) / den
    half = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / den
    return [max(0.0, mid - half), min(1.0, mid + half)]


def detection_rate(verifier, delta, alpha, beta, reps, seq) -> dict:
    hits = 0
    tvs = []
    for child in seq.spawn(reps):
        try:
            r = assert_output_law(
                verifier, P, otspec.iid(Q, 1), delta=delta, alpha=alpha, beta=beta, method="sampling", rng=np.random.default_rng(child)
            )
            tvs.append(r.tv)
        except VerifierAssertionError as exc:
            hits += 1
            tvs.append(exc.details["tv"])
    return {"reps": reps, "detected": hits, "rate": hits / reps, "rate_ci95": wilson(hits, reps), "mean_empirical_tv": float(np.mean(tvs))}


def run(args) -> dict:
    deltas = [1e-1, 1e-2] if args.quick else [1e-1, 3e-2, 1e-2, 3e-3, 1e-3]
    reps_for = {1e-1: 200, 3e-2: 100, 1e-2: 40, 3e-3: 12, 1e-3: 5} if not args.quick else {1e-1: 20, 1e-2: 4}
    alpha, beta = args.alpha, args.beta
    root = np.random.SeedSequence(args.seed)
    rows, exact_rows = [], []
    t0 = time.perf_counter()
    for delta in deltas:
        n = sample_size(delta, alpha=alpha, beta=beta, V=P.size)
        reps = reps_for[delta]
        cells = {}
        cases = [("correct", "correct", 0.0)] + [(f"{f}_{tag}", f, t) for f in FAULTS for tag, t in (("delta", delta), ("half", delta / 2))]
        for key, fault, tv in cases:
            kind = "residual_mix" if fault == "correct" else fault  # the correct rule is residual_mix at eps = 0
            eps = 0.0 if fault == "correct" else eps_for(fault, tv)
            seq = root.spawn(1)[0]
            cells[key] = {
                "fault": fault,
                "planted_tv": planted_tv(kind, eps),
                "eps": eps,
                **detection_rate(make_sampler(kind, eps), delta, alpha, beta, reps, seq),
            }
            if fault != "correct":
                k = make_kernel(fault, eps)
                try:
                    r = assert_output_law(k, P, otspec.iid(Q, 1), method="exact")
                    exact_rows.append({"fault": fault, "planted_tv": tv, "exact_tv": r.tv, "detected": False})
                except VerifierAssertionError as exc:
                    exact_rows.append({"fault": fault, "planted_tv": tv, "exact_tv": exc.details["tv"], "detected": True})
        flat = {key: f"{c['detected']}/{c['reps']}" for key, c in cells.items()}
        rows.append({"delta": delta, "n": n, "guaranteed_rate": 1 - beta, "false_alarm_bound": alpha, **flat, "cells": cells})
    return {
        "p": P.tolist(),
        "q": Q.tolist(),
        "law": "iid(q, 1)",
        "alpha": alpha,
        "beta": beta,
        "test": "reject when TV(empirical, p) >= sqrt((V-1)/n)/2 + sqrt(ln(1/alpha)/(2n)); n = ceil((sqrt(V-1) + sqrt(ln(1/alpha)/2) + sqrt(ln(1/beta)/2))^2 / delta^2)",
        "rows": rows,
        "exact": exact_rows,
        "seconds": time.perf_counter() - t0,
    }


def report(payload: dict, args) -> tuple[dict, list]:
    rows = payload["rows"]
    head = [
        "delta",
        "draws n",
        "stated",
        "residual_mix at delta",
        "raw_q at delta",
        "residual_mix at delta/2",
        "raw_q at delta/2",
        "false alarms",
    ]
    body = []
    for r in rows:
        c = r["cells"]
        d = r["delta"]

        def cell(key, c=c):
            x = c[key]
            return f"{x['detected']}/{x['reps']} [{x['rate_ci95'][0]:.2f}, {x['rate_ci95'][1]:.2f}]"

        fa = c["correct"]
        body.append(
            [
                f"{d:g}",
                r["n"],
                f">= {r['guaranteed_rate']:g}",
                cell("residual_mix_delta"),
                cell("raw_q_delta"),
                cell("residual_mix_half"),
                cell("raw_q_half"),
                f"{fa['detected']}/{fa['reps']} (bound {r['false_alarm_bound']:g})",
            ]
        )
    exact = _output.markdown_table(
        ["fault", "planted TV", "exact TV from the kernel", "difference", "detected"],
        [
            [
                e["fault"],
                f"{e['planted_tv']:.3g}",
                f"{e['exact_tv']:.12g}",
                f"{e['exact_tv'] - e['planted_tv']:.1e}",
                "yes" if e["detected"] else "no",
            ]
            for e in payload["exact"]
        ],
    )
    fig, ax = plt.subplots(figsize=(6.5, 4), layout="constrained")
    ds = [r["delta"] for r in rows]
    for f, marker in (("residual_mix", "o"), ("raw_q", "s")):
        for tag, ls in (("delta", "-"), ("half", "--")):
            y = [r["cells"][f"{f}_{tag}"]["rate"] for r in rows]
            ax.plot(ds, y, marker=marker, ls=ls, label=f"{f}, planted TV = {'delta' if tag == 'delta' else 'delta/2'}")
    ax.axhline(1 - payload["beta"], color="k", lw=0.8, ls=":", label="stated 1 - beta")
    ax.set_xscale("log")
    ax.set_xlabel("TV tolerance delta (sample size n(delta))")
    ax.set_ylabel("detection rate")
    ax.set_ylim(-0.02, 1.05)
    ax.legend(fontsize=7)
    _output.save_figure(fig, args.out, NAME)
    notes = [
        f"p = {payload['p']}, drafts iid(q, 1) with q = {payload['q']}; alpha = {payload['alpha']:g}, beta = {payload['beta']:g}.",
        "Each cell: detections / runs of the sampling check, with the Wilson 95% interval; every run draws fresh seeds.",
        "The guarantee (detection >= 1 - beta) applies at planted TV = delta; at delta/2 nothing is promised.",
        f"Run time {payload['seconds']:.1f} s.",
    ]
    return {"Detection rate of the sampling check": _output.markdown_table(head, body), "Exact check (kernel given)": exact}, notes


def arguments(ap) -> None:
    ap.add_argument("--alpha", type=float, default=0.05, help="false-alarm probability (default 0.05)")
    ap.add_argument("--beta", type=float, default=0.05, help="miss probability at TV delta (default 0.05)")


def main(argv: list[str] | None = None) -> dict:
    return _output.experiment(NAME, __doc__, argv, run=run, report=report, arguments=arguments)


if __name__ == "__main__":
    main()
