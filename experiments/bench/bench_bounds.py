"""Benchmark of otspec.optimal_acceptance: closed forms at LLM vocabulary sizes, tuple-level
solvers (network simplex vs HiGHS vs cvxpy) side by side, the sparse max-flow (OR-Tools) against
them at 1e5 / 1e6 / 1e7 LP columns, `import otspec`, and the whole `otspec bound` command.

    python experiments/bench/bench_bounds.py --out experiments/out/bench_bounds --baseline 90c08eb

Baselines named in the output: for without replacement, the plain-numpy reference loop over
prefixes (400 + 200 Gauss-Legendre nodes) where it finishes in reasonable time; for tuple-level
solves, HiGHS (``lp``) and cvxpy beside the network simplex (``flow``) on the same LP; for the
max-flow scaling runs, the exact closed form (``prefix``, i.i.d. drafts) as the value every solver
must reach, and ``lp`` / ``flow`` / ``cvxpy`` in the same run (each solve in a fresh process:
whole-process time and peak RSS); for the i.i.d. optimum, its floor (argsort of p/q + cumsum of p)
timed interleaved with it; for ``import otspec``, ``import numpy`` in the same fresh process.
With ``--baseline REV`` the max-flow runs and the i.i.d. optimum are also timed on the package as
it was at git revision REV (extracted with ``git archive`` into a temporary folder), interleaved
with the current tree, so before/after come from the same run under the same load.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import markdown_table, median_time, write_report  # noqa: E402

import otspec  # noqa: E402
from otspec.errors import ProblemTooLargeError  # noqa: E402
from otspec.synthetic import synthetic_pair  # noqa: E402

VOCABS = (5000, 49152, 262144)
KS = (2, 4, 8)


def closed_forms(seed: int, quick: bool):
    rows = []
    for V in VOCABS[:1] if quick else VOCABS:
        p, q = synthetic_pair(V, seed=seed)
        for k in KS:
            for name, make in (("iid", otspec.iid), ("without_replacement", otspec.without_replacement), ("greedy", otspec.greedy)):
                law = make(q, k)
                reps = 1 if name == "without_replacement" else 5
                t, res = median_time(lambda: otspec.optimal_acceptance(p, law, method="prefix"), reps)
                rows.append(
                    {
                        "V": V,
                        "k": k,
                        "law": name,
                        "method": "prefix",
                        "seconds": t,
                        "value": res.value,
                        "error_bound": res.error_bound,
                        "status": res.status,
                        "cut": int(res.cut.size),
                    }
                )
                print(rows[-1], flush=True)
    return rows


def _median_time_capped(fn, repeats: int, cap_s: float = 5.0):
    """Median wall time of up to ``repeats`` calls; a call that takes longer than ``cap_s`` is timed
    once (the slow cells would otherwise dominate the run)."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
        if times[0] > cap_s:
            break
    return float(np.median(times)), out


def tuple_level(seed: int, quick: bool):
    cases = [("iid", 2, 50), ("iid", 2, 126), ("iid", 3, 30)] + (
        [] if quick else [("iid", 2, 300), ("iid", 3, 60), ("product", 2, 126), ("without_replacement", 3, 40), ("iid", 2, 1000)]
    )
    rows = []
    from otspec.bounds.maxflow import maxflow_available

    methods_all = ["prefix", "flow", "lp", "cvxpy"] + (["maxflow"] if maxflow_available() else [])
    p0, q0 = synthetic_pair(5, seed=seed)
    for method in methods_all:  # warm-up: solver imports are not part of any timed cell
        otspec.optimal_acceptance(p0, otspec.iid(q0, 2), method=method)
    for kind, k, V in cases:
        p, q = synthetic_pair(V, seed=seed)
        law_class = otspec.laws.by_kind(kind)
        if law_class.parameters == "qs":  # k drafters: q and a second seeded draft
            law = law_class.constructor([q, synthetic_pair(V, seed=seed + 1)[1]])
        else:
            law = law_class.constructor(q, k)
        sets, _ = law.enumerate_sets()
        arcs = sets.shape[0] * V
        # the largest case is there to find where each engine stops: time it once
        big = arcs > 1e8
        row = {"law": repr(law), "draft_sets": int(sets.shape[0]), "dense_arcs": int(arcs), "lp_columns": int((sets >= 0).sum())}
        values = {}
        methods = list(methods_all)
        if big:  # HiGHS took 480 s here at revision 4e56b75 (cvxpy and flow refuse): not re-run
            methods = [m for m in methods if m not in ("lp", "cvxpy")]
            row["lp_s"] = "not run (480 s at revision 4e56b75)"
        for method in methods:
            if method == "prefix" and not law.prefix_exact:
                continue
            reps = 1 if (method == "cvxpy" or big) else 3
            try:
                t, res = _median_time_capped(lambda: otspec.optimal_acceptance(p, law, method=method), reps)
            except ProblemTooLargeError as exc:
                row[f"{method}_s"] = "refused: " + str(exc).split(";")[0]
                continue
            row[f"{method}_s"] = t
            row[f"{method}_status"] = res.status
            values[method] = res.value
        ref = values.get("flow", next(iter(values.values())))
        row["max_disagreement"] = float(max(abs(v - ref) for v in values.values()))
        rows.append(row)
        print(row, flush=True)
    return rows


