"""``otspec speedup``: predicted tokens per second and the best gamma / k / tree size of every
verifier and of the optimum, from exact per-position acceptance and a cost model.

The acceptance comes from an ``otspec corpus`` run (``--corpus DIR``: one column per verifier, law
and k; certified lower ends ``_lo`` of a logged run when that is all there is) or from a JSON file
(``--acceptance FILE``: ``{"name": {"k": [alpha_t, ...]}, "lengths": [...]}``). The cost model is
the draft's cost per token (``--draft-cost``), the target's verify cost as a function of the number
of positions scored (``--verify-cost A,B`` for a + b n, measured ``--verify-points N:S,...``, or
``--verify-traces`` of ``otspec decode --trace`` runs at several gammas) and the batch size. See :mod:`otspec.speedup` for the model.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from otspec._docs import fill_doc
from otspec.cli.toolkit import CliError, number_flag, print_json, print_table

__all__ = ["register", "run", "acceptance_of_corpus"]

#: Columns of a corpus run that are not per-position acceptances.
_NOT_ACCEPTANCE = ("doc", "domain", "doc_index", "position", "token", "score_s", "solve_s")


@fill_doc
def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``speedup`` subcommand and its options to the ``otspec`` parser.

    Parameters
    ----------
    {register_args}
    """
    ap = sub.add_parser(
        "speedup",
        help="predicted tokens/s and the best gamma / k / tree size of every verifier and the optimum",
        description=(
            "Predict tokens per second of speculative decoding from exact per-position acceptance (an otspec corpus "
            "run, or a JSON file) and a cost model (draft cost per token, target verify cost as a function of the "
            "positions scored, batch size), for every verifier and the optimum and every gamma and k; print the best "
            "configuration of each, and the constant-acceptance formula's tokens per round beside the exact ones."
        ),
    )
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--corpus", metavar="DIR", help="an otspec corpus output folder (needs pyarrow)")
    src.add_argument("--acceptance", metavar="FILE", help='JSON: {"name": {"k": [per-position acceptance, ...]}, "lengths": [...]}')
    ap.add_argument("--draft-cost", default="0", metavar="S", help="seconds per drafted token and sequence (default 0: prompt lookup)")
    cost = ap.add_mutually_exclusive_group(required=True)
    cost.add_argument("--verify-cost", metavar="A,B", help="target forward of n positions costs A + B*n seconds")
    cost.add_argument("--verify-points", metavar="N:S,...", help="measured target forwards: N positions in S seconds, >= 2 points")
    cost.add_argument(
        "--verify-traces",
        metavar="FILE,...",
        help="otspec decode --trace files at >= 2 gammas: each gives its forward's positions and median round time but the draft",
    )
    ap.add_argument("--batch", default="1", metavar="B", help="sequences decoded in lockstep (default 1)")
    ap.add_argument("--gammas", default="1,2,3,4,5,6,7,8", metavar="G,...", help="draft depths to try (default 1..8)")
    ap.add_argument("--plot", default=None, metavar="FILE", help="also plot tokens/s against tree size (needs matplotlib)")
    ap.add_argument("--json", action="store_true", help="print JSON (every configuration) instead of a table")
    ap.set_defaults(func=run)


def _pairs(text: str, flag: str, example: str) -> list[tuple[float, float]]:
    out = []
    for part in str(text).split(","):
        bits = part.split(":")
        if len(bits) != 2:
            raise CliError(f"{flag} must be N:S pairs separated by commas (got {text!r}); pass e.g. {flag} {example}")
        out.append((number_flag(bits[0], flag, int, minimum=1), number_flag(bits[1], flag, float)))
    return out


def _cost(args: argparse.Namespace) -> Any:
    from otspec.speedup import CostModel, affine_verify, measured_verify

    if args.verify_cost is not None:
        bits = str(args.verify_cost).split(",")
        if len(bits) != 2:
            raise CliError(f"--verify-cost must be A,B (seconds of a + b*n; got {args.verify_cost!r}); pass e.g. --verify-cost 0.05,0.008")
        verify = affine_verify(number_flag(bits[0], "--verify-cost"), number_flag(bits[1], "--verify-cost"))
    elif args.verify_points is not None:
        pts = _pairs(args.verify_points, "--verify-points", "1:0.054,5:0.09")
        verify = measured_verify([n for n, _ in pts], [s for _, s in pts])
    else:
        from otspec.speedup import verify_points_from_traces

        verify = measured_verify(*verify_points_from_traces([t for t in str(args.verify_traces).split(",") if t]))
    return CostModel(
        draft_cost=number_flag(args.draft_cost, "--draft-cost", minimum=0),
        verify=verify,
        batch=number_flag(args.batch, "--batch", int, minimum=1),
    )


