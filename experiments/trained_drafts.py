"""The trained SmolLM2 drafts measured: cost per drafted token, acceptance on held-out prompts, wall clock.

For each trained draft (``smollm2-exit<L>``, ``smollm2-medusa``, ``smollm2-eagle``; built by
``otspec train-draft``):

(a) **cost**: the draft's time per drafted token over the target's time per decoding step (one
    cached token at a context of ~100 tokens), medians of ``--repeats`` interleaved samples (draft
    and target alternate, so a load burst hits both); the target's forward over 2..4 new positions
    (a verification) on the same clock;
(b) **acceptance** on held-out prompts (the experiments' own prompt set, never used in training): the
    target samples ``--alpha-tokens`` tokens after each prompt at temperature 1, and at every
    position the single-draft acceptance :math:`\\alpha = \\sum_x \\min(p, q)` of each drafted step
    is computed by teacher forcing (early exit: its law at the same position; Medusa head ``i``:
    :math:`q_i(h_t)` against :math:`p_{t+1+i}`; EAGLE: its first and second step along the text), at
    temperatures 1 and 0.6 (the same contexts, both models' logits divided by the temperature);
    mean with a 95% interval clustered by prompt;
(c) **wall clock**: ``otspec_gpu.decoding.decode`` (what ``otspec decode`` runs) with token
    verification for each configuration (draft, gamma) against plain sampling with the target alone
    (one cached forward and one draw per token), on the same prompts, interleaved per prompt;
    seconds exclude the prefill on both sides and the exact-theory phase (``theory=False``). The
    speed-up is the ratio of tokens per second, with a 95% BCa interval clustered by prompt
    (:func:`otspec.stats.clustered_relative_change`); tokens per target call are reported beside it.

``--quick`` trains tiny heads on a tiny random-weight target in-process (seconds); its numbers are
not results.

    python experiments/trained_drafts.py --out docs/_static/results/trained_drafts
    python experiments/trained_drafts.py --quick --out /tmp/td
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import warnings

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import numpy as np
from _output import ci, experiment, fmt, markdown_table, save_figure

NAME = "trained_drafts"
DRAFTS = ("smollm2-exit6", "smollm2-medusa", "smollm2-eagle")
#: (draft, gamma) configurations decoded against plain sampling.
CONFIGS = "smollm2-eagle:1,smollm2-eagle:2,smollm2-medusa:1,smollm2-exit6:1"
TEMPERATURES = (1.0, 0.6)


def arguments(ap) -> None:
    ap.add_argument("--drafts", default=",".join(DRAFTS), help="trained drafts to measure (comma-separated)")
    ap.add_argument("--configs", default=CONFIGS, help="draft:gamma pairs decoded against plain sampling ('' skips (c))")
    ap.add_argument("--alpha-prompts", type=int, default=16, help="held-out prompts of the acceptance measurement")
    ap.add_argument("--alpha-tokens", type=int, default=64, help="sampled tokens per prompt for the acceptance")
    ap.add_argument("--decode-prompts", type=int, default=8, help="prompts of the wall-clock measurement")
    ap.add_argument("--decode-tokens", type=int, default=64, help="new tokens per prompt in the wall-clock measurement")
    ap.add_argument("--repeats", type=int, default=21, help="interleaved samples per cost measurement")


# ---------------------------------------------------------------- models


def _quick_models(seed: int):
    """A tiny target and its three drafts trained in-process for a few steps (the quick run)."""
    import torch

    from otspec_gpu.models import tiny
    from otspec_gpu.models.early_exit import load_early_exit
    from otspec_gpu.models.heads import load_head
    from otspec_gpu.training.build import build_draft
    from otspec_gpu.training.features import extract

    target = tiny(seed=0, vocab_size=11, layers=3, name="tiny")
    g = torch.Generator().manual_seed(seed)
    seqs = torch.randint(0, 11, (40, 16), generator=g).tolist()
    d = tempfile.mkdtemp(prefix="otspec-td-")
    extract(target, seqs, layers=(1,), out_dir=os.path.join(d, "f"))
    drafts = {}
    for name in ("tiny-exit1", "tiny-medusa", "tiny-eagle"):
        build_draft(name, target, os.path.join(d, "f"), steps=10, batch=16, seed=seed, directory=d)
        drafts[name] = load_early_exit(name, lambda: target, directory=d) if "exit" in name else load_head(name, d)[0]
    return target, drafts, "tiny-medusa:2,tiny-eagle:2,tiny-exit1:1"


def _models(args):
    from otspec_gpu.models import load, smollm2
    from otspec_gpu.models.heads import load_head

    target = smollm2()
    drafts = {}
    for name in [d for d in args.drafts.split(",") if d]:
        drafts[name] = load(name) if "-exit" in name else load_head(name)[0]
    return target, drafts, args.configs


def _sidecar(name: str) -> dict:
    """The training record of a built draft (its JSON sidecar: data, steps, seconds, held-out losses)."""
    import json

    from otspec_gpu.models.heads import head_paths

    info = json.loads(head_paths(name)[1].read_text())
    return {k: info.get(k) for k in ("architecture", "seed", "training", "training_data", "otspec_version")}


def _source(name: str, draft):
    """The decoder's draft source of a loaded draft."""
    if "-exit" in name:
        return draft
    from otspec_gpu.head_drafters import EagleDraft, MedusaDraft

    return MedusaDraft(head=draft) if "medusa" in name else EagleDraft(head=draft)


