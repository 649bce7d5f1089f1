"""Check the speedup model (:mod:`otspec.speedup`) against measured ``otspec decode`` wall clock.

For one model pair and drafter, at each draft length ``gamma`` (a *configuration*):

(a) **costs, measured apart** from decoding, before every prompt and after the last (each
    prompt's prediction uses the measurements right before and after it, so that a drifting load
    hits prediction and measurement alike): the target forward over ``n = 1 .. gamma + 1`` new positions with a key/value cache
    holding a context as long as decoding's middle (the decoder's own cache object,
    :class:`otspec_gpu.scoring.RowCache`, and its probability transform; median of ``--repeats`` per
    measurement, sizes interleaved), the cache crop after it, one token-verification step on those rows
    (:class:`otspec_gpu.verifying.VerifierStep`), and the draft's cost per drafted token (one cached
    draft forward, its transform and one draw; prompt lookup: one ``draft`` call of its drafter over
    ``gamma``);
(b) **decoding**: :func:`otspec_gpu.decoding.decode` (what ``otspec decode`` runs), token
    verification, one prompt at a time, after a short warm-up; measured seconds are the call's wall
    clock minus its prefill and its exact-theory phase (``wall_s - prefill_s - round_t_theory``),
    and, on CPU, its process time minus the CPU time of the prefill and of the theory;
(c) **prediction** with :mod:`otspec.speedup` from the costs of (a) and acceptance from two
    sources independent of the measured time: the run's exact per-round theory (tokens per round
    :math:`1 + E[\\tau \\mid \\text{drafts}]`, over the run's rounds) and a teacher-forced pass over
    each generated text (per-position acceptance :math:`\\alpha_t`: prompt lookup, :math:`p_t(d_t)`
    of the token the lookup proposes there; a draft model, :math:`\\sum_x \\min(p_t, q_t)`), whose
    expected rounds come from the renewal model (:func:`otspec.speedup.expected_rounds`). Two cost
    models: *full* (target forward + crop + verify step per round, plus the draft) and *forward*
    (the target forward and the draft only: what a user who times the model alone would enter); and,
    for comparison, the constant-acceptance formula of engine docs at the mean teacher-forced
    acceptance (:func:`otspec.speedup.constant_acceptance_tokens`);
(d) the **prediction error** ``predicted tokens/s / measured tokens/s - 1`` per configuration, with a
    95% cluster-bootstrap interval over prompts (:func:`otspec.stats.clustered_relative_change`),
    split into its acceptance part (tokens per round) and its cost part (seconds per round).

The JSON (``speedup_check.json``) is rewritten after every configuration, so an interrupted run
keeps what it measured; ``speedup_check.md`` holds the table. ``--render DIR`` writes ``DIR/table.md``
from every ``*.json`` result in ``DIR`` (the documentation's table).

Models: SmolLM2-135M-Instruct with prompt lookup and the int8 self-draft (``--drafters``), or with
``--random-weights`` SmolLM2-135M's shapes with random weights (the output layer scaled x6, so the
laws are not near uniform) and an early-exit draft (the target's first 4 layers, final norm and
head): model files cannot travel to a lent GPU machine; random weights make acceptance meaningless
but leave every cost real, and the check compares a prediction with a measurement on the same run.

Defaults (``--prompts`` x ``--tokens``): 8 x 48 on CUDA, 6 x 24 on CPU; ``gamma`` in 1, 2, 4.

    python experiments/speedup_check.py --random-weights --device cuda --out DIR
    python experiments/speedup_check.py --random-weights --device cpu --threads 2 --out DIR
    python experiments/speedup_check.py --drafters prompt-lookup --prompts 12 --tokens 48 --out DIR
    python experiments/speedup_check.py --random-weights --quick --out DIR    # tiny shapes, seconds
    python experiments/speedup_check.py --render docs/_static/results/speedup
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import statistics
import sys
import time
import traceback
import warnings
from contextlib import contextmanager

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the network for models or tokenizers
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
sys.path.append(os.path.dirname(_HERE))  # otspec from this checkout when it is not installed (a bare GPU machine)

NAME = "speedup_check"
GAMMAS = (1, 2, 4)
#: (prompts, new tokens per prompt) by device: the CUDA and the 2-thread CPU run together take
#: about 4 minutes on an H200 machine.
DEFAULT_SIZES = {"cuda": (8, 48), "cpu": (6, 24)}
QUICK_SIZES = (2, 6)
EARLY_EXIT_LAYERS = 4
HEAD_SCALE = 6.0


# ---------------------------------------------------------------- models, prompts, drafters


def random_models(quick: bool, device: str):
    """Target and early-exit draft with random weights: SmolLM2-135M's shapes (tiny ones with ``quick``)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from otspec_gpu.models import wrap

    if quick:
        shape = dict(
            vocab_size=512, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128
        )
        n_draft = 1
    else:
        shape = dict(
            vocab_size=49_152, hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, intermediate_size=1_536
        )
        n_draft = EARLY_EXIT_LAYERS
    common = dict(max_position_embeddings=2048, tie_word_embeddings=True, bos_token_id=0, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    target = LlamaForCausalLM(LlamaConfig(**shape, **common)).eval()
    with torch.no_grad():
        target.lm_head.weight.mul_(HEAD_SCALE)  # tied with the embedding: both scaled, which sharpens the laws
    draft = LlamaForCausalLM(LlamaConfig(**{**shape, "num_hidden_layers": n_draft}, **common)).eval()
    draft.load_state_dict(target.state_dict(), strict=False)  # the early exit: first layers, final norm, head
    name = "tiny-shaped" if quick else "smollm2-shaped"
    return wrap(target.to(device), name=f"{name} (random weights)"), wrap(draft.to(device), name=f"early-exit-{n_draft}")


def load_models(args):
    """``(target, {drafter name: draft source}, prompts as [(id, token ids)])``."""
    import torch

    from otspec_gpu.prompt_lookup import PromptLookup

    lookup = PromptLookup()
    if args.random_weights:
        target, early = random_models(args.quick, args.device)
        gen = torch.Generator().manual_seed(args.seed)
        ids = torch.randint(1, target.vocab_size, (args.prompts, 32), generator=gen).tolist()
        prompts = [(f"random/{i}", p) for i, p in enumerate(ids)]
        sources = {"prompt-lookup": lookup, "early-exit": early}
    else:
        from _prompts import DOMAINS, encode, own_prompts

        from otspec_gpu import models

        target = models.smollm2()
        sources = {"prompt-lookup": lookup}
        if "int8" in args.drafters:
            sources["int8"] = models.smollm2_int8()
        by = {d: [p for p in own_prompts() if p.domain == d] for d in ("summarising", *[d for d in DOMAINS if d != "summarising"])}
        order = [by[d][i] for i in range(16) for d in by]  # the domains in turn, summarising first
        prompts = [(p.id, encode(target, p)) for p in order[: args.prompts]]
        target.model.to(args.device)
        for s in sources.values():
            if hasattr(s, "model") and s.model is not None:
                s.model.to(args.device)
    unknown = [d for d in args.drafters if d not in sources]
    if unknown:
        raise SystemExit(f"{NAME}: unknown drafter(s) {unknown} for these models; pick from {sorted(sources)}")
    return target, {d: sources[d] for d in args.drafters}, prompts


# ---------------------------------------------------------------- clocks


class Clock:
    """Wall (``perf_counter`` after ``torch.cuda.synchronize`` on CUDA) and process CPU seconds."""

    def __init__(self, device: str):
        import torch

        self.cuda = device == "cuda"
        self.sync = torch.cuda.synchronize if self.cuda else (lambda: None)

    def now(self) -> tuple[float, float]:
        self.sync()
        return time.perf_counter(), time.process_time()

    def since(self, t0: tuple[float, float]) -> tuple[float, float]:
        t = self.now()
        return t[0] - t0[0], t[1] - t0[1]


@contextmanager
def cpu_clocks():
    """CPU seconds of the decoder's prefill and exact theory, for subtraction from a decode's process
    time: timing wrappers around :class:`otspec_gpu.scoring.DecodeCaches` construction and
    :func:`otspec_gpu.theory.round_theory`, which ``decode`` looks up at every call."""
    import otspec_gpu.scoring as sc
    import otspec_gpu.theory as th

    spent = {"prefill": 0.0, "theory": 0.0}
    real_theory, real_init = th.round_theory, sc.DecodeCaches.__init__

    def theory(*a, **kw):
        c0 = time.process_time()
        try:
            return real_theory(*a, **kw)
        finally:
            spent["theory"] += time.process_time() - c0

    def init(self, *a, **kw):
        c0 = time.process_time()
        try:
            real_init(self, *a, **kw)
        finally:
            spent["prefill"] += time.process_time() - c0

    th.round_theory, sc.DecodeCaches.__init__ = theory, init
    try:
        yield spent
    finally:
        th.round_theory, sc.DecodeCaches.__init__ = real_theory, real_init


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


# ---------------------------------------------------------------- (a) costs measured apart


def _context(prompts, length: int) -> list[int]:
    """A context of ``length`` tokens (the first prompt repeated): only its length matters for the cost."""
    base = prompts[0][1]
    return (base * (length // len(base) + 1))[:length]


def measure_costs(target, source, prompts, gamma: int, context_len: int, repeats: int, temperature: float, clock: Clock, seed: int) -> dict:
    """Median wall and CPU seconds of each cost of a round, measured apart from decoding (module docstring, (a))."""
    import torch

    from otspec_gpu.inputs import generators
    from otspec_gpu.processing import probs_from_logits
    from otspec_gpu.scoring import RowCache
    from otspec_gpu.verifying import VerifierStep

    device = next(target.model.parameters()).device
    ctx = torch.tensor([_context(prompts, context_len)], device=device)

    def transform(lg):
        return probs_from_logits(lg, temperature=temperature, dtype=torch.float64)

    rc = RowCache(target, 1, device)
    rc.feed(ctx[:, :-1], torch.ones_like(ctx[:, :-1], dtype=torch.bool))
    ns = list(range(1, gamma + 2))
    rng = np.random.default_rng(seed)
    fwd = {n: [] for n in ns}
    crop, step_t, P_last = [], [], None
    step = VerifierStep("chain", "token", 1, 1)
    g_verify, g_bonus = generators(seed, 2, device)
    X = ctx[:, -gamma:] if ctx.shape[1] >= gamma else ctx[:, :1].repeat(1, gamma)
    Q = torch.zeros((1, gamma, target.vocab_size), dtype=torch.float64, device=device).scatter_(2, X.unsqueeze(2), 1.0)
    ones = torch.ones(1, dtype=torch.long, device=device)
    for _ in range(repeats):
        for n in rng.permutation(ns).tolist():  # sizes interleaved, so a drift of the machine hits all alike
            ids = ctx[:, -n:] if ctx.shape[1] >= n else ctx[:, :1].repeat(1, n)
            t0 = clock.now()
            P = transform(rc.feed(ids, torch.ones_like(ids, dtype=torch.bool)))
            fwd[n].append(clock.since(t0))
            t0 = clock.now()
            rc.keep(n, torch.zeros(1, dtype=torch.long, device=device))
            crop.append(clock.since(t0))
            if n == gamma + 1:
                P_last = P
        t0 = clock.now()
        step(P_last, Q, X, ones, g_verify, g_bonus)
        step_t.append(clock.since(t0))
    draft = measure_draft(source, ctx, gamma, target.vocab_size, repeats, transform, clock, seed)

    def med(xs, i):
        return float(statistics.median(x[i] for x in xs))

    return dict(
        positions=ns,
        context=int(ctx.shape[1]),
        repeats=repeats,
        forward_wall_s=[med(fwd[n], 0) for n in ns],
        forward_cpu_s=[med(fwd[n], 1) for n in ns],
        crop_wall_s=med(crop, 0),
        crop_cpu_s=med(crop, 1),
        step_wall_s=med(step_t, 0),
        step_cpu_s=med(step_t, 1),
        draft_wall_s_per_token=draft[0],
        draft_cpu_s_per_token=draft[1],
    )


def measure_draft(source, ctx, gamma: int, V: int, repeats: int, transform, clock: Clock, seed: int) -> tuple[float, float]:
    """Median (wall, CPU) seconds per drafted token: one cached draft forward + transform + draw, or
    prompt lookup's ``draft`` call over ``gamma`` tokens divided by ``gamma``."""
    import torch

    from otspec_gpu.prompt_lookup import PromptLookup, PromptLookupDrafter
    from otspec_gpu.sampling import categorical
    from otspec_gpu.scoring import RowCache

    device = ctx.device
    times = []
    if isinstance(source, PromptLookup):
        drafter = PromptLookupDrafter([ctx[0].tolist()], gamma, source.max_ngram, V, device)
        for _ in range(repeats):
            t0 = clock.now()
            drafter.draft()
            w, c = clock.since(t0)
            times.append((w / gamma, c / gamma))
    else:
        gen = torch.Generator(device=device).manual_seed(seed)
        rc = RowCache(source, 1, device)
        rc.feed(ctx[:, :-1], torch.ones_like(ctx[:, :-1], dtype=torch.bool))
        one = torch.ones((1, 1), dtype=torch.bool, device=device)
        for _ in range(repeats):
            t0 = clock.now()
            categorical(transform(rc.feed(ctx[:, -1:], one)[:, -1]), gen)
            times.append(clock.since(t0))
            rc.keep(1, torch.zeros(1, dtype=torch.long, device=device))
    return float(statistics.median(t[0] for t in times)), float(statistics.median(t[1] for t in times))


# ---------------------------------------------------------------- (b) decoding


def seed_of(seed: int, prompt: int, gamma: int) -> int:
    """An independent seed per (run, prompt, gamma)."""
    return int(np.random.SeedSequence([seed, prompt, gamma]).generate_state(1)[0] >> 1)


def decode_one(target, source, ids: list[int], gamma: int, tokens: int, temperature: float, seed: int, clock: Clock) -> tuple[dict, object]:
    """One measured decode of one prompt: seconds without prefill and theory, on both clocks."""
    from otspec_gpu.decoding import decode

    with cpu_clocks() as spent:
        c0 = clock.now()
        res = decode(
            target,
            source,
            [ids],
            verifier="token",
            gamma=gamma,
            temperature=temperature,
            max_new_tokens=tokens,
            seed=seed,
            stop_at_eos=False,
        )
        _, cpu = clock.since(c0)
    c, cfg = res.trace.columns, res.config
    theory_s = float(np.sum(c["round_t_theory"]))
    tau = np.asarray(c["tau"], dtype=np.float64)
    row = dict(
        tokens=len(res.tokens[0]),
        rounds=int(tau.size),
        accepted=float(tau.sum()),
        expected=[float(x) for x in c["th_expected"]],
        wall_s=float(cfg["wall_s"]) - float(cfg["prefill_s"]) - theory_s,
        cpu_s=cpu - spent["prefill"] - spent["theory"],
        prefill_s=float(cfg["prefill_s"]),
        theory_s=theory_s,
        phase_s={ph: float(np.sum(c[f"round_t_{ph}"])) for ph in ("draft", "target", "verify", "rollback")},
    )
    if "lookup_matched" in cfg:
        row["lookup_matched_rounds"] = int(np.count_nonzero(cfg["lookup_matched"][0]))
    return row, res


# ---------------------------------------------------------------- (c) teacher-forced acceptance


def teacher_forced_alpha(target, source, ids: list[int], generated: list[int], temperature: float) -> tuple[np.ndarray, np.ndarray]:
    r"""Per-position single-draft acceptance along a generated text ``y`` (module docstring, (c)), two ways, ``(N,)`` each.

    * ``alpha``: the acceptance at each context, :math:`\sum_x \min(p_t, q_t)` (prompt lookup:
      :math:`p_t(d_t)`), what a teacher-forced corpus gives;
    * ``given_text``: the probability that :math:`y_t` was an accepted draft given that it was emitted,
      :math:`\min(p_t(y_t), q_t(y_t)) / p_t(y_t)` (prompt lookup: :math:`1\{y_t = d_t\}`). Given the
      text, token verification's acceptances are independent coins with these probabilities, so the
      renewal model over them gives the expected rounds of this text exactly (for prompt lookup, up to
      a draft that continues an earlier match instead of looking up again).
    """
    import torch

    from otspec_gpu.processing import probs_from_logits
    from otspec_gpu.prompt_lookup import NgramIndex, PromptLookup
    from otspec_gpu.scoring import forward

    device = next(target.model.parameters()).device
    L0, N = len(ids), len(generated)
    seq = torch.tensor([ids + generated[:-1]], device=device)  # position L0 - 1 + t predicts generated[t]
    at = torch.arange(N, device=device)
    y = torch.tensor(generated, device=device)

    def rows(lm):
        return probs_from_logits(forward(lm, seq)[0][0, L0 - 1 :], temperature=temperature, dtype=torch.float64)  # [N, V]

    p = rows(target)
    if isinstance(source, PromptLookup):
        ix, d = NgramIndex(ids, source.max_ngram), []
        for tok in generated:
            d.append(ix.propose(1)[0][0])
            ix.extend([tok])
        d = torch.tensor(d, device=device)
        alpha, given = p[at, d], (d == y).double()
    else:
        q = incremental_rows(source, ids, generated, temperature, device)
        alpha = torch.minimum(p, q).sum(-1)
        py, qy = p[at, y], q[at, y]
        given = torch.where(py > 0, torch.minimum(py, qy) / py.clamp_min(1e-300), torch.zeros_like(py))
    return alpha.clamp(0.0, 1.0).cpu().numpy(), given.clamp(0.0, 1.0).cpu().numpy()


def incremental_rows(lm, ids: list[int], generated: list[int], temperature: float, device):
    """The draft's conditionals before each generated token, fed one token at a time with a cache as
    decoding feeds it (``[N, V]``): a dynamically quantised draft scales its activations over the
    tokens of one forward, so a whole-sequence forward would give a different q (TV up to 0.3 for
    SmolLM2-int8)."""
    import torch

    from otspec_gpu.processing import probs_from_logits
    from otspec_gpu.scoring import RowCache

    rc = RowCache(lm, 1, device)
    if len(ids) > 1:
        rc.feed(torch.tensor([ids[:-1]], device=device), torch.ones((1, len(ids) - 1), dtype=torch.bool, device=device))
    one = torch.ones((1, 1), dtype=torch.bool, device=device)
    seq = ids + generated[:-1]
    out = [rc.feed(torch.tensor([[tok]], device=device), one)[0, -1] for tok in seq[len(ids) - 1 :]]
    return probs_from_logits(torch.stack(out), temperature=temperature, dtype=torch.float64)


# ---------------------------------------------------------------- (c, d) prediction and its error


def cost_models(costs: dict, clock: str) -> dict:
    """The two cost models of a configuration (module docstring, (c)) on one clock (``wall``/``cpu``)."""
    from otspec.speedup import CostModel, measured_verify

    fwd = costs[f"forward_{clock}_s"]
    per_round = costs[f"step_{clock}_s"] + costs[f"crop_{clock}_s"]
    draft = costs[f"draft_{clock}_s_per_token"]
    return {
        "full": CostModel(draft_cost=draft, verify=measured_verify(costs["positions"], [f + per_round for f in fwd])),
        "forward": CostModel(draft_cost=draft, verify=measured_verify(costs["positions"], fwd)),
    }


def pooled_costs(slots: list[dict]) -> dict:
    """The mean of the medians of several measurement slots (each a :func:`measure_costs` result)."""
    out = dict(slots[0])
    for key, v in slots[0].items():
        if key.endswith("_s") or key.endswith("_per_token"):
            vals = [sl[key] for sl in slots]
            out[key] = [float(np.mean(col)) for col in zip(*vals, strict=True)] if isinstance(v, list) else float(np.mean(vals))
    return out


def predictions(rows: list[dict], costs: dict, gamma: int, clocks: tuple[str, ...], seed: int) -> dict:
    """Predicted against measured tokens/s per (clock, cost model, acceptance source), with prompt-clustered
    intervals; each prompt's round costs come from the measurements right before and after it (``row["costs"]``)."""
    from otspec.speedup import constant_acceptance_tokens, expected_rounds
    from otspec.stats import clustered_relative_change

    ids = [r["id"] for r in rows]
    out = {}
    for clock in clocks:
        measured = np.array([r[f"{clock}_s"] for r in rows])
        per_prompt = [cost_models(r["costs"], clock) for r in rows]
        for cname, cm in cost_models(costs, clock).items():
            T = np.array([m[cname].round_seconds(gamma, 1) for m in per_prompt])  # seconds per round, per prompt
            for src in ("tf", "text", "constant", "theory"):
                if src != "theory":  # rounds to emit the text, from the teacher-forced acceptance
                    tok_p = np.array([r["tokens"] for r in rows], dtype=np.float64)
                    if src in ("tf", "text"):  # the renewal model over the per-position acceptances
                        key = "alpha" if src == "tf" else "alpha_given_text"
                        rounds_p = np.array([expected_rounds(r[key], gamma) for r in rows])
                    else:  # the engine-docs formula at the mean acceptance over all positions
                        per_round = constant_acceptance_tokens(float(np.mean(np.concatenate([r["alpha"] for r in rows]))), gamma)
                        rounds_p = tok_p / per_round
                    tok_m, rounds_m = tok_p, np.array([r["rounds"] for r in rows], dtype=np.float64)
                else:  # the run's rounds, each with its exact expected tokens 1 + E[tau | drafts]
                    rounds_p = rounds_m = np.array([r["rounds"] for r in rows], dtype=np.float64)
                    tok_p = np.array([r["rounds"] + sum(r["expected"]) for r in rows])
                    tok_m = np.array([r["rounds"] + r["accepted"] for r in rows])
                sec_p = rounds_p * T
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # few prompts: the interval's caveat is stated in the report
                    err = clustered_relative_change(tok_p, sec_p, ids, tok_m, measured, ids, seed=seed)
                out[f"{clock}/{cname}/{src}"] = dict(
                    predicted_tokens_per_s=float(tok_p.sum() / sec_p.sum()),
                    measured_tokens_per_s=float(tok_m.sum() / measured.sum()),
                    error=dict(value=err.value, low=err.low, high=err.high, n_clusters=err.n_clusters),
                    tokens_per_round_predicted=float(tok_p.sum() / rounds_p.sum()),
                    tokens_per_round_measured=float(tok_m.sum() / rounds_m.sum()),
                    round_s_predicted=float(sec_p.sum() / rounds_p.sum()),
                    round_s_measured=float(measured.sum() / rounds_m.sum()),
                    predicted_speedup=float(tok_p.sum() / sec_p.sum() / cm.autoregressive_tokens_per_s()),
                )
    return out


# ---------------------------------------------------------------- one configuration


def run_config(target, source, drafter: str, prompts, gamma: int, args, clock: Clock) -> dict:
    """Warm-up, then costs measured apart before every prompt and after the last (so that each prompt's
    prediction uses the costs of its own minutes: a drifting load hits both alike), every prompt
    decoded and teacher-forced, predictions."""
    t_start, load_before = time.perf_counter(), load_average()
    ctx_len = int(np.mean([len(p) for _, p in prompts])) + args.tokens // 2
    kw = dict(context_len=ctx_len, repeats=args.repeats, temperature=args.temperature, clock=clock)
    decode_one(target, source, prompts[0][1], gamma, min(4, args.tokens), args.temperature, args.seed, clock)  # warm-up, not measured
    slots = [measure_costs(target, source, prompts, gamma, seed=args.seed, **kw)]
    print(f"  target forward {[round(1e3 * x, 2) for x in slots[0]['forward_wall_s']]} ms at n = {slots[0]['positions']}", flush=True)
    rows = []
    for i, (pid, ids) in enumerate(prompts):
        row, res = decode_one(target, source, ids, gamma, args.tokens, args.temperature, seed_of(args.seed, i, gamma), clock)
        alpha, given = teacher_forced_alpha(target, source, ids, res.tokens[0], args.temperature)
        slots.append(measure_costs(target, source, prompts, gamma, seed=args.seed + i + 1, **kw))
        row.update(id=pid, alpha=[float(a) for a in alpha], alpha_given_text=[float(b) for b in given], costs=pooled_costs(slots[-2:]))
        rows.append(row)
        print(
            f"  prompt {i + 1}/{len(prompts)} {pid}: {row['tokens']} tokens in {row['rounds']} rounds, "
            f"{row['wall_s']:.3f} s (prefill {row['prefill_s']:.3f} s, theory {row['theory_s']:.3f} s excluded)",
            flush=True,
        )
    costs = pooled_costs(slots)
    clocks = ("wall",) if clock.cuda else ("wall", "cpu")
    return dict(
        drafter=drafter,
        draft=getattr(source, "name", drafter),
        gamma=gamma,
        costs=costs,
        cost_slots=slots,
        per_prompt=rows,
        predictions=predictions(rows, costs, gamma, clocks, args.seed),
        load_average_before=load_before,
        load_average_after=load_average(),
        seconds=time.perf_counter() - t_start,
    )


# ---------------------------------------------------------------- tables


def _pct(e: dict | None) -> str:
    if e is None:
        return "-"
    v, lo, hi = e["value"], e["low"], e["high"]
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return f"{100 * v:+.1f}%"
    return f"{100 * v:+.1f}% [{100 * lo:+.1f}, {100 * hi:+.1f}]"


def table_rows(data: dict) -> list[str]:
    """Markdown rows of one result file (one row per configuration that finished)."""
    meta, lines = data["meta"], []
    for c in data["configs"]:
        if "error" in c:
            lines.append(f"| {meta['label']} | {c['drafter']} | {c['gamma']} | failed: {c['error'][:60]} |" + " |" * 9)
            continue
        pr = c["predictions"]
        tf, text, theory, const = (pr[f"wall/full/{src}"] for src in ("tf", "text", "theory", "constant"))
        cpu = _pct(pr["cpu/full/tf"]["error"]) if "cpu/full/tf" in pr else "-"
        load = c["load_average_before"], c["load_average_after"]
        load_s = "-" if None in load else f"{load[0][0]:.1f} -> {load[1][0]:.1f}"
        lines.append(
            f"| {meta['label']} | {c['draft']} | {c['gamma']} | {tf['measured_tokens_per_s']:.2f} | {tf['predicted_tokens_per_s']:.2f} | "
            f"{_pct(tf['error'])} | {_pct(text['error'])} | {_pct(theory['error'])} | {_pct(const['error'])} | "
            f"{tf['tokens_per_round_measured']:.3f} / {tf['tokens_per_round_predicted']:.3f} / {text['tokens_per_round_predicted']:.3f} | "
            f"{1e3 * tf['round_s_predicted']:.1f} / {1e3 * tf['round_s_measured']:.1f} | {cpu} | {load_s} |"
        )
    return lines


TABLE_HEAD = (
    "| run | drafter | gamma | measured tokens/s | predicted tokens/s | error (corpus acceptance) | error (acceptance given the text) "
    "| error (per-round theory) | error (constant-acceptance formula) | tokens/round measured / corpus / given the text "
    "| ms/round predicted / measured | error on CPU time | load (1 min) |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)
TABLE_NOTE = (
    "Error = predicted / measured tokens per second - 1 (wall clock, prefill and exact-theory time excluded), "
    "95% cluster-bootstrap interval over prompts. Predictions use the costs measured apart from decoding (target forward, "
    "cache crop and verify step per round, plus the draft) and the renewal model over per-position acceptance of the generated "
    "texts: corpus acceptance = sum_x min(p_t, q_t) (prompt lookup: p_t(d_t)), as a teacher-forced corpus gives; given the text "
    "= min(p_t(y_t), q_t(y_t)) / p_t(y_t) (prompt lookup: 1{y_t = d_t}), the exact acceptance probability of the emitted token; "
    "per-round theory = the run's rounds with their exact expected tokens; constant formula = (1 - a^(gamma+1)) / (1 - a) at "
    "the mean corpus acceptance a. Predicted tokens/s, ms/round and the error on CPU time (process time, prefill and theory "
    "excluded, costs timed on the same clock): corpus acceptance. The JSON also has forward-only costs "
    "(without the verify step and crop) and every combination on the CPU clock."
)


def table(folder: str) -> str:
    """The table of every ``*.json`` result of ``speedup_check.py`` in ``folder`` (markdown, sorted by file name)."""
    lines = [TABLE_HEAD]
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as f:
            data = json.load(f)
        if data.get("meta", {}).get("name") == NAME:
            lines += table_rows(data)
    return "\n".join(lines) + "\n\n" + TABLE_NOTE + "\n"


def write_outputs(out: str, payload: dict) -> None:
    """JSON (atomically: an interrupted run keeps the last complete file) and the markdown table."""
    path = os.path.join(out, f"{NAME}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(payload, f, indent=1)
    os.replace(path + ".tmp", path)
    meta = payload["meta"]
    md = [
        f"# Speedup model against measured decoding: {meta['label']}",
        "",
        f"Command: `{meta['command']}`",
        "",
        f"Revision: `{meta['revision']}`",
        "",
        f"{meta['models']}; {meta['prompts']} prompts x {meta['tokens']} tokens, temperature {meta['temperature']}; "
        f"load average at start {meta['load_average_start']}.",
        "",
        TABLE_HEAD,
        *table_rows(payload),
        "",
        TABLE_NOTE,
        "",
    ]
    with open(os.path.join(out, f"{NAME}.md"), "w") as f:
        f.write("\n".join(md))


# ---------------------------------------------------------------- main


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog=NAME, description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the models run (default cpu)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (torch.set_num_threads; default 1)")
    ap.add_argument("--random-weights", action="store_true", help="SmolLM2-135M shapes with random weights, early-exit draft (no files)")
    ap.add_argument(
        "--drafters", default=None, help="comma-separated: prompt-lookup, int8 (SmolLM2) / early-exit (random weights); default all"
    )
    ap.add_argument("--gammas", default=",".join(map(str, GAMMAS)), help="draft lengths (default 1,2,4)")
    ap.add_argument("--prompts", type=int, default=None, help="prompts (default 8 on CUDA, 6 on CPU)")
    ap.add_argument("--tokens", type=int, default=None, help="new tokens per prompt (default 48 on CUDA, 24 on CPU)")
    ap.add_argument(
        "--repeats", type=int, default=None, help="timings per cost before each prompt and after the last (default 5 CUDA, 2 CPU)"
    )
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of target and draft (default 1)")
    ap.add_argument("--seed", type=int, default=0, help="seed of prompts, decoding and bootstrap (default 0)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (seconds; with --random-weights tiny shapes): a dry run, not a result")
    ap.add_argument("--out", default=os.path.join(_HERE, "out", NAME), help="output folder")
    ap.add_argument("--label", default=None, help="the run's name in the tables (default: device and threads)")
    ap.add_argument("--render", default=None, metavar="DIR", help="write DIR/table.md from the result JSON files in DIR and exit")
    a = ap.parse_args(argv)
    sizes = QUICK_SIZES if a.quick else DEFAULT_SIZES[a.device]
    a.prompts = sizes[0] if a.prompts is None else a.prompts
    a.tokens = sizes[1] if a.tokens is None else a.tokens
    a.repeats = (1 if a.quick else 5 if a.device == "cuda" else 2) if a.repeats is None else a.repeats
    a.gammas = [int(g) for g in a.gammas.split(",") if g.strip()]
    default = ["prompt-lookup", "early-exit"] if a.random_weights else ["prompt-lookup", "int8"]
    a.drafters = default if a.drafters is None else [d.strip() for d in a.drafters.split(",") if d.strip()]
    if min(a.prompts, a.tokens, a.repeats, a.threads, *a.gammas, 1) < 1 or not (a.temperature > 0):
        ap.error("--prompts, --tokens, --repeats, --threads and every gamma must be >= 1, and --temperature > 0")
    return a


def meta_of(args, target, sources, prompts) -> dict:
    import torch
    import transformers
    from bench._report import git_revision

    dev = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU"
    label = args.label or (dev if args.device == "cuda" else f"CPU, {args.threads} thread{'s' if args.threads > 1 else ''}")
    return dict(
        name=NAME,
        label=label,
        command="python experiments/speedup_check.py " + " ".join(sys.argv[1:] if args.argv is None else args.argv),
        revision=git_revision(),
        device=dev,
        threads=args.threads,
        cpu_count=os.cpu_count(),
        torch=torch.__version__,
        transformers=transformers.__version__,
        models=f"target {target.name}; drafts {', '.join(getattr(s, 'name', d) for d, s in sources.items())}",
        random_weights=args.random_weights,
        quick=args.quick,
        prompts=len(prompts),
        prompt_ids=[p for p, _ in prompts],
        tokens=args.tokens,
        gammas=args.gammas,
        temperature=args.temperature,
        repeats=args.repeats,
        seed=args.seed,
        load_average_start=load_average(),
        started_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    args.argv = argv
    if args.render:
        with open(os.path.join(args.render, "table.md"), "w") as f:
            f.write(table(args.render))
        return 0
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"{NAME}: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    target, sources, prompts = load_models(args)
    payload = dict(meta=meta_of(args, target, sources, prompts), configs=[])
    clock, failed = Clock(args.device), 0
    for drafter, source in sources.items():
        for gamma in args.gammas:
            print(f"{NAME}: {drafter}, gamma = {gamma} ({time.perf_counter() - t0:.0f} s so far)", flush=True)
            try:
                payload["configs"].append(run_config(target, source, drafter, prompts, gamma, args, clock))
                e = payload["configs"][-1]["predictions"]["wall/full/tf"]
                print(f"  prediction error {_pct(e['error'])} (per-position model, full costs, wall clock)", flush=True)
            except Exception as exc:  # one failed configuration must not lose the others' measurements
                traceback.print_exc()
                payload["configs"].append(dict(drafter=drafter, gamma=gamma, error=f"{type(exc).__name__}: {exc}"))
                failed += 1
            payload["meta"]["elapsed_s"] = time.perf_counter() - t0
            write_outputs(args.out, payload)
    print(f"{NAME}: done in {time.perf_counter() - t0:.0f} s; {os.path.join(args.out, NAME + '.json')}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
