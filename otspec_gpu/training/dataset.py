r"""The training set of the trained drafts: corpus plus target features, built once into the cache.

:func:`build_dataset` (1) has the target answer :func:`~otspec_gpu.training.corpus.training_prompts`
at temperature 1, (2) cuts the local text into chunks
(:func:`~otspec_gpu.training.corpus.text_chunks`) and (3) stores the target's features on both
(:func:`~otspec_gpu.training.features.extract`) under :func:`dataset_dir`, outside the repository.
A finished folder (its manifest says ``done``) is reused.

Run directly as ``python -m otspec_gpu.training.dataset [--seed S] [--tokens N]``;
``otspec train-draft`` calls it when the folder is missing.

Examples
--------
>>> from otspec_gpu.training.dataset import dataset_dir
>>> dataset_dir("smollm2", seed=0, text_tokens=1000, answers=4, layers=(8,)).name
'smollm2-s0-t1000-a4-L8'
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

__all__ = ["DEFAULT_ANSWERS", "DEFAULT_LAYERS", "DEFAULT_TEXT_TOKENS", "build_dataset", "dataset_dir"]

#: Tokens of teacher-forced local text (chunks of 256).
DEFAULT_TEXT_TOKENS = 30_000
#: Training prompts the target answers (up to 160 new tokens each).
DEFAULT_ANSWERS = 32
#: Early-exit depths whose residual stream is stored.
DEFAULT_LAYERS = (6, 8, 10)


def dataset_dir(target: str, *, seed: int, text_tokens: int, answers: int, layers: tuple[int, ...]) -> Path:
    """Cache folder of one training set (``<cache>/drafts/features/<key>``).

    Parameters
    ----------
    target : str
        The target's model name.
    seed : int
        Seed of the corpus choices and the answers.
    text_tokens : int
        Teacher-forced text tokens.
    answers : int
        Number of answered training prompts.
    layers : tuple of int
        Stored early-exit depths.

    Returns
    -------
    pathlib.Path
        The folder (not created here).
    """
    from otspec_gpu.models import cache_dir

    key = f"{target}-s{seed}-t{text_tokens}-a{answers}-L{'_'.join(str(L) for L in layers)}"
    return cache_dir() / "drafts" / "features" / key


def build_dataset(
    lm,
    *,
    seed: int = 0,
    text_tokens: int = DEFAULT_TEXT_TOKENS,
    answers: int = DEFAULT_ANSWERS,
    layers: tuple[int, ...] = DEFAULT_LAYERS,
    max_new_tokens: int = 160,
    out_dir=None,
    log=print,
) -> Path:
    r"""Build (or reuse) the training set of ``lm`` and return its folder.

    Parameters
    ----------
    lm : otspec_gpu.models.LM
        The target (with its tokenizer).
    seed : int
        One seed for everything: a ``numpy.random.Generator`` for the corpus choices and torch's
        global generator (seeded once here) for the answers.
    text_tokens : int
        Teacher-forced text tokens.
    answers : int
        Training prompts to answer.
    layers : tuple of int
        Early-exit depths to store.
    max_new_tokens : int
        Answer length cap.
    out_dir : str or pathlib.Path, optional
        Folder (default :func:`dataset_dir`).
    log : callable
        Progress lines.

    Returns
    -------
    pathlib.Path
        The folder holding ``manifest.json`` and the shards.
    """
    from otspec_gpu.training.corpus import text_chunks, training_prompts
    from otspec_gpu.training.features import extract, generate_answers

    out = Path(out_dir) if out_dir is not None else dataset_dir(lm.name, seed=seed, text_tokens=text_tokens, answers=answers, layers=layers)
    man = out / "manifest.json"
    if man.exists() and json.loads(man.read_text()).get("done"):
        return out
    t0 = time.time()
    rng = np.random.default_rng(seed)
    prompts = training_prompts(rng, answers)
    torch.manual_seed(seed)
    answered = generate_answers(lm, prompts, max_new_tokens=max_new_tokens, batch=16, log=log) if prompts else []
    t_answers = time.time() - t0
    text = text_chunks(lm.tokenizer, rng, text_tokens)
    log(f"corpus: {len(answered)} answers ({sum(map(len, answered))} tokens), {len(text.chunks)} text chunks {text.tokens}")
    meta = {
        "target": lm.name,
        "seed": seed,
        "answers": {
            "prompts": len(prompts),
            "tokens": int(sum(map(len, answered))),
            "max_new_tokens": max_new_tokens,
            "seconds": round(t_answers, 1),
        },
        "text": {"tokens": text.tokens, "files": text.sources, "chunk": 256},
        "held_out": "the 64 evaluation prompts of experiments/_prompts.py are never used",
    }
    extract(lm, answered + text.chunks, layers=tuple(layers), out_dir=out, meta=meta, log=log)
    return out


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: build the SmolLM2 training set (``--seed``, ``--tokens``, ``--answers``)."""
    ap = argparse.ArgumentParser(prog="python -m otspec_gpu.training.dataset")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=DEFAULT_TEXT_TOKENS)
    ap.add_argument("--answers", type=int, default=DEFAULT_ANSWERS)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    from otspec_gpu.models import smollm2

    lm = smollm2(fast_linear=False)
    path = build_dataset(lm, seed=a.seed, text_tokens=a.tokens, answers=a.answers, log=lambda s: print(s, flush=True))
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
