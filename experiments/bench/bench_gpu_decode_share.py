"""Verification's share of a decoding round on a GPU, per verifier, eager and replayed from CUDA graphs.

The serving-speed targets for decoding (verification <= 2% of a round for the chains, <= 5% for
k = 4 single-step rules and trees; the optimal i.i.d. verifier's share within 2x of K-SEQ's) are
measured here. Model weights cannot travel to a lent GPU machine, so the models have SmolLM2-135M's
shapes with random weights (``LlamaConfig``: vocabulary 49 152, hidden 576, 30 layers, 9 heads, 3
key/value heads, intermediate 1 536, tied embeddings; the output layer scaled x6 so the laws are not
near uniform) and the draft is an early-exit copy of the target (its first 4 layers, the final
norm and the head). Acceptance rates of random weights mean nothing; the costs of every phase do.

Each configuration decodes ``--prompts`` random-token prompts of 32 tokens for ``--tokens`` new
tokens after a short warm-up decode of the same configuration (Triton compilation and graph capture
happen there), with ``theory=False``. ``decode``'s phase clock synchronises the device at every
phase boundary (``otspec_gpu.recording.PhaseClock``), so the phases add up to the round; the share
is the verify phase's seconds over the sum of the draft, target, verify and rollback phases, over
all measured rounds. Graphs: ``OTSPEC_CUDA_GRAPHS=1`` for the replayed rows; "compiled" rows also
set ``OTSPEC_COMPILE=1`` (:mod:`otspec_gpu.compiled`: the optimal verifier's pure step through
Inductor).

    python experiments/bench/bench_gpu_decode_share.py --out DIR          # CUDA, SmolLM2 shapes
    python experiments/bench/bench_gpu_decode_share.py --quick --out DIR  # CPU dry run, tiny shapes
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch

#: (label, verifier, drafts k, gamma) of the measured configurations.
CONFIGS = (
    ("chain token", "token", 1, 4),
    ("chain block", "block", 1, 4),
    ("single kseq k 4", "kseq", 4, 1),
    ("single optimal_iid k 4", "optimal_iid", 4, 1),
    ("single optimal_iid k 4, compiled", "optimal_iid", 4, 1),
    ("single rrs k 4", "rrs", 4, 1),
    ("tree kseq 4 x 4", "kseq", 4, 4),
    ("tree rrs 4 x 4", "rrs", 4, 4),
)
PHASES = ("draft", "target", "verify", "rollback")


def models(quick: bool, device: str):
    """Target and early-exit draft (random weights; SmolLM2-135M shapes, or tiny ones with ``quick``)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from otspec_gpu.models import wrap

    shape = (
        dict(vocab_size=512, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128)
        if quick
        else dict(
            vocab_size=49_152, hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, intermediate_size=1_536
        )
    )
    cfg = LlamaConfig(**shape, max_position_embeddings=2048, tie_word_embeddings=True, bos_token_id=0, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    target = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        target.lm_head.weight.mul_(6.0)  # tied with the embedding: both scaled, which only sharpens the laws
    n_draft = 1 if quick else 4
    draft_cfg = LlamaConfig(
        **{**shape, "num_hidden_layers": n_draft},
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=0,
        eos_token_id=None,
        pad_token_id=None,
    )
    draft = LlamaForCausalLM(draft_cfg).eval()
    # the early exit: the target's first layers, final norm and head
    draft.load_state_dict(target.state_dict(), strict=False)
    target, draft = target.to(device), draft.to(device)
    return wrap(target, name="smollm2-shaped" if not quick else "tiny-shaped"), wrap(draft, name=f"early-exit-{n_draft}")


def run(target, draft, prompts, verifier: str, k: int, gamma: int, tokens: int, graphs: bool, compile_steps: bool = False) -> dict:
    """Decode once (warm-up) and again (measured); phase seconds summed over the measured rounds."""
    from otspec_gpu.decoding import decode

    before = {name: os.environ.get(name) for name in ("OTSPEC_CUDA_GRAPHS", "OTSPEC_COMPILE")}
    os.environ["OTSPEC_CUDA_GRAPHS"] = "1" if graphs else "0"
    os.environ["OTSPEC_COMPILE"] = "1" if compile_steps else "0"
    kw = dict(verifier=verifier, drafts=k, gamma=gamma, temperature=1.0, theory=False, stop_at_eos=False, seed=1)
    try:
        decode(target, draft, prompts, max_new_tokens=min(8, tokens), **kw)  # compile, capture, allocate
        t0 = time.perf_counter()
        res = decode(target, draft, prompts, max_new_tokens=tokens, **kw)
        wall = time.perf_counter() - t0
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    c = res.trace.columns
    sec = {p: float(c[f"round_t_{p}"].sum()) for p in PHASES}
    total = sum(sec.values())
    return dict(
        verifier=verifier,
        k=k,
        gamma=gamma,
        graphs=graphs,
        rounds=int(len(c["round_t_verify"])),
        wall_s=wall,
        phase_s=sec,
        verify_share=sec["verify"] / total if total > 0 else None,
        verify_ms_per_round=1e3 * sec["verify"] / max(1, len(c["round_t_verify"])),
    )


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [
        "## Verification's share of a decoding round",
        "",
        f"{meta['device']}, {meta['models']}, B = {meta['prompts']} prompts x {meta['tokens']} tokens, revision {meta['revision']}; "
        f"command `{meta['command']}`.",
        "",
        "| configuration | graphs | rounds | verify ms / round | verify share | draft / target / rollback s |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r["phase_s"]
        share = "-" if r["verify_share"] is None else f"{100 * r['verify_share']:.1f}%"
        lines.append(
            f"| {r['label']} | {'on' if r['graphs'] else 'off'} | {r['rounds']} | {r['verify_ms_per_round']:.3f} | {share} | "
            f"{s['draft']:.2f} / {s['target']:.2f} / {s['rollback']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output folder (bench_gpu_decode_share.json / .md)")
    ap.add_argument("--quick", action="store_true", help="tiny shapes on CPU (a dry run of the script)")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per batch (default 8)")
    ap.add_argument("--tokens", type=int, default=48, help="new tokens per prompt (default 48)")
    ap.add_argument("--configs", nargs="*", default=None, help="labels of CONFIGS to run (default: all)")
    a = ap.parse_args(argv)
    if a.prompts < 1 or a.tokens < 1:
        print(f"bench_gpu_decode_share: --prompts and --tokens must be >= 1 (got {a.prompts}, {a.tokens})", file=sys.stderr)
        return 2
    device = "cpu" if a.quick else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("bench_gpu_decode_share: no CUDA device (use --quick for a CPU dry run)", file=sys.stderr)
        return 0
    target, draft = models(a.quick, device)
    V = target.vocab_size
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(1, V, (a.prompts, 32), generator=gen).tolist()
    configs = [c for c in CONFIGS if a.configs is None or c[0] in a.configs]
    rows = []
    for label, verifier, k, gamma in configs:
        for graphs in (False, True) if device == "cuda" else (False,):
            r = run(target, draft, prompts, verifier, k, gamma, a.tokens, graphs, compile_steps=label.endswith("compiled"))
            r["label"] = label
            rows.append(r)
            share = "-" if r["verify_share"] is None else f"{100 * r['verify_share']:.1f}%"
            print(
                f"{label:24s} graphs={'on ' if graphs else 'off'} verify {r['verify_ms_per_round']:.3f} ms/round, share {share}", flush=True
            )
    try:
        rev = (
            subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False).stdout.strip() or "unknown"
        )
    except OSError:
        rev = "unknown"
    meta = dict(
        device=torch.cuda.get_device_name(0) if device == "cuda" else "CPU",
        models=f"{target.name} (random weights) / {draft.name}",
        prompts=a.prompts,
        tokens=a.tokens,
        revision=rev,
        command="python experiments/bench/bench_gpu_decode_share.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        torch=torch.__version__,
    )
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "bench_gpu_decode_share.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    with open(os.path.join(a.out, "bench_gpu_decode_share.md"), "w") as f:
        f.write(markdown(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
