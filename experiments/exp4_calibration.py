"""Experiment 4: theory vs practice -- realized acceptance against its exact expectation, per round.

For every verifier family run by the decoding harness (single-step multi-draft rules, token and
block chains, SpecTr / RRS trees) each round's realized outcome (accepted or not; tau accepted
tokens) is set against the exact expectation computed from that round's float64 distributions
(``th_expected_cond`` = P(accept | the drafts proposed) for single-step rounds, E[tau | drafted
path or tree] otherwise). A correct implementation's bin means lie on the diagonal within their
95% intervals and the overall z-score of realized - expected is about N(0, 1). Each family's mean
realized - exact also gets a 95% cluster-bootstrap interval over prompts (:mod:`otspec.stats`; the
rounds of one prompt in one run are one cluster; the JSON records the cluster of every round).
Prompts come from the standard set (``experiments/_prompts.py``, a domain-stratified subset).

Negative control (the plot that shows a biased implementation at a glance): on real SmolLM2
steps, K-SEQ with k = 4 is run once correctly and once with drafts sampled from the draft
distribution at another temperature than the q the verifier is given (a known pitfall); its
realized acceptance is set against the acceptance the theory promises.

Besides its own single-step runs, ``--traces DIR ...`` adds every ``*.safetensors`` trace found
there (exp2 and exp3 write theirs into their output folders).

    python experiments/exp4_calibration.py --traces experiments/out/exp2_block_vs_token experiments/out/exp3_multidraft_sequences
    python experiments/exp4_calibration.py --quick      # tiny random models (V = 6), CI
"""

from __future__ import annotations

import glob
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _output  # selects the Agg backend before pyplot is imported
import _real
import matplotlib.pyplot as plt
import numpy as np

import otspec
from otspec import plot
from otspec.stats import clustered_mean
from otspec.verifiers import kseq

NAME = "exp4_calibration"
SINGLE = (("kseq", 4), ("rrs", 4), ("greedy_optimal", 4), ("token", 1))


def family(cfg: dict) -> str:
    """Verifier family of a trace, with its draft model (traces of several drafts may be added)."""
    mode, d = cfg.get("mode"), cfg.get("draft")
    if mode == "single":
        return f"{cfg.get('verifier')} k={cfg.get('drafts')} ({d})"
    if mode == "chain":
        return f"{cfg.get('verifier')} chain gamma={cfg.get('gamma')} ({d})"
    return f"{cfg.get('verifier')} tree k={cfg.get('drafts')} gamma={cfg.get('gamma')} ({d})"


def negative_control(p_rows: np.ndarray, q_rows: np.ndarray, k: int, draws: int, wrong_t: float, rng: np.random.Generator):
    """(expected, realized correct, realized with drafts from the wrong q) per draw, K-SEQ."""
    exp, ok, bad = [], [], []
    for p, q in zip(p_rows, q_rows, strict=False):
        law = otspec.iid(q, k)
        a = kseq.acceptance(p, law).value
        d = law.sample(rng, draws)
        ok.append((d == kseq.sample_batch(p, law, d, rng=rng)[:, None]).any(1))
        q_wrong = _real.softmax64(np.log(np.maximum(q, 1e-300)), wrong_t)
        dw = otspec.iid(q_wrong, k).sample(rng, draws)
        bad.append((dw == kseq.sample_batch(p, law, dw, rng=rng)[:, None]).any(1))
        exp.append(np.full(draws, a))
    return np.concatenate(exp), np.concatenate(ok).astype(float), np.concatenate(bad).astype(float)


def arguments(ap) -> None:
    ap.add_argument("--draft", default="int8")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--prompts", type=int, default=8, help="a domain-stratified subset of the own prompts (default 8)")
    ap.add_argument("--tokens", type=int, default=40, help="tokens per prompt in each single-step run")
    ap.add_argument("--traces", nargs="*", default=[], help="folders whose *.safetensors decoding traces are added")
    ap.add_argument("--wrong-temperature", type=float, default=1.5, help="temperature of the negative control's draft sampler")
    ap.add_argument(
        "--multi",
        nargs="*",
        default=[],
        metavar="RULE:GAMMA[:K]",
        help="also decode these chain / tree runs (e.g. token:4 block:4 kseq:4:2 rrs:4:2), each with its own seed",
    )


