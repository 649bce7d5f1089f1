"""Benchmark the torch single-step verifiers (``otspec_gpu.verifiers.SINGLE_STEP``) against the
numpy core's ``sample`` (the named baseline), per verification step.

One step = verify B rows of k drafts: ``v.sample(p, q, drafts, generator=g, validate=False)`` with
per-row float32 laws ``p``, ``q`` of shape ``[B, V]`` (as the decoding harness calls it; the
drafts are drawn beforehand and not timed). Baseline: ``otspec.verifiers.by_name(name).sample``
called once per row on the same float64 laws (a fresh ``otspec`` law object per row, as in decoding
where every step brings new distributions). Grid: B in {1, 64}, V in {49 152, 262 144},
k in {1, 4, 8} (``spechub`` at its only k = 2; ``token`` and ``approximate`` at k = 1). CUDA rows
are added when a GPU is present (``--devices``; CUDA times from CUDA events around back-to-back
calls, synchronised).

Same-run baselines (``_gpu_baselines.py``), per (device, V, B): ``formula ms``, a minimal no-sync
single-step token step written from the formula, and on CUDA ``formula graph ms``, its CUDA-graph
replay; ``x formula`` is each row's torch time over the formula's. On CUDA ``graph ms`` is the
rule's own ``sample`` replayed from a captured graph (:mod:`otspec_gpu.graphs`), and for the rules
of :data:`otspec_gpu.compiled.COMPILABLE` ``compiled ms`` / ``compiled graph ms`` are the same with
the pure step compiled by Inductor, eager and replayed.

Times are medians of repeated calls (the machine is shared: never quote one run). Writes
``<out>/bench_torch_verifiers.json``, ``.md`` and ``.rst`` (the table of docs/gpu.rst), each with
the exact command and git revision.

    python experiments/bench/bench_torch_verifiers.py --out experiments/bench/out --seed 0

Extending: other benchmarks (e.g. chains/trees) add a function ``rows(args, device) -> list[dict]``
to :data:`EXTRA_SECTIONS`; each row dict is written as given and tabled in its own section.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _gpu_baselines import cuda_time, formula_token, graphed
from _report import markdown_table, write_report

import otspec
from otspec_gpu.compiled import COMPILABLE
from otspec_gpu.drafting import sample_drafts
from otspec_gpu.verifiers import SINGLE_STEP

VS = (49_152, 262_144)
BS = (1, 64)
KS = (1, 4, 8)

#: Hook for other sections (name -> callable(args, device) -> list of row dicts).
EXTRA_SECTIONS: dict[str, Callable] = {}


def ks_for(name: str, ks: tuple[int, ...] = KS) -> tuple[int, ...]:
    v = SINGLE_STEP[name]
    if v.k_max == v.k_min:
        return (v.k_min,)
    return tuple(k for k in ks if k >= v.k_min and (v.k_max is None or k <= v.k_max))


def laws(rng: np.random.Generator, B: int, V: int) -> tuple[np.ndarray, np.ndarray]:
    """LLM-like rows: p = softmax(3 z), q = softmax(3 z + 1.5 z'), z, z' standard normal."""
    z = 3.0 * rng.standard_normal((B, V))
    zq = z + 1.5 * rng.standard_normal((B, V))
    p = np.exp(z - z.max(1, keepdims=True))
    q = np.exp(zq - zq.max(1, keepdims=True))
    return p / p.sum(1, keepdims=True), q / q.sum(1, keepdims=True)


def timed(fn: Callable[[], object], sync: Callable[[], None], min_total: float, max_reps: int) -> tuple[float, int, float]:
    """Median seconds per call (after one warm-up call), the number of timed calls and the mean.

    Both statistics are kept because a sampler's cost is random: the lossless rules build their
    residual only when some row rejects every draft (``otspec_gpu.verifiers.schedule.sample_rounds``),
    so at B = 1 the calls split into cheap (accepted) and full (rejected) ones; the mean is the
    expected cost per step, the median the typical one."""
    fn()
    sync()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_reps and (len(times) < 3 or time.perf_counter() - start < min_total):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), len(times), statistics.fmean(times)


def step_time(fn: Callable[[], object], device: str, args) -> tuple[float, int, float]:
    """``timed`` on CPU; CUDA events around back-to-back calls on CUDA (median per call; the mean
    column then repeats the median)."""
    if device == "cuda":
        t = cuda_time(fn, device)
        return t, 100, t
    return timed(fn, lambda: None, args.min_total, args.max_reps)


def baseline_row(p, q, device: str, args) -> dict:
    """The formula token step's time on these laws, and on CUDA its graph replay's."""
    g = torch.Generator(device).manual_seed(args.seed)
    d1 = sample_drafts(q, 1, "iid", generator=g)
    out = {"formula_ms": 1e3 * step_time(lambda: formula_token(p, q, d1, generator=g), device, args)[0]}
    gs = graphed(formula_token, (p, q, d1), g)
    if isinstance(gs, str):
        out["formula_graph"] = gs
    elif gs is not None:
        out["formula_graph_ms"] = 1e3 * cuda_time(lambda: gs(p, q, d1), device)
    return out


def graph_time(v, p, q, drafts, g, device: str) -> dict:
    """The rule's ``sample`` replayed from a captured CUDA graph (CUDA only)."""
    gs = graphed(v.sample, (p, q, drafts), g, validate=False)
    if gs is None:
        return {}
    if isinstance(gs, str):
        return {"graph": gs}
    return {"graph_ms": 1e3 * cuda_time(lambda: gs(p, q, drafts), device)}


def compiled_time(v, p, q, drafts, g, device: str, args) -> dict:
    """The rule's ``sample`` with its pure step compiled by Inductor (:mod:`otspec_gpu.compiled`),
    eager and replayed from a CUDA graph (CUDA only; the first call compiles, untimed)."""
    from otspec_gpu.compiled import compiled_sample, failure

    f = compiled_sample(v)
    f(p, q, drafts, generator=g, validate=False)  # compile for this shape
    if failure() is not None:
        return {"compiled": failure()[:80]}
    out = {"compiled_ms": 1e3 * step_time(lambda: f(p, q, drafts, generator=g, validate=False), device, args)[0]}
    gs = graphed(f, (p, q, drafts), g, validate=False)
    if isinstance(gs, str):
        out["compiled_graph"] = gs
    elif gs is not None:
        out["compiled_graph_ms"] = 1e3 * cuda_time(lambda: gs(p, q, drafts), device)
    return out


def single_step_rows(args, device: str) -> list[dict]:
    rng = np.random.default_rng(args.seed)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rows = []
    for V in args.vocabs:
        for B in args.batches:
            p64, q64 = laws(rng, B, V)
            p = torch.as_tensor(p64, dtype=torch.float32, device=device)
            q = torch.as_tensor(q64, dtype=torch.float32, device=device)
            base = baseline_row(p, q, device, args)
            for name in args.verifiers:
                v = SINGLE_STEP[name]
                for k in ks_for(name, tuple(args.ks)):
                    g = torch.Generator(device).manual_seed(args.seed)
                    drafts = sample_drafts(q, k, v.draft_law, generator=g)
                    t_torch, n_torch, mean_torch = step_time(
                        lambda v=v, drafts=drafts, g=g, p=p, q=q: v.sample(p, q, drafts, generator=g, validate=False), device, args
                    )
                    row = {
                        "device": device,
                        "V": V,
                        "B": B,
                        "k": k,
                        "verifier": name,
                        "torch_ms": 1e3 * t_torch,
                        "torch_mean_ms": 1e3 * mean_torch,
                        "torch_reps": n_torch,
                        **base,
                        "x_formula": t_torch / (base["formula_ms"] / 1e3),
                    }
                    if device == "cuda" and v.step is not None:  # every rule's sample is sync-free: captured
                        row.update(graph_time(v, p, q, drafts, g, device))
                    if device == "cuda" and args.compiled and name in COMPILABLE:  # many small ops: Inductor fuses them
                        row.update(compiled_time(v, p, q, drafts, g, device, args))
                    if (device, V, B, k, name) in args.before:
                        row["before_ms"] = args.before[(device, V, B, k, name)]
                    if device == "cpu" and not args.no_numpy:
                        nv = otspec.verifiers.by_name(name)
                        make = getattr(otspec, v.draft_law)
                        d_np = drafts.cpu().numpy()
                        nrng = np.random.default_rng(args.seed)

                        def numpy_step(nv=nv, make=make, k=k, d_np=d_np, nrng=nrng, B=B, p64=p64, q64=q64):
                            for b in range(B):  # the numpy sample verifies one tuple per call
                                nv.sample(p64[b], make(q64[b], k), d_np[b], rng=nrng)

                        t_np, n_np, _ = timed(numpy_step, sync, args.min_total, max(3, args.max_reps // 4))
                        row.update({"numpy_ms": 1e3 * t_np, "numpy_reps": n_np, "speedup": t_np / t_torch})
                    rows.append(row)
                    print(row, flush=True)
    return rows


#: Table columns: torch median and mean per step, the previous revision's torch median (``--before``),
#: the numpy baseline's median and numpy / torch (medians).
COLUMNS = [
    "device",
    "V",
    "B",
    "k",
    "verifier",
    "torch ms",
    "torch mean ms",
    "graph ms",
    "compiled ms",
    "compiled graph ms",
    "formula ms",
    "formula graph ms",
    "x formula",
    "before ms",
    "numpy ms",
    "speedup",
]


def _ms(r: dict, key: str) -> str:
    return f"{r[key]:.3f}" if key in r else ("failed" if key[:-3] in r else "-")


def _cells(r: dict) -> list[str]:
    return [
        r["device"],
        str(r["V"]),
        str(r["B"]),
        str(r["k"]),
        r["verifier"],
        f"{r['torch_ms']:.3f}",
        f"{r['torch_mean_ms']:.3f}" if "torch_mean_ms" in r else "-",
        _ms(r, "graph_ms"),
        _ms(r, "compiled_ms"),
        _ms(r, "compiled_graph_ms"),
        _ms(r, "formula_ms"),
        _ms(r, "formula_graph_ms"),
        f"{r['x_formula']:.1f}x" if "x_formula" in r else "-",
        f"{r['before_ms']:.3f}" if "before_ms" in r else "-",
        f"{r['numpy_ms']:.3f}" if "numpy_ms" in r else "-",
        f"{r['speedup']:.1f}x" if "speedup" in r else "-",
    ]


def load_before(path: str | None) -> dict:
    """``{(device, V, B, k, verifier): torch median ms}`` from an earlier run's JSON (``--before``)."""
    if not path:
        return {}
    with open(path) as f:
        rows = json.load(f)["single_step"]
    return {(r["device"], r["V"], r["B"], r["k"], r["verifier"]): r["torch_ms"] for r in rows}


def rst_table(rows: list[dict], meta: str) -> str:
    """The single-step rows as an RST grid for docs/gpu.rst (one line per V, B, k, verifier)."""
    head, body = COLUMNS, [_cells(r) for r in rows]
    w = [max(len(x) for x in col) for col in zip(head, *body, strict=False)]
    rule = "  ".join("=" * n for n in w)
    fmt = lambda cells: "  ".join(c.ljust(n) for c, n in zip(cells, w, strict=False)).rstrip()
    return "\n".join([meta, "", rule, fmt(head), rule, *(fmt(b) for b in body), rule, ""])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="experiments/bench/out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verifiers", nargs="*", default=sorted(SINGLE_STEP), choices=sorted(SINGLE_STEP))
    ap.add_argument("--min-total", type=float, default=0.3, help="seconds of timed calls per cell (at least 3 calls)")
    ap.add_argument("--max-reps", type=int, default=30)
    ap.add_argument("--no-numpy", action="store_true", help="skip the numpy baseline")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's own)")
    ap.add_argument(
        "--compiled",
        action="store_true",
        help="CUDA: also time the Inductor-compiled step of optimal_iid / khisti / wor_iid (compiles per shape)",
    )
    ap.add_argument("--vocabs", type=int, nargs="*", default=list(VS), help="vocabulary sizes (default: 49152 262144)")
    ap.add_argument("--batches", type=int, nargs="*", default=list(BS), help="batch sizes B (default: 1 64)")
    ap.add_argument(
        "--ks", type=int, nargs="*", default=list(KS), help="numbers of drafts k (default: 1 4 8; a rule's own k where it has one)"
    )
    ap.add_argument(
        "--before",
        default=None,
        help="JSON of an earlier run (e.g. of the previous revision's otspec_gpu, put first on PYTHONPATH): its torch medians become the 'before ms' column",
    )
    ap.add_argument("--devices", nargs="*", default=None, choices=["cpu", "cuda"], help="default: cpu, and cuda when present")
    args = ap.parse_args(argv)
    args.before = load_before(args.before)
    if args.threads:
        torch.set_num_threads(args.threads)
    devices = args.devices if args.devices is not None else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    devices = [d for d in devices if d != "cuda" or torch.cuda.is_available()]
    rows = [r for d in devices for r in single_step_rows(args, d)]
    extra = {name: [r for d in devices for r in fn(args, d)] for name, fn in EXTRA_SECTIONS.items()}
    table = markdown_table(COLUMNS, [_cells(r) for r in rows])
    tables = {"Single-step verification, per step (median ms)": table}
    for name, rs in extra.items():
        if rs:
            keys = list(rs[0])
            tables[name] = markdown_table(keys, [[r.get(c, "") for c in keys] for r in rs])
    import otspec_gpu

    payload = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "devices": devices,
        "otspec_gpu": os.path.dirname(os.path.abspath(otspec_gpu.__file__)),
        "load_average": os.getloadavg(),
        "single_step": rows,
        **extra,
    }
    write_report(args.out, "bench_torch_verifiers", payload, tables)
    from _report import command_line, git_revision

    meta = (
        f"Command: ``{command_line()}``, revision ``{git_revision()}``, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, load average at the end {os.getloadavg()[0]:.2f}."
    )
    with open(os.path.join(args.out, "bench_torch_verifiers.rst"), "w") as f:
        f.write(rst_table(rows, meta))


if __name__ == "__main__":
    main()
