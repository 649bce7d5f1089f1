"""Speed a user sees on this CPU: plain sampling against speculative decoding, B = 1, same process.

SmolLM2-135M-Instruct target, temperature 1, no top-k/top-p, ``--max-new-tokens`` (128) tokens per
prompt, batch size 1, one torch thread. Methods, interleaved prompt by prompt (a seeded order per
prompt, so that drifts of the shared machine hit every method alike):

* ``plain`` -- ``transformers`` ``generate`` sampling from the target alone (the baseline);
* ``lookup`` -- otspec :func:`otspec_gpu.decoding.decode` with prompt-lookup drafts
  (:mod:`otspec_gpu.prompt_lookup`: the continuation of the most recent earlier match of the last
  ``n <= --ngram`` tokens, one-hot q, no draft model) and token verification, ``gamma`` = ``--gamma``;
* ``int8`` -- otspec decode with the int8 dynamic-quantised self-draft and token verification;
* ``hf-int8`` -- ``transformers`` assisted generation with the same int8 draft (sampling, constant
  ``num_assistant_tokens = gamma``);
* ``hf-lookup`` -- ``transformers``' own prompt lookup (``prompt_lookup_num_tokens = gamma``,
  ``max_matching_ngram_size = --ngram``; its earliest match, at most the tokens already in the
  context, nothing proposed without a match). With sampling it keeps a candidate when a token
  sampled from p equals it, which is token verification with a one-hot q.

Every method generates exactly ``--max-new-tokens`` tokens (``transformers``: ``min_new_tokens``;
otspec: ``stop_at_eos=False``). Each call is timed whole (prefill included) on two clocks: CPU time
of the process (with one torch thread, the speed on an otherwise idle core; the primary measure,
because this machine is shared and its wall clock charges every method for the other jobs) and
wall-clock time. For otspec the exact per-round theory it computes is timed apart and subtracted
(the trace's top-k summaries stay in). Statistics are over prompts (:mod:`otspec.stats`, cluster =
prompt, BCa, 95%): tokens per second of a method is ``sum tokens / sum seconds``; its speed
relative to plain sampling is the ratio of mean seconds per token, plain over method, on the same
prompts (the interval includes the denominator's variance); block efficiency is generated tokens
per verification round (target forward after the prefill; for plain sampling 1). For ``lookup``
the exact expected accepted tokens per round given the drafts (:mod:`otspec_gpu.theory`) sits next
to the realized count. One cached target forward over ``gamma + 1`` positions is timed against one
over a single position after every prompt (the cost of a speculative round in target steps).
HumanEval and our own prompts are reported apart (and our own per domain).

Usage::

    nice -n 5 python experiments/bench/bench_decode.py --n-humaneval 40 --n-own 64 --budget-min 32 --out docs/_static/results
    python experiments/bench/bench_decode.py --quick --out /tmp/bench_decode   # tiny models, seconds (CI)
"""

from __future__ import annotations

import os
import sys
import time

_EXP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _EXP not in sys.path:
    sys.path.insert(0, _EXP)

from _output import fmt, markdown_table, parse, parser, save_figure, write  # noqa: E402 (sets the thread count first)

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

NAME = "bench_decode"
METHODS = ("plain", "lookup", "int8", "hf-int8", "hf-lookup")
LABELS = {
    "plain": "plain sampling (transformers)",
    "lookup": "otspec, prompt-lookup drafts",
    "int8": "otspec, int8 self-draft",
    "hf-int8": "transformers assisted, int8 draft",
    "hf-lookup": "transformers prompt lookup",
}


class CallCounter:
    """Counts the forwards of a module (a forward hook)."""

    def __init__(self, module):
        self.n = 0
        self.h = module.register_forward_hook(self._hook)

    def _hook(self, *_):
        self.n += 1

    def close(self):
        self.h.remove()


class TheoryClock:
    """CPU seconds spent in the decoder's exact per-round theory (a timing wrapper around
    :func:`otspec_gpu.theory.round_theory`, which the recorder looks up at every call)."""

    def __init__(self):
        import otspec_gpu.theory as th

        self.module, self.real, self.cpu_s = th, th.round_theory, 0.0

        def timed(*a, **kw):
            t0 = time.process_time()
            try:
                return self.real(*a, **kw)
            finally:
                self.cpu_s += time.process_time() - t0

        th.round_theory = timed

    def close(self):
        self.module.round_theory = self.real


