"""``otspec block``: exact expected accepted tokens of chain and tree verifiers on random models.

For a seeded random target (:func:`otspec.models.dirichlet`) and a close draft
(:func:`otspec.models.close_draft`) it tabulates E[tau] and the block efficiency E[tau] + 1 of token
verification, block verification, the block optimum (closed form and, when small enough, the
certified block LP), the unachievable joint-coupling bound and the engines' chain rules (strict exact match;
typical acceptance, lossy); with ``--drafts k > 1`` also K-SEQ over
sequences, recursive rejection over the tree (with and without replacement), their BV boosts,
Traversal Verification (leaf to root; with and without replacement), the optimal tree verifier (select one draft by the tree optimum's law, then block-verify) and the tree
optimum (node LP; trie LP when small).
Enumerations that would not fit are refused (exit status 2, with the size).
"""

from __future__ import annotations

import argparse

from otspec._docs import fill_doc
from otspec.cli.toolkit import CliError, number_flag, print_json, print_table

__all__ = ["register", "run"]


@fill_doc
def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``block`` subcommand and its options to the ``otspec`` parser.

    Parameters
    ----------
    {register_args}
    """
    from otspec import models

    close = models.close_draft.__kwdefaults__
    rnd = models.dirichlet.__kwdefaults__
    ap = sub.add_parser(
        "block",
        help="expected accepted tokens of token / block / tree verifiers and the optimum on random models",
        description=(
            "Exact E[tau] (accepted draft tokens per block) and block efficiency E[tau]+1 of token verification, "
            "block verification (Sun et al.), the block optimum (closed form W and the certified block LP), the "
            "joint-coupling bound (not achievable), the engines' chain rules (strict exact match; typical acceptance, "
            "lossy) and, with --drafts k > 1, K-SEQ over sequences, recursive rejection "
            "over the draft tree, their BV boosts, Traversal Verification, the optimal tree verifier and the tree optimum (node LP; trie LP "
            "when small), on a seeded Dirichlet target and a close draft."
        ),
    )
    # Numbers are parsed by the command itself so that a bad value is one line and exit 2.
    ap.add_argument("--vocab", "-V", required=True, metavar="V", help="vocabulary size")
    ap.add_argument("--gamma", "-g", required=True, metavar="G", help="draft block length")
    ap.add_argument("--drafts", "-k", default="1", metavar="K", help="number of drafted sequences (default 1)")
    ap.add_argument(
        "--concentration",
        default=str(rnd["concentration"]),
        metavar="A",
        help=f"Dirichlet concentration of the target (default {rnd['concentration']})",
    )
    ap.add_argument("--seed", default=str(rnd["seed"]), metavar="S", help=f"seed of both models (default {rnd['seed']})")
    ap.add_argument(
        "--noise",
        default=str(close["noise"]),
        metavar="L",
        help=f"draft = (1-L) tempered target + L Dirichlet noise (default {close['noise']})",
    )
    ap.add_argument(
        "--temperature",
        default=str(close["temperature"]),
        metavar="T",
        help=f"temperature applied to the target to make the draft (default {close['temperature']})",
    )
    ap.add_argument(
        "--lp",
        choices=("auto", "yes", "no"),
        default="auto",
        help="solve the block/tree LPs: auto = when small (default), yes = always, no = never",
    )
    ap.add_argument(
        "--memory-cap", default=None, metavar="GIB", help="refuse computations whose estimated memory exceeds this many GiB (default 4)"
    )
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Solve ``otspec block``: exact :math:`E[\\tau]` of the chain and tree verifiers and the optima.

    A seeded Dirichlet target and a close draft (:func:`otspec.models.close_draft`) are built from
    the options and passed to :func:`otspec.report.block_report`.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed options of ``otspec block`` (``vocab``, ``gamma``, ``drafts``, ``seed``,
        ``concentration``, ``temperature``, ``noise``, ``lp``, ``memory_cap`` in GiB, ``json``).

    Returns
    -------
    int
        0 (a table, or JSON with ``--json``, was printed).

    Raises
    ------
    CliError
        If a flag is not a number of the right kind, or ``--memory-cap`` is not positive.
    OtspecInputError
        Any input error of the library, e.g. ProblemTooLargeError when the enumeration exceeds
        its cap.
    """
    from otspec import models, prefixes
    from otspec._validation import as_int_in_range
    from otspec.report import block_report

    V = as_int_in_range(number_flag(args.vocab, "--vocab", int), "--vocab")
    gamma = as_int_in_range(number_flag(args.gamma, "--gamma", int), "--gamma")
    k = as_int_in_range(number_flag(args.drafts, "--drafts", int), "--drafts")
    seed = as_int_in_range(number_flag(args.seed, "--seed", int), "--seed", minimum=0)
    cap = None if args.memory_cap is None else number_flag(args.memory_cap, "--memory-cap") * 1024**3
    if cap is not None and not cap > 0:
        raise CliError(f"--memory-cap must be > 0 GiB (got {args.memory_cap!r})")
    target = models.dirichlet(V, concentration=number_flag(args.concentration, "--concentration"), seed=seed, memory_cap=cap)
    draft = models.close_draft(
        target, temperature=number_flag(args.temperature, "--temperature"), noise=number_flag(args.noise, "--noise"), seed=seed
    )

    prefixes.check_prefix_enumeration(V, gamma, hint="use a smaller --vocab or --gamma")  # before any enumeration
    rep = block_report(target, draft, gamma, k, lp=args.lp, memory_cap=cap)
    rows, skipped = rep.rows, rep.skipped

    params = {
        "vocab": V,
        "gamma": gamma,
        "drafts": k,
        "concentration": target.concentration,
        "seed": seed,
        "noise": draft.noise,
        "temperature": draft.temperature,
        "target": repr(target),
        "draft": repr(draft),
    }
    if args.json:
        print_json({"params": params, "results": rows, "skipped": skipped})
        return 0
    table_rows = [
        (r["verifier"], r["how"], f"{r['expected_accepted']:.10f}", f"{r['block_efficiency']:.10f}", r["status"] or "") for r in rows
    ]
    # (no square brackets: rich would read them as markup)
    caption = "accepted = E(tau), expected accepted draft tokens per block; block efficiency = E(tau) + 1."
    if skipped:
        caption += " Skipped: " + "; ".join(skipped) + "."
    print_table(
        f"otspec block: V={V}, gamma={gamma}, k={k}, seed={seed}",
        ("verifier", "how", "accepted E(tau)", "block efficiency", "status"),
        table_rows,
        caption=caption,
    )
    return 0
