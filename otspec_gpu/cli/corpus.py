"""``otspec corpus``: dataset-level bounds over texts (with a model pair) or logged top-K traces.

A plug-in command (entry point ``corpus`` of the group ``"otspec.cli"``); torch, pyarrow and Ray
are imported inside :func:`run` only.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import warnings
from pathlib import Path
from typing import Any

from otspec.cli.toolkit import CliError, number_flag, print_json, print_table

__all__ = ["DEFAULTS", "INTERRUPTED", "register", "run", "resume_command"]

#: The library defaults (:class:`otspec_gpu.corpus.SolverSpec`, :func:`otspec_gpu.corpus.run_corpus`), kept equal by a test.
DEFAULTS = dict(
    laws="iid,greedy",
    ks="2,4,8",
    verifiers="kseq,rrs",
    mc_samples=2000,
    seed=0,
    shard_docs=16,
    shard_steps=4096,
    temperature=1.0,
    confidence=0.95,
)


# long-function: one add_argument per option of the command (the option list is the function)
def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``corpus`` subcommand to the ``otspec`` parser.

    Parameters
    ----------
    sub : argparse._SubParsersAction
        The subparsers of the ``otspec`` parser; the new subparser sets ``func`` to :func:`run`.
    """
    ap = sub.add_parser(
        "corpus",
        help="dataset-level bounds: the optimum and the verifiers at every position of a corpus, per domain with intervals",
        description=(
            "Score texts (files, .jsonl, humaneval, prompts) with a target and a draft model by teacher forcing and "
            "compute, at every position, the exact optimal acceptance for each draft law and k, each verifier's "
            "acceptance and 1 - TV; or, with --logged, bound logged top-K traces by certified intervals. Writes "
            "Parquet shards (one row per position) to --out, resumes a killed run, and prints a per-domain summary "
            "with document-clustered bootstrap intervals."
        ),
    )
    ap.add_argument(
        "sources", nargs="*", help="inputs: text files, .jsonl files, humaneval, humaneval+solutions, prompts (or log files with --logged)"
    )
    ap.add_argument(
        "--out", required=True, help="output folder (Parquet shards, corpus.json, summary.json); an existing run there is resumed"
    )
    ap.add_argument(
        "--logged", action="store_true", help="the sources are logged top-K traces (JSONL, or otspec decode --trace files): no models"
    )
    ap.add_argument(
        "--draft-log",
        action="append",
        default=None,
        metavar="FILE",
        help="--logged: the draft model's engine log (vLLM JSON / Parquet, OpenAI-style, SGLang) for each source, in order; "
        "the sources are then the target's logs, and --temperature / --top-p are applied to the raw logprobs offline",
    )
    ap.add_argument(
        "--log-format", default="auto", help="--logged --draft-log: vllm, vllm-parquet, openai, sglang (default auto: detected)"
    )
    ap.add_argument("--target", default="smollm2", help="target model (default smollm2; tiny for tests)")
    ap.add_argument("--draft", default="smollm2-int8", help="draft model (default smollm2-int8; tiny-draft for tests)")
    ap.add_argument("--field", default="text", help="JSONL key of the text or token ids (default text)")
    ap.add_argument("--laws", default=DEFAULTS["laws"], help=f"draft laws: iid, without_replacement, greedy (default {DEFAULTS['laws']})")
    ap.add_argument("--ks", default=DEFAULTS["ks"], help=f"numbers of drafts, comma-separated (default {DEFAULTS['ks']})")
    ap.add_argument(
        "--verifiers", default=DEFAULTS["verifiers"], help=f"verifiers, comma-separated or 'none' (default {DEFAULTS['verifiers']})"
    )
    ap.add_argument(
        "--mc-samples", default=str(DEFAULTS["mc_samples"]), help="draft tuples per Monte Carlo estimate (verifiers without a closed form)"
    )
    ap.add_argument("--seed", default=str(DEFAULTS["seed"]), help="seed of Monte Carlo estimates and of the bootstrap (default 0)")
    ap.add_argument("--temperature", default=str(DEFAULTS["temperature"]), help="sampling temperature of both models (default 1)")
    ap.add_argument("--top-k", default=None, help="top-k filter of both models")
    ap.add_argument("--top-p", default=None, help="top-p filter of both models")
    ap.add_argument("--max-tokens", default=None, help="keep the first N tokens of each document")
    ap.add_argument("--engine", choices=("local", "ray"), default="local", help="local: one process (default); ray: Ray Data")
    ap.add_argument("--ray-address", default=None, help="join a Ray cluster (auto, ray://HOST:10001); default: start a local Ray")
    ap.add_argument("--workers", default=None, help="Ray: scoring actors (default: one per GPU, else one per CPU but one)")
    ap.add_argument("--shard-docs", default=str(DEFAULTS["shard_docs"]), help="documents per shard, the unit of resumption (default 16)")
    ap.add_argument(
        "--shard-steps",
        default=str(DEFAULTS["shard_steps"]),
        help=f"--logged: steps per shard, the unit of resumption (default {DEFAULTS['shard_steps']})",
    )
    ap.add_argument("--overwrite", action="store_true", help="replace an earlier run in --out instead of resuming it")
    ap.add_argument("--confidence", default=str(DEFAULTS["confidence"]), help="confidence of the intervals (default 0.95)")
    ap.add_argument("--markdown", default=None, metavar="FILE", help="also write the summary as markdown")
    ap.add_argument("--plot", default=None, metavar="FILE", help="also plot the optimum and the verifiers vs k (needs matplotlib)")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument(
        "--tree-drafts",
        default=None,
        metavar="K",
        help="tree mode: draft K i.i.d. sequences at each position and add the certified interval for the tree optimum "
        "(columns tree_lower, tree_upper, tree_gap, tree_nodes, tree_kseq)",
    )
    ap.add_argument("--tree-gamma", default=None, help="tree mode: length of the drafted sequences (default 3)")
    ap.add_argument("--tree-top-k", default=None, help="tree mode: children kept per expanded node under each model (default 4)")
    ap.add_argument("--tree-levels", default=None, help="tree mode: expansion levels, one batched pass of both models each (default 0)")
    ap.add_argument("--tree-stride", default=None, help="tree mode: evaluate every N-th position (default 1)")
    # the options as (dest, flag, default, is a switch), to write the resume command after Ctrl-C
    options = tuple((a.dest, a.option_strings[-1], a.default, a.nargs == 0) for a in ap._actions if a.option_strings and a.dest != "help")
    ap.set_defaults(func=run, corpus_options=options)