def run_otspec(target, draft, ids, n_new: int, gamma: int, seed: int) -> dict:
    """otspec decode (token verification); seconds = wall (and CPU) time minus the exact-theory time."""
    from otspec_gpu.decoding import decode

    clock = TheoryClock()
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        res = decode(
            target, draft, [ids], verifier="token", gamma=gamma, temperature=1.0, max_new_tokens=n_new, seed=seed, stop_at_eos=False
        )
    finally:
        clock.close()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    c = res.trace.columns
    theory_s = float(c["round_t_theory"].sum())
    out = dict(
        tokens=len(res.tokens[0]),
        seconds=wall - theory_s,
        cpu_seconds=cpu - clock.cpu_s,
        theory_s=theory_s,
        rounds=int(c["tau"].size),
        target_forwards=int(res.config["target_calls"]) + 1,  # + the prefill
        accepted=float(c["tau"].sum()),
        expected=float(c["th_expected"].sum()),
        verify_s=float(c["round_t_verify"].sum()),
        draft_s=float(c["round_t_draft"].sum()),
    )
    if "lookup_matched" in res.config:
        m = np.asarray(res.config["lookup_matched"][0])
        out["matched_rounds"] = int((m > 0).sum())
    return out


def run_hf(target, ids, n_new: int, gamma: int, seed: int, *, assistant=None, lookup_ngram: int = 0) -> dict:
    """transformers generate: plain sampling, assisted by ``assistant``, or prompt lookup."""
    import torch

    torch.manual_seed(seed)
    x = torch.tensor([ids])
    counter = CallCounter(target.model)
    kw = dict(
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=n_new,
        min_new_tokens=n_new,
        attention_mask=torch.ones_like(x),
        pad_token_id=target.eos_token_id if target.eos_token_id is not None else 0,
    )
    if assistant is not None:
        assistant.model.generation_config.num_assistant_tokens = gamma
        assistant.model.generation_config.num_assistant_tokens_schedule = "constant"
        assistant.model.generation_config.assistant_confidence_threshold = 0.0
        kw.update(assistant_model=assistant.model)
    if lookup_ngram:
        kw.update(prompt_lookup_num_tokens=gamma, max_matching_ngram_size=lookup_ngram)
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.no_grad():
        out = target.model.generate(x, **kw)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    counter.close()
    n = int(out.shape[1] - x.shape[1])
    return dict(tokens=n, seconds=dt, cpu_seconds=cpu, rounds=counter.n, target_forwards=counter.n)


def load(quick: bool):
    """(target, int8 draft, prompts): SmolLM2 and the standard prompt set, or tiny models and token prompts."""
    from otspec_gpu import models

    if quick:
        target, draft = models.load("tiny"), models.load("tiny-draft")
        rng = np.random.default_rng(0)
        prompts = []
        for i in range(4):  # a repeated motif, so that prompt lookup finds matches
            motif = [int(t) for t in rng.integers(0, target.vocab_size, 3)]
            prompts.append(dict(id=f"quick/{i}", domain="humaneval" if i < 2 else "code", ids=motif * 3 + motif[:1]))
        return target, draft, prompts
    return models.smollm2(), models.smollm2_int8(), None


def select_prompts(target, n_humaneval: int, n_own: int, seed: int) -> list[dict]:
    """A seeded subset: ``n_humaneval`` HumanEval prompts and ``n_own`` of ours, the same number per domain."""
    from _prompts import DOMAINS, encode, humaneval_prompts, own_prompts

    rng = np.random.default_rng(seed)
    he = humaneval_prompts()
    picked = [he[i] for i in sorted(rng.choice(len(he), size=min(n_humaneval, len(he)), replace=False))]
    own = own_prompts()
    per = n_own // len(DOMAINS)
    for d in DOMAINS:
        mine = [p for p in own if p.domain == d]
        picked += [mine[i] for i in sorted(rng.choice(len(mine), size=min(per, len(mine)), replace=False))]
    return [dict(id=p.id, domain=p.domain, ids=encode(target, p)) for p in picked]


def forward_cost(target, ids: list, gamma: int, repeats: int = 3) -> dict:
    """Median CPU seconds of one cached target forward over 1 and over ``gamma + 1`` new positions after the prompt."""
    import torch
    from transformers import DynamicCache

    times: dict = {1: [], gamma + 1: []}
    with torch.no_grad():
        cache = DynamicCache()
        target.model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
        for _ in range(repeats):
            for n in times:
                x = torch.tensor([ids[-n:] if len(ids) >= n else (ids * n)[:n]])
                t0 = time.process_time()
                target.model(input_ids=x, past_key_values=cache, use_cache=True)
                times[n].append(time.process_time() - t0)
                cache.crop(-n)
    return {"forward_1_s": float(np.median(times[1])), "forward_block_s": float(np.median(times[gamma + 1]))}