_RSS_WRAPPER = (
    "import resource, subprocess, sys\n"
    "subprocess.run([sys.executable, *sys.argv[1:]], check=True, stdout=subprocess.DEVNULL)\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
)


def whole_command(quick: bool):
    rows = []
    cases = [["--vocab", "5000", "--drafts", "4"]] + (
        [] if quick else [["--vocab", "262144", "--drafts", "8"], ["--vocab", "262144", "--drafts", "8", "--verifiers"]]
    )
    for args in cases:
        times, rss = [], []
        for _ in range(5 if args[1] == "5000" else 3):
            t0 = time.perf_counter()
            # A child's ru_maxrss includes the memory it inherited at fork, so the command runs
            # under a tiny wrapper interpreter that reports its own child's peak RSS (KiB).
            out = subprocess.run(
                [sys.executable, "-c", _RSS_WRAPPER, "-m", "otspec", "bound", *args, "--json"], check=True, capture_output=True, text=True
            )
            times.append(time.perf_counter() - t0)
            rss.append(int(out.stdout.strip().splitlines()[-1]))
        rows.append(
            {"command": "otspec bound " + " ".join(args), "seconds_median": float(np.median(times)), "peak_rss_mb": max(rss) / 1024}
        )
        print(rows[-1], flush=True)
    return rows


_CHILD = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np, otspec
from otspec.synthetic import synthetic_pair
V, k, method, seed = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
p, q = synthetic_pair(V, seed=seed)
law = otspec.iid(q, k)
t = time.perf_counter()
try:
    r = otspec.optimal_acceptance(p, law, method=method, memory_cap=12 * 2**30)
    out = {"value": r.value, "status": r.status, "gap": r.gap, "cut_value": float(otspec.bounds.cuts.cut_value(p, law, r.cut))}
except Exception as exc:  # a refusal is a result here
    out = {"refused": type(exc).__name__ + ": " + str(exc).split(";")[0]}
