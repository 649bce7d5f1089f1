"""Coverage of otspec.stats' cluster bootstrap interval against the number of clusters (simulation).

A 95% interval from :func:`otspec.stats.clustered_mean` (scipy's BCa bootstrap over clusters, 2000
resamples, the library defaults) is built on many synthetic clustered data sets whose true mean is
known, and the share of intervals holding it is counted, for 10-160 clusters (documents, prompts),
equal and unequal cluster sizes, and two data models:

* ``gaussian`` -- y = 0.6 + cluster effect (sd 0.1) + position noise (sd 0.2) (as ``tests/test_stats.py``);
* ``acceptance`` -- each cluster has an acceptance rate drawn from Beta(7, 3) (mean 0.7, sd 0.14)
  and each position accepts (1) or not (0) with that rate: per-position acceptances of a corpus.

Equal clusters hold 20 positions each; unequal ones round(exp(N(log 20, 1))) (at least 1): a
spread of sizes like documents of a corpus (the largest cluster ~10x the median). Sizes are drawn
independently of the values, so the ratio of totals estimates the true mean (0.6 or 0.7). Each
coverage comes with its Wilson 95% interval (N data sets per cell).

    python experiments/stats_coverage.py --seed 0 --out docs/_static/results   # ~3-5 min, one core
    python experiments/stats_coverage.py --quick                               # seconds, CI
"""

from __future__ import annotations

import math
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _output  # selects the Agg backend before pyplot is imported
import matplotlib.pyplot as plt
import numpy as np

from otspec.stats import FewClustersWarning, clustered_mean

NAME = "stats_coverage"
CONFIDENCE = 0.95
MODELS = {"gaussian": 0.6, "acceptance": 0.7}  # data model -> true mean
SIZES = ("equal", "unequal")


def make_data(rng: np.random.Generator, model: str, sizes: str, n_clusters: int) -> tuple[np.ndarray, np.ndarray]:
    """One synthetic data set: per-position values and their cluster labels."""
    if sizes == "equal":
        n = np.full(n_clusters, 20)
    else:
        n = np.maximum(1, np.rint(np.exp(rng.normal(math.log(20.0), 1.0, n_clusters)))).astype(np.int64)
    g = np.repeat(np.arange(n_clusters), n)
    if model == "gaussian":
        y = 0.6 + rng.normal(0.0, 0.1, n_clusters)[g] + rng.normal(0.0, 0.2, g.size)
    else:
        rate = rng.beta(7.0, 3.0, n_clusters)
        y = (rng.random(g.size) < rate[g]).astype(np.float64)
    return y, g


def wilson(hits: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval (95%) for a binomial proportion."""
    ph = hits / n
    denom = 1 + z * z / n
    centre = (ph + z * z / (2 * n)) / denom
    half = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def coverage_cell(
    rng: np.random.Generator, boot: np.random.Generator, model: str, sizes: str, n_clusters: int, reps: int, n_resamples: int
) -> dict:
    """Coverage of the clustered_mean interval over ``reps`` data sets of one cell."""
    truth = MODELS[model]
    hits, widths = 0, []
    for _ in range(reps):
        y, g = make_data(rng, model, sizes, n_clusters)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FewClustersWarning)  # the point of the experiment
            est = clustered_mean(y, g, confidence=CONFIDENCE, n_resamples=n_resamples, seed=boot)
        hits += bool(est.low <= truth <= est.high)
        widths.append(est.high - est.low)
    lo, hi = wilson(hits, reps)
    return {
        "model": model,
        "sizes": sizes,
        "clusters": n_clusters,
        "reps": reps,
        "hits": hits,
        "coverage": hits / reps,
        "coverage_ci95": [lo, hi],
        "mean_width": float(np.mean(widths)),
    }


def main(argv: list[str] | None = None) -> dict:
    ap = _output.parser(NAME, __doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=300, help="data sets per cell (default 300)")
    ap.add_argument("--clusters", default="10,20,40,80,160", help="numbers of clusters (default 10,20,40,80,160)")
    args = _output.parse(ap, argv)
    clusters = [10, 40] if args.quick else [int(c) for c in args.clusters.split(",")]
    reps = 20 if args.quick else args.reps
    n_resamples = 200 if args.quick else 2000
    t0 = time.perf_counter()
    # one stream for the data, one for every bootstrap's resampling: independent, never re-seeded
    data_rng, boot_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(args.seed).spawn(2))
    cells = [coverage_cell(data_rng, boot_rng, model, sizes, C, reps, n_resamples) for model in MODELS for sizes in SIZES for C in clusters]
    elapsed = time.perf_counter() - t0

    fig, ax = plt.subplots(figsize=(7, 4.2), layout="constrained")
    for model in MODELS:
        for sizes in SIZES:
            rows = [c for c in cells if c["model"] == model and c["sizes"] == sizes]
            x = [c["clusters"] for c in rows]
            y = [c["coverage"] for c in rows]
            err = np.array([[c["coverage"] - c["coverage_ci95"][0] for c in rows], [c["coverage_ci95"][1] - c["coverage"] for c in rows]])
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=f"{model}, {sizes} sizes")
    ax.axhline(CONFIDENCE, color="k", lw=0.8, ls="--", label="nominal 95%")
    ax.set_xscale("log", base=2)
    ax.set_xticks(clusters, [str(c) for c in clusters])
    ax.set_xlabel("number of clusters")
    ax.set_ylabel("coverage of the 95% interval")
    ax.set_title(f"clustered_mean (BCa, {n_resamples} resamples), {reps} data sets per point")
    ax.legend(fontsize=8)
    png = _output.save_figure(fig, args.out, NAME)

    header = ["clusters"] + [f"{m}, {s}" for m in MODELS for s in SIZES]
    table = _output.markdown_table(
        header,
        [
            [C]
            + [
                f"{c['coverage']:.1%} [{c['coverage_ci95'][0]:.1%}, {c['coverage_ci95'][1]:.1%}]"
                for m in MODELS
                for s in SIZES
                for c in cells
                if c["model"] == m and c["sizes"] == s and c["clusters"] == C
            ]
            for C in clusters
        ],
    )
    payload = {
        "confidence": CONFIDENCE,
        "method": "BCa",
        "n_resamples": n_resamples,
        "reps_per_cell": reps,
        "clusters": clusters,
        "cells": cells,
        "seconds": elapsed,
        "png": os.path.basename(png),
    }
    notes = [
        "Each cell: coverage = share of data sets whose 95% interval holds the true mean, with its Wilson 95% interval.",
        "Data models and cluster sizes as in the script's docstring; bootstrap options are otspec.stats' defaults.",
        f"Run time {elapsed:.1f} s.",
    ]
    _output.write(args.out, NAME, args, payload, {"Coverage of the 95% interval": table}, notes)
    return payload


if __name__ == "__main__":
    main()
