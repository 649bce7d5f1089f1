"""``otspec decode --verifier sprinter --verifier-weights FILE``: SPRINTER decoding with its certified TV bound.

Called by ``otspec decode`` (:mod:`otspec_gpu.cli.decode`) when the verifier is ``sprinter``; this
module does not import the decode command.
"""

from __future__ import annotations

import argparse

from otspec.cli.toolkit import CliError, number_flag, print_json, print_table
from otspec_gpu.cli import prompt_arg, require_decode_stack, sampling_flags

__all__ = ["run_sprinter"]


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
    threshold = number_flag(getattr(args, "threshold", None), "--threshold", float, minimum=0, maximum=1, optional=True)
    if str(args.gamma) != "4":  # 4 is otspec decode's default
        raise CliError(
            f"--gamma does not apply to --verifier sprinter (got {args.gamma}): the verifier decides each run's length, capped at 20; drop --gamma"
        )
    sampling = sampling_flags(args)
    prompt, labels = prompt_arg(args)
    require_decode_stack()
    from otspec_gpu import models
    from otspec_gpu.sprinter import DEFAULT_CAP, decode
    from otspec_gpu.sprinter.classifier import load_verifier

    verifier = load_verifier(weights, threshold)
    target, draft = models.load(args.target), models.load(args.draft)
    res = decode(
        target,
        draft,
        prompt,
        verifier=verifier,
        cap=DEFAULT_CAP,
        **sampling,
        chat=not getattr(args, "raw_prompt", False),
    )
    return _show(args, res, labels, verifier.name, DEFAULT_CAP, f"SPRINTER: {target.name} <- {draft.name}")


def _show(args: argparse.Namespace, res, labels: list, name: str, cap: int, title: str) -> int:
    """Print the text and the fidelity summary (or JSON)."""
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
        print(f"--- prompt {i}: {labels[i] if i < len(labels) else ''}")
        print(txt)
    rows = [
        ("verifier", f"{name} (cap {cap})"),
        ("tokens", str(summ["tokens"])),
        ("target calls per token", f"{summ['target_calls_per_token']:.3f}"),
        ("mean drafted run length", f"{summ['mean_run_length']:.2f}"),
        ("sum of exact per-token TV terms", ", ".join(f"{c:.4f}" for c in res.certified_tv)),
        ("certified TV bound, min(1, sum)", ", ".join(f"{min(1.0, c):.4f}" for c in res.certified_tv)),
        ("target log-likelihood per token", f"{summ['loglik_per_token']:.3f}"),
    ]
    print_table(title, ["quantity", "value"], rows)
    return 0
