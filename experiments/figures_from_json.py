"""Figures drawn from committed results only (no model runs): the landing figure and experiment 1's plots.

* ``landing``: the documentation's landing figure, real next-token distributions of SmolLM2-135M-
  Instruct and its int8 draft from experiment 1 (``exp1_verifiers_vs_optimum.json``): the optimum
  :math:`\\alpha^*` of three draft laws and the acceptance of K-SEQ and RRS against the number of
  drafts k, at T = 1 (means over the positions; their paired differences and intervals are on the
  results page).
* ``exp1``: experiment 1's two figures per model pair, re-drawn from each pair's JSON with the
  experiment's own plotting function; ``exp2``: experiment 2's figure, likewise.

    python experiments/figures_from_json.py                      # both, into docs/_static
    python experiments/figures_from_json.py --only landing --results DIR --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _output  # noqa: F401  (headless matplotlib before pyplot loads)
import exp1_verifiers_vs_optimum as exp1
import exp2_block_vs_token as exp2
import matplotlib.pyplot as plt
import numpy as np

__all__ = ["LANDING", "landing", "replot_exp1", "replot_exp2", "main"]

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "..", "docs", "_static", "results")
#: The landing figure's file, under ``docs/_static``.
LANDING = "landing_smollm2.png"
#: Experiment 1's JSON files (their figures are named after them).
EXP1 = ("exp1_verifiers_vs_optimum", "exp1_verifiers_vs_optimum_t0.7", "exp1_verifiers_vs_optimum_gemma3-270m_t0.7")
#: The landing figure's curves: (summary key, label, colour, line style, marker).
CURVES = (
    ("opt_wor", r"$\alpha^*$ drafts without replacement", "black", "-", "s"),
    ("opt_greedy", r"$\alpha^*$ greedy drafts (top $k-1$ + one sample)", "0.35", "-.", "^"),
    ("opt_iid", r"$\alpha^*$ i.i.d. drafts", "black", ":", "o"),
    ("kseq", "K-SEQ (SpecTr), i.i.d. drafts", "C0", "-", "o"),
    ("rrs", "RRS (SpecInfer), i.i.d. drafts", "C1", "-", "o"),
)


def landing(results: str, out: str, temperature: float = 1.0) -> str:
    """The landing figure from experiment 1's SmolLM2 / int8 JSON; returns the PNG's path."""
    with open(os.path.join(results, EXP1[0] + ".json")) as f:
        d = json.load(f)
    s, ks = d["summary"][str(temperature)], np.asarray(d["ks"])
    fig, ax = plt.subplots(figsize=(7.2, 4.4), layout="constrained")
    for key, label, colour, ls, marker in CURVES:
        # means over the positions; no bands: the levels' intervals vary with the prompts and overlap,
        # while the paired differences between the curves are resolved (the results page gives them)
        ax.plot(ks, np.asarray(s[key]["mean"]), color=colour, ls=ls, marker=marker, ms=5, lw=2.0, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("number of drafts k", fontsize=11)
    ax.set_ylabel("acceptance per step", fontsize=11)
    ax.tick_params(labelsize=10)
    ax.grid(alpha=0.3)
    ax.set_title(f"SmolLM2-135M-Instruct, int8 draft, T = {temperature:g}: {len(d['prompts'])} prompts", fontsize=11)
    ax.legend(fontsize=10, loc="lower right")
    path = os.path.join(out, LANDING)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def replot_exp1(results: str, out: str) -> list[str]:
    """Experiment 1's figures for every pair whose JSON is in ``results``, drawn into ``out``."""
    done = []
    for name in EXP1:
        path = os.path.join(results, name + ".json")
        if os.path.exists(path):
            with open(path) as f:
                d = json.load(f)
            exp1._figures({**d, "_name": name}, out)
            done.append(name)
    return done


def replot_exp2(results: str, out: str) -> str | None:
    """Experiment 2's figure from its JSON in ``results``, drawn into ``out`` (``None`` without it)."""
    path = os.path.join(results, "exp2_block_vs_token.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        d = json.load(f)
    return exp2.make_plot(d, out, "exp2_block_vs_token")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="figures_from_json", description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=RESULTS, help="folder of the experiments' JSON (default docs/_static/results)")
    ap.add_argument("--out", default=None, help="output folder (default: docs/_static for the landing figure, --results for exp1)")
    ap.add_argument("--only", choices=("landing", "exp1", "exp2"), default=None, help="draw one of them (default all)")
    args = ap.parse_args(argv)
    if args.only in (None, "landing"):
        landing(args.results, args.out or os.path.join(args.results, ".."))
    if args.only in (None, "exp1"):
        replot_exp1(args.results, args.out or args.results)
    if args.only in (None, "exp2"):
        replot_exp2(args.results, args.out or args.results)


if __name__ == "__main__":
    main()
