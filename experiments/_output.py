"""Shared command line and output of the experiment scripts.

Every experiment takes ``--seed``, ``--out`` (default ``experiments/out/<name>``, gitignored) and
``--quick`` (tiny sizes, seconds: what CI runs), and writes ``<name>.json``, ``<name>.md`` (tables
with the exact command and git revision) and one or more PNG plots into ``--out``. Importing this
module first makes torch single-threaded unless ``OMP_NUM_THREADS`` is set.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

# One math thread unless the caller asks for more (before torch / numpy load their thread pools): on
# a shared 2-core machine a two-thread forward is 5-9x slower than a one-thread one when other jobs
# run (the threads wait for each other). Set OMP_NUM_THREADS to override.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", os.environ["OMP_NUM_THREADS"])

import matplotlib

matplotlib.use("Agg")  # headless: experiments never open a window

import matplotlib.pyplot as plt

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from bench._report import command_line, git_revision, markdown_table, write_report

__all__ = ["parser", "parse", "write", "save_figure", "markdown_table", "command_line", "git_revision", "fmt"]


def parser(name: str, description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=name, description=description)
    ap.add_argument("--seed", type=int, default=0, help="seed of every random draw (default 0)")
    ap.add_argument("--out", default=os.path.join(_HERE, "out", name), help="output folder (default experiments/out/%(prog)s)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes for CI (seconds); not a result")
    return ap


def parse(ap: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    args.revision_at_start = git_revision()  # the code that runs; the tree may move during a long run
    return args


def save_figure(fig: Any, out_dir: str, name: str, dpi: int = 110) -> str:
    """Save ``fig`` as ``out_dir/name.png`` and close it (pyplot keeps figures alive otherwise)."""
    path = os.path.join(out_dir, f"{name}.png")
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def write(out_dir: str, name: str, args: argparse.Namespace, payload: dict, tables: dict[str, str], notes: list[str] | None = None) -> None:
    """``name.json`` + ``name.md`` with the command, revision, seed and quick flag."""
    start = getattr(args, "revision_at_start", None) or git_revision()
    payload = {"seed": args.seed, "quick": bool(args.quick), "git_revision_at_start": start, **payload}
    write_report(out_dir, name, payload, tables)
    md_path = os.path.join(out_dir, f"{name}.md")
    with open(md_path) as f:
        md = f.read()
    end = git_revision()
    if end != start:  # write_report records the revision at the end of the run; state both
        md = md.replace(f"Revision: `{end}`", f"Revision: `{start}` at start (`{end}` at the end)", 1)
    if notes:
        md = md.rstrip("\n") + "\n\n## Notes\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    with open(md_path, "w") as f:
        f.write(md)


def fmt(x: float, digits: int = 4) -> str:
    """A table cell: fixed digits, '-' for NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}f}"
