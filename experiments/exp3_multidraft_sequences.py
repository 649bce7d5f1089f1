"""Experiment 3: k drafted sequences verified as a tree -- SpecTr (K-SEQ) and RRS (SpecInfer).

Claim re-measured (SpecTr, NeurIPS 2023; Khisti et al., ICLR 2025): drafting k i.i.d. sequences
and verifying them top-down with a multi-draft rule raises block efficiency over one chain, and
K-SEQ's per-node rule accepts at least as much as RRS's (SpecTr reports block efficiencies per
rule and (k, L) up to k = 8, L = 8 on PaLM-2; Khisti et al. Table 1 reports SpecTr 1.77 / 1.96 vs
SpecInfer 1.76 / 1.95 at K = 2 / 4 on OPT, Dolly, T = 1.2 -- secondary sources, see the docs).

Estimand (the papers'): each rule's block efficiency **in its own runs**. Every (rule, k, L) is
its own decoding run, on its own seed (so its own drafting, verification and bonus streams), of the
same prompts. The decoding harness (``otspec_gpu.decode``) drafts k sequences of L = gamma tokens,
verifies them with the run's rule and records, per round, the exact E[tau | drafted tree] of *both*
rules on that tree (an exact walk; coins and residual draws integrated out). Per run:

* exact block efficiency = 1 + mean over rounds of E[tau | tree] of the run's own rule;
* realized block efficiency = 1 + mean over rounds of tau (tokens per target call);
* K-SEQ minus RRS *on the same trees* (paired per round; a second, narrower estimand).

Every interval is a cluster bootstrap over prompts (:mod:`otspec.stats`, BCa, 95%): the rounds of
one prompt are one cluster. Comparisons between runs (K-SEQ vs RRS at the same (k, L); k drafts vs
one chain) are ratios of two runs' block efficiencies, resampled by prompt with both runs' rounds
(``_output.clustered_between_runs``), so they carry both runs' variance. The JSON records the
prompt of every round.

    python experiments/exp3_multidraft_sequences.py           # SmolLM2 / int8, own prompts; see --help
    python experiments/exp3_multidraft_sequences.py --quick   # tiny random models (V = 6), CI
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _output  # selects the Agg backend before pyplot is imported
import _real
import matplotlib.pyplot as plt
import numpy as np

from otspec.stats import clustered_difference, clustered_mean

NAME = "exp3_multidraft_sequences"
RULES = ("kseq", "rrs")
#: most drafted rows x positions per batched call (B k (L + 1)): ~0.4 GB of float64 rows (P and Q) at V = 49 152
ROW_BUDGET = 480
LABEL = {"kseq": "SpecTr (K-SEQ)", "rrs": "RRS (SpecInfer)"}


def parse_runs(ks: str, gammas: str, rules: str, tokens: int, extra: str) -> list[dict]:
    """The (rule, k, gamma, tokens) runs: the grid ``rules x ks x gammas`` (RRS only for k > 1: one
    sequence is token verification for both rules) and the ``RULE:K:GAMMA`` runs of ``extra``."""
    runs = []
    for g in (int(x) for x in gammas.split(",") if x):
        for k in (int(x) for x in ks.split(",") if x):
            for rule in rules.split(","):
                if rule not in RULES:
                    raise SystemExit(f"--rules: {rule!r} is not one of {RULES}")
                if rule == "rrs" and k == 1:
                    continue
                runs.append({"rule": rule, "k": k, "gamma": g, "tokens": tokens})
    for spec in (s for s in extra.split(",") if s):
        parts = spec.split(":")
        if len(parts) not in (3, 4) or parts[0] not in RULES or not all(x.isdigit() for x in parts[1:]):
            raise SystemExit(f"--long {spec!r}: expected RULE:K:L[:TOKENS] with RULE in {RULES}, e.g. kseq:4:4 or rrs:8:8:16")
        runs.append({"rule": parts[0], "k": int(parts[1]), "gamma": int(parts[2]), "tokens": int(parts[3]) if len(parts) == 4 else None})
    return runs


def decode_run(target, draft, ids: list[list[int]], run: dict, temperature: float, seed: int, batch: int, out_dir: str, tag: str) -> dict:
    """Decode every prompt once with the run's rule (``batch`` prompts per batched call); per-round records."""
    from otspec_gpu.decoding import decode

    rec = {"prompt": [], "tau": [], "e_kseq": [], "e_rrs": [], "e_expected": []}
    t0 = time.perf_counter()
    # memory: the round's float64 target and draft rows are ~ 2 * B * k * (L + 1) * V * 8 bytes
    batch = max(1, min(batch, ROW_BUDGET // (run["k"] * (run["gamma"] + 1))))
    # prompts are left-padded to the batch's longest and prefilled k times: batches of similar lengths
    order = sorted(range(len(ids)), key=lambda i: (len(ids[i]), i))
    for c, start in enumerate(range(0, len(ids), batch)):
        members = order[start : start + batch]
        chunk = [ids[i] for i in members]
        out = decode(
            target,
            draft,
            chunk,
            verifier=run["rule"],
            drafts=run["k"],
            gamma=run["gamma"],
            temperature=temperature,
            max_new_tokens=run["tokens"],
            seed=seed + c,  # every chunk of every run on its own streams
            stop_at_eos=False,
        )
        if c == 0:  # input of exp4 (one trace per run)
            out.trace.save(os.path.join(out_dir, f"trace_tree_{run['rule']}_k{run['k']}_g{run['gamma']}{tag}.safetensors"))
        col = out.trace.columns
        rec["prompt"] += [members[int(p)] for p in col["prompt"]]
        rec["tau"] += np.asarray(col["tau"], float).tolist()
        rec["e_kseq"] += np.asarray(col["th_exp_kseq"], float).tolist()
        rec["e_rrs"] += np.asarray(col["th_exp_rrs"], float).tolist()
        rec["e_expected"] += np.asarray(col["th_expected"], float).tolist()
    return {**{k: np.asarray(v) for k, v in rec.items()}, "seconds": time.perf_counter() - t0}


def summarise(run: dict, rec: dict, pids: list[str], domains: list[str], seed: int) -> dict:
    """Per-run block efficiencies with prompt-clustered intervals, overall and per domain."""
    g = np.array([pids[i] for i in rec["prompt"]])
    own = rec["e_kseq"] if run["rule"] == "kseq" else rec["e_rrs"]

    def be(x, sel=slice(None)):
        iv = clustered_mean(1.0 + x[sel], g[sel], seed=seed)
        return _output.interval_dict(iv)

    dom = np.array([domains[i] for i in rec["prompt"]])
    per_domain = {}
    for d in dict.fromkeys(dom.tolist()):
        sel = dom == d
        per_domain[d] = {"exact_own": be(own, sel), "realized": be(rec["tau"], sel), "prompts": int(len(set(g[sel].tolist())))}
    return {
        **run,
        "records": int(g.size),
        "prompts": int(len(set(g.tolist()))),
        "seconds": rec["seconds"],
        "be_exact_own": be(own),
        "be_exact_kseq": be(rec["e_kseq"]),
        "be_exact_rrs": be(rec["e_rrs"]),
        "be_realized": be(rec["tau"]),
        "kseq_minus_rrs_same_trees": _output.interval_dict(clustered_difference(rec["e_kseq"], rec["e_rrs"], g, seed=seed)),
        "kseq_minus_rrs_same_trees_min": float(np.min(rec["e_kseq"] - rec["e_rrs"])),
        "realized_minus_exact": _output.interval_dict(clustered_mean(rec["tau"] - rec["e_expected"], g, seed=seed)),
        "per_domain": per_domain,
        "samples": {
            "prompt": [int(i) for i in rec["prompt"]],
            "tau": [int(t) for t in rec["tau"]],
            "e_kseq": _output.rounded(rec["e_kseq"]),
            "e_rrs": _output.rounded(rec["e_rrs"]),
        },
    }


def comparisons(runs: list[dict], pids: list[str], seed: int) -> list[dict]:
    """Own-run ratios: K-SEQ / RRS at the same (k, L, tokens), and k sequences / one chain (K-SEQ, same L, tokens)."""

    def vals(r, which):
        s = r["samples"]
        e = np.asarray(s["e_kseq"] if r["rule"] == "kseq" else s["e_rrs"]) if which == "exact" else np.asarray(s["tau"], float)
        return 1.0 + e, np.array([pids[i] for i in s["prompt"]])

    by = {(r["rule"], r["k"], r["gamma"], r["tokens"]): r for r in runs}
    out = []
    for (rule, k, g, n), r in by.items():
        pairs = []
        if rule == "kseq" and ("rrs", k, g, n) in by:
            pairs.append((f"K-SEQ / RRS, k={k}, L={g}", r, by[("rrs", k, g, n)]))
        if rule == "kseq" and k > 1 and ("kseq", 1, g, n) in by:
            pairs.append((f"K-SEQ k={k} / one chain, L={g}", r, by[("kseq", 1, g, n)]))
        for label, ra, rb in pairs:
            row = {"comparison": label, "k": k, "gamma": g, "tokens": n}
            for which in ("exact", "realized"):
                a, ga = vals(ra, which)
                b, gb = vals(rb, which)
                row[which] = _output.clustered_between_runs(a, ga, b, gb, kind="ratio", seed=seed)
            out.append(row)
    return out


def make_plot(payload: dict, out_dir: str, name: str) -> str:
    """Block efficiency (each rule in its own runs) vs k, one panel per draft length L."""
    runs = payload["runs"]
    gammas = sorted({r["gamma"] for r in runs})
    fig, axes = plt.subplots(1, len(gammas), figsize=(4.6 * len(gammas), 4), layout="constrained", sharey=True, squeeze=False)
    for ax, g in zip(axes[0], gammas, strict=True):
        for rule, mk, dx in (("kseq", "s", -0.04), ("rrs", "o", 0.04)):
            rr = sorted(
                (r for r in runs if r["gamma"] == g and (r["rule"] == rule or (r["k"] == 1 and rule == "rrs"))), key=lambda r: r["k"]
            )
            rr = [r for r in rr if r["tokens"] == rr[0]["tokens"]] if rr else rr
            if not rr:
                continue
            x = np.array([r["k"] for r in rr], float) * (1 + dx)
            for key, fmt, lab in (("be_exact_own", mk + "-", "exact"), ("be_realized", "x", "realized")):
                v = np.array([r[key]["value"] for r in rr])
                lo = np.array([r[key]["low"] for r in rr], float)
                hi = np.array([r[key]["high"] for r in rr], float)
                ax.errorbar(
                    x,
                    v,
                    yerr=np.nan_to_num(np.stack([v - lo, hi - v])),
                    fmt=fmt,
                    capsize=3,
                    alpha=1.0 if key == "be_exact_own" else 0.6,
                    label=f"{LABEL[rule]} {lab}",
                )
        ks = sorted({r["k"] for r in runs if r["gamma"] == g})
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_xlabel("number of drafted sequences k")
        ax.set_title(f"L = {g}", fontsize="medium")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("block efficiency (own runs)")
    axes[0][-1].legend(fontsize="x-small")
    fig.suptitle(
        f"{payload['target']} / {payload['draft']}, T = {payload['temperature']}, {payload['n_prompts']} prompts "
        "(95% cluster-bootstrap intervals over prompts)",
        fontsize="medium",
    )
    return _output.save_figure(fig, out_dir, name)


def tables(payload: dict) -> dict[str, str]:
    """The markdown tables: per run, per comparison, per domain."""
    ci = _output.ci
    run_rows = [
        [
            r["rule"],
            r["k"],
            r["gamma"],
            r["tokens"],
            r["prompts"],
            r["records"],
            ci(r["be_exact_own"]),
            ci(r["be_realized"]),
            ci(r["kseq_minus_rrs_same_trees"], 4, signed=True),
            ci(r["realized_minus_exact"], 3, signed=True),
            f"{r['seconds']:.0f}",
        ]
        for r in payload["runs"]
    ]
    t = {
        "Block efficiency of each rule in its own runs": _output.markdown_table(
            [
                "rule",
                "k",
                "L",
                "tokens / prompt",
                "prompts",
                "rounds",
                "BE exact (own rule)",
                "BE realized",
                "K-SEQ - RRS, same trees (E[tau])",
                "realized - exact tau",
                "run s",
            ],
            run_rows,
        )
    }
    if payload["comparisons"]:
        t["Ratios of block efficiencies between runs (paired by prompt)"] = _output.markdown_table(
            ["comparison", "tokens / prompt", "exact ratio", "realized ratio"],
            [[c["comparison"], c["tokens"], ci(c["exact"]), ci(c["realized"])] for c in payload["comparisons"]],
        )
    domains = list(dict.fromkeys(d for r in payload["runs"] for d in r["per_domain"]))
    t["Block efficiency per domain (exact, own rule)"] = _output.markdown_table(
        ["rule", "k", "L", "tokens / prompt", *domains],
        [
            [r["rule"], r["k"], r["gamma"], r["tokens"]]
            + [ci(r["per_domain"][d]["exact_own"], 2) if d in r["per_domain"] else "-" for d in domains]
            for r in payload["runs"]
        ],
    )
    return t


def main(argv: list[str] | None = None) -> dict:
    ap = _output.parser(NAME, __doc__.splitlines()[0])
    ap.add_argument("--draft", default="int8")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--prompt-set", default="own", choices=("own", "humaneval", "all"), help="experiments/_prompts.py set (default own)")
    ap.add_argument("--prompts", type=int, default=None, help="a seeded, domain-stratified subset of this many prompts (default all)")
    ap.add_argument("--humaneval", type=int, default=None, help="the first N HumanEval prompts (sets humaneval / all)")
    ap.add_argument("--ks", default="1,2,4,8", help="grid: numbers of drafted sequences (default 1,2,4,8)")
    ap.add_argument("--gammas", default="4,8", help="grid: draft lengths L (default 4,8)")
    ap.add_argument("--rules", default="kseq,rrs", help="grid: rules (default kseq,rrs; RRS only for k > 1)")
    ap.add_argument("--tokens", type=int, default=32, help="grid: tokens generated per prompt and run (default 32)")
    ap.add_argument(
        "--long",
        default="",
        metavar="RULE:K:L[:N],...",
        help="more runs after the grid: RULE:K:L[:TOKENS] (default --long-tokens), e.g. kseq:2:4,rrs:2:4",
    )
    ap.add_argument("--long-tokens", type=int, default=128, help="tokens per prompt of the --long runs (default 128)")
    ap.add_argument("--batch", type=int, default=16, help="prompts per batched decoding call, grouped by length (default 16)")
    ap.add_argument("--replot", metavar="JSON", help="only redraw the PNG from a finished run's JSON (into --out), no models")
    args = _output.parse(ap, argv)
    if args.replot:
        with open(args.replot) as f:
            payload = json.load(f)
        make_plot(payload, args.out, os.path.splitext(os.path.basename(args.replot))[0])
        return payload

    # a non-default draft gets its own file names (same folder): exp3_multidraft_sequences_t0.7, ...
    name = NAME if (args.quick or args.draft == "int8") else f"{NAME}_{args.draft}"
    tag = "" if name == NAME else f"_{args.draft}"
    if args.quick:
        runs = parse_runs("1,2", "2", "kseq,rrs", 8, "kseq:2:2")
        long_tokens, prompts = 12, _real.select_prompts("own")[::16][:3]
    else:
        runs = parse_runs(args.ks, args.gammas, args.rules, args.tokens, args.long)
        long_tokens, prompts = args.long_tokens, _real.select_prompts(args.prompt_set, args.prompts, args.humaneval, args.seed)
    for r in runs:
        r["tokens"] = r["tokens"] or long_tokens
    T = args.temperature
    t0 = time.perf_counter()
    target, draft = _real.load_pair(args.draft, quick=args.quick)
    ids = _real.prompt_token_ids(target, prompts, args.seed, quick=args.quick)
    pids, domains = [p.id for p in prompts], [p.domain for p in prompts]
    results = []
    for i, run in enumerate(runs):
        seed = 1_000_000 * args.seed + 1000 * (i + 1)  # its own streams: runs are independent samples
        rec = decode_run(target, draft, ids, run, T, seed, args.batch, args.out, tag)
        results.append({**summarise(run, rec, pids, domains, args.seed), "seed": seed})
        print(
            f"[exp3] {run['rule']} k={run['k']} L={run['gamma']} x{run['tokens']}: BE exact {results[-1]['be_exact_own']['value']:.3f}, "
            f"{rec['seconds']:.0f} s",
            flush=True,
        )
        # written after every run: a long run that is stopped keeps its finished runs (the notes say how many)
        report(args, name, target, draft, prompts, results, len(runs), time.perf_counter() - t0)
    return report(args, name, target, draft, prompts, results, len(runs), time.perf_counter() - t0)


def report(args, name: str, target, draft, prompts: list, results: list[dict], n_planned: int, elapsed: float) -> dict:
    """JSON + markdown + plot of the runs finished so far."""
    pids, domains = [p.id for p in prompts], [p.domain for p in prompts]
    T = args.temperature
    payload = {
        "target": target.name,
        "draft": draft.name,
        "temperature": T,
        "prompt_set": "own (first of each domain)" if args.quick else args.prompt_set,
        "n_prompts": len(prompts),
        "prompts": [{"id": p.id, "domain": p.domain} for p in prompts],
        "runs": results,
        "runs_planned": n_planned,
        "comparisons": comparisons(results, pids, args.seed),
        "seconds": elapsed,
        "png": name + ".png",
    }
    make_plot(payload, args.out, name)
    notes = [
        f"{len(prompts)} prompts ({args.prompt_set if not args.quick else 'quick'} set; domains: "
        + ", ".join(f"{d} {domains.count(d)}" for d in dict.fromkeys(domains))
        + f"), decoded in batches of at most {args.batch} prompts of similar length (and at most {ROW_BUDGET} rows x positions); "
        "one record per (round, prompt); "
        f"temperature {T}.",
        "Each (rule, k, L) is its own run on its own seed. BE exact = 1 + mean E[tau | tree] of the run's own rule over its rounds; "
        "BE realized = 1 + mean tau. K-SEQ - RRS on the same trees is paired per round (both rules' exact E[tau] on the run's trees).",
        "[low, high]: 95% BCa cluster-bootstrap interval over prompts (otspec.stats; 2000 resamples); ratios between runs resample "
        "prompts with both runs' rounds (the denominator's variance included).",
        f"Runs finished: {len(results)} of {n_planned}. Run time {elapsed:.0f} s.",
    ]
    _output.write(args.out, name, args, payload, tables(payload), notes)
    return payload


if __name__ == "__main__":
    main()