#: Exit status after Ctrl-C (128 + SIGINT, as shells report it).
INTERRUPTED = 130


def resume_command(args: argparse.Namespace, *, keep_overwrite: bool = False) -> str:
    """The ``otspec corpus`` command line of ``args``, quoted for a POSIX shell: every source and
    every option that differs from its default (``--overwrite`` only if ``keep_overwrite``: a run
    that already replaced the folder resumes without it).

    Parameters
    ----------
    args : argparse.Namespace
        The parsed options of ``otspec corpus``.
    keep_overwrite : bool
        Keep ``--overwrite`` (when the run was stopped before it replaced anything).

    Returns
    -------
    str
        E.g. ``otspec corpus logs.jsonl --out runs/x --logged``.
    """
    parts = ["otspec", "corpus", *args.sources]
    for dest, flag, default, switch in args.corpus_options:
        value = getattr(args, dest)
        if dest == "overwrite" and not keep_overwrite:
            continue
        if switch:
            parts += [flag] if value else []
        elif isinstance(value, list):  # a repeated flag (--draft-log)
            parts += [x for v in value for x in (flag, str(v))]
        elif value is not None and value != default:
            parts += [flag, str(value)]
    return shlex.join(parts)


def _interrupted(args: argparse.Namespace, exc: BaseException, ran: bool) -> int:
    """Say what a Ctrl-C kept and how to resume (``ran``: the shards were all done already)."""
    from otspec_gpu.corpus.run import CorpusInterrupted
    from otspec_gpu.corpus.shards import kept_shards, shard_path

    if isinstance(exc, CorpusInterrupted) or ran:
        kept, total = (exc.kept, exc.n_shards) if isinstance(exc, CorpusInterrupted) else kept_shards(args.out)
        names = ", ".join(shard_path("", i).name for i in kept[:3]) + (", ..." if len(kept) > 3 else "")
        what = f"kept {len(kept)} of {total if total is not None else '?'} shards in {args.out}" + (f" ({names})" if kept else "")
        cmd = resume_command(args)
    else:  # stopped while reading the inputs, loading the models or checking the folder: this run wrote no shard
        what = "no shard of this run was written yet"
        cmd = resume_command(args, keep_overwrite=True)
    print(f"otspec corpus: interrupted; {what}. Resume with:\n  {cmd}", file=sys.stderr)
    return INTERRUPTED


