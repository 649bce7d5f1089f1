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


#: Single-step targets at k = 8, V = 262 144: (rule, B, microseconds); the serving-speed targets of
#: K-SEQ and RRS, and those of the tree-free optimal i.i.d. draw on the device.
SINGLE_K8_LIMITS = (
    ("kseq", 1, 100),
    ("kseq", 64, 300),
    ("rrs", 1, 100),
    ("rrs", 64, 300),
    ("rrs_wor", 1, 100),
    ("rrs_wor", 64, 300),
    ("optimal_iid", 1, 1000),
    ("optimal_iid", 64, 5000),
)


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
    compiled_rows = _load(os.path.join(out, "compiled", "bench_torch_verifiers.json"), "single_step")
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
    for name, B, lim in SINGLE_K8_LIMITS:
        r = _find(single, verifier=name, V=262_144, B=B, k=8) or _find(compiled_rows, verifier=name, V=262_144, B=B, k=8)
        row(f"{name} k 8, V 262144, B {B}: <= {lim} us", r, lim, step_key="-")
        c = _find(compiled_rows, verifier=name, V=262_144, B=B, k=8)
        if c is not None and "compiled_ms" in c:  # the Inductor-compiled step (otspec_gpu.compiled)
            c = {
                **c,
                "torch_ms": c["compiled_ms"],
                "graph_ms": c.get("compiled_graph_ms", c.get("compiled_graph")),
                "graph_inplace_ms": None,
            }
            row(f"{name} k 8, V 262144, B {B}, compiled step: <= {lim} us", c, lim, step_key="-")
    for name in ("kseq", "rrs", "rrs_wor"):
        for B in (1, 64):
            row(f"tree {name} 4 x 4, V 49152, B {B}: <= 200 us", _find(chains, kind="tree", rule=name, V=49_152, B=B, gamma=4), 200)
    return "\n".join(lines) + "\n\n" + share_table(out)


#: Decoding-share targets: (configuration label of bench_gpu_decode_share.py, largest share).
SHARE_LIMITS = (
    ("chain token", 0.02),
    ("chain block", 0.02),
    ("single kseq k 4", 0.05),
    ("single rrs k 4", 0.05),
    ("single optimal_iid k 4", 0.05),
    ("single optimal_iid k 4, compiled", 0.05),
    ("tree kseq 4 x 4", 0.05),
    ("tree rrs 4 x 4", 0.05),
)


def share_table(out: str) -> str:
    """Verification's share of a decoding round against the targets (<= 2% for chains, <= 5% for
    k = 4 single-step rules and trees; optimal_iid's share within 2x K-SEQ's),
    eager and replayed from graphs, from ``share/bench_gpu_decode_share.json`` (markdown).

    Parameters
    ----------
    out : str
        The run's output folder.

    Returns
    -------
    str
        A markdown table, one row per target.
    """
    path = os.path.join(out, "share", "bench_gpu_decode_share.json")
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            rows = json.load(f)["rows"]

    def share(label: str, graphs: bool):
        hit = [r for r in rows if r["label"] == label and r["graphs"] == graphs and r["verify_share"] is not None]
        return hit[0]["verify_share"] if hit else None

    def pct(x):
        return "unmeasured" if x is None else f"{100 * x:.1f}%"

    def met(x, limit):
        return "unmeasured" if x is None else ("yes" if x <= limit else "no")

    lines = ["| decoding target | share eager | share graph | met eager | met graph |", "|---|---|---|---|---|"]
    for label, limit in SHARE_LIMITS:
        e, g = share(label, False), share(label, True)
        lines.append(f"| {label}: verify <= {100 * limit:.0f}% of a round | {pct(e)} | {pct(g)} | {met(e, limit)} | {met(g, limit)} |")
    for label in ("single optimal_iid k 4", "single optimal_iid k 4, compiled"):
        ratios = []
        for graphs in (False, True):
            o, k = share(label, graphs), share("single kseq k 4", graphs)
            ratios.append(None if o is None or k is None or k <= 0 else o / k)
        txt = ["unmeasured" if r is None else f"{r:.2f}x" for r in ratios]
        name = "optimal_iid" + (" compiled" if label.endswith("compiled") else "")
        lines.append(f"| {name} share <= 2x kseq's (k 4) | {txt[0]} | {txt[1]} | {met(ratios[0], 2.0)} | {met(ratios[1], 2.0)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(sys.argv[1] if len(sys.argv) > 1 else "experiments/bench/out/gpu_checks"))
