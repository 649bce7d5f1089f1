"""Real-LLM speculative decoding: otspec's verifiers vs transformers assisted generation, same run.

SmolLM2-135M-Instruct target, its int8 dynamic-quantized draft (every Linear except down_proj),
temperature 1, no top-k/top-p. For each prompt (20 of our own: chat, code, maths, summarising) and
each configuration -- token (gamma 4), block (gamma 4 and 8), k = 4 single-token drafts with K-SEQ
and RRS, and k = 4 draft trees of depth 4 with SpecTr and RRS when the tree verifiers are installed
-- we decode ``--max-new-tokens`` tokens and record target forward calls per generated token,
tokens/s (decoding only; the per-round exact theory is timed apart and excluded), the share of a
round spent in verification, and realized vs exact expected acceptance. Target calls include the
prefill forward on both sides (``transformers`` counts it among its calls too).

Baselines on the same prompts, same process: ``transformers`` assisted generation
(``assistant_model`` = the same int8 draft, sampling, ``num_assistant_tokens = gamma`` with the
constant schedule; its target calls are counted by a forward hook), and plain target sampling.

The machine is shared and noisy: tokens/s are medians over prompts of one run each; compare
configurations within one run only. Target calls per token do not depend on the machine.

Usage::

    python experiments/bench/bench_decode.py --out experiments/bench/results          # full: 20 prompts x 128 tokens
    python experiments/bench/bench_decode.py --prompts 4 --max-new-tokens 32 --out ... # quick
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import markdown_table, write_report

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from otspec_gpu import models
from otspec_gpu.decoding import decode

PROMPTS = [
    # chat
    "Hi! Can you suggest three fun things to do on a rainy weekend?",
    "What is a good way to start learning to play the guitar?",
    "My friend is feeling sad after losing a game. What could I say to cheer them up?",
    "Write a short, friendly email inviting my team to a picnic on Friday.",
    "Tell me a story about a cat who wants to become a lighthouse keeper.",
    # code
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "Explain what a hash map is and give a small example in Python.",
    "Write a SQL query that returns the ten customers with the highest total order value.",
    "How do I reverse a linked list in C? Show the code.",
    "Write a bash one-liner that counts the lines of every .py file in a directory.",
    # maths
    "What is the derivative of x^3 * sin(x)? Show the steps.",
    "A train travels 180 km in 2.5 hours. What is its average speed in km/h?",
    "Explain why the square root of 2 is irrational.",
    "Solve for x: 3x + 7 = 22.",
    "What is the probability of getting at least one six in four rolls of a fair die?",
    # summarising
    "Summarise in two sentences: The city council met on Tuesday to discuss the new bike lanes. Residents raised concerns about parking, while cyclists argued the lanes would reduce accidents. The council agreed to a six-month trial.",
    "Summarise the main idea of photosynthesis for a ten-year-old.",
    "Give a one-paragraph summary of the causes of the French Revolution.",
    "Summarise: Regular exercise improves heart health, mood and sleep, and lowers the risk of several chronic diseases, but most adults do not meet the recommended 150 minutes per week.",
    "Summarise the plot of Romeo and Juliet in three sentences.",
]


def chat(tok, text: str) -> list:
    """Token ids of a one-turn chat prompt (SmolLM2-Instruct's own template)."""
    ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return [int(i) for i in ids]


class CallCounter:
    def __init__(self, module):
        self.n = 0
        self.h = module.register_forward_hook(self._hook)

    def _hook(self, *_):
        self.n += 1

    def close(self):
        self.h.remove()


def run_otspec(target, draft, ids, cfg, n_new, seed):
    res = decode(
        target,
        draft,
        ids,
        verifier=cfg["verifier"],
        drafts=cfg["k"],
        gamma=cfg["gamma"],
        temperature=1.0,
        max_new_tokens=n_new,
        seed=seed,
        stop_at_eos=False,
    )
    rep = res.report()
    t = rep.time_s
    agreement = rep.agreement[0]
    return dict(
        # + 1: the prefill forward, which transformers' generate also counts among its target calls
        tokens=rep.tokens,
        target_calls=rep.records + 1,
        decode_s=t["prefill"] + t["draft"] + t["target"] + t["verify"] + t["rollback"],
        verify_share=rep.verify_share,
        theory_s=t["theory"],
        realized=agreement.realized,
        expected=agreement.expected,
        diff=agreement.diff,
        ci=(agreement.ci_low, agreement.ci_high),
        agrees=agreement.agrees,
        optimum=rep.optimum,
    )


def run_hf(target, draft, ids, gamma, n_new, seed):
    """transformers generate: assisted (gamma > 0) or plain sampling (gamma = 0)."""
    torch.manual_seed(seed)
    x = torch.tensor([ids])
    counter = CallCounter(target.model)
    kw = dict(
        do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=n_new, min_new_tokens=n_new, attention_mask=torch.ones_like(x)
    )
    if gamma:
        draft.model.generation_config.num_assistant_tokens = gamma
        draft.model.generation_config.num_assistant_tokens_schedule = "constant"
        draft.model.generation_config.assistant_confidence_threshold = 0.0
        kw.update(assistant_model=draft.model)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = target.model.generate(x, **kw)
    dt = time.perf_counter() - t0
    counter.close()
    n = int(out.shape[1] - x.shape[1])
    return dict(tokens=n, target_calls=counter.n, decode_s=dt)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=20, help="how many of the 20 prompts (default 20)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--configs", default="token4,block4,block8,kseq4,rrs4,tree-kseq4,tree-rrs4,hf4,hf8,plain", help="comma-separated subset"
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: on a shared 2-core machine two threads per process stall on every small matmul)",
    )
    ap.add_argument("--out", default="experiments/bench/results")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target, draft = models.smollm2(), models.smollm2_int8()
    prompts = [chat(target.tokenizer, p) for p in PROMPTS[: args.prompts]]
    configs = {
        "token4": dict(verifier="token", k=1, gamma=4),
        "block4": dict(verifier="block", k=1, gamma=4),
        "block8": dict(verifier="block", k=1, gamma=8),
        "kseq4": dict(verifier="kseq", k=4, gamma=1),
        "rrs4": dict(verifier="rrs", k=4, gamma=1),
        "tree-kseq4": dict(verifier="kseq", k=4, gamma=4),
        "tree-rrs4": dict(verifier="rrs", k=4, gamma=4),
    }
    wanted = [c.strip() for c in args.configs.split(",") if c.strip()]
    try:
        import otspec_gpu.verifiers.tree  # noqa: F401
    except ImportError:
        wanted = [c for c in wanted if not c.startswith("tree-")]
    results: dict = {c: [] for c in wanted}
    # Interleave configurations prompt by prompt, so that machine noise hits all of them alike.
    for i, ids in enumerate(prompts):
        for c in wanted:
            seed = args.seed * 1000 + i
            if c in configs:
                r = run_otspec(target, draft, ids, configs[c], args.max_new_tokens, seed)
            elif c.startswith("hf"):
                r = run_hf(target, draft, ids, int(c[2:]), args.max_new_tokens, seed)
            else:
                r = run_hf(target, draft, ids, 0, args.max_new_tokens, seed)
            results[c].append(r)
            print(
                f"prompt {i} {c}: {r['tokens']} tokens, {r['target_calls']} target calls, {r['tokens'] / r['decode_s']:.2f} tok/s",
                flush=True,
            )
    rows, summary = [], {}
    for c in wanted:
        rs = results[c]
        tok = sum(r["tokens"] for r in rs)
        calls = sum(r["target_calls"] for r in rs)
        tps = statistics.median(r["tokens"] / r["decode_s"] for r in rs)
        s = dict(tokens=tok, target_calls=calls, calls_per_token=calls / tok, median_tokens_per_s=tps)
        if "verify_share" in rs[0]:
            s.update(
                verify_share=statistics.mean(r["verify_share"] for r in rs),
                realized=statistics.mean(r["realized"] for r in rs),
                expected=statistics.mean(r["expected"] for r in rs),
                agree_fraction=sum(r["agrees"] for r in rs) / len(rs),
                optimum=statistics.mean(r["optimum"] for r in rs),
            )
        summary[c] = s
        rows.append(
            [
                c,
                tok,
                f"{calls / tok:.3f}",
                f"{tps:.2f}",
                f"{100 * s['verify_share']:.2f}%" if "verify_share" in s else "-",
                f"{s['realized']:.3f} / {s['expected']:.3f}" if "realized" in s else "-",
                f"{s['optimum']:.3f}" if "optimum" in s and s["optimum"] == s["optimum"] else "-",
                f"{s['agree_fraction']:.2f}" if "agree_fraction" in s else "-",
            ]
        )
    table = markdown_table(
        [
            "config",
            "tokens",
            "target calls / token",
            "tokens/s (median)",
            "verify share",
            "realized / expected accepted per round",
            "optimum (mean)",
            "prompts agreeing (99% CI)",
        ],
        rows,
    )
    write_report(
        args.out,
        "bench_decode",
        {"args": vars(args), "summary": summary, "per_prompt": results},
        {"SmolLM2 target + int8 draft, temperature 1": table},
    )


if __name__ == "__main__":
    main()