def _show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
    """One line per warning on stderr, like the errors (no source line of otspec's code)."""
    print(f"otspec: warning: {message}", file=sys.stderr)


#: Options of the model run only (dest, flag): refused with --logged rather than ignored.
_MODEL_ONLY = (
    ("target", "--target"),
    ("draft", "--draft"),
    ("field", "--field"),
    ("top_k", "--top-k"),
    ("max_tokens", "--max-tokens"),
    ("workers", "--workers"),
    ("shard_docs", "--shard-docs"),
    ("tree_drafts", "--tree-drafts"),
)
#: Tree-mode settings: they need --tree-drafts.
_TREE_ONLY = (
    ("tree_gamma", "--tree-gamma"),
    ("tree_top_k", "--tree-top-k"),
    ("tree_levels", "--tree-levels"),
    ("tree_stride", "--tree-stride"),
)


def _check_mode(args: argparse.Namespace) -> None:
    """Refuse every option that does not apply to the run's mode (a flag is never silently ignored)."""
    default = {dest: d for dest, _flag, d, _switch in args.corpus_options}
    set_flags = lambda pairs: [flag for dest, flag in pairs if getattr(args, dest) != default[dest]]  # noqa: E731
    if args.tree_drafts is None and set_flags(_TREE_ONLY):
        raise CliError(f"{', '.join(set_flags(_TREE_ONLY))} set the tree mode; add --tree-drafts K or drop them")
    if args.logged:
        if args.engine != "ray" and args.ray_address is not None:
            raise CliError("--ray-address applies to --logged only with --engine ray; add --engine ray or drop --ray-address")
        bad = set_flags(_MODEL_ONLY)
        if bad:
            raise CliError(f"{', '.join(bad)} do not apply to --logged (they set up the models of a text run); drop them")
        raw = [] if args.draft_log else set_flags((("temperature", "--temperature"), ("top_p", "--top-p"), ("log_format", "--log-format")))
        if raw:
            raise CliError(
                f"{', '.join(raw)} apply to --logged only with --draft-log (engine logs of raw logprobs); otspec's paired steps "
                "are bounded as logged: drop them, or pass the engine logs with --draft-log"
            )
    else:
        bad = set_flags((("draft_log", "--draft-log"), ("log_format", "--log-format"), ("shard_steps", "--shard-steps")))
        if bad:
            raise CliError(f"{', '.join(bad)} apply only to --logged runs; drop them or add --logged")


def _list(text: str, flag: str, kind=str) -> tuple:
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if kind is int:
        return tuple(number_flag(t, flag, int, minimum=2) for t in items)
    return tuple(items)


def _spec(args: argparse.Namespace):
    from otspec_gpu.corpus import SolverSpec

    verifiers = () if args.verifiers.strip().lower() in ("", "none") else _list(args.verifiers, "--verifiers")
    return SolverSpec(
        laws=_list(args.laws, "--laws"),
        ks=_list(args.ks, "--ks", int),
        verifiers=verifiers,
        mc_samples=number_flag(args.mc_samples, "--mc-samples", int, minimum=2),
        seed=number_flag(args.seed, "--seed", int, minimum=0),
    )


def _tree(args: argparse.Namespace):
    """The tree mode's settings (unset flags take :class:`~otspec_gpu.corpus.trees.TreeSpec`'s defaults), or None."""
    if args.tree_drafts is None:
        return None
    from otspec_gpu.corpus.trees import TreeSpec

    d = TreeSpec()
    opt = lambda dest, flag, default, minimum: number_flag(  # noqa: E731
        default if getattr(args, dest) is None else getattr(args, dest), flag, int, minimum=minimum
    )
    return TreeSpec(
        k=opt("tree_drafts", "--tree-drafts", d.k, 1),
        gamma=opt("tree_gamma", "--tree-gamma", d.gamma, 1),
        top_k=opt("tree_top_k", "--tree-top-k", d.top_k, 1),
        levels=opt("tree_levels", "--tree-levels", d.levels, 0),
        stride=opt("tree_stride", "--tree-stride", d.stride, 1),
        seed=number_flag(args.seed, "--seed", int, minimum=0),
    )