# ---------------------------------------------------------------- (a) cost


def measure_costs(target, drafts: dict, ctx: list[int], repeats: int, seed: int) -> dict:
    """Median seconds of a target step, of target forwards over 2..4 positions and of each draft's
    drafted token, interleaved (module docstring, (a))."""
    import torch
    from transformers import DynamicCache

    gen = torch.Generator().manual_seed(seed)
    lm_head = target.model.get_output_embeddings()
    emb = target.model.get_input_embeddings()
    x = torch.tensor([ctx])

    def cached(lm):
        c = DynamicCache()
        lm.logits(x, cache=c)
        return c

    def step(lm, cache, n):
        def run():
            lm.logits(torch.tensor([ctx[-n:]]), cache=cache)
            cache.crop(-n)

        return run

    def draw(logits):
        torch.multinomial(torch.softmax(logits.double(), -1), 1, generator=gen)

    from otspec_gpu.scoring import forward

    h = forward(target, x, hidden=True)[1][0, -1:]  # the target's feature at the context's end
    tok = torch.tensor([ctx[-1]])
    tc = cached(target)
    jobs = {"target_step": step(target, tc, 1), **{f"target_forward_{n}": step(target, tc, n) for n in (2, 3, 4)}}
    for name, d in drafts.items():
        if "-exit" in name:
            dc = cached(d)

            def run(d=d, dc=dc):
                draw(d.logits(torch.tensor([ctx[-1:]]), cache=dc)[0, -1])
                dc.crop(-1)

        elif "medusa" in name:

            def run(d=d):  # one head's feature, output layer and draw: the cost of one drafted token
                with torch.no_grad():
                    u = d.features(h)[:, 0]
                    draw(lm_head(u)[0])

        else:

            def run(d=d):
                with torch.no_grad():
                    f = d.features(h, tok, emb)
                    draw(lm_head(f)[0])

        jobs[name] = run
    times: dict = {k: [] for k in jobs}
    for fn in jobs.values():  # warm-up
        fn()
    for _ in range(repeats):
        for k, fn in jobs.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"median_s": med, "relative_to_target_step": {k: med[k] / med["target_step"] for k in med}, "repeats": repeats}


# ---------------------------------------------------------------- (b) acceptance