out["solve_s"] = time.perf_counter() - t
out["process_s"] = time.perf_counter() - t0
out["otspec_file"] = otspec.__file__
print(json.dumps(out))
"""

_RSS_CAPTURE = (
    "import resource, subprocess, sys\n"
    "r = subprocess.run([sys.executable, *sys.argv[1:]], check=True, stdout=subprocess.PIPE, text=True)\n"
    "print(r.stdout.strip().splitlines()[-1])\n"
    "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(u.ru_maxrss, u.ru_utime + u.ru_stime)\n"
)


def _run_child(V: int, k: int, method: str, seed: int, tree: str | None = None) -> dict:
    """One solve in a fresh process: its result, solve time, whole-process time and peak RSS.
    ``tree``: a folder holding another version of the ``otspec`` package to import instead (the
    child runs there, so that folder comes first on ``sys.path``)."""
    import json

    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", _RSS_CAPTURE, "-c", _CHILD, str(V), str(k), method, str(seed)],
        check=True,
        capture_output=True,
        text=True,
        cwd=tree,
    )
    wall = time.perf_counter() - t0
    lines = out.stdout.strip().splitlines()
    row = json.loads(lines[-2])
    rss_kib, cpu_s = lines[-1].split()
    row.update({"wall_s": wall, "cpu_s": float(cpu_s), "peak_rss_mb": int(rss_kib) / 1024})
    if tree is not None and not row["otspec_file"].startswith(tree):
        raise RuntimeError(f"baseline child imported {row['otspec_file']}, not the tree in {tree}")
    return row


def _median_rows(rows: list[dict]) -> dict:
    """Medians of the timings over repeated runs of one cell, the largest peak RSS, the rest from
    the first run (results are identical across runs: every solver here is deterministic)."""
    out = dict(rows[0])
    for key in ("solve_s", "process_s", "wall_s", "cpu_s"):
        out[key] = float(np.median([r[key] for r in rows]))
    out["peak_rss_mb"] = float(max(r["peak_rss_mb"] for r in rows))
    out["runs"] = len(rows)
    return out


def maxflow_scaling(seed: int, quick: bool, baseline: str | None):
    """maxflow (current tree and, with a baseline, the baseline tree) vs lp vs flow vs cvxpy on
    i.i.d. k = 2 laws with 1e5, 1e6 and 1e7 LP columns (V^2 pairs); repeated runs interleaved."""
    from otspec.bounds.maxflow import maxflow_available

    if not maxflow_available():
        print("maxflow: OR-Tools not installed, skipped", flush=True)
        return []
    sizes = [(316, "1e5")] + ([] if quick else [(1000, "1e6"), (3163, "1e7")])
    rows = []
    for V, label in sizes:
        exact = _run_child(V, 2, "prefix", seed)
        # maxflow is repeated (interleaved with the baseline's); the others run once: lp ~5 s,
        # cvxpy ~30 s, flow ~35 s at 1e5 columns; lp ~10 minutes at 1e6 (measured once), cvxpy and flow
        # refuse 1e6 (memory cap): they run only at 1e5.
        cells = [("maxflow", None, 3 if V < 3000 else 2)]
        if baseline is not None:
            cells.append(("maxflow", baseline, cells[0][2]))
        cells += [("flow", None, 1)] + ([("lp", None, 1), ("cvxpy", None, 1)] if V <= 316 else [])
        runs: dict = {}
        for rep in range(max(c[2] for c in cells)):
            for method, tree, reps in cells:
                if rep < reps:
                    runs.setdefault((method, tree), []).append(_run_child(V, 2, method, seed, tree))
        for method, tree, _ in cells:
            r = _median_rows(runs[(method, tree)])
            row = {"V": V, "k": 2, "columns": label, "pairs": V * V, "method": method, "tree": "baseline" if tree else "current", **r}
            if "value" in r:
                row["minus_exact"] = r["value"] - exact["value"]
                row["cut_minus_exact"] = r["cut_value"] - exact["value"]
            rows.append(row)
            print(row, flush=True)
    return rows


_FLOOR_CHILD = """
import json, sys, time
import numpy as np, otspec
from otspec.synthetic import synthetic_pair
V, k, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
p, q = synthetic_pair(V, seed=0)
law = otspec.iid(q, k)
try:  # the compiled path and its numpy reference (revisions before the compiled path: one engine)
    from otspec.bounds import jit_policy
    from otspec.bounds.prefix import ratio_keys, ratio_sort
except ImportError:
    jit_policy = None
def opt(engine):
    if jit_policy is not None:
        jit_policy.ENGINE = engine
    return otspec.optimal_acceptance(p, law, method="prefix")
cells = {"opt": lambda: opt("compiled"), "floor": lambda: np.cumsum(p[np.argsort(p / q)])}
if jit_policy is not None:
    cells["numpy"] = lambda: opt("numpy")
    cells["packed_floor"] = lambda: np.cumsum(p[ratio_sort(ratio_keys(p, q))])
res = cells["opt"]()
ref = cells["numpy"]() if "numpy" in cells else res
for fn in cells.values():  # warm-up: numba's start-up and the cached kernels' loading are not timed
    fn()
w = {n: [] for n in cells}
c = {n: [] for n in cells}
for _ in range(reps):  # interleaved; wall and CPU time of this process
    for name, fn in cells.items():
        t, tc = time.perf_counter(), time.process_time()
        fn()
        w[name].append(time.perf_counter() - t)
        c[name].append(time.process_time() - tc)
