"""The GPU verify-step targets against one run of ``gpu_checks.sh``: reads the JSON the run wrote
under its output folder and prints one markdown table (target, measured eager ``sample``, the pure
step, the graph replay with the inputs copied and with them in place, the same-run formula step
and its replay, met or not).

    python experiments/bench/gpu_targets.py OUT_DIR

A target is judged twice: on the eager ``sample`` time (``validate=False``) and on the graph replay
with the inputs copied into the graph (the conservative replay: ``graph in place`` leaves the copy
out, as a caller writing its inputs into the graph's tensors would). A cell the run did not produce
reads ``unmeasured``.
"""

from __future__ import annotations

import glob
import json
import os
import sys


def _load(pattern: str, key: str) -> list[dict]:
    rows = []
    for path in sorted(glob.glob(pattern)):
        with open(path) as f:
            rows += [r for r in json.load(f).get(key, []) if r.get("device") == "cuda"]
    return rows


def _us(x) -> str:
    return "-" if x is None or isinstance(x, str) else f"{1e3 * x:.0f}"


def _find(rows: list[dict], **want) -> dict | None:
    hits = [r for r in rows if all(r.get(k) == v for k, v in want.items())]
    return hits[0] if hits else None


def table(out: str) -> str:
    """The targets table of the run whose files are under ``out`` (markdown).

    Parameters
    ----------
    out : str
        The run's output folder (``chains_V*/bench_torch_chains.json``, ``verifiers_B*/bench_torch_verifiers.json``).

    Returns
    -------
    str
        A markdown table, one row per target cell.
    """
    chains = _load(os.path.join(out, "chains_V*", "bench_torch_chains.json"), "cuda_rows")
    single = _load(os.path.join(out, "verifiers_B*", "bench_torch_verifiers.json"), "single_step")
    lines = [
        "| target | sample (us) | step (us) | graph (us) | graph in place (us) | formula / formula graph (us) | met eager | met graph |",
        "|---|---|---|---|---|---|---|---|",
    ]
    missing = "unmeasured | - | - | - | - | unmeasured | unmeasured |"

    def met(x, limit):
        return "-" if x is None or isinstance(x, str) else ("yes" if x <= limit else "no")

    def row(label, r, limit_us, step_key="step_ms"):
        if r is None:
            lines.append(f"| {label} | {missing}")
            return
        t, g = r["torch_ms"], r.get("graph_ms")
        lines.append(
            f"| {label} | {_us(t)} | {_us(r.get(step_key))} | {_us(g)} | {_us(r.get('graph_inplace_ms'))} | "
            f"{_us(r.get('formula_ms'))} / {_us(r.get('formula_graph_ms'))} | {met(1e3 * t, limit_us)} | "
            f"{met(None if g is None or isinstance(g, str) else 1e3 * g, limit_us)} |"
        )

    for V, limits in ((49_152, (70, 100)), (128_256, (75, 175))):
        for B, lim in zip((1, 64), limits, strict=True):
            row(f"token chain, gamma 4, V {V}, B {B}: <= {lim} us", _find(chains, kind="chain", rule="token", V=V, B=B, gamma=4), lim)
    for V in (49_152, 128_256, 262_144):
        for B in (1, 64):
            tok = _find(chains, kind="chain", rule="token", V=V, B=B, gamma=4)
            blk = _find(chains, kind="chain", rule="block", V=V, B=B, gamma=4)
            label = f"block chain <= 1.5x token, gamma 4, V {V}, B {B}"
            if tok is None or blk is None:
                lines.append(f"| {label} | {missing}")
                continue
            ratio = blk["torch_ms"] / tok["torch_ms"]
            g_ratio = None
            if isinstance(blk.get("graph_ms"), float) and isinstance(tok.get("graph_ms"), float):
                g_ratio = blk["graph_ms"] / tok["graph_ms"]
            g_text = "-" if g_ratio is None else f"{_us(blk['graph_ms'])} ({g_ratio:.2f}x)"
            lines.append(
                f"| {label} | {_us(blk['torch_ms'])} ({ratio:.2f}x token) | {_us(blk.get('step_ms'))} | {g_text} | "
                f"{_us(blk.get('graph_inplace_ms'))} | - | {met(ratio, 1.5)} | {met(g_ratio, 1.5)} |"
            )
    for V in sorted({r["V"] for r in single}) or [49_152]:
        row(f"single-step token, V {V}, B 1: <= 30 us", _find(single, verifier="token", V=V, B=1, k=1), 30, step_key="-")
    for name in ("kseq", "rrs", "rrs_wor"):
        for B, lim in ((1, 100), (64, 300)):
            row(f"{name} k 8, V 262144, B {B}: <= {lim} us", _find(single, verifier=name, V=262_144, B=B, k=8), lim, step_key="-")
    for name in ("kseq", "rrs", "rrs_wor"):
        for B in (1, 64):
            row(f"tree {name} 4 x 4, V 49152, B {B}: <= 200 us", _find(chains, kind="tree", rule=name, V=49_152, B=B, gamma=4), 200)
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(sys.argv[1] if len(sys.argv) > 1 else "experiments/bench/out/gpu_checks"))
