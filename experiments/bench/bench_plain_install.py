"""The plain install without numba against the same code with numba, in one run.

numba is a core dependency, but an install can lack it (a platform without wheels, ``--no-deps``):
this script hides it (``sys.modules["numba"] = None`` in a child process, so every ``import numba``
fails as it would without the package) and times, in that child and in one with numba, at
V = 262 144 and k = 8 on the seed-0 LM-shaped pair of ``otspec.synthetic``:

1. ``otspec bound -V 262144 -k 8 --verifiers --json``, the whole command in a fresh process (target
   <= 5 s on the plain install), and each verifier row's ``acceptance`` call behind it;
2. each interleaved with three floors in the same process (``--samples`` rounds of floors and
   computation in turn, medians of wall and CPU time, one warm-up call of each first): the i.i.d. optimum with its certificate
   (``optimal_acceptance(p, iid(q, 8), method="prefix")``), the without-replacement optimum with
   its certificate, and the optimal i.i.d. verifier's preparation + one draw on a fresh pair
   (``prepare(..., draw="bridge")``). The floors: numpy's default ``argsort`` of p/q (what the
   i.i.d. scan and r* call), a stable ``argsort`` of p/q (what the WOR bench names its floor),
   and argsort + ``cumsum`` of the sorted p (the i.i.d. bench's floor);
3. one evaluation of the Luce law's double integral at V = 100, k = 3 (``optimal_wor``'s oracle),
   compiled and as plain Python: the cliff that ``UncompiledLuceWarning`` announces.

Every child imports the committed revision (``git archive HEAD``), not the working tree.
Usage: ``python experiments/bench/bench_plain_install.py --out docs/_static/results``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _report import markdown_table, write_report

#: Prepended to every child: hide numba (an ``import numba`` then raises ImportError).
_HIDE = "import sys; sys.modules['numba'] = None\n"

_TIMING_CHILD = r"""
import json, sys, time, warnings
import numpy as np, otspec
from otspec.synthetic import synthetic_pair
from otspec.verifiers.step.optimal_iid import prepare
V, k, samples = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
p, q = synthetic_pair(V, seed=0)
ratio = p / q
iid, wor = otspec.iid(q, k), otspec.without_replacement(q, k)
drafts = iid.sample(np.random.default_rng(0), 1)
floors = {
    "argsort": lambda: np.argsort(ratio),
    "stable_argsort": lambda: np.argsort(ratio, kind="stable"),
    "argsort_cumsum": lambda: np.cumsum(p[np.argsort(p / q)]),
}
work = {
    "iid_optimum": lambda: otspec.optimal_acceptance(p, iid, method="prefix"),
    "wor_optimum": lambda: otspec.optimal_acceptance(p, wor),
    "iid_fresh_draw": lambda: prepare(p, q, k, draw="bridge").sample_batch(drafts, rng=np.random.default_rng(0)),
}
out = {name: fn() for name, fn in {**floors, **work}.items()}  # warm-up (imports, compiled kernels loaded once)
res = {}
for name, fn in work.items():  # each computation interleaved with its own three floors
    fns = {**floors, name: fn}
    wall = {n: [] for n in fns}
    cpu = {n: [] for n in fns}
    for _ in range(samples):
        for n, f in fns.items():
            c0, t0 = time.process_time(), time.perf_counter()
            f()
            wall[n].append(time.perf_counter() - t0)
            cpu[n].append(time.process_time() - c0)
    res[name] = {n: {"wall_s": float(np.median(wall[n])), "cpu_s": float(np.median(cpu[n]))} for n in fns}
res["iid_value"], res["iid_status"] = out["iid_optimum"].value, out["iid_optimum"].status
res["iid_membership"] = out["iid_optimum"].checks.get("selection_law_membership")
res["wor_value"], res["wor_error_bound"] = out["wor_optimum"].value, out["wor_optimum"].error_bound
res["numba_loaded"] = sys.modules.get("numba") is not None
res["otspec_file"] = otspec.__file__
print(json.dumps(res))
"""

_ROWS_CHILD = r"""
import json, sys, time
import numpy as np, otspec
from otspec.synthetic import synthetic_pair
from otspec.cli.bound import DEFAULT_LAWS, _make_law
V, k, skip = int(sys.argv[1]), int(sys.argv[2]), set(sys.argv[3:])
p, q = synthetic_pair(V, seed=0)
rows = []
for name in DEFAULT_LAWS:
    law = _make_law(name, q, k)
    opt = otspec.optimal_acceptance(p, law)
    for v in otspec.verifiers.ALL:
        if not v.applies_to(law):
            continue
        if v.name in skip:
            rows.append({"law": name, "verifier": v.name, "how": "skipped (--skip)", "seconds": float("nan"), "cpu_seconds": float("nan")})
            continue
        t, c = time.perf_counter(), time.process_time()
        bracket = getattr(v, "certified_bracket", lambda p, law: None)(p, law)
        if bracket is None:
            try:
                how = v.acceptance(p, law).how
            except otspec.errors.ProblemTooLargeError:
                how = "unavailable"
            except (MemoryError, Exception) as exc:  # a failing row is a result here (the command fails on it)
                how = "fails: " + type(exc).__name__
        else:
            how = "bracket"
        rows.append({"law": name, "verifier": v.name, "how": how, "seconds": time.perf_counter() - t,
                     "cpu_seconds": time.process_time() - c})