def acceptance_of_corpus(table: Any) -> tuple[dict, np.ndarray]:
    """Per-position acceptance of every verifier and optimum in the rows of an ``otspec corpus`` run.

    Parameters
    ----------
    table : pyarrow.Table
        :func:`otspec.corpus_shards.read_results` of the run.

    Returns
    -------
    acceptance : dict
        ``name -> {k: (N,) array}``: ``one_minus_tv`` (k = 1: token verification, the optimum of one
        draft), ``opt_<law>`` (the optimum), ``<verifier>_<law>``; a logged run's certified lower
        ends as ``<name>_lo``. Columns with a nan (e.g. greedy k beyond the support) are left out.
    lengths : ndarray of int
        Positions of each run of equal ``doc_index`` (rounds do not cross documents).

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = pa.table({"doc_index": [0, 0, 1], "one_minus_tv": [0.5, 0.6, 0.7], "opt_iid_k2": [0.6, 0.7, 0.8]})
    >>> acc, lengths = acceptance_of_corpus(t)
    >>> sorted(acc), lengths.tolist()
    (['one_minus_tv', 'opt_iid'], [2, 1])
    """
    cols = table.column_names
    out: dict[str, dict[int, np.ndarray]] = {}
    for c in cols:
        if c in _NOT_ACCEPTANCE or c.endswith(("_err", "_hi")) or (c.endswith("_lo") and c[:-3] in cols):
            continue
        a = np.asarray(table.column(c).to_numpy(zero_copy_only=False), dtype=np.float64)
        if np.isnan(a).any():
            continue
        base, lo = (c[:-3], "_lo") if c.endswith("_lo") else (c, "")
        m = re.fullmatch(r"(.+)_k(\d+)", base)
        name, k = (m.group(1) + lo, int(m.group(2))) if m else (base + lo, 1)
        out.setdefault(name, {})[k] = a
    d = np.asarray(table.column("doc_index").to_numpy(), dtype=np.int64)
    starts = np.r_[0, np.flatnonzero(d[1:] != d[:-1]) + 1, d.size]
    return out, np.diff(starts)


def _read(args: argparse.Namespace) -> tuple[dict, Any]:
    if args.corpus is not None:
        try:
            from otspec.corpus_shards import read_results
        except ImportError as exc:
            raise CliError(f"--corpus needs otspec's corpus extra (pyarrow): {exc}") from None
        try:
            return acceptance_of_corpus(read_results(args.corpus))
        except ImportError as exc:
            raise CliError(str(exc)) from None
    path = Path(args.acceptance)
    try:
        obj = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CliError(f"--acceptance {path}: cannot read it as JSON ({exc}); pass a JSON file of per-position acceptances") from None
    if not isinstance(obj, dict):
        raise CliError(f'--acceptance {path}: the top level must be an object {{"name": {{"k": [...]}}}} (got {type(obj).__name__})')
    lengths = obj.pop("lengths", None)
    acc: dict[str, dict[int, Any]] = {}
    for name, by_k in obj.items():
        if not isinstance(by_k, dict) or not by_k:
            raise CliError(f'--acceptance {path}: {name!r} must map k to a list of acceptances, e.g. {{"1": [0.8, 0.6]}}')
        acc[name] = {number_flag(k, f"--acceptance {path}: {name!r} key", int, minimum=1): v for k, v in by_k.items()}
    return acc, lengths


def run(args: argparse.Namespace) -> int:
    """Run ``otspec speedup``: read the acceptance, predict every configuration, print the best.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed options (``corpus`` or ``acceptance``; ``draft_cost``, ``verify_cost``,
        ``verify_points`` or ``verify_traces``, ``batch``, ``gammas``, ``plot``, ``json``).

    Returns
    -------
    int
        0 (a table, or JSON with ``--json``, was printed).

    Raises
    ------
    CliError
        A bad flag, an unreadable acceptance file, a missing optional package.
    OtspecInputError
        Acceptances outside [0, 1], lengths that do not fit, a bad cost model (exit 2).
    """
    from otspec.speedup import best_configurations, constant_acceptance_tokens, plot_speedup

    gammas = sorted({number_flag(g, "--gammas", int, minimum=1, maximum=64) for g in str(args.gammas).split(",") if g.strip()})
    if not gammas:
        raise CliError(f"--gammas must list at least one depth (got {args.gammas!r}); pass e.g. --gammas 1,2,4")
    cost = _cost(args)
    acc, lengths = _read(args)
    best = best_configurations(acc, cost, gammas=gammas, lengths=lengths)
    mean = {(n, k): float(np.mean(a)) for n, by_k in acc.items() for k, a in by_k.items()}
    const = {(n, p.k, p.gamma): constant_acceptance_tokens(mean[n, p.k], p.gamma) for n, rows in best.items() for p in rows}
    if args.plot:
        try:
            plot_speedup(best, args.plot)
        except ImportError as exc:
            raise CliError(str(exc)) from None
    baseline = cost.autoregressive_tokens_per_s()
    if args.json:
        rows = {
            n: [dict(vars(p), constant_formula_tokens_per_round=const[n, p.k, p.gamma], mean_acceptance=mean[n, p.k]) for p in preds]
            for n, preds in best.items()
        }
        print_json({"autoregressive_tokens_per_s": baseline, "best": {n: vars(p[0]) for n, p in best.items()}, "configurations": rows})
        return 0
    table = []
    for n, preds in sorted(best.items(), key=lambda kv: -kv[1][0].tokens_per_s):
        p = preds[0]
        table.append(
            (
                n,
                p.gamma,
                p.k,
                p.tree_size,
                f"{mean[n, p.k]:.4f}",
                f"{p.tokens_per_round:.4f}",
                f"{const[n, p.k, p.gamma]:.4f}",
                f"{p.tokens_per_s:.2f}",
                f"{p.speedup:.3f}",
            )
        )
    cols = ["verifier", "gamma", "k", "tree size", "mean alpha", "tokens/round", "const. formula", "tokens/s", "speedup"]
    print_table(
        "otspec speedup: best configuration of each",
        cols,
        table,
        caption=f"autoregressive: {baseline:.2f} tokens/s; const. formula = (1 - a^(g+1)) / (1 - a) at the mean acceptance",
    )
    return 0