def interleave(prompts: list[dict]) -> list[dict]:
    """HumanEval and our own prompts alternately (our domains in turn), so that a run stopped by its
    time budget holds both sets in equal numbers."""
    he = [p for p in prompts if p["domain"] == "humaneval"]
    own = [p for p in prompts if p["domain"] != "humaneval"]
    domains = sorted({p["domain"] for p in own})
    by = {d: [p for p in own if p["domain"] == d] for d in domains}
    own_rr = [by[d][i] for i in range(max((len(v) for v in by.values()), default=0)) for d in domains if i < len(by[d])]
    out = []
    for i in range(max(len(he), len(own_rr))):
        out += ([he[i]] if i < len(he) else []) + ([own_rr[i]] if i < len(own_rr) else [])
    return out


def seed_of(seed: int, prompt: int, method: int) -> int:
    """An independent seed per (run, prompt, method)."""
    return int(np.random.SeedSequence([seed, prompt, method]).generate_state(1)[0] >> 1)


def run_all(
    target, draft, prompts: list[dict], methods: list[str], n_new: int, gamma: int, ngram: int, seed: int, budget_s: float
) -> tuple[list[dict], list[dict]]:
    """Every method on every prompt (a seeded order per prompt) until the time budget is spent: (rows, forward costs)."""
    from otspec_gpu.prompt_lookup import PromptLookup

    rng = np.random.default_rng(seed)
    rows, costs, t0 = [], [], time.perf_counter()
    for i, pr in enumerate(prompts):
        if time.perf_counter() - t0 > budget_s:
            print(f"time budget spent after {i} prompts", flush=True)
            break
        costs.append(dict(prompt=pr["id"], domain=pr["domain"], **forward_cost(target, pr["ids"], gamma)))
        order = [methods[j] for j in rng.permutation(len(methods))]
        for m in order:
            s = seed_of(seed, i, METHODS.index(m))
            if m == "plain":
                r = run_hf(target, pr["ids"], n_new, gamma, s)
            elif m == "lookup":
                r = run_otspec(target, PromptLookup(ngram), pr["ids"], n_new, gamma, s)
            elif m == "int8":
                r = run_otspec(target, draft, pr["ids"], n_new, gamma, s)
            elif m == "hf-int8":
                r = run_hf(target, pr["ids"], n_new, gamma, s, assistant=draft)
            else:
                r = run_hf(target, pr["ids"], n_new, gamma, s, lookup_ngram=ngram)
            r.update(prompt=pr["id"], domain=pr["domain"], method=m, prompt_tokens=len(pr["ids"]))
            rows.append(r)
            print(
                f"{i + 1}/{len(prompts)} {pr['id']:>16} {m:>9}: {r['tokens']} tokens in {r['seconds']:.2f} s "
                f"({r['tokens'] / r['seconds']:.2f} tok/s), {r['rounds']} rounds",
                flush=True,
            )
    return rows, costs