def _prompts(args) -> list:
    return _real.select_prompts("own")[::32] if args.quick else _real.select_prompts("own", args.prompts, seed=args.seed)


def _decode_all(args, target, draft, prompts, n_tok: int) -> list:
    """The traces: the single-step runs, the --multi runs (own seeds), the quick chain and tree, and --traces."""
    from otspec.io import load_trace
    from otspec_gpu.decoding import decode

    T = args.temperature
    traces = []
    for verifier, k in SINGLE:
        out = decode(
            target,
            draft,
            prompts,
            verifier=verifier,
            drafts=k,
            gamma=1,
            temperature=T,
            max_new_tokens=n_tok,
            seed=args.seed,
            stop_at_eos=False,
        )
        out.trace.save(os.path.join(args.out, f"trace_single_{verifier}_k{k}.safetensors"))
        traces.append(out.trace)
    for i, spec in enumerate(args.multi):
        parts = spec.split(":")
        if len(parts) not in (2, 3) or not all(x.isdigit() for x in parts[1:]):
            raise SystemExit(f"--multi {spec!r}: expected RULE:GAMMA or RULE:GAMMA:K, e.g. token:4 or kseq:4:2")
        rule, g, k = parts[0], int(parts[1]), int(parts[2]) if len(parts) == 3 else 1
        seed = args.seed + 101 + i  # runs on their own streams: families are independent samples
        out = decode(
            target, draft, prompts, verifier=rule, drafts=k, gamma=g, temperature=T, max_new_tokens=n_tok, seed=seed, stop_at_eos=False
        )
        out.trace.save(os.path.join(args.out, f"trace_multi_{rule}_g{g}_k{k}.safetensors"))
        traces.append(out.trace)
    if args.quick:  # one chain and one tree so that every family's code path runs
        common = dict(temperature=T, max_new_tokens=n_tok, seed=args.seed, stop_at_eos=False)
        traces.append(decode(target, draft, prompts, verifier="block", gamma=2, **common).trace)
        traces.append(decode(target, draft, prompts, verifier="kseq", drafts=2, gamma=2, **common).trace)
    for folder in args.traces:
        for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
            traces.append(load_trace(path))
    return traces


def _families(traces: list) -> tuple[dict, dict]:
    """(expected, realized, mode) and the prompt clusters of every family, runs of one family pooled."""
    fams, clusters = {}, {}
    for i, tr in enumerate(traces):
        c, cfg = tr.columns, tr.config
        col = "th_expected_cond" if cfg.get("mode") == "single" else "th_expected"
        e, y = np.asarray(c[col], float), np.asarray(c["tau"], float)
        g = np.array([f"run{i}/{int(p)}" for p in c["prompt"]])  # one cluster per (run, prompt in its batch)
        name = family(cfg)
        prev = fams.get(name)
        fams[name] = (np.concatenate([prev[0], e]), np.concatenate([prev[1], y]), cfg.get("mode")) if prev else (e, y, cfg.get("mode"))
        clusters[name] = np.concatenate([clusters[name], g]) if name in clusters else g
    return fams, clusters


