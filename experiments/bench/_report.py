"""Shared output of the benchmark scripts: JSON + markdown with the command and git revision."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

__all__ = ["git_revision", "command_line", "median_time", "interleaved_times", "run_cells", "write_report", "markdown_table"]


def git_revision() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def command_line() -> str:
    return "python " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])


def median_time(fn: Callable[[], object], repeats: int = 5) -> tuple[float, object]:
    """Median wall time of ``repeats`` calls (the machine is noisy: never quote one run)."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def interleaved_times(fns: Sequence[Callable[[], object]], samples: int) -> list[dict]:
    """Wall and CPU (``time.process_time``) time of each function over ``samples`` rounds, calling
    them in turn within each round (so the machine's load hits every one alike).

    Returns, per function, ``{"wall_s", "cpu_s"}`` (medians), ``"wall_all"`` (every round's wall
    time) and ``"out"`` (the last output).
    """
    wall: list[list[float]] = [[] for _ in fns]
    cpu: list[list[float]] = [[] for _ in fns]
    out: list[object] = [None] * len(fns)
    for _ in range(samples):
        for i, fn in enumerate(fns):
            c0, t0 = time.process_time(), time.perf_counter()
            out[i] = fn()
            wall[i].append(time.perf_counter() - t0)
            cpu[i].append(time.process_time() - c0)
    return [
        {"wall_s": statistics.median(w), "cpu_s": statistics.median(c), "wall_all": w, "out": o}
        for w, c, o in zip(wall, cpu, out, strict=True)
    ]


def run_cells(cells: Sequence[tuple], cell: Callable[..., dict]) -> tuple[list[dict], tuple, tuple]:
    """``cell(*c)`` for each ``c`` of ``cells``, printing each row as it comes: ``(rows, load average
    before, load average after)``."""
    load0 = os.getloadavg()
    rows = []
    for c in cells:
        r = cell(*c)
        rows.append(r)
        print(r, flush=True)
    return rows, load0, os.getloadavg()


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    return "\n".join(lines)


def write_report(out_dir: str, name: str, payload: dict, tables: dict[str, str]) -> None:
    """Write ``name.json`` and ``name.md`` (all tables, with the exact command and revision)."""
    os.makedirs(out_dir, exist_ok=True)
    meta = {
        "command": command_line(),
        "git_revision": git_revision(),
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump({"meta": meta, **payload}, f, indent=2, default=float)
    md = [
        f"# {name}",
        "",
        f"Command: `{meta['command']}`  ",
        f"Revision: `{meta['git_revision']}`, Python {meta['python']}, {meta['cpus']} CPUs",
        "",
    ]
    for title, table in tables.items():
        md += [f"## {title}", "", table, ""]
    with open(os.path.join(out_dir, f"{name}.md"), "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))
