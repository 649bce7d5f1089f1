"""Experiment 5: the landscape of the optimal acceptance at a Gemma-sized vocabulary (synthetic).

For seeded Zipf-shaped (target, draft) pairs over V = 262 144 tokens (``otspec.synthetic``), the
exact optimum alpha*(p, Q) for the three draft laws -- i.i.d. (with replacement), without
replacement and greedy (top-(k-1) plus one sample) -- against the number of drafts k and against
TV(p, q); beside it the "independent attempts" curve 1 - (1 - alpha_1)^k, K-SEQ's acceptance and
SpecTr's guarantee (1 - (1 - 1/k)^k) alpha* >= (1 - 1/e) alpha*.

    python experiments/exp5_bound_landscape.py            # the full run (~1 min)
    python experiments/exp5_bound_landscape.py --quick    # V = 2000, CI
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _output  # selects the Agg backend before pyplot is imported
import matplotlib.pyplot as plt
import numpy as np

import otspec
from otspec import plot
from otspec.verifiers import kseq

NAME = "exp5_bound_landscape"
LAWS = {"iid": otspec.iid, "wor": otspec.without_replacement, "greedy": otspec.greedy}


def optima(p: np.ndarray, q: np.ndarray, ks: list[int]) -> dict[str, list[float]]:
    """alpha*(p, law(q, k)) for every law and k (exact; the result's status must be optimal)."""
    out: dict[str, list[float]] = {}
    for name, law in LAWS.items():
        vals = []
        for k in ks:
            r = otspec.optimal_acceptance(p, law(q, k))
            if not r.ok:
                raise RuntimeError(f"optimal_acceptance({name}, k={k}) returned status {r.status!r}")
            vals.append(float(r.value))
        out[name] = vals
    return out


def arguments(ap) -> None:
    ap.add_argument("--vocab", type=int, default=262_144, help="vocabulary size V (default 262144, Gemma 3)")
    ap.add_argument("--draft-noise", type=float, default=1.0, help="draft logit noise of the pair used for the k sweep")


def _sizes(args) -> tuple[int, list[int], list[float], list[int]]:
    """V, the k sweep, the draft noises and the TV sweep's k (tiny with ``--quick``)."""
    if args.quick:
        return 2000, [1, 2, 4], [0.5, 2.0], [2, 4]
    return args.vocab, [1, 2, 3, 4, 6, 8, 12, 16], [0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0], [2, 8]


def run(args) -> dict:
    """(a) one pair over a k sweep and (b) pairs of increasing draft noise: every number of the payload."""
    V, ks, noises, tv_ks = _sizes(args)
    t0 = time.perf_counter()

    # (a) one pair, k sweep
    p, q = otspec.synthetic.synthetic_pair(V, seed=args.seed, draft_noise=args.draft_noise)
    tv = 0.5 * float(np.abs(p - q).sum())
    opt = optima(p, q, ks)
    alpha1 = opt["iid"][0] if ks[0] == 1 else 1.0 - tv
    indep = [1.0 - (1.0 - alpha1) ** k for k in ks]
    det = [kseq.details(p, q, k) for k in ks]
    phase1 = [d.phase1 for d in det]
    member = [d.membership for d in det]
    guarantee = plot.kseq_guarantee(ks).tolist()
    ratio = [a / o if o > 0 else float("nan") for a, o in zip(phase1, opt["iid"], strict=False)]

    # (b) TV sweep: pairs with increasing draft noise
    sweep = []
    for s in noises:
        ps, qs = otspec.synthetic.synthetic_pair(V, seed=args.seed, draft_noise=s)
        o = optima(ps, qs, tv_ks)
        sweep.append(
            {
                "draft_noise": s,
                "tv": 0.5 * float(np.abs(ps - qs).sum()),
                **{f"{law}_k{k}": o[law][i] for law in LAWS for i, k in enumerate(tv_ks)},
            }
        )

    checks = {
        "wor_minus_iid_min": min(w - i for w, i in zip(opt["wor"], opt["iid"], strict=False)),
        "kseq_ratio_minus_guarantee_min": min(r - g for r, g in zip(ratio, guarantee, strict=False)),
        "k1_equals_one_minus_tv": abs(opt["iid"][0] - (1.0 - tv)) if ks[0] == 1 else None,
        "sweep_wor_minus_iid_min": min(row[f"wor_k{k}"] - row[f"iid_k{k}"] for row in sweep for k in tv_ks),
    }
    return {
        "vocab": V,
        "ks": ks,
        "tv": tv,
        "draft_noise": args.draft_noise,
        "optimum": opt,
        "independent_tries": indep,
        "kseq_phase1": phase1,
        "kseq_membership": member,
        "kseq_ratio": ratio,
        "kseq_guarantee": guarantee,
        "tv_sweep": sweep,
        "checks": checks,
        "seconds": time.perf_counter() - t0,
    }


def _figure(d: dict, tv_ks: list[int], out: str) -> str:
    """The k sweep and the TV sweep side by side; returns the PNG's path."""
    ks, opt, sweep = d["ks"], d["optimum"], d["tv_sweep"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    plot.acceptance_vs_k(
        ks,
        {r"$1-(1-\alpha_1)^k$ (independent tries)": d["independent_tries"], "K-SEQ (SpecTr)": d["kseq_membership"]},
        optimum={"i.i.d.": opt["iid"], "w/o repl.": opt["wor"], "greedy": opt["greedy"]},
        e_line="i.i.d.",
        ax=ax1,
        title=f"V = {d['vocab']:,}, TV(p, q) = {d['tv']:.3f}",
    )
    ax1.set_xscale("log", base=2)
    ax1.set_xticks(ks, [str(k) for k in ks])
    curves = {f"{law} k={k}": [row[f"{law}_k{k}"] for row in sweep] for k in tv_ks for law in LAWS}
    plot.acceptance_vs_tv([row["tv"] for row in sweep], curves, ax=ax2, title=r"$\alpha^*$ vs TV (draft noise sweep)")
    return _output.save_figure(fig, out, NAME)


def report(d: dict, args) -> tuple[dict[str, str], list[str]]:
    """The figure, the two tables and the notes, from the payload."""
    tv_ks = _sizes(args)[3]
    ks, opt, sweep, checks = d["ks"], d["optimum"], d["tv_sweep"], d["checks"]
    d["png"] = os.path.basename(_figure(d, tv_ks, args.out))
    rows = [
        [
            k,
            _output.fmt(opt["iid"][i]),
            _output.fmt(opt["wor"][i]),
            _output.fmt(opt["greedy"][i]),
            _output.fmt(d["independent_tries"][i]),
            _output.fmt(d["kseq_membership"][i]),
            _output.fmt(d["kseq_ratio"][i], 3),
            _output.fmt(d["kseq_guarantee"][i], 3),
        ]
        for i, k in enumerate(ks)
    ]
    head_k = [
        "k",
        "alpha* iid",
        "alpha* w/o repl.",
        "alpha* greedy",
        "1-(1-alpha_1)^k",
        "K-SEQ",
        "K-SEQ phase-1 / alpha* iid",
        "guarantee 1-(1-1/k)^k",
    ]
    cols = ["draft noise", "TV"] + [f"{law} k={k}" for k in tv_ks for law in LAWS]
    table_tv = _output.markdown_table(
        cols,
        [
            [_output.fmt(r["draft_noise"], 2), _output.fmt(r["tv"], 3)] + [_output.fmt(r[f"{law}_k{k}"]) for k in tv_ks for law in LAWS]
            for r in sweep
        ],
    )
    notes = [
        "Pairs: otspec.synthetic.synthetic_pair (Zipf-shaped target, draft = target logits + Gaussian noise), float64.",
        f"Checks: min(alpha*_wor - alpha*_iid) = {checks['wor_minus_iid_min']:.3g} (k sweep) and {checks['sweep_wor_minus_iid_min']:.3g} (TV sweep); "
        f"min(K-SEQ phase-1 / alpha* - guarantee) = {checks['kseq_ratio_minus_guarantee_min']:.3g}.",
        f"Run time {d['seconds']:.1f} s.",
    ]
    return {"Optimum vs k": _output.markdown_table(head_k, rows), "Optimum vs TV": table_tv}, notes


def main(argv: list[str] | None = None) -> dict:
    return _output.experiment(NAME, __doc__, argv, arguments=arguments, run=run, report=report)


if __name__ == "__main__":
    main()