print(json.dumps({"rows": rows, "numba_loaded": sys.modules.get("numba") is not None}))
"""

_LUCE_CHILD = r"""
import json, sys, time, warnings
import numpy as np
from otspec.verifiers.step._luce_law import luce_law_quadrature
V, k = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
q = rng.dirichlet(np.full(V, 0.5)); b = rng.uniform(0.5, 2.0, V); A = np.arange(V) >= V // 2
luce_law_quadrature(q, b, A, k, h=0.5)  # warm-up: compiled kernels loaded once
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    t = time.perf_counter()
    r = luce_law_quadrature(q, b, A, k, h=0.25)
    dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "warned": [x.category.__name__ for x in w], "r_head": r.r[:3].tolist(),
                  "numba_loaded": sys.modules.get("numba") is not None}))
"""


#: The committed revision the children import (a ``git archive`` of it; set in main): the shared
#: working tree may hold other people's unfinished files.
_TREE: dict = {"cwd": None}


def _extract_head() -> str:
    """``git archive HEAD`` of the package into a temporary folder; the children run there, so
    ``import otspec`` is the committed revision (the current folder comes first on sys.path)."""
    import tarfile
    import tempfile

    tmp = tempfile.mkdtemp(prefix="otspec_head_")
    data = subprocess.run(["git", "archive", "HEAD", "otspec"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=__import__("io").BytesIO(data)) as tf:
        tf.extractall(tmp, filter="data")
    return tmp


def _child(code: str, args: list[str], plain: bool) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", (_HIDE if plain else "") + code, *args], check=True, capture_output=True, text=True, cwd=_TREE["cwd"]
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


#: ``--skip``: the command's child drops these verifiers from the registry before ``main`` runs
#: (``otspec.verifiers.ALL`` and the report's copy of it), so the command's rows are all but them.
_SKIP_CODE = """
import otspec.report, otspec.verifiers
_skip = set({skip!r})
otspec.verifiers.ALL = otspec.report.ALL = tuple(v for v in otspec.verifiers.ALL if v.name not in _skip)
"""


def _children_cpu() -> float:
    """User + system CPU seconds of this process's finished children so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _run(argv: list[str], timeout: float):
    """One run of the command: ``(wall seconds, CPU seconds, failure or None)``; a run past
    ``timeout`` is stopped. On a shared machine the CPU time (the child's user + system) is the
    figure to compare with a target; the wall time counts the other jobs' share of the cores."""
    t0, c0 = time.perf_counter(), _children_cpu()
    try:
        run = subprocess.run(argv, capture_output=True, text=True, cwd=_TREE["cwd"], timeout=timeout)
    except subprocess.TimeoutExpired:
        failure = {"returncode": None, "stderr_tail": f"stopped after the {timeout:g} s timeout"}
        return time.perf_counter() - t0, _children_cpu() - c0, failure
    dt, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if run.returncode != 0:  # a result too: recorded with the end of its stderr
        return dt, cpu, {"returncode": run.returncode, "stderr_tail": run.stderr[-2000:]}
    return dt, cpu, None