def _alpha(p_logits, q_logits, temperature: float) -> np.ndarray:
    import torch

    p = torch.softmax(p_logits.double() / temperature, -1)
    q = torch.softmax(q_logits.double() / temperature, -1)
    return torch.minimum(p, q).sum(-1).numpy()


def acceptance(target, drafts: dict, texts, temperatures) -> dict:
    """Per draft, drafted step and temperature: the acceptance at every position of ``texts``
    (``(sequence, prompt length)`` pairs) and its prompt index (module docstring, (b))."""
    import torch

    from otspec_gpu.scoring import forward

    emb = target.model.get_input_embeddings()
    lm_head = target.model.get_output_embeddings()
    out: dict = {}

    def add(key, j, T, values):
        e = out.setdefault(key, {}).setdefault(f"T{T:g}", {"alpha": [], "prompt": []})
        e["alpha"] += values.tolist()
        e["prompt"] += [j] * len(values)

    for j, (seq, n_prompt) in enumerate(texts):
        x = torch.tensor([seq[:-1]])
        pl, h = forward(target, x, hidden=True)
        pl, h = pl[0], h[0]
        t0, n = n_prompt - 1, pl.shape[0]  # position t's law p_t is that of seq[t + 1]
        toks = torch.tensor(seq)
        with torch.no_grad():
            for name, d in drafts.items():
                for T in temperatures:
                    if "-exit" in name:
                        add((name, 0), j, T, _alpha(pl[t0:], d.logits(x)[0, t0:], T))
                    elif "medusa" in name:
                        for i in range(d.n_heads):
                            ts = torch.arange(t0, n - 1 - i)
                            add((name, i), j, T, _alpha(pl[ts + 1 + i], d(h[ts], lm_head)[:, i], T))
                    else:
                        ts = torch.arange(t0, n - 2)
                        f1 = d.features(h[ts], toks[ts + 1], emb)
                        f2 = d.features(f1, toks[ts + 2], emb)
                        add((name, 0), j, T, _alpha(pl[ts + 1], lm_head(f1), T))
                        add((name, 1), j, T, _alpha(pl[ts + 2], lm_head(f2), T))
    return out


# ---------------------------------------------------------------- (c) wall clock


def plain_sampling(target, ids: list[int], tokens: int, seed: int) -> dict:
    """Plain sampling with the target alone: seconds after the prefill for ``tokens`` tokens."""
    import torch
    from transformers import DynamicCache

    gen = torch.Generator().manual_seed(seed)
    cache = DynamicCache()
    logits = target.logits(torch.tensor([ids]), cache=cache)[0, -1]
    t0 = time.perf_counter()
    for _ in range(tokens):
        tok = int(torch.multinomial(torch.softmax(logits.double(), -1), 1, generator=gen))
        logits = target.logits(torch.tensor([[tok]]), cache=cache)[0, -1]
    return {"seconds": time.perf_counter() - t0, "tokens": tokens, "target_calls": tokens}


def speculative(target, source, ids: list[int], gamma: int, tokens: int, seed: int) -> dict:
    """One ``decode`` run with token verification: seconds after the prefill, tokens, target calls."""
    from otspec_gpu.decoding import decode

    res = decode(target, source, [ids], verifier="token", gamma=gamma, max_new_tokens=tokens, seed=seed, stop_at_eos=False, theory=False)
    cfg = res.trace.columns
    theory = float(np.sum(cfg["round_t_theory"])) if "round_t_theory" in cfg else 0.0
    rounds = len(cfg["tau"])
    return {
        "seconds": float(res.config["wall_s"]) - float(res.config["prefill_s"]) - theory,
        "tokens": len(res.tokens[0]),
        "target_calls": rounds,
        "accepted": float(np.sum(cfg["tau"])),
    }