def _family_results(fams: dict, clusters: dict, seed: int) -> tuple[dict, dict]:
    """Per family: realized vs exact with its cluster interval; and every chain / tree round pooled."""
    results = {}
    for name, (e, y, mode) in fams.items():
        nb = max(1, min(6, e.size // 15))
        b = plot.calibration_bins(e, y, n_bins=nb)
        diff = clustered_mean(y - e, clusters[name], seed=seed)
        results[name] = {
            "mode": mode,
            "n": int(e.size),
            "mean_expected": float(e.mean()),
            "mean_realized": float(y.mean()),
            "z_overall": b.z_overall,
            "realized_minus_exact": diff.as_dict(),
            "samples": {"cluster": clusters[name].tolist(), "expected": _output.rounded(e), "realized": _output.rounded(y)},
        }
    # every multi-token round pooled: is realized tau below its expectation in chains and trees?
    multi_names = [n for n, (_, _, mode) in fams.items() if mode != "single"]
    multi = [results[n] for n in multi_names]
    pooled = {"rounds": 0, "families": len(multi), "families_below": int(sum(r["mean_realized"] < r["mean_expected"] for r in multi))}
    if multi_names:
        d_multi = np.concatenate([fams[n][1] - fams[n][0] for n in multi_names])
        iv = clustered_mean(d_multi, np.concatenate([clusters[n] for n in multi_names]), seed=seed)
        pooled.update(
            rounds=int(d_multi.size),
            mean_realized_minus_exact=iv.value,
            realized_minus_exact=iv.as_dict(),
            z=float(d_multi.mean() / (d_multi.std(ddof=1) / np.sqrt(d_multi.size))) if d_multi.size > 1 else float("nan"),
        )
    return results, pooled


def _control(args, target, draft, prompts, chosen, rng) -> tuple[dict, tuple]:
    """The negative control on real steps: its summary and its draws (promised, correct, wrong q)."""
    steps = _real.real_steps_ids(target, draft, prompts, 4 if args.quick else 12, args.temperature, args.seed)
    kk = 2 if args.quick else 4
    e_nc, ok_nc, bad_nc = negative_control(steps.p, steps.q, kk, 20 if args.quick else 60, args.wrong_temperature, rng)
    nb = 8 if not args.quick else 2
    b_ok, b_bad = plot.calibration_bins(e_nc, ok_nc, n_bins=nb), plot.calibration_bins(e_nc, bad_nc, n_bins=nb)
    nc = {
        "k": kk,
        "draws": int(e_nc.size),
        "promised": float(e_nc.mean()),
        "correct": float(ok_nc.mean()),
        "wrong_q": float(bad_nc.mean()),
        "z_correct": b_ok.z_overall,
        "z_wrong_q": b_bad.z_overall,
    }
    g_nc = np.repeat(np.array([chosen[j].id for j in steps.prompt]), e_nc.size // steps.n)  # draws of a step: its prompt
    for label, y_nc in (("correct", ok_nc), ("wrong q", bad_nc)):
        nc[f"realized_minus_promised_{label.replace(' ', '_')}"] = clustered_mean(y_nc - e_nc, g_nc, seed=args.seed).as_dict()
    return nc, (e_nc, ok_nc, bad_nc)


def run(args) -> dict:
    """Decode, gather the families, and the negative control; ``_fams`` / ``_nc`` are the figures' arrays."""
    n_tok = 6 if args.quick else args.tokens
    chosen = _prompts(args)
    t0 = time.perf_counter()
    target, draft = _real.load_pair(args.draft, quick=args.quick)
    prompts = _real.prompt_token_ids(target, chosen, args.seed, quick=args.quick)
    rng = np.random.default_rng(args.seed)  # the negative control's stream
    fams, clusters = _families(_decode_all(args, target, draft, prompts, n_tok))
    t_decode = time.perf_counter() - t0
    nc, nc_draws = _control(args, target, draft, prompts, chosen, rng)
    elapsed = time.perf_counter() - t0
    results, pooled = _family_results(fams, clusters, args.seed)
    return {
        "target": target.name,
        "draft": draft.name,
        "temperature": args.temperature,
        "families": results,
        "negative_control": nc,
        "chain_tree_pooled": pooled,
        "seconds": {"decode": t_decode, "total": elapsed},
        "png": NAME + ".png",
        "_fams": fams,
        "_nc": nc_draws,
    }


def _figure(d: dict, args) -> None:
    """Calibration of every family (single-step; chains and trees) and of the negative control."""
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.5), layout="constrained")
    for name, (e, y, mode) in d["_fams"].items():
        plot.calibration(e, y, n_bins=max(1, min(6, e.size // 15)), label=name, ax=axes[0] if mode == "single" else axes[1])
    for ax in axes[:2]:  # many families: a smaller legend
        if ax.get_legend() is not None:
            ax.legend(fontsize="xx-small", loc="upper left")
    axes[0].set_title("single-step rounds: P(accept | drafts)")
    axes[1].set_title("chains and trees: E[tau | drafted path / tree]")
    axes[1].set_xlabel("exact E[tau | drafts]")
    axes[1].set_ylabel("realized tau (bin mean)")
    e_nc, ok_nc, bad_nc = d["_nc"]
    nb, kk = 8 if not args.quick else 2, d["negative_control"]["k"]
    plot.calibration(e_nc, ok_nc, n_bins=nb, label="K-SEQ, drafts from q", ax=axes[2])
    plot.calibration(e_nc, bad_nc, n_bins=nb, label=f"K-SEQ, drafts from q at T x {args.wrong_temperature:g} (bug)", ax=axes[2])
    axes[2].set_title(f"negative control: real steps, k = {kk}")
    axes[2].set_xlabel("acceptance promised by theory")
    _output.save_figure(fig, args.out, NAME)


def _rows(d: dict) -> list[list]:
    """One table row per family, the pooled chain / tree row and the two negative-control rows."""
    rows = []
    for name, r in d["families"].items():
        iv = r["realized_minus_exact"]
        mean_e, mean_y = r["mean_expected"], r["mean_realized"]
        rows.append(
            [
                name,
                r["mode"],
                r["n"],
                iv["n_clusters"],
                f"{mean_e:.4f}",
                f"{mean_y:.4f}",
                _output.ci(iv, 4, signed=True),
                f"{r['z_overall']:+.2f}",
            ]
        )
    pooled = d["chain_tree_pooled"]
    if "realized_minus_exact" in pooled:  # some chain or tree family exists
        iv = pooled["realized_minus_exact"]
        label = f"all chain and tree rounds pooled ({pooled['families_below']} of {pooled['families']} families below)"
        rows.append(
            [label, "chain+tree", pooled["rounds"], iv["n_clusters"], "-", "-", _output.ci(iv, 4, signed=True), f"{pooled['z']:+.2f}"]
        )
    nc = d["negative_control"]
    for label, mean_y, z in (("correct", nc["correct"], nc["z_correct"]), ("wrong q", nc["wrong_q"], nc["z_wrong_q"])):
        iv = nc[f"realized_minus_promised_{label.replace(' ', '_')}"]
        row = [
            f"negative control: K-SEQ k={nc['k']}, {label}",
            "numpy",
            nc["draws"],
            iv["n_clusters"],
            f"{nc['promised']:.4f}",
            f"{mean_y:.4f}",
        ]
        rows.append(row + [_output.ci(iv, 4, signed=True), f"{z:+.2f}"])
    return rows


def report(d: dict, args) -> tuple[dict[str, str], list[str]]:
    """The figure, the table and the notes, from the payload."""
    _figure(d, args)
    head = [
        "family",
        "mode",
        "records",
        "prompt clusters",
        "mean exact",
        "mean realized",
        "realized - exact [95% CI]",
        "z (realized - exact)",
    ]
    chosen = _prompts(args)
    notes = [
        "z = sum(realized - exact) / sqrt(sum of variances): exact Bernoulli variances for single-step acceptance, the sample variance for tau; |z| > 3 would flag a bias (false-alarm rate ~0.3% per family under independence).",
        "[95% CI]: BCa cluster bootstrap over prompts (otspec.stats, 2000 resamples); a cluster is one prompt in one run (negative control: one prompt).",
        f"Prompts: {len(chosen)} of the own set ({', '.join(p.id for p in chosen)}).",
        f"Traces added from: {', '.join(args.traces) if args.traces else 'none'}.",
        f"Own chain / tree runs (--multi, seeds {args.seed + 101}...): {', '.join(args.multi) if args.multi else 'none'}.",
        "Families with the same name (same rule, gamma, k and draft) from several runs are pooled.",
        f"Run time {d['seconds']['total']:.0f} s.",
    ]
    return {"Realized vs exact, per family": _output.markdown_table(head, _rows(d))}, notes


def main(argv: list[str] | None = None) -> dict:
    return _output.experiment(NAME, __doc__, argv, arguments=arguments, run=run, report=report)


if __name__ == "__main__":
    main()