def _command(args: list[str], plain: bool, repeats: int, timeout: float, skip: tuple = ()) -> dict:
    code = (_HIDE if plain else "import sys\n") + (_SKIP_CODE.format(skip=sorted(skip)) if skip else "")
    code += "from otspec.cli import main; sys.exit(main(sys.argv[1:]))"
    times, cpus, failures = [], [], []
    first = None
    if not plain:  # the first run in a fresh tree compiles numba's kernels into its cache: timed apart
        first, _, _ = _run([sys.executable, "-c", code, *args], timeout)
    for _ in range(repeats):
        dt, cpu, failure = _run([sys.executable, "-c", code, *args], timeout)
        times.append(dt)
        cpus.append(cpu)
        if failure:
            failures.append(failure)
    return {
        "command": "otspec " + " ".join(args),
        "plain": plain,
        "skipped_verifiers": sorted(skip),
        "seconds": sorted(times)[len(times) // 2],
        "cpu_seconds": sorted(cpus)[len(cpus) // 2],
        "all_seconds": times,
        "all_cpu_seconds": cpus,
        "failures": failures,
        "first_run_seconds": first,
    }


# long-function: a linear script: run, write, report in order (experiments/README.md); splitting only moves lines
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="experiments/out/bench_plain_install")
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--repeats", type=int, default=3, help="runs of the whole command per install (median)")
    ap.add_argument("--quick", action="store_true", help="V = 5000 (smoke test)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds after which a run of the command is stopped (recorded)")
    ap.add_argument(
        "--skip",
        nargs="*",
        default=[],
        metavar="VERIFIER",
        help="also time the command without these verifiers' rows, and leave them out of the row-by-row timing",
    )
    args = ap.parse_args()
    V, k = (5000, 8) if args.quick else (262144, 8)
    _TREE["cwd"] = _extract_head()
    head = subprocess.run(["git", "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    load0 = os.getloadavg()
    timing, commands, rows, luce = {}, [], {}, {}
    for plain in (True, False):
        tag = "plain (numba hidden)" if plain else "with numba"
        cmd = ["bound", "-V", str(V), "-k", str(k), "--verifiers", "--json"]
        commands.append(_command(cmd, plain, args.repeats, args.timeout))
        print(commands[-1], flush=True)
        if args.skip:
            commands.append(_command(cmd, plain, args.repeats, args.timeout, tuple(args.skip)))
            print(commands[-1], flush=True)
        timing[tag] = _child(_TIMING_CHILD, [str(V), str(k), str(args.samples)], plain)
        print(tag, timing[tag], flush=True)
        rows[tag] = _child(_ROWS_CHILD, [str(V), str(k), *args.skip], plain)
        luce[tag] = _child(_LUCE_CHILD, ["100", "3"], plain)
        print(tag, luce[tag], flush=True)
    load1 = os.getloadavg()
    __import__("shutil").rmtree(_TREE["cwd"], ignore_errors=True)

    def ratio(t: dict, name: str, floor: str, clock: str) -> str:
        return f"{t[name][clock] / t[floor][clock]:.2f}"

    fl_names = ("argsort", "stable_argsort", "argsort_cumsum")
    t_rows, floors = [], []
    for tag, tt in timing.items():
        for name in ("iid_optimum", "wor_optimum", "iid_fresh_draw"):
            t = tt[name]
            t_rows.append(
                (
                    tag,
                    name,
                    f"{t[name]['wall_s'] * 1e3:.1f} / {t[name]['cpu_s'] * 1e3:.1f}",
                    *(f"{ratio(t, name, fl, 'wall_s')} / {ratio(t, name, fl, 'cpu_s')}" for fl in fl_names),
                )
            )
            floors.append((tag, name, *(f"{t[fl]['wall_s'] * 1e3:.1f} / {t[fl]['cpu_s'] * 1e3:.1f}" for fl in fl_names)))
    cmd_rows = [
        (
            c["command"],
            "plain (numba hidden)" if c["plain"] else "with numba",
            ", ".join(c["skipped_verifiers"]) or "-",
            f"{c['seconds']:.2f} / {c['cpu_seconds']:.2f}",
            "-" if c["first_run_seconds"] is None else f"{c['first_run_seconds']:.2f}",
            "; ".join(f["stderr_tail"].splitlines()[-1] if f["stderr_tail"] else str(f["returncode"]) for f in c["failures"]) or "-",
        )
        for c in commands
    ]
    slow = []
    for tag, r in rows.items():
        timed = [x for x in r["rows"] if x["seconds"] == x["seconds"]]
        total = (sum(x["seconds"] for x in timed), sum(x["cpu_seconds"] for x in timed))
        slow.append((tag, "all laws", "every timed row", "sum", f"{total[0]:.2f} / {total[1]:.2f}"))
        for x in sorted(timed, key=lambda x: -x["cpu_seconds"])[:6]:
            slow.append((tag, x["law"], x["verifier"], x["how"], f"{x['seconds']:.2f} / {x['cpu_seconds']:.2f}"))
    luce_rows = [(tag, f"{x['seconds']:.3f}", ", ".join(x["warned"]) or "-") for tag, x in luce.items()]
    tables = {
        f"otspec bound at V = {V}, k = {k}: whole command in a fresh process (median of {args.repeats}; target <= 5 s plain)": markdown_table(
            [
                "command",
                "install",
                "verifiers left out",
                "seconds (wall / CPU)",
                "first run (numba compiles its cache)",
                "failed or stopped runs",
            ],
            cmd_rows,
        ),
        "The slowest verifier rows behind it (acceptance call, seconds)": markdown_table(
            ["install", "law", "verifier", "how", "s (wall / CPU)"], slow
        ),
        f"Same-run ratios (wall / CPU, medians of {args.samples} interleaved rounds) to three floors": markdown_table(
            ["install", "computation", "ms (wall / CPU)", "/ argsort", "/ stable argsort", "/ argsort + cumsum"], t_rows
        ),
        "The floors of each computation's rounds (ms, wall / CPU)": markdown_table(
            ["install", "interleaved with", "argsort", "stable argsort", "argsort + cumsum"], floors
        ),
        "One Luce law evaluation (optimal_wor's oracle) at V = 100, k = 3, h = 0.25": markdown_table(
            ["install", "seconds", "warning"], luce_rows
        ),
        "machine load": f"load average before {tuple(round(x, 2) for x in load0)}, after {tuple(round(x, 2) for x in load1)}",
    }
    write_report(
        args.out,
        "bench_plain_install",
        {
            "children_import": f"otspec at HEAD {head} (git archive)",
            "V": V,
            "k": k,
            "samples": args.samples,
            "commands": commands,
            "timing": timing,
            "rows": rows,
            "luce": luce,
            "load_before": load0,
            "load_after": load1,
        },
        tables,
    )


if __name__ == "__main__":
    main()