def wall_clock(target, drafts: dict, configs: list[tuple[str, int]], prompt_ids, tokens: int, seed: int, log) -> dict:
    """Plain sampling and every configuration on each prompt, interleaved (module docstring, (c))."""
    from otspec.stats import clustered_relative_change

    runs: dict = {"plain": []} | {f"{n}:{g}": [] for n, g in configs}
    for j, ids in enumerate(prompt_ids):
        runs["plain"].append(plain_sampling(target, ids, tokens, seed + j))
        for n, g in configs:
            runs[f"{n}:{g}"].append(speculative(target, _source(n, drafts[n]), ids, g, tokens, seed + j))
        log(f"decode prompt {j + 1}/{len(prompt_ids)}: " + ", ".join(f"{k} {v[-1]['seconds']:.2f} s" for k, v in runs.items()))
    plain = runs["plain"]
    clusters = np.arange(len(prompt_ids))
    out = {"plain": {"per_prompt": plain, "tokens_per_s": sum(r["tokens"] for r in plain) / sum(r["seconds"] for r in plain)}}
    for key in runs:
        if key == "plain":
            continue
        rs = runs[key]
        g = clustered_relative_change(
            [r["tokens"] for r in rs],
            [r["seconds"] for r in rs],
            clusters,
            [r["tokens"] for r in plain],
            [r["seconds"] for r in plain],
            clusters,
            seed=seed,
        ).as_dict()
        out[key] = {
            "per_prompt": rs,
            "tokens_per_s": sum(r["tokens"] for r in rs) / sum(r["seconds"] for r in rs),
            "tokens_per_target_call": sum(r["tokens"] for r in rs) / sum(r["target_calls"] for r in rs),
            "speedup": {k: (1.0 + v if k in ("value", "low", "high") and v is not None else v) for k, v in g.items()},
        }
    return out


# ---------------------------------------------------------------- run / report


def run(args) -> dict:
    import torch
    from _real import continuations_ids, prompt_token_ids, select_prompts

    from otspec.stats import clustered_mean

    if args.quick:  # two prompts: the intervals are not results there
        warnings.simplefilter("ignore", category=Warning)
    torch.manual_seed(args.seed)
    log = (lambda s: None) if args.quick else (lambda s: print(s, flush=True))
    if args.quick:
        target, drafts, configs = _quick_models(args.seed)
        n_alpha, n_tok, n_dec, n_dtok, reps = 2, 6, 2, 6, 3
    else:
        target, drafts, configs = _models(args)
        n_alpha, n_tok, n_dec, n_dtok, reps = args.alpha_prompts, args.alpha_tokens, args.decode_prompts, args.decode_tokens, args.repeats
    prompts = select_prompts("own", n_alpha, seed=args.seed)
    ids = prompt_token_ids(target, prompts, args.seed, quick=args.quick)
    t0 = time.time()
    texts = continuations_ids(target, ids, n_tok, 1.0, args.seed)
    acc = acceptance(target, drafts, texts, TEMPERATURES)
    alpha = {}
    for (name, i), by_t in acc.items():
        for T, e in by_t.items():
            iv = clustered_mean(np.asarray(e["alpha"]), np.asarray(e["prompt"]), seed=args.seed).as_dict()
            alpha.setdefault(name, {}).setdefault(T, []).append({"step": i, **iv})
    log(f"acceptance: {time.time() - t0:.0f} s")
    ctx = (texts[0][0] * 4)[:100]
    costs = measure_costs(target, drafts, ctx, reps, args.seed)
    log(f"costs: {costs['relative_to_target_step']}")
    pairs = [(c.split(":")[0], int(c.split(":")[1])) for c in configs.split(",") if c]
    pairs = [(n, g) for n, g in pairs if n in drafts]
    dec_prompts = select_prompts("own", n_dec, seed=args.seed + 1)
    dec_ids = prompt_token_ids(target, dec_prompts, args.seed, quick=args.quick)
    clock = wall_clock(target, drafts, pairs, dec_ids, n_dtok, args.seed, log) if pairs else {}
    training = {} if args.quick else {name: _sidecar(name) for name in drafts}
    return {
        "quick": bool(args.quick),
        "seed": args.seed,
        "target": target.name,
        "threads": torch.get_num_threads(),
        "acceptance": {"prompts": [p.id for p in prompts], "tokens_per_prompt": n_tok, "temperatures": list(TEMPERATURES), "alpha": alpha},
        "costs": costs,
        "decode": {"prompts": [p.id for p in dec_prompts], "tokens_per_prompt": n_dtok, "verifier": "token", "results": clock},
        "training": training,
        "load_average": list(os.getloadavg()),
    }


