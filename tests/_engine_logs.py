"""Seeded synthetic engine logs (vLLM JSON and Parquet, OpenAI-style, SGLang) from known full pairs.

``python -m tests._engine_logs`` rewrites the committed fixtures in ``tests/data/engine_logs/``;
``tests/test_logs.py`` regenerates them in a temporary folder and compares, and checks that the
intervals from every format contain the full-vocabulary optimum of the pairs they were cut from.
Each log keeps the top-K entries of a position plus the token at the position when it lies outside
them (as vLLM, OpenAI and SGLang do). Log-probabilities are float64 (``log`` of the full
distribution), so the truncated pair is the exact restriction of the full one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

V, K, DOCS, POSITIONS = 40, 5, ("req-a", "req-b"), 6
FIXTURES = Path(__file__).resolve().parent / "data" / "engine_logs"


def full_pairs(seed: int = 0) -> dict:
    """``{(doc, position): (p, q, token)}``: LM-shaped target and draft laws (a draft close to the
    target, with heavy tails) and the token at the position (drawn from p)."""
    rng = np.random.default_rng(seed)
    out = {}
    for doc in DOCS:
        for pos in range(1, POSITIONS + 1):
            logits = rng.standard_normal(V) * 2.5
            p = np.exp(logits - logits.max())
            p /= p.sum()
            ql = logits + rng.standard_normal(V) * 0.8
            q = np.exp(ql - ql.max())
            q /= q.sum()
            out[doc, pos] = (p, q, int(rng.choice(V, p=p)))
    return out


def _entries(dist: np.ndarray, token: int, k: int = K) -> list[int]:
    top = [int(i) for i in np.argsort(-dist, kind="stable")[:k]]
    return top if token in top else [*top, token]


def _vllm(which: int, pairs: dict) -> list[dict]:
    recs = []
    for doc in DOCS:
        toks = [0] + [pairs[doc, pos][2] for pos in range(1, POSITIONS + 1)]
        plps = [None]
        for pos in range(1, POSITIONS + 1):
            d, tok = pairs[doc, pos][which], pairs[doc, pos][2]
            order = {int(i): r + 1 for r, i in enumerate(np.argsort(-d, kind="stable"))}
            plps.append({str(i): {"logprob": float(np.log(d[i])), "rank": order[i], "decoded_token": f"t{i}"} for i in _entries(d, tok)})
        recs.append({"request_id": doc, "prompt_token_ids": toks, "prompt_logprobs": plps})
    return recs


def _openai(which: int, pairs: dict) -> list[dict]:
    recs = []
    for doc in DOCS:
        content = []
        for pos in range(1, POSITIONS + 1):
            d, tok = pairs[doc, pos][which], pairs[doc, pos][2]
            top = [int(i) for i in np.argsort(-d, kind="stable")[:K]]
            content.append(
                {
                    "token": f"t{tok}",
                    "logprob": float(np.log(d[tok])),
                    "top_logprobs": [{"token": f"t{i}", "logprob": float(np.log(d[i]))} for i in top],
                }
            )
        # an OpenAI log counts its positions from 0 (its completion only): position j is pairs[doc, j + 1]
        recs.append({"id": doc, "object": "chat.completion", "choices": [{"index": 0, "logprobs": {"content": content}}]})
    return recs


def _sglang(which: int, pairs: dict) -> list[dict]:
    recs = []
    for doc in DOCS:
        tok_lps, top_lps = [[None, 0, "t0"]], [None]
        for pos in range(1, POSITIONS + 1):
            d, tok = pairs[doc, pos][which], pairs[doc, pos][2]
            tok_lps.append([float(np.log(d[tok])), tok, f"t{tok}"])
            top_lps.append([[float(np.log(d[i])), int(i), f"t{i}"] for i in np.argsort(-d, kind="stable")[:K]])
        recs.append({"text": "", "meta_info": {"id": doc, "input_token_logprobs": tok_lps, "input_top_logprobs": top_lps}})
    return recs


def _parquet_table(which: int, pairs: dict):
    import pyarrow as pa

    rows = {"doc": [], "position": [], "token_id": [], "topk_ids": [], "topk_logprobs": []}
    for (doc, pos), (p, q, tok) in pairs.items():
        d = (p, q)[which]
        ids = [int(i) for i in np.argsort(-d, kind="stable")[:K]]
        rows["doc"].append(doc)
        rows["position"].append(pos)
        rows["token_id"].append(tok)
        rows["topk_ids"].append(ids)
        rows["topk_logprobs"].append([float(np.log(d[i])) for i in ids])
    return pa.table(rows)


def write_fixtures(folder: Path = FIXTURES, seed: int = 0) -> list[Path]:
    """Write every fixture (target and draft of each format) into ``folder``; returns the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    pairs = full_pairs(seed)
    out = []
    for which, side in ((0, "target"), (1, "draft")):
        for name, make, suffix in (("vllm", _vllm, "jsonl"), ("openai", _openai, "json"), ("sglang", _sglang, "jsonl")):
            path = folder / f"{name}_{side}.{suffix}"
            recs = make(which, pairs)
            text = json.dumps(recs, indent=1) + "\n" if suffix == "json" else "".join(json.dumps(r) + "\n" for r in recs)
            path.write_text(text)
            out.append(path)
        try:
            import pyarrow.parquet as pq
        except ImportError:
            continue
        path = folder / f"vllm_{side}.parquet"
        pq.write_table(_parquet_table(which, pairs), path)
        out.append(path)
    return out


if __name__ == "__main__":
    for p in write_fixtures():
        print(p)
