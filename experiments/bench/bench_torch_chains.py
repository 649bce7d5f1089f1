"""Per-step cost of the torch chain and tree verifiers (otspec_gpu.verifiers.chain / .tree) beside
the numpy ``sample`` of the same rule, in one run on one machine.

    python experiments/bench/bench_torch_chains.py --out experiments/out/bench_torch_chains --seed 0

Grid: gamma in {4, 8}, V in {49 152, 262 144}, B in {1, 64} rows, float32 torch inputs (the
decoding harness's dtype). Rows:

* chains: ``token_sample`` / ``block_sample`` (one verification per row) and ``*_conditional``
  (the exact (tau, next token) law the harness uses for theory), against
  ``otspec.verifiers.token_chain.sample`` / ``otspec.verifiers.block.sample`` called once per row
  on tabulated float64 models of the drafted path (the numpy reference implementation);
* trees (k = 4 sequences): ``tree.sample`` for each rule against ``otspec.verifiers.tree.sample``
  once per row. B = 64 at V = 262 144 is left out for trees (the inputs alone are 2.4 GB).

Each torch row is timed with the input checks (``torch sample``: ``validate=True``, the default)
and without (``no validate``); ``validation`` is their difference (the row checks of
``otspec_gpu._validation.check_rows`` and the drafts' checks). Chains also time ``float64 row sums``:
the float64 sum of every row of p and q, which is what the row check cost before it summed in
blocks with an error bound (the check now makes it only for a row it cannot decide otherwise).

The numpy baseline loops over rows; above 8 rows it is timed on 8 rows and scaled linearly (marked
``x8`` in the table). Target of the issue: chains at gamma = 8 under 5 ms (B = 1) on this CPU.
Every time is the median of ``--repeats`` runs, on the wall clock or (``--clock cpu``) in CPU time of
the process, which on a shared machine leaves out the time other jobs hold the core.

CUDA rows (``--devices cuda``; default: added when a GPU is present): chains and trees at gamma 4
(and 8), V in {49 152, 128 256, 262 144}, B in {1, 64}, float32, ``sample(..., validate=False)``
timed with CUDA events around back-to-back calls; beside each, in the same run, ``validated``
(chains: ``sample`` with ``validate=True``, the checks' device work and host synchronisations), ``step`` (the chains'
pure step ``token_step`` / ``block_step`` on uniforms drawn once: the kernels and the Python around
them, without the checks and the two ``torch.rand`` draws), ``graph`` (the same
call replayed from a captured CUDA graph, :mod:`otspec_gpu.graphs`, the inputs copied into the
graph's static tensors; chains and the masked rrs / rrs_wor trees), ``graph in place`` (the replay
with the static tensors passed back, as a caller that writes its inputs there in place: no copy;
chains), ``formula`` (a
minimal no-sync token chain written from the formula, ``_gpu_baselines.py``), ``formula graph``
and ``formula graph in place`` (its replays), and ``x formula`` = torch / formula. No numpy column on CUDA. torch runs on one intra-op thread by default
(``--threads``): on the shared 2-core project machine, two threads measured 100x slower than one
(OpenMP spin-waits against other processes; 158 ms vs 1.2 ms for token_sample at gamma = 8,
V = 49 152, B = 1).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from _gpu_baselines import cuda_time, formula_token_chain, graphed  # noqa: E402
from _report import markdown_table, write_report  # noqa: E402

from otspec import models  # noqa: E402
from otspec.verifiers import block as np_block  # noqa: E402
from otspec.verifiers import token_chain as np_token  # noqa: E402
from otspec.verifiers import tree as np_tree  # noqa: E402
from otspec_gpu.sampling import sample_weights  # noqa: E402
from otspec_gpu.verifiers import TREE, chain, tree  # noqa: E402

GAMMAS = (4, 8)
VOCABS = (49_152, 262_144)
BATCHES = (1, 64)
K_TREE = 4
NUMPY_ROWS = 8


#: The clock of the CPU medians (``--clock``): wall time, or the process's CPU time, which a
#: one-thread step does not share with the other jobs of a loaded machine.
_CLOCK = [time.perf_counter]


def median_time(fn, repeats: int = 5):
    """Median time of ``repeats`` calls on the ``--clock`` clock, and the last output."""
    clock, times, out = _CLOCK[0], [], None
    for _ in range(repeats):
        t0 = clock()
        out = fn()
        times.append(clock() - t0)
    return statistics.median(times), out


def pair(shape, V, gen):
    """Target and draft rows [*shape, V] float32: softmax of Gaussian logits (scale 3), the draft a
    noisy copy of the target's logits (acceptance around 0.6-0.8)."""
    logits = 3.0 * torch.randn(*shape, V, generator=gen)
    p = torch.softmax(logits, -1)
    q = torch.softmax(logits + 1.0 * torch.randn(*shape, V, generator=gen), -1)
    return p, q