def tables_of(payload: dict) -> dict[str, str]:
    """The markdown tables of a payload (the report's and the documentation's ``table.md``)."""
    rel = payload["costs"]["relative_to_target_step"]
    rows = []
    for name, by_t in payload["acceptance"]["alpha"].items():
        for T, steps in by_t.items():
            rows.append([name, T, fmt(rel.get(name, float("nan")), 3), "; ".join(f"step {s['step']}: {ci(s)}" for s in steps)])
    tables = {
        "Cost per drafted token (x a target step) and held-out acceptance (95% CI, clustered by prompt)": markdown_table(
            ["draft", "T", "cost", "alpha per drafted step"], rows
        )
    }
    steps = [k for k in rel if k.startswith("target_forward_")]
    tables["Target forward over n new positions with a cache (x a target step)"] = markdown_table(
        ["n", *(k.rsplit("_", 1)[1] for k in steps)], [["cost", *(fmt(rel[k], 3) for k in steps)]]
    )
    res = payload["decode"]["results"]
    if res:
        drows = [["plain sampling", "-", fmt(res["plain"]["tokens_per_s"], 2), "1.000", "1 (reference)"]]
        for key, r in res.items():
            if key != "plain":
                drows.append(
                    [key.split(":")[0], key.split(":")[1], fmt(r["tokens_per_s"], 2), fmt(r["tokens_per_target_call"], 3), ci(r["speedup"])]
                )
        tables["Wall clock against plain sampling (token verification, T = 1)"] = markdown_table(
            ["draft", "gamma", "tokens/s", "tokens per target call", "speed-up (95% CI)"], drows
        )
    return tables


def render(payload: dict) -> str:
    """``table.md`` of the documentation: the tables of :func:`tables_of`, each under a bold title."""
    return "".join(f"**{title}**\n\n{table}\n\n" for title, table in tables_of(payload).items())


def write_table(args) -> None:
    """Write ``table.md`` next to the JSON (the documentation includes it)."""
    import json

    with open(os.path.join(args.out, f"{NAME}.json")) as f:
        payload = json.load(f)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(render(payload))


def report(payload: dict, args):
    import matplotlib.pyplot as plt

    rel = payload["costs"]["relative_to_target_step"]
    tables = tables_of(payload)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, by_t in payload["acceptance"]["alpha"].items():
        steps = by_t.get("T1", [])
        ax.plot([s["step"] for s in steps], [s["value"] for s in steps], "o-", label=f"{name} (cost {rel.get(name, float('nan')):.2f})")
    ax.set_xlabel("drafted step")
    ax.set_ylabel("acceptance alpha (T = 1)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, args.out, NAME)
    notes = [
        f"target {payload['target']}, {payload['threads']} torch thread(s); acceptance on {len(payload['acceptance']['prompts'])} held-out prompts "
        f"x {payload['acceptance']['tokens_per_prompt']} sampled tokens; decoding on {len(payload['decode']['prompts'])} prompts x "
        f"{payload['decode']['tokens_per_prompt']} tokens; load average at the end {payload['load_average']}"
    ]
    return tables, notes


def main(argv: list[str] | None = None) -> dict:
    return experiment(NAME, __doc__, argv, run=run, report=report, arguments=arguments, after_write=write_table)


if __name__ == "__main__":
    main()