def summarise(rows: list[dict], methods: list[str], groups: dict[str, list[str]], seed: int) -> dict:
    """Per group of prompts and method: tokens/s, speed relative to plain, block efficiency (prompt-clustered)."""
    from otspec.stats import clustered_ratio as _ratio

    def clustered_ratio(a, b, cl, seed, reference=None):
        r = _ratio(a, b, cl, seed=seed)
        d = dict(value=r.value, low=r.low, high=r.high, confidence=r.confidence, n_clusters=r.n_clusters, method=r.method)
        if reference is not None:  # two-sided bootstrap p-value of "the ratio equals reference"
            d["pvalue_vs_1"] = r.pvalue(reference) if r.distribution is not None else float("nan")
        return d

    out: dict = {}
    for g, ids in groups.items():
        by = {m: {r["prompt"]: r for r in rows if r["method"] == m and r["prompt"] in ids} for m in methods}
        common = sorted(set.intersection(*(set(v) for v in by.values())))
        if not common:
            continue
        res = {}
        for m in methods:
            rs = [by[m][p] for p in common]
            tok = np.array([r["tokens"] for r in rs], dtype=float)
            sec = np.array([r["seconds"] for r in rs])
            rounds = np.array([r["rounds"] for r in rs], dtype=float)
            cl = np.arange(len(rs))
            e = dict(n_prompts=len(rs))
            for clock, key in (("cpu", "cpu_seconds"), ("wall", "seconds")):
                t = np.array([r[key] for r in rs])
                suffix = "" if clock == "cpu" else "_wall"
                e["tokens_per_s" + suffix] = clustered_ratio(tok, t, cl, seed=seed)
                if m != "plain":
                    base = np.array([by["plain"][p][key] / by["plain"][p]["tokens"] for p in common])
                    e["speed_vs_plain" + suffix] = clustered_ratio(base, t / tok, cl, seed=seed, reference=1.0)
            e["block_efficiency"] = clustered_ratio(tok, rounds, cl, seed=seed)
            if "expected" in rs[0]:
                acc = np.array([r["accepted"] for r in rs])
                exp = np.array([r["expected"] for r in rs])
                e["accepted_per_round"] = clustered_ratio(acc, rounds, cl, seed=seed)
                e["expected_per_round"] = clustered_ratio(exp, rounds, cl, seed=seed)
                e["verify_share"] = float(sum(r["verify_s"] for r in rs) / sec.sum())  # of wall time
            if "matched_rounds" in rs[0]:
                e["match_rate"] = clustered_ratio(np.array([r["matched_rounds"] for r in rs], dtype=float), rounds, cl, seed=seed)
            res[m] = e
        out[g] = res
    return out


def ci(d: dict | None, digits: int = 2) -> str:
    if d is None:
        return "-"
    return f"{fmt(d['value'], digits)} [{fmt(d['low'], digits)}, {fmt(d['high'], digits)}]"


def tables(summary: dict, methods: list[str]) -> dict[str, str]:
    out = {}
    for g, res in summary.items():
        rows = []
        for m in methods:
            e = res[m]
            rows.append(
                [
                    LABELS[m],
                    e["n_prompts"],
                    ci(e["tokens_per_s"]),
                    ci(e.get("speed_vs_plain"), 3),
                    ci(e.get("speed_vs_plain_wall"), 3),
                    ci(e["block_efficiency"], 3),
                    (ci(e["accepted_per_round"], 3) + " / " + fmt(e["expected_per_round"]["value"], 3))
                    if "expected_per_round" in e
                    else "-",
                    ci(e["match_rate"], 3) if "match_rate" in e else "-",
                ]
            )
        out[f"{g} (95% cluster-bootstrap intervals over prompts)"] = markdown_table(
            [
                "method",
                "prompts",
                "tokens per CPU-second",
                "speed / plain (CPU time)",
                "speed / plain (wall clock)",
                "tokens per round",
                "accepted per round: realized / exact expected",
                "rounds with a match",
            ],
            rows,
        )
    return out