def draw(q, gen):
    """One token per row of q [..., V] (float64 inverse CDF)."""
    flat = q.reshape(-1, q.shape[-1])
    return sample_weights(flat, torch.rand(flat.shape[0], generator=gen, dtype=torch.float64)).view(q.shape[:-1])


def tabulated(rows, path):
    """float64 numpy models along one drafted path: {path[:i]: rows[i]}."""
    return models.tabulated({tuple(path[:i]): rows[i].astype(np.float64) / rows[i].astype(np.float64).sum() for i in range(len(rows))})


def chain_rows(B, V, g, gen, repeats):
    p, _ = pair((B, g + 1), V, gen)
    q = torch.softmax(torch.log(p[:, :g]) + 1.0 * torch.randn(B, g, V, generator=gen), -1)  # draft near the target
    x = draw(q, gen)
    out = []
    n_np = min(B, NUMPY_ROWS)
    P, Q, X = p.numpy(), q.numpy(), x.numpy()
    np_models = [(tabulated(P[b], X[b].tolist()), tabulated(Q[b], X[b].tolist()), X[b].tolist()) for b in range(n_np)]
    rng = np.random.default_rng(0)
    for rule, samp, cond, np_mod in (
        ("token", chain.token_sample, chain.token_conditional, np_token),
        ("block", chain.block_sample, chain.block_conditional, np_block),
    ):
        g_t = torch.Generator().manual_seed(1)
        t_s, res = median_time(lambda: samp(p, q, x, generator=g_t), repeats)
        t_sv, _ = median_time(lambda: samp(p, q, x, generator=g_t, validate=False), repeats)
        t_c, law = median_time(lambda: cond(p, q, x, validate=False), repeats)
        t_f64, _ = median_time(lambda: [torch.where(t >= 0, t, float("nan")).sum(-1, dtype=torch.float64) for t in (p, q)], repeats)
        t_np, _ = median_time(lambda: [np_mod.sample(pm, qm, path, rng=rng) for pm, qm, path in np_models], max(1, repeats // 2))
        t_np *= B / n_np
        out.append(
            {
                "kind": "chain",
                "rule": rule,
                "B": B,
                "V": V,
                "gamma": g,
                "k": 1,
                "torch_sample_ms": 1e3 * t_s,
                "torch_sample_novalidate_ms": 1e3 * t_sv,
                "torch_conditional_ms": 1e3 * t_c,
                "float64_row_sums_ms": 1e3 * t_f64,
                "numpy_sample_ms": 1e3 * t_np,
                "numpy_scaled": n_np < B,
                "mean_accepted": float(res.accepted.double().mean()),
                "exact_mean_accepted": float(chain.expected_accepted(law).double().mean()),
            }
        )
    return out


def tree_rows(B, V, g, gen, repeats):
    k = K_TREE
    # One context-free pair per row (every node of a row uses the same conditionals): the cost of a
    # verification does not depend on where the rows come from.
    p1, _ = pair((B, 1), V, gen)
    q1 = torch.softmax(torch.log(p1) + 1.0 * torch.randn(B, 1, V, generator=gen), -1)
    p = p1[:, :, None].expand(B, k, g + 1, V).contiguous()
    q = q1[:, :, None].expand(B, k, g, V).contiguous()
    out = []
    n_np = min(B, NUMPY_ROWS)
    for rule in TREE:
        if rule == "rrs_wor":
            first = torch.stack([torch.multinomial(q1[b, 0].double(), k, replacement=False, generator=gen) for b in range(B)])
            x = torch.cat([first[:, :, None], draw(q[:, :, 1:], gen)], dim=2) if g > 1 else first[:, :, None]
        else:
            x = draw(q, gen)
        P1, Q1, X = p1[:, 0].double().numpy(), q1[:, 0].double().numpy(), x.numpy()
        np_models = [(models.context_free(P1[b] / P1[b].sum()), models.context_free(Q1[b] / Q1[b].sum()), X[b]) for b in range(n_np)]
        rng = np.random.default_rng(0)
        g_t = torch.Generator().manual_seed(1)
        t_s, res = median_time(lambda: tree.sample(p, q, x, rule=rule, generator=g_t), repeats)
        t_sv, _ = median_time(lambda: tree.sample(p, q, x, rule=rule, generator=g_t, validate=False), repeats)
        t_np, _ = median_time(lambda: [np_tree.sample(pm, qm, t, verifier=rule, rng=rng) for pm, qm, t in np_models], max(1, repeats // 2))
        t_np *= B / n_np
        out.append(
            {
                "kind": "tree",
                "rule": rule,
                "B": B,
                "V": V,
                "gamma": g,
                "k": k,
                "torch_sample_ms": 1e3 * t_s,
                "torch_sample_novalidate_ms": 1e3 * t_sv,
                "torch_conditional_ms": None,
                "numpy_sample_ms": 1e3 * t_np,
                "numpy_scaled": n_np < B,
                "mean_accepted": float(res.accepted.double().mean()),
                "exact_mean_accepted": None,
            }
        )
    return out


VOCABS_CUDA = (49_152, 128_256, 262_144)


def cuda_pair(shape, V, gen):
    """:func:`pair` drawn on the generator's device (on the GPU the CPU draw of the large cells would dominate the run)."""
    logits = 3.0 * torch.randn(*shape, V, generator=gen, device=gen.device)
    return torch.softmax(logits, -1), logits


def _graph_ms(sample, inputs, gen, **extra):
    """``(copy, in place)``: ms per replay of the captured ``sample`` with ``inputs`` copied into the
    graph's static tensors, and with the static tensors passed back (inputs written in place: no
    copy); ``(None, None)`` off CUDA, the capture error's text twice if capture fails."""
    gs = graphed(sample, inputs, gen, **extra)
    if gs is None or isinstance(gs, str):
        return gs, gs
    return 1e3 * cuda_time(lambda: gs(*inputs), "cuda"), 1e3 * cuda_time(lambda: gs(*gs.static), "cuda")


def cuda_rows(V, g, B, gen, trees: bool) -> list[dict]:
    """CUDA rows of one (V, gamma, B) cell: chains (eager, graph, formula, formula graph) and trees
    (eager). The device is the generator's (a CPU generator gives a smoke run of the same code)."""
    dev = gen.device.type
    p, logits = cuda_pair((B, g + 1), V, gen)
    q = torch.softmax(logits[:, :g] + torch.randn(B, g, V, generator=gen, device=dev), -1)
    x = torch.multinomial(q.reshape(-1, V), 1, generator=gen).view(B, g)
    t_f = 1e3 * cuda_time(lambda: formula_token_chain(p, q, x, generator=gen), dev)
    f_graph, f_inplace = _graph_ms(formula_token_chain, (p, q, x), gen)
    out = []
    coins = torch.rand((B, g), generator=gen, device=dev)
    u = torch.rand(B, generator=gen, dtype=torch.float64, device=dev)
    for rule, samp, step in (("token", chain.token_sample, chain.token_step), ("block", chain.block_sample, chain.block_step)):
        t = 1e3 * cuda_time(lambda samp=samp: samp(p, q, x, generator=gen, validate=False), dev)
        t_val = 1e3 * cuda_time(lambda samp=samp: samp(p, q, x, generator=gen), dev)  # validate=True: the value checks too
        t_step = 1e3 * cuda_time(lambda step=step: step(p, q, x, coins, u), dev)
        gr, gr_in = _graph_ms(samp, (p, q, x), gen, validate=False)
        out.append(
            {"device": dev, "kind": "chain", "rule": rule, "B": B, "V": V, "gamma": g, "k": 1, "torch_ms": t, "validated_ms": t_val, "step_ms": t_step,
             "graph_ms": gr, "graph_inplace_ms": gr_in, "formula_ms": t_f, "formula_graph_ms": f_graph,
             "formula_graph_inplace_ms": f_inplace, "x_formula": t / t_f}
        )  # fmt: skip
    if trees:
        k = K_TREE
        p4 = p[:, None].expand(B, k, g + 1, V).contiguous()
        q4 = q[:, None].expand(B, k, g, V).contiguous()
        for rule in TREE:
            if rule == "rrs_wor":
                first = torch.multinomial(q[:, 0], k, replacement=False, generator=gen)
                rest = torch.multinomial(q4[:, :, 1:].reshape(-1, V), 1, generator=gen).view(B, k, g - 1)
                xt = torch.cat([first[:, :, None], rest], dim=2)
            else:
                xt = torch.multinomial(q4.reshape(-1, V), 1, generator=gen).view(B, k, g)
            t = 1e3 * cuda_time(
                lambda rule=rule, xt=xt: tree.sample(p4, q4, xt, rule=rule, generator=gen, validate=False), dev, reps=5, rounds=3
            )
            gr_t = None
            if rule in tree.MASKED:  # the masked walk makes no host synchronisation: capturable
                gr_t = _graph_ms(lambda p, q, x, rule=rule, **kw: tree.sample(p, q, x, rule=rule, **kw), (p4, q4, xt), gen, validate=False)[
                    0
                ]
            out.append(
                {"device": dev, "kind": "tree", "rule": rule, "B": B, "V": V, "gamma": g, "k": k, "torch_ms": t,
                 "graph_ms": gr_t, "formula_ms": t_f, "formula_graph_ms": f_graph, "x_formula": t / t_f}
            )  # fmt: skip
    return out


def cuda_table(rows: list[dict]) -> str:
    """The CUDA rows as a markdown table (times in microseconds)."""

    def us(x):
        return "-" if x is None else (x if isinstance(x, str) else f"{1e3 * x:.0f}")

    return markdown_table(
        ["verifier", "k", "gamma", "V", "B", "torch (us)", "validated (us)", "step (us)", "graph (us)", "graph in place (us)", "formula (us)",
         "formula graph (us)", "formula graph in place (us)", "x formula"],
        [
            [f"{r['kind']}:{r['rule']}", r["k"], r["gamma"], r["V"], r["B"], us(r["torch_ms"]), us(r.get("validated_ms")), us(r.get("step_ms")), us(r["graph_ms"]),
             us(r.get("graph_inplace_ms")), us(r["formula_ms"]), us(r["formula_graph_ms"]), us(r.get("formula_graph_inplace_ms")),
             f"{r['x_formula']:.1f}x"]
            for r in rows
        ],
    )  # fmt: skip


# long-function: a linear script: run, write, report in order (experiments/README.md); splitting only moves lines
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="experiments/out/bench_torch_chains")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="clock of the CPU medians: wall time or the process's CPU time (default wall)",
    )
    ap.add_argument("--quick", action="store_true", help="V = 49 152 and gamma = 4 only (smoke test)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, see the module docstring)")
    ap.add_argument(
        "--before",
        default=None,
        help="JSON of an earlier run (e.g. of the previous revision's otspec_gpu, put first on PYTHONPATH): its torch sample medians become the 'before' column",
    )
    ap.add_argument("--devices", nargs="*", default=None, choices=["cpu", "cuda"], help="default: cpu, and cuda when present")
    ap.add_argument("--cuda-gammas", type=int, nargs="*", default=[4, 8], help="gammas of the CUDA rows")
    ap.add_argument("--cuda-vocabs", type=int, nargs="*", default=list(VOCABS_CUDA), help="vocabulary sizes of the CUDA rows")
    args = ap.parse_args()
    devices = args.devices if args.devices is not None else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    devices = [d for d in devices if d != "cuda" or torch.cuda.is_available()]
    before = {}
    if args.before:
        with open(args.before) as f:
            before = {(r["kind"], r["rule"], r["B"], r["V"], r["gamma"]): r["torch_sample_novalidate_ms"] for r in json.load(f)["rows"]}
    torch.set_num_threads(args.threads)
    _CLOCK[0] = time.process_time if args.clock == "cpu" else time.perf_counter
    gen = torch.Generator().manual_seed(args.seed)
    rows = []
    cuda = []
    if "cuda" in devices:
        cgen = torch.Generator("cuda").manual_seed(args.seed)
        for V in args.cuda_vocabs[:1] if args.quick else args.cuda_vocabs:
            for g in args.cuda_gammas:
                for B in BATCHES:
                    cuda += cuda_rows(V, g, B, cgen, trees=not (B == 64 and V == 262_144))
                    print(f"cuda done V={V} gamma={g} B={B}", file=sys.stderr)
    for V in (VOCABS[:1] if args.quick else VOCABS) if "cpu" in devices else ():
        for g in GAMMAS[:1] if args.quick else GAMMAS:
            for B in BATCHES:
                rows += chain_rows(B, V, g, gen, args.repeats)
                if not (B == 64 and V == 262_144):
                    rows += tree_rows(B, V, g, gen, args.repeats)
                print(f"done V={V} gamma={g} B={B}", file=sys.stderr)
    for r in rows:
        key = (r["kind"], r["rule"], r["B"], r["V"], r["gamma"])
        if key in before:
            r["before_novalidate_ms"] = before[key]

    def fmt(x):
        return "-" if x is None else f"{x:.2f}"

    table = markdown_table(
        [
            "verifier",
            "k",
            "gamma",
            "V",
            "B",
            "torch sample (ms)",
            "no validate (ms)",
            "validation (ms)",
            "float64 row sums (ms)",
            "before, no validate (ms)",
            "torch conditional (ms)",
            "numpy sample (ms)",
            "speed-up",
        ],
        [
            [
                f"{r['kind']}:{r['rule']}",
                r["k"],
                r["gamma"],
                r["V"],
                r["B"],
                fmt(r["torch_sample_ms"]),
                fmt(r["torch_sample_novalidate_ms"]),
                fmt(r["torch_sample_ms"] - r["torch_sample_novalidate_ms"]),
                fmt(r.get("float64_row_sums_ms")),
                fmt(r.get("before_novalidate_ms")),
                fmt(r["torch_conditional_ms"]),
                fmt(r["numpy_sample_ms"]) + (" (x8)" if r["numpy_scaled"] else ""),
                f"{r['numpy_sample_ms'] / r['torch_sample_ms']:.1f}x",
            ]
            for r in rows
        ],
    )
    import otspec_gpu

    payload = {
        "seed": args.seed,
        "threads": torch.get_num_threads(),
        "clock": args.clock,
        "torch": torch.__version__,
        "otspec_gpu": os.path.dirname(os.path.abspath(otspec_gpu.__file__)),
        "before": args.before,
        "load_average": os.getloadavg(),
        "rows": rows,
        "cuda_rows": cuda,
        "devices": devices,
    }
    tables = {}
    if rows:
        tables["Per-step verification cost (CPU, float32 torch inputs; numpy float64)"] = table
    if cuda:
        tables["Per-step verification cost on CUDA (float32, validate=False; same-run baselines)"] = cuda_table(cuda)
    write_report(args.out, "bench_torch_chains", payload, tables)


if __name__ == "__main__":
    main()
