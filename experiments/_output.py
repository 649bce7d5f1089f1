"""Shared command line and output of the experiment scripts.

Every experiment takes ``--seed``, ``--out`` (default ``experiments/out/<name>``, gitignored) and
``--quick`` (tiny sizes, seconds: what CI runs), and writes ``<name>.json``, ``<name>.md`` (tables
with the exact command and git revision) and one or more PNG plots into ``--out``. Every script has
one shape, :func:`experiment`: parse, run (every number, into the JSON payload), report (tables and
figures from that payload), write (see ``experiments/README.md``). Importing this
module first makes torch single-threaded unless ``OMP_NUM_THREADS`` is set.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
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

__all__ = ["experiment", "parser", "parse", "write", "save_figure", "markdown_table", "command_line", "git_revision", "fmt"]


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


def experiment(
    name: str,
    doc: str,
    argv: list[str] | None,
    *,
    run: Callable[[argparse.Namespace], dict],
    report: Callable[[dict, argparse.Namespace], tuple[dict[str, str], list[str]]],
    arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    after_write: Callable[[argparse.Namespace], None] | None = None,
) -> dict:
    """The one shape of every experiment script: parse -> run -> report -> write.

    ``arguments(ap)`` adds the script's own flags to the shared ones (:func:`parser`);
    ``run(args)`` computes every number from seeded generators and returns the JSON payload (keys
    starting with ``_`` are not written: in-memory arrays for the figures, ``_name`` for the files'
    name when it is not the script's);
    ``report(payload, args)`` draws the figures into ``args.out`` and returns the markdown tables and
    notes, reading the payload only (plus the flags); :func:`write` stores the JSON and the markdown
    with the command and revision; ``after_write(args)`` derives further files from the written JSON
    (e.g. reStructuredText tables for the documentation). Returns the written payload.
    """
    ap = parser(name, doc.splitlines()[0])
    if arguments is not None:
        arguments(ap)
    args = parse(ap, argv)
    payload = run(args)
    tables, notes = report(payload, args)
    out_name = payload.get("_name", name)  # a run may name its files (e.g. after a non-default model pair)
    payload = {key: value for key, value in payload.items() if not key.startswith("_")}
    write(args.out, out_name, args, payload, tables, notes)
    if after_write is not None:
        after_write(args)
    return payload


def fmt(x: float, digits: int = 4) -> str:
    """A table cell: fixed digits, '-' for NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}f}"


# ---- prompt-clustered statistics of the experiment scripts (added for experiments 1, 3, 4, SPRINTER) ----


def ci(iv: Any, digits: int = 3, signed: bool = False) -> str:
    """A table cell ``value [low, high]`` for an :class:`otspec.stats.BootstrapInterval` (or its dict)."""
    d = iv.as_dict() if hasattr(iv, "as_dict") else dict(iv)
    f = f"{{:+.{digits}f}}" if signed else f"{{:.{digits}f}}"
    if d["low"] is None or (isinstance(d["low"], float) and math.isnan(d["low"])):
        return f.format(d["value"])
    return f"{f.format(d['value'])} [{f.format(d['low'])}, {f.format(d['high'])}]"


def clustered_between_runs(
    a: Any,
    clusters_a: Any,
    b: Any,
    clusters_b: Any,
    *,
    kind: str = "ratio",
    reference: float | None = None,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> dict:
    """Ratio (or difference) of the means of two runs on the same prompts, by a paired cluster bootstrap.

    Run A's values ``a`` (one per round) fall in prompts ``clusters_a``, run B's in ``clusters_b``;
    both runs decoded the same prompts with independent seeds. The statistic is
    ``mean_A / mean_B`` (``kind="ratio"``) or ``mean_A - mean_B`` (``"difference"``), each mean a
    ratio of totals over rounds (every round weighs the same, as a per-run block efficiency does).
    :func:`scipy.stats.bootstrap` (BCa) resamples prompts, each resampled prompt bringing its rounds
    of both runs, so the interval carries both runs' variance, the denominators' included.

    ``reference`` (a published number on the statistic's scale) adds ``p_value``: the two-sided
    percentile-bootstrap p-value of ``statistic == reference`` (twice the smaller tail of the
    bootstrap distribution at ``reference``; resolution ``1 / n_resamples``).

    Returns a dict: ``value``, ``low``, ``high``, ``confidence``, ``n`` (rounds), ``n_clusters``,
    ``method`` and, with a reference, ``reference`` and ``p_value``.
    """
    import numpy as np
    from scipy.stats import bootstrap

    from otspec.stats import cluster_totals

    sa, na = cluster_totals(a, clusters_a)
    sb, nb = cluster_totals(b, clusters_b)
    la = list(dict.fromkeys(np.asarray(clusters_a).tolist()))
    lb = list(dict.fromkeys(np.asarray(clusters_b).tolist()))
    common = [c for c in la if c in set(lb)]
    ia = np.array([la.index(c) for c in common])
    ib = np.array([lb.index(c) for c in common])
    data = (sa[ia], na[ia].astype(float), sb[ib], nb[ib].astype(float))

    def stat(x, m, y, n, axis=-1):
        ma = np.sum(x, axis=axis) / np.sum(m, axis=axis)
        mb = np.sum(y, axis=axis) / np.sum(n, axis=axis)
        return ma / mb if kind == "ratio" else ma - mb

    value = float(stat(*data))
    out = dict(
        value=value, low=math.nan, high=math.nan, confidence=confidence, n=int(na.sum() + nb.sum()), n_clusters=len(common), method="BCa"
    )
    singles = stat(*(x[:, None] for x in data))
    if len(common) >= 2 and np.all(np.isfinite(singles)) and np.ptp(singles) == 0.0:
        out.update(low=value, high=value)  # every prompt gives the same statistic: so does every resample
    elif len(common) >= 2:
        res = bootstrap(
            data,
            stat,
            paired=True,
            vectorized=True,
            confidence_level=confidence,
            n_resamples=n_resamples,
            method="BCa",
            rng=np.random.default_rng(seed),
        )
        out.update(low=float(res.confidence_interval.low), high=float(res.confidence_interval.high))
        if reference is not None:
            dist = np.asarray(res.bootstrap_distribution)
            tail = min(np.mean(dist <= reference), np.mean(dist >= reference))
            out.update(reference=float(reference), p_value=float(min(1.0, 2.0 * max(tail, 1.0 / dist.size))))
    return out


def interval_dict(iv: Any) -> dict:
    """A :class:`otspec.stats.BootstrapInterval` as a JSON-ready dict (NaN kept as NaN)."""
    return iv.as_dict() if hasattr(iv, "as_dict") else dict(iv)


def rounded(values: Any, digits: int = 6) -> list:
    """A JSON-compact list of floats (``digits`` decimals)."""
    import numpy as np

    return [round(float(v), digits) for v in np.asarray(values, dtype=float).ravel()]