def plot(summary: dict, methods: list[str], out: str) -> None:
    import matplotlib.pyplot as plt

    groups = [g for g in ("humaneval", "own") if g in summary]
    ms = [m for m in methods if m != "plain"]
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    w = 0.8 / max(len(groups), 1)
    for j, g in enumerate(groups):
        v = [summary[g][m]["speed_vs_plain"] for m in ms]
        x = np.arange(len(ms)) + (j - (len(groups) - 1) / 2) * w
        val = np.array([d["value"] for d in v])
        err = np.array([[d["value"] - d["low"], d["high"] - d["value"]] for d in v]).T
        ax.bar(x, val, w, yerr=np.nan_to_num(err), capsize=3, label=g)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xticks(np.arange(len(ms)), [LABELS[m].replace(", ", ",\n") for m in ms], fontsize=8)
    ax.set_ylabel("speed relative to plain sampling")
    ax.set_title("tokens per CPU-second relative to plain sampling (B = 1; 95% intervals over prompts)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out, NAME)


def report(args, rows: list[dict], costs: list[dict], run_s: float, models: dict, measured: dict | None = None) -> None:
    """Summaries, tables, plot and the JSON / markdown of a run (``measured``: the stored run's meta when re-summarised)."""
    from otspec.stats import clustered_ratio

    methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
    seen: dict = {}
    for r in rows:
        seen.setdefault(r["prompt"], r["domain"])
    groups = {
        "all": list(seen),
        "humaneval": [p for p, d in seen.items() if d == "humaneval"],
        "own": [p for p, d in seen.items() if d != "humaneval"],
    }
    for d in sorted(set(seen.values()) - {"humaneval"}):
        groups[f"own: {d}"] = [p for p, dd in seen.items() if dd == d]
    summary = summarise(rows, methods, {g: v for g, v in groups.items() if v}, args.seed)
    cost = clustered_ratio([c["forward_block_s"] for c in costs], [c["forward_1_s"] for c in costs], np.arange(len(costs)), seed=args.seed)
    cost_d = dict(value=cost.value, low=cost.low, high=cost.high)
    plot(summary, methods, args.out)
    where = (
        f"Measured by `{measured['command']}` at revision `{measured['git_revision']}`; summarised from its stored per-prompt data. "
        if measured
        else ""
    )
    notes = [
        f"{where}Run time {run_s / 60:.1f} min on this machine ({os.cpu_count()} shared CPU cores, one torch thread); prompts: "
        f"{len(groups['humaneval'])} HumanEval and {len(groups['own'])} of ours (a seeded subset in alternating order, the run stopped "
        f"by its time budget), {args.max_new_tokens} new tokens each, gamma {args.gamma}, n-gram <= {args.ngram}.",
        "Speeds are tokens per CPU-second of the whole call (prefill included, one torch thread: the speed on an otherwise idle "
        "core, robust to the other jobs of this shared machine), and alongside the same ratio in wall-clock time; otspec's exact "
        "per-round theory is timed apart and subtracted.",
        "Tokens per round: generated tokens per verification round (target forward after the prefill); plain sampling: 1.",
        f"One cached target forward over gamma + 1 = {args.gamma + 1} positions costs {ci(cost_d, 2)} times a forward over one "
        f"position (CPU time, median of 3 each per prompt, ratio of sums over {len(costs)} prompts): so, draft and verification cost "
        "aside, a speculative round must emit more tokens than that ratio to beat plain sampling.",
    ]
    payload = dict(
        args={k: v for k, v in vars(args).items() if k != "revision_at_start"},
        run_s=run_s,
        measured=measured,
        summary=summary,
        per_prompt=rows,
        forward_cost=dict(block_over_one=cost_d, per_prompt=costs),
        models=models,
    )
    write(args.out, NAME, args, payload, tables(summary, methods), notes)


def main(argv: list[str] | None = None) -> None:
    ap = parser(NAME, __doc__.split("\n")[0])
    ap.add_argument("--n-humaneval", type=int, default=24, help="HumanEval prompts, a seeded subset (default 24)")
    ap.add_argument("--n-own", type=int, default=24, help="our own prompts, the same number per domain, seeded (default 24)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--ngram", type=int, default=3, help="longest n-gram of the prompt-lookup drafts (default 3)")
    ap.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset of " + ",".join(METHODS))
    ap.add_argument(
        "--budget-min",
        type=float,
        default=35.0,
        help="stop starting new prompts after this many minutes (HumanEval and ours alternate; default 35)",
    )
    ap.add_argument(
        "--summarise",
        default=None,
        metavar="JSON",
        help="measure nothing: recompute the summary, tables and plot from a stored bench_decode.json (its settings are used)",
    )
    args = parse(ap, argv)
    if args.summarise:
        import json

        with open(args.summarise) as f:
            stored = json.load(f)
        for key in ("max_new_tokens", "gamma", "ngram", "seed"):
            setattr(args, key, stored["args"][key])
        measured = stored.get("measured") or dict(command=stored["meta"]["command"], git_revision=stored["meta"]["git_revision"])
        costs = stored["forward_cost"]["per_prompt"]
        report(args, stored["per_prompt"], costs, stored["run_s"], stored["models"], measured)
        return
    import torch

    torch.set_num_threads(1)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad or "plain" not in methods:
        ap.error(f"--methods must name methods of {list(METHODS)} and include plain (got {args.methods!r})")
    t_start = time.perf_counter()
    target, draft, prompts = load(args.quick)
    if args.quick:
        args.max_new_tokens = min(args.max_new_tokens, 12)
    else:
        prompts = select_prompts(target, args.n_humaneval, args.n_own, args.seed)
    prompts = interleave(prompts)
    rows, costs = run_all(target, draft, prompts, methods, args.max_new_tokens, args.gamma, args.ngram, args.seed, 60 * args.budget_min)
    report(args, rows, costs, time.perf_counter() - t_start, dict(target=target.name, draft=draft.name))


if __name__ == "__main__":
    main()