def _compute(args: argparse.Namespace, spec: Any) -> Any:
    """Run (or resume) the logged or the model run of ``args``."""
    from otspec_gpu.corpus import Processing, run_corpus, run_logged

    if args.logged:
        steps = number_flag(args.shard_steps, "--shard-steps", int, minimum=1)
        ray = dict(engine=args.engine, ray_address=args.ray_address)
        if not args.draft_log:
            return run_logged(args.sources, out=args.out, spec=spec, shard_steps=steps, overwrite=args.overwrite, **ray)
        import tempfile

        from otspec_gpu.corpus.inputs import write_engine_steps

        with tempfile.TemporaryDirectory() as tmp:  # the paired steps, read back bit for bit by run_logged
            paired = write_engine_steps(
                args.sources,
                args.draft_log,
                Path(tmp) / "engine_steps.jsonl",
                fmt=args.log_format,
                temperature=number_flag(args.temperature, "--temperature", float),
                top_p=number_flag(args.top_p, "--top-p", float) if args.top_p is not None else 1.0,
            )
            return run_logged([paired], out=args.out, spec=spec, shard_steps=steps, overwrite=args.overwrite, **ray)
    from otspec_gpu.cli import require_decode_stack

    require_decode_stack()
    proc = Processing(
        temperature=number_flag(args.temperature, "--temperature", float),
        top_k=number_flag(args.top_k, "--top-k", int, minimum=1, optional=True),
        top_p=number_flag(args.top_p, "--top-p", float, optional=True),
    )
    return run_corpus(
        args.sources,
        target=args.target,
        draft=args.draft,
        out=args.out,
        spec=spec,
        processing=proc,
        engine=args.engine,
        shard_docs=number_flag(args.shard_docs, "--shard-docs", int, minimum=1),
        max_tokens=number_flag(args.max_tokens, "--max-tokens", int, minimum=2, optional=True),
        overwrite=args.overwrite,
        progress=not (args.no_progress or args.json),
        ray_address=args.ray_address,
        workers=number_flag(args.workers, "--workers", int, minimum=1, optional=True),
        field=args.field,
        tree=_tree(args),
    )


def run(args: argparse.Namespace) -> int:
    """Run ``otspec corpus``: compute (or resume) the run, then print and save its summary.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed options.

    Returns
    -------
    int
        0 on success; :data:`INTERRUPTED` (130) after Ctrl-C, having printed which shards were kept
        and the command that resumes the run (usage and input errors raise and exit 2 through the
        CLI's guard).

    Raises
    ------
    CliError
        A bad option, no source, or a missing optional package (pyarrow, Ray, torch).
    """
    # Over 80 lines only through this docstring: the code reads the options and calls the engine.
    if not args.sources:
        raise CliError("no input: pass at least one source (a text or .jsonl file, humaneval, prompts; log files with --logged)")
    _check_mode(args)
    confidence = number_flag(args.confidence, "--confidence", float, minimum=0.5, maximum=0.999)
    try:
        from otspec_gpu.corpus import plot_summary, read_results, summarize
    except ImportError as exc:
        raise CliError(f"otspec corpus needs torch (install it with `pip install torch==2.13.0`): {exc}") from None
    spec = _spec(args)
    res = None
    try:
        with warnings.catch_warnings():  # damaged shards (as they are found), few clusters...: one line each
            warnings.showwarning = _show_warning
            res = _compute(args, spec)
            summary = summarize(read_results(args.out), confidence=confidence, seed=spec.seed)
    except ImportError as exc:
        raise CliError(str(exc)) from None
    except KeyboardInterrupt as exc:
        return _interrupted(args, exc, ran=res is not None)
    info = dict(
        out=str(res.out),
        engine=res.engine,
        documents=res.n_documents,
        positions=res.n_positions,
        shards=res.n_shards,
        shards_computed=res.shards_computed,
        seconds=round(res.seconds, 3),
        timings={k: round(float(v), 3) for k, v in res.timings.items()},
    )
    payload = {"run": info, **summary.to_json()}
    (Path(args.out) / "summary.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(summary.to_markdown())
    if args.plot:
        try:
            plot_summary(summary, args.plot)
        except ImportError as exc:
            raise CliError(str(exc)) from None
    if args.json:
        print_json(payload)
        return 0
    for d in summary.domains():
        cols, rows = summary.table(d)
        print_table(f"otspec corpus: {d}", cols, rows)
    rate = res.n_positions / res.seconds if res.seconds > 0 and res.shards_computed else float("nan")
    print(
        f"{res.n_documents} documents, {res.n_positions} positions, {res.shards_computed}/{res.n_shards} shards computed "
        f"({res.engine}, {res.seconds:.1f} s, {rate:.1f} positions/s); rows in {res.out}"
    )
    return 0
