"""``otspec train-draft``: build the weights of a trained SmolLM2 draft on this machine.

A plug-in command (entry point ``train-draft`` of the group ``"otspec.cli"``); torch is imported
inside :func:`run` only. The training set (:mod:`otspec_gpu.training.dataset`) is built first when
it is missing, then the draft is trained (:mod:`otspec_gpu.training.build`); both go to
``otspec_gpu.models.cache_dir()``, never into the repository.
"""

from __future__ import annotations

import argparse
import json
import time

from otspec.cli.toolkit import CliError, number_flag

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``train-draft`` subcommand to the ``otspec`` parser.

    Parameters
    ----------
    sub : argparse._SubParsersAction
        The subparsers of the ``otspec`` parser; the new subparser sets ``func`` to :func:`run`.
    """
    ap = sub.add_parser(
        "train-draft",
        help="train a SmolLM2 draft (early exit, Medusa heads, EAGLE head) on local text; weights go to the cache",
        description=(
            "Build the weights of smollm2-exit<L> (the first L layers and a trained exit head), smollm2-medusa (heads "
            "that draft the next tokens from the target's last hidden layer) or smollm2-eagle (a one-layer head on the "
            "target's features). The training set (the target's answers to prompts built from local text, and "
            "chunks of local text, with the target's features) is built first if it is missing. Seeded; written to "
            "the otspec cache folder."
        ),
    )
    ap.add_argument("name", help="smollm2-exit<L> (L in 1..29; 6, 8, 10 share the default training set), smollm2-medusa or smollm2-eagle")
    ap.add_argument("--seed", default="0", help="seed of the training set, the initial weights and the batches (default 0)")
    ap.add_argument("--steps", default=None, help="optimiser steps (default: 250 exit, 150 medusa, 300 eagle)")
    ap.add_argument("--batch", default=None, help="positions per step (default 128)")
    ap.add_argument("--tokens", default=None, help="tokens of local text in the training set (default 30000)")
    ap.add_argument("--answers", default=None, help="training prompts the target answers (default 32)")
    ap.add_argument("--threads", default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--json", action="store_true", help="print the sidecar as JSON")
    ap.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``otspec train-draft``.

    Parameters
    ----------
    args : argparse.Namespace
        ``name``, ``seed``, ``steps``, ``batch``, ``tokens``, ``answers``, ``threads``, ``json``.

    Returns
    -------
    int
        0 (the weights were written and their sidecar printed).

    Raises
    ------
    CliError
        If the name is not a trained SmolLM2 draft, a number is out of range, or transformers is missing.
    """
    from otspec.errors import UnknownModelError
    from otspec_gpu.cli import require_decode_stack
    from otspec_gpu.training.train import TRAINED_DRAFTS, parse_draft_name

    try:
        target, kind, layers = parse_draft_name(args.name)
    except UnknownModelError as exc:
        raise CliError(str(exc)) from None
    if target != "smollm2":
        raise CliError(f"train-draft builds SmolLM2 drafts only (got {args.name!r}); pick one of {TRAINED_DRAFTS}")
    if layers is not None and not 1 <= layers <= 29:
        raise CliError(f"the early-exit depth must be in 1..29 for smollm2 (got {layers} in {args.name!r}); pick e.g. smollm2-exit8")
    seed = number_flag(args.seed, "--seed", int, minimum=0)
    steps = None if args.steps is None else number_flag(args.steps, "--steps", int, minimum=1)
    batch = None if args.batch is None else number_flag(args.batch, "--batch", int, minimum=1)
    threads = None if args.threads is None else number_flag(args.threads, "--threads", int, minimum=1)
    require_decode_stack()
    import torch

    from otspec_gpu.models import smollm2
    from otspec_gpu.training.build import build_draft
    from otspec_gpu.training.dataset import DEFAULT_ANSWERS, DEFAULT_LAYERS, DEFAULT_TEXT_TOKENS, build_dataset

    tokens = DEFAULT_TEXT_TOKENS if args.tokens is None else number_flag(args.tokens, "--tokens", int, minimum=256)
    answers = DEFAULT_ANSWERS if args.answers is None else number_flag(args.answers, "--answers", int, minimum=0)
    if threads is not None:
        torch.set_num_threads(threads)
    depths = tuple(sorted(set(DEFAULT_LAYERS) | ({layers} if layers is not None else set())))

    def log(line: str) -> None:
        print(line, flush=True)

    t0 = time.time()
    lm = smollm2(fast_linear=False)
    folder = build_dataset(lm, seed=seed, text_tokens=tokens, answers=answers, layers=depths, log=log)
    t1 = time.time()
    info = build_draft(args.name, lm, folder, seed=seed, steps=steps, batch=batch, log=log)
    t2 = time.time()
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
    else:
        val = info["training"]["validation"]["after"]
        print(
            f"{args.name}: trained in {t2 - t1:.0f} s (training set {folder.name}: {t1 - t0:.0f} s); "
            f"held-out KL per drafted step {val['kl']}, acceptance {val['alpha']}"
        )
    return 0