med = lambda x: float(np.median(x))
out = {"optimum_ms": 1e3 * med(w["opt"]), "floor_ms": 1e3 * med(w["floor"]),
    "optimum_cpu_ms": 1e3 * med(c["opt"]), "floor_cpu_ms": 1e3 * med(c["floor"]),
    "value": res.value, "cut": res.cut.tolist(), "status": res.status, "otspec_file": otspec.__file__,
    "numpy_path_identical": bool(res.value == ref.value and res.lower_bound == ref.lower_bound and res.checks == ref.checks
                                 and np.array_equal(res.cut, ref.cut))}
if "numpy" in cells:
    out.update({"numpy_path_ms": 1e3 * med(w["numpy"]), "numpy_path_cpu_ms": 1e3 * med(c["numpy"]),
                "packed_floor_ms": 1e3 * med(w["packed_floor"]), "packed_floor_cpu_ms": 1e3 * med(c["packed_floor"])})
print(json.dumps(out))
"""


def iid_floor(seed: int, quick: bool, baseline: str | None):
    """The i.i.d. optimum at V = 262 144, k = 8 against its floor (argsort of p/q + cumsum of p),
    interleaved in one fresh process per tree, 41 repeats each; wall and CPU-time medians. The
    optimum runs the compiled path (``jit_policy.ENGINE = "compiled"``), and beside it the numpy
    reference (``"numpy"``, the path of a process's first solves) and the floor with the packed
    sort the optimum uses (:func:`otspec.bounds.prefix.ratio_sort`). Every cell is called once
    before the timed repeats. The seed is fixed at 0 in the child (the docs' instance)."""
    import json

    V, reps = (5000, 15) if quick else (262144, 41)
    rows = []
    for tree in [None] + ([baseline] if baseline else []):
        out = subprocess.run(
            [sys.executable, "-c", _FLOOR_CHILD, str(V), "8", str(reps)], check=True, capture_output=True, text=True, cwd=tree
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        r.update(
            {
                "V": V,
                "k": 8,
                "tree": "baseline" if tree else "current",
                "ratio": r["optimum_ms"] / r["floor_ms"],
                "cpu_ratio": r["optimum_cpu_ms"] / r["floor_cpu_ms"],
            }
        )
        if "numpy_path_ms" in r:
            r["numpy_path_ratio"] = r["numpy_path_ms"] / r["floor_ms"]
            r["numpy_path_cpu_ratio"] = r["numpy_path_cpu_ms"] / r["floor_cpu_ms"]
            r["packed_floor_cpu_ratio"] = r["packed_floor_cpu_ms"] / r["floor_cpu_ms"]
        rows.append(r)
    if len(rows) == 2:
        rows[1]["same_value_and_cut_as_current"] = rows[0]["value"] == rows[1]["value"] and rows[0]["cut"] == rows[1]["cut"]
    for r in rows:
        r["cut_size"] = len(r.pop("cut"))
        print(r, flush=True)
    return rows


_IMPORT_PROBE = (
    "import time; t0 = time.perf_counter(); import numpy; t1 = time.perf_counter(); import otspec; t2 = time.perf_counter(); "
    "import sys; print(t1 - t0, t2 - t1, int('scipy.optimize' in sys.modules))"
)


def import_time():
    """`import otspec` in fresh processes (best and median of 7), beside `import numpy`."""
    np_s, ot_s, heavy = [], [], 0
    for _ in range(7):
        out = subprocess.run([sys.executable, "-c", _IMPORT_PROBE], check=True, capture_output=True, text=True).stdout.split()
        np_s.append(float(out[0]))
        ot_s.append(float(out[1]))
        heavy |= int(out[2])
    row = {
        "numpy_best_s": min(np_s),
        "otspec_after_numpy_best_s": min(ot_s),
        "otspec_after_numpy_median_s": float(np.median(ot_s)),
        "total_best_s": min(a + b for a, b in zip(np_s, ot_s, strict=False)),
        "scipy_optimize_imported": bool(heavy),
    }
    print(row, flush=True)
    return row


def product_bnb(seed: int, quick: bool) -> list[dict]:
    """``method="product"`` (branch-and-bound, with its re-check) at LLM vocabularies for k = 2, 3
    heterogeneous drafters (drafter 0: the synthetic pair's q; drafter j >= 1: the same seed's
    ranking with target noise 1 and draft noise 0.5 + 0.5 j), median of 3 solves; at V = 2 000, k = 2 also the max-flow's value beside it."""
    rows = []
    for V in (2000,) if quick else (2000, 49152, 262144):
        for k in (2, 3):
            for s in (seed, seed + 1):
                p, q = synthetic_pair(V, seed=s)
                # drafter j >= 1: the same ranking, its own logit noise (twice as large for j = 2)
                others = [synthetic_pair(V, seed=s, draft_noise=0.5 + 0.5 * j, target_noise=1.0)[1] for j in range(1, k)]
                law = otspec.product([q, *others])
                t, res = median_time(lambda law=law, p=p: otspec.optimal_acceptance(p, law, method="product"), 3)
                row = {
                    "V": V,
                    "k": k,
                    "seed": s,
                    "seconds": t,
                    "value": res.value,
                    "gap": res.gap,
                    "boxes": res.certificate.n_boxes,
                    "status": res.status,
                    "cut": int(res.cut.size),
                }
                if V <= 2000 and k == 2:
                    with contextlib.suppress(ImportError):  # the maxflow extra is optional
                        row["maxflow_minus_product"] = otspec.optimal_acceptance(p, law, method="maxflow").value - res.value
                rows.append(row)
                print(row, flush=True)
    return rows


def _product_targets(rows: list[dict]) -> list[tuple]:
    """The targets at V = 262 144: at most 1 s for k = 2 and 3 s for k = 3, every solve certified."""
    out = []
    for k, limit in ((2, 1.0), (3, 3.0)):
        sel = [r for r in rows if r["V"] == 262144 and r["k"] == k]
        if sel:
            worst = max(r["seconds"] for r in sel)
            ok = worst <= limit and all(r["status"] == "optimal" for r in sel)
            out.append((f"V = 262 144, k = {k}: <= {limit:.0f} s", f"{worst:.2f} s (worst seed)", "met" if ok else "NOT met"))
    return out


def _load_average() -> float:
    try:
        return float(os.getloadavg()[0])
    except OSError:
        return float("nan")


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "uptime unavailable"


def _extract_tree(rev: str) -> str:
    """The ``otspec`` package at git revision ``rev``, extracted into a fresh temporary folder."""
    tmp = tempfile.mkdtemp(prefix="otspec_baseline_")
    archive = subprocess.run(["git", "archive", rev, "otspec"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
    return tmp


def _iid_only(args) -> None:
    """``--only iid``: the i.i.d. optimum with its certificate against its argsort + cumsum floor,
    this revision and (``--baseline``) another, each in a fresh process of the same run."""
    load_before = _load_average()
    rev = (
        subprocess.run(["git", "rev-parse", args.baseline], check=True, capture_output=True, text=True).stdout.strip()
        if args.baseline
        else None
    )
    tree = _extract_tree(rev) if rev else None
    try:
        fl = iid_floor(args.seed, args.quick, tree)
    finally:
        if tree:
            shutil.rmtree(tree, ignore_errors=True)
    rows = []
    for r in fl:
        code = f"baseline {rev[:7]}" if r["tree"] == "baseline" else "this revision"
        rows.append(
            (
                r["V"],
                r["k"],
                code + (", compiled" if "numpy_path_ms" in r else ""),
                f"{r['optimum_ms']:.1f}",
                f"{r['floor_ms']:.1f}",
                f"{r['ratio']:.2f}",
                f"{r['optimum_cpu_ms']:.1f}",
                f"{r['floor_cpu_ms']:.1f}",
                f"{r['cpu_ratio']:.2f}",
                r["status"],
            )
        )
        if "numpy_path_ms" in r:
            rows.append(
                (
                    r["V"],
                    r["k"],
                    code + ", numpy path",
                    f"{r['numpy_path_ms']:.1f}",
                    f"{r['floor_ms']:.1f}",
                    f"{r['numpy_path_ratio']:.2f}",
                    f"{r['numpy_path_cpu_ms']:.1f}",
                    f"{r['floor_cpu_ms']:.1f}",
                    f"{r['numpy_path_cpu_ratio']:.2f}",
                    "identical" if r["numpy_path_identical"] else "DIFFERS",
                )
            )
            rows.append(
                (
                    r["V"],
                    r["k"],
                    code + ", floor with the packed sort",
                    f"{r['packed_floor_ms']:.1f}",
                    f"{r['floor_ms']:.1f}",
                    f"{r['packed_floor_ms'] / r['floor_ms']:.2f}",
                    f"{r['packed_floor_cpu_ms']:.1f}",
                    f"{r['floor_cpu_ms']:.1f}",
                    f"{r['packed_floor_cpu_ratio']:.2f}",
                    "-",
                )
            )
    cols = ["V", "k", "code", "ms", "floor ms", "ratio (wall)", "CPU ms", "floor CPU ms", "ratio (CPU)", "status"]
    load = {"load_average_1min_before": load_before, "load_average_1min_after": _load_average(), "baseline_revision": rev}
    write_report(
        args.out,
        "bench_bounds_iid",
        {"iid_floor": fl, "machine_load": load},
        {
            "i.i.d. optimum with its certificate against the argsort + cumsum floor (interleaved, one fresh process per code; medians)": (
                markdown_table(cols, rows)
            ),
            "Machine load": f"1-minute load average {load_before:.2f} before, {load['load_average_1min_after']:.2f} after",
        },
    )


# long-function: a linear script: parse, run every benchmark, write its report in order; splitting only moves lines
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="experiments/out/bench_bounds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="smallest sizes only (smoke test)")
    ap.add_argument("--baseline", default=None, help="git revision to time the max-flow runs and the i.i.d. optimum against")
    ap.add_argument(
        "--only",
        choices=("product", "iid"),
        default=None,
        help="run one section only (product: the branch-and-bound; iid: the i.i.d. optimum against its floor, with --baseline)",
    )
    args = ap.parse_args()
    if args.only == "iid":
        _iid_only(args)
        return
    if args.only == "product":
        load = _load_average()
        rows = product_bnb(args.seed, args.quick)
        t = markdown_table(
            ["V", "k", "seed", "s (median of 3)", "boxes", "optimum", "gap", "status", "|cut|", "maxflow - product"],
            [
                (
                    r["V"],
                    r["k"],
                    r["seed"],
                    f"{r['seconds']:.3f}",
                    r["boxes"],
                    f"{r['value']:.10f}",
                    "-" if r["gap"] is None else f"{r['gap']:.1e}",
                    r["status"],
                    r["cut"],
                    f"{r['maxflow_minus_product']:.1e}" if "maxflow_minus_product" in r else "-",
                )
                for r in rows
            ],
        )
        targets = markdown_table(["target", "measured", "verdict"], _product_targets(rows))
        tables = {
            f"Heterogeneous drafters: method='product' (1-minute load average before: {load:.2f}, after: {_load_average():.2f})": t,
            "Targets": targets,
        }
        write_report(args.out, "bench_bounds_product", {"rows": rows}, tables)
        return
    load_before, uptime_before = _load_average(), _uptime()
    baseline_rev = (
        subprocess.run(["git", "rev-parse", args.baseline], check=True, capture_output=True, text=True).stdout.strip()
        if args.baseline
        else None
    )
    tree = _extract_tree(baseline_rev) if baseline_rev else None
    try:
        imp = import_time()
        fl = iid_floor(args.seed, args.quick, tree)
        cf = closed_forms(args.seed, args.quick)
        tl = tuple_level(args.seed, args.quick)
        mf = maxflow_scaling(args.seed, args.quick, tree)
        wc = whole_command(args.quick)
    finally:
        if tree:
            shutil.rmtree(tree, ignore_errors=True)
    t1 = markdown_table(
        ["V", "k", "law", "ms", "optimum", "error bound", "|cut|", "status"],
        [
            (r["V"], r["k"], r["law"], f"{r['seconds'] * 1e3:.1f}", f"{r['value']:.10f}", f"{r['error_bound']:.1e}", r["cut"], r["status"])
            for r in cf
        ],
    )
    fmt = lambda x: (
        f"{x:.3f}" if isinstance(x, float) else ("-" if x is None else ("refused (memory cap)" if str(x).startswith("refused") else str(x)))
    )
    t2 = markdown_table(
        ["law", "draft sets", "dense arcs", "LP columns", "prefix s", "flow s", "HiGHS lp s", "cvxpy s", "maxflow s", "max disagreement"],
        [
            (
                r["law"],
                r["draft_sets"],
                r["dense_arcs"],
                r["lp_columns"],
                fmt(r.get("prefix_s")),
                fmt(r.get("flow_s")),
                fmt(r.get("lp_s")),
                fmt(r.get("cvxpy_s")),
                fmt(r.get("maxflow_s")),
                f"{r['max_disagreement']:.1e}",
            )
            for r in tl
        ],
    )
    t3 = markdown_table(
        ["command", "median s", "peak RSS MB"], [(r["command"], f"{r['seconds_median']:.2f}", f"{r['peak_rss_mb']:.0f}") for r in wc]
    )
    t4 = markdown_table(
        [
            "LP columns",
            "V (iid, k = 2)",
            "method",
            "code",
            "runs",
            "solve s",
            "whole process s",
            "process CPU s",
            "peak RSS MB",
            "value - exact",
            "cut value - exact",
            "gap",
            "status",
        ],
        [
            (
                r["columns"],
                r["V"],
                r["method"],
                "baseline" if r["tree"] == "baseline" else "this revision",
                r["runs"],
                f"{r['solve_s']:.2f}",
                f"{r['wall_s']:.2f}",
                f"{r['cpu_s']:.2f}",
                f"{r['peak_rss_mb']:.0f}",
                f"{r['minus_exact']:.1e}" if "minus_exact" in r else "-",
                f"{r['cut_minus_exact']:.1e}" if "cut_minus_exact" in r else "-",
                f"{r['gap']:.1e}" if "gap" in r else "-",
                r.get("status", "refused (memory cap)" if "refused" in r else "-"),
            )
            for r in mf
        ],
    )
    t5 = markdown_table(
        ["import numpy (best s)", "import otspec after numpy (best s)", "(median s)", "total (best s)", "scipy.optimize imported"],
        [
            (
                f"{imp['numpy_best_s']:.3f}",
                f"{imp['otspec_after_numpy_best_s']:.3f}",
                f"{imp['otspec_after_numpy_median_s']:.3f}",
                f"{imp['total_best_s']:.3f}",
                imp["scipy_optimize_imported"],
            )
        ],
    )
    t6 = markdown_table(
        ["V", "k", "code", "optimum ms", "floor ms", "ratio (wall)", "optimum CPU ms", "floor CPU ms", "ratio (CPU)"],
        [
            (
                r["V"],
                r["k"],
                "baseline" if r["tree"] == "baseline" else "this revision",
                f"{r['optimum_ms']:.1f}",
                f"{r['floor_ms']:.1f}",
                f"{r['ratio']:.2f}",
                f"{r['optimum_cpu_ms']:.1f}",
                f"{r['floor_cpu_ms']:.1f}",
                f"{r['cpu_ratio']:.2f}",
            )
            for r in fl
        ],
    )
    load = {
        "load_average_1min_before": load_before,
        "load_average_1min_after": _load_average(),
        "uptime_before": uptime_before,
        "uptime_after": _uptime(),
        "cpus": os.cpu_count(),
        "baseline_revision": baseline_rev,
    }
    write_report(
        args.out,
        "bench_bounds",
        {
            "closed_forms": cf,
            "iid_floor": fl,
            "tuple_level": tl,
            "maxflow_scaling": mf,
            "import_time": imp,
            "whole_command": wc,
            "machine_load": load,
        },
        {
            "Closed forms (method='prefix')": t1,
            "i.i.d. optimum against the argsort + cumsum floor (interleaved, 41 pairs; medians)": t6,
            "Tuple-level exact solvers on the same LP": t2,
            "Sparse max-flow (OR-Tools) vs lp / flow / cvxpy, each solve in a fresh process": t4,
            "import otspec": t5,
            "Whole command": t3,
            "Machine load": (
                f"`{load['uptime_before']}` before, `{load['uptime_after']}` after, {load['cpus']} CPUs; "
                f"baseline revision {baseline_rev or '(none)'}"
            ),
        },
    )


if __name__ == "__main__":
    main()
