"""``otspec decode --verifier sprinter --verifier-weights FILE``: SPRINTER decoding with its certified TV bound.

Called by ``otspec decode`` when the verifier is ``sprinter``. torch and the models are imported
inside :func:`run_sprinter` only, so ``import otspec`` never imports torch.
"""

from __future__ import annotations

import argparse
import math

from otspec.cli._common import CliError, print_json, print_table
from otspec.cli.decode import require_decode_stack

__all__ = ["run_sprinter"]


def _number(value, flag: str, kind: type, lo: float, hi: float | None = None):
    try:
        x = kind(value)
    except (TypeError, ValueError):
        raise CliError(f"{flag} must be {'an integer' if kind is int else 'a number'} (got {value!r})") from None
    if (kind is float and not math.isfinite(x)) or x < lo or (hi is not None and x > hi):
        raise CliError(f"{flag} must lie in [{lo:g}, {'inf' if hi is None else f'{hi:g}'}] (got {value!r})")
    return x


def run_sprinter(args: argparse.Namespace) -> int:
    """Decode with SPRINTER (a trained verifier file is required) and print text and the fidelity summary.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed options of ``otspec decode`` with ``--verifier sprinter`` (``verifier_weights``
        is required, ``threshold`` optional; ``drafts`` must be 1 and ``gamma`` left at its default).

    Returns
    -------
    int
        0 (the text and the summary, with the certified total-variation bound, or JSON, were printed).

    Raises
    ------
    CliError
        If the weights file is missing, ``--drafts``/``--gamma`` are set, a flag is out of range,
        or the decode stack is not installed.
    """
    weights = getattr(args, "verifier_weights", None)
    if not weights:
        raise CliError(
            "--verifier sprinter needs --verifier-weights FILE (train one with `python experiments/sprinter.py`, which writes verifier.safetensors)"
        )
    if str(args.drafts) != "1":
        raise CliError(f"--verifier sprinter drafts one token at a time (got --drafts {args.drafts}); drop --drafts")
    threshold = None if getattr(args, "threshold", None) is None else _number(args.threshold, "--threshold", float, 0.0, 1.0)
    if str(args.gamma) != "4":  # 4 is otspec decode's default
        raise CliError(
            f"--gamma does not apply to --verifier sprinter (got {args.gamma}): the verifier decides each run's length, capped at 20; drop --gamma"
        )
    temperature = _number(args.temperature, "--temperature", float, 0.0)
    n_new = _number(args.max_new_tokens, "--max-new-tokens", int, 1)
    seed = _number(args.seed, "--seed", int, 0)
    top_k = None if args.top_k is None else _number(args.top_k, "--top-k", int, 1)
    top_p = None if args.top_p is None else _number(args.top_p, "--top-p", float, 0.0, 1.0)
    require_decode_stack()
    from otspec_gpu import models
    from otspec_gpu.sprinter import DEFAULT_CAP, decode
    from otspec_gpu.sprinter.classifier import load_verifier

    verifier = load_verifier(weights, threshold)
    target, draft = models.load(args.target), models.load(args.draft)
    prompt = args.prompt if len(args.prompt) > 1 else args.prompt[0]
    res = decode(
        target,
        draft,
        prompt,
        verifier=verifier,
        cap=DEFAULT_CAP,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        max_new_tokens=n_new,
        seed=seed,
    )
    summ = res.summary()
    if args.json:
        print_json(
            {
                "text": res.text,
                "tokens": res.tokens,
                "certified_tv": res.certified_tv,
                "target_calls": res.target_calls,
                "summary": summ,
                "config": res.config,
            }
        )
        return 0
    for i, txt in enumerate(res.text or [" ".join(map(str, t)) for t in res.tokens]):
        print(f"--- prompt {i}: {args.prompt[i] if i < len(args.prompt) else ''}")
        print(txt)
    rows = [
        ("verifier", f"{verifier.name} (cap {DEFAULT_CAP})"),
        ("tokens", str(summ["tokens"])),
        ("target calls per token", f"{summ['target_calls_per_token']:.3f}"),
        ("mean drafted run length", f"{summ['mean_run_length']:.2f}"),
        ("sum of exact per-token TV terms", ", ".join(f"{c:.4f}" for c in res.certified_tv)),
        ("certified TV bound, min(1, sum)", ", ".join(f"{min(1.0, c):.4f}" for c in res.certified_tv)),
        ("target log-likelihood per token", f"{summ['loglik_per_token']:.3f}"),
    ]
    print_table(f"SPRINTER: {target.name} <- {draft.name}", ["quantity", "value"], rows)
    return 0
