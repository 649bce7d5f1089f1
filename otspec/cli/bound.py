"""``otspec bound``: the optimal multi-draft acceptance for a (p, q) pair, per draft law."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import numpy as np

from otspec._docs import fill_doc
from otspec.cli.toolkit import CliError, print_json, print_table, progress
from otspec.laws import KINDS, by_kind
from otspec.synthetic import DEFAULTS, FAMILIES

__all__ = ["register", "run", "LAWS", "DEFAULT_LAWS", "PRODUCT_TEMPERATURE_STEP"]

#: Laws evaluated when no ``--law`` is given: every registered law built from one draft
#: distribution (``constructor(q, k)``), and ``k1``, the single-draft baseline 1 - TV. Tree laws
#: are left to ``--law``: one step of a tree is its root's set, the ``top_k`` row.
DEFAULT_LAWS = (*(kind for kind in KINDS if by_kind(kind).parameters == "q" and not by_kind(kind).draft_tree), "k1")

#: Laws the command can evaluate: the defaults, the tree laws and the laws of k drafters
#: (``product``: k heterogeneous drafters from a temperature ladder of q, only when asked for by name).
LAWS = (*DEFAULT_LAWS, *(kind for kind in KINDS if by_kind(kind).draft_tree or by_kind(kind).parameters == "qs"))

#: ``--law product``: drafter j (j = 0..k-1) draws from q at temperature 1 + j * this step.
PRODUCT_TEMPERATURE_STEP = 0.25


@fill_doc
def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``bound`` subcommand and its options to the ``otspec`` parser.

    Parameters
    ----------
    {register_args}
    """
    ap = sub.add_parser(
        "bound",
        help="optimal acceptance of k drafts (iid / without replacement / greedy) with certificates",
        description=(
            "Exact optimal multi-draft acceptance alpha* = 1 + min_H [P(H) - Q(H^k)] for a target p and "
            "draft q, for each draft law, with the dual cut, the method and its certified error. "
            "Use --vocab for a seeded synthetic pair or --p/--q for files."
        ),
    )
    src = ap.add_argument_group("source (synthetic pair, or files)")
    src.add_argument("--vocab", "-V", type=int, help="vocabulary size of a synthetic pair")
    src.add_argument("--p", dest="p_file", help="target distribution file (.npy .npz .safetensors .txt .csv)")
    src.add_argument("--q", dest="q_file", help="draft distribution file (same formats)")
    src.add_argument("--logits", action="store_true", help="files hold logits (float64 softmax applied)")
    src.add_argument("--family", choices=FAMILIES, default=DEFAULTS.family, help=f"synthetic family (default {DEFAULTS.family})")
    src.add_argument("--seed", type=int, default=DEFAULTS.seed, help=f"seed of the synthetic pair (default {DEFAULTS.seed})")
    src.add_argument(
        "--temperature",
        type=float,
        default=DEFAULTS.temperature,
        help=f"sampling temperature of both models (default {DEFAULTS.temperature})",
    )
    src.add_argument(
        "--draft-noise",
        type=float,
        default=DEFAULTS.draft_noise,
        help=f"zipf: std of the draft's logit noise (default {DEFAULTS.draft_noise})",
    )
    src.add_argument(
        "--concentration", type=float, default=DEFAULTS.concentration, help=f"dirichlet: concentration (default {DEFAULTS.concentration})"
    )
    ap.add_argument("--drafts", "-k", type=int, required=True, help="number of drafts k")
    ap.add_argument(
        "--law",
        action="append",
        choices=LAWS,
        help=(
            "law(s) to evaluate (repeatable; default: all but product); product: k independent drafters, "
            f"drafter j drawing from q at temperature 1 + {PRODUCT_TEMPERATURE_STEP} j"
        ),
    )
    ap.add_argument(
        "--method",
        default="auto",
        choices=("auto", "prefix", "subsets", "lp", "cvxpy", "flow", "maxflow", "product"),
        help="solver (default auto)",
    )
    ap.add_argument(
        "--memory-cap",
        type=float,
        default=None,
        metavar="GIB",
        help="refuse tuple-level solves whose estimated memory exceeds this many GiB (default 4)",
    )
    ap.add_argument("--verifiers", action="store_true", help="also tabulate every applicable verifier's acceptance vs the optimum")
    ap.add_argument(
        "--fit-wor",
        action="store_true",
        help=(
            "with --verifiers: compute the acceptances shown by default as certified intervals at scale: optimal_wor's "
            "Luce weight fit (seconds of CPU at V ~ 50 000, about 20 s at V = 262 144, k = 8; default row [0, alpha*_WOR]) and wor_iid's "
            "Monte Carlo estimate (default row [alpha*_iid, alpha*_WOR])"
        ),
    )
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.set_defaults(func=run)


def _load_pair(args) -> tuple[np.ndarray, np.ndarray, dict]:
    from otspec import io
    from otspec.synthetic import synthetic_pair

    if args.p_file or args.q_file:
        if not (args.p_file and args.q_file):
            raise CliError("--p and --q must be given together; pass both files")
        if args.vocab is not None:
            raise CliError("--vocab cannot be combined with --p/--q; choose a synthetic pair or files")
        p = io.load_distribution(args.p_file, name="p", logits=args.logits)
        q = io.load_distribution(args.q_file, name="q", logits=args.logits)
        return p, q, {"source": "files", "p": args.p_file, "q": args.q_file}
    if args.vocab is None:
        raise CliError("give --vocab V for a synthetic pair, or --p FILE --q FILE")
    p, q = synthetic_pair(
        args.vocab,
        family=args.family,
        seed=args.seed,
        temperature=args.temperature,
        draft_noise=args.draft_noise,
        concentration=args.concentration,
        memory_cap=None if args.memory_cap is None else args.memory_cap * 1024**3,
    )
    return p, q, {"source": "synthetic", "family": args.family, "seed": args.seed, "temperature": args.temperature}


def _make_law(name: str, q: np.ndarray, k: int):
    import otspec
    from otspec._validation import as_int_in_range
    from otspec.synthetic import softmax

    if name == "k1":
        return otspec.iid(q, 1)
    law_class = by_kind(name)
    if law_class.parameters == "qs":  # k drafters: q at temperatures 1, 1 + step, ...
        as_int_in_range(k, "k")
        with np.errstate(divide="ignore"):
            logq = np.log(q)
        return law_class.constructor([q] + [softmax(logq, 1.0 + PRODUCT_TEMPERATURE_STEP * j) for j in range(1, k)])
    return law_class.constructor(q, k)


# long-function: one subcommand: parse, solve, then print a table or JSON, step by step
def run(args) -> int:
    """Solve ``otspec bound``: the optimal acceptance of each requested draft law, printed.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed options of ``otspec bound`` (source pair, ``drafts``, ``law``, ``method``,
        ``memory_cap`` in GiB, ``verifiers``, ``fit_wor``, ``json``).

    Returns
    -------
    int
        0 (a table, or JSON with ``--json``, was printed).

    Raises
    ------
    CliError
        If the options contradict each other (``--p`` without ``--q``, ``--vocab`` with files,
        a non-positive ``--memory-cap``).
    OtspecInputError
        Any input error of the library (bad k, unreadable file, vocabulary mismatch, a law asked
        for by name that does not apply to k); :func:`otspec.cli.main` prints it as one line.
    """
    import otspec
    from otspec._validation import as_int_in_range, check_same_vocab
    from otspec.errors import InvalidDraftCountError

    as_int_in_range(args.drafts, "k")  # a bad k is an error for every law, never "not applicable"
    if args.memory_cap is not None and not args.memory_cap > 0:
        raise CliError(f"--memory-cap must be a positive number of GiB (got {args.memory_cap}); pass e.g. 8")
    p, q, meta = _load_pair(args)
    check_same_vocab(p, q)
    laws = args.law or list(DEFAULT_LAWS)
    cap = None if args.memory_cap is None else args.memory_cap * 1024**3
    rows, skipped = [], []
    show = not args.json and sys.stderr.isatty()
    with progress(show) as bar:
        task = bar.add_task("solving", total=len(laws))
        for name in laws:
            try:
                law = _make_law(name, q, args.drafts)
            except InvalidDraftCountError as exc:
                if args.law:  # asked for by name: an error
                    raise
                skipped.append((name, str(exc)))  # part of the default set: say why it is absent
                bar.advance(task)
                continue
            t0 = time.perf_counter()
            res = otspec.optimal_acceptance(p, law, method=args.method, memory_cap=cap)
            dt = time.perf_counter() - t0
            rows.append((name, law, res, dt))
            bar.advance(task)
    verifier_rows = {}
    if args.verifiers:
        from otspec import report

        for name, law, res, _ in rows:
            verifier_rows[name] = report.compare(p, law, optimum=res.value, fit=args.fit_wor)
    # the lossy rules' distance to the target and efficiency (acceptance - optimum) / TV, per law
    lossy = {
        name: {r.name: _lossy_cost(p, law, r) for r in verifier_rows[name] if not r.lossless}
        for name, law, _, _ in rows
        if name in verifier_rows
    }

    tv = float(0.5 * np.abs(p - q).sum())
    if args.json:
        out = {
            "V": int(p.size),
            "k": int(args.drafts),
            **meta,
            "tv": tv,
            "results": [{**res.to_dict(), "law": name, "law_repr": res.law, "k": int(law.k), "seconds": dt} for name, law, res, dt in rows],
        }
        if skipped:
            out["not_applicable"] = [{"law": name, "reason": why} for name, why in skipped]
        if args.verifiers:
            out["verifiers"] = {
                name: [{**dataclasses.asdict(r), **_cost_fields(lossy[name].get(r.name), r.lossless)} for r in vr]
                for name, vr in verifier_rows.items()
            }
        print_json(out)
        return 0
    title = f"optimal acceptance, V = {p.size}, k = {args.drafts}  ({meta['source']}; TV(p, q) = {tv:.4f})"
    table_rows = [
        (name, law.k, f"{res.value:.10f}", res.cut.size, res.method, res.status, f"{res.error_bound:.1e}", f"{dt * 1e3:.1f}")
        for name, law, res, dt in rows
    ]
    caption = "; ".join(f"{name}: not applicable ({why})" for name, why in skipped) or None
    print_table(title, ["law", "k", "optimum", "|cut|", "method", "status", "error bound", "ms"], table_rows, caption=caption)
    methods = {name: res.method for name, _, res, _ in rows}
    laws = {name: law for name, law, _, _ in rows}
    for name, vr in verifier_rows.items():
        print_table(
            f"verifiers vs optimum, law = {name}",
            ["verifier", "acceptance", "how", "optimum", "shortfall", "% of optimum", "TV to p", "efficiency"],
            [_verifier_cells(r) + _cost_cells(lossy[name].get(r.name), r.lossless) for r in vr],
            caption=" ".join(
                c for c in (_unavailable_footnote(vr, methods[name]), _certified_footnote(vr, p, laws[name]), _bracket_footnote(vr)) if c
            )
            or None,
        )
    return 0


#: What a table shows for a number that was not computed (the footnote says why).
NOT_COMPUTED = "\u2014"


def _verifier_cells(r) -> tuple:
    """One table row of ``otspec bound --verifiers``: numbers, or the dash for a verifier that could not run."""
    if r.how == "unavailable":
        return (r.name, NOT_COMPUTED, NOT_COMPUTED, f"{r.optimum:.8f}", NOT_COMPUTED, NOT_COMPUTED)
    if r.how == "bracket":  # a certified interval, not fitted (see _bracket_footnote)
        short = f"<= {r.optimum - r.ci_low:.2e}" if r.ci_low > 0 else NOT_COMPUTED
        return (r.name, f"[{r.ci_low:.8f}, {r.ci_high:.8f}]", r.how, f"{r.optimum:.8f}", short, NOT_COMPUTED)
    return (r.name, f"{r.acceptance:.8f}", r.how, f"{r.optimum:.8f}", f"{r.shortfall:.2e}", f"{r.percent_of_optimum:.2f}")


def _lossy_cost(p: np.ndarray, law, r) -> tuple[float, float] | None:
    """``(TV to p, efficiency)`` of a lossy verifier's row (``None`` when its output law is not computable here)."""
    from otspec.verifiers import by_name
    from otspec.verifiers.lossy import exact_tv_or_none

    if r.how in ("unavailable", "bracket"):
        return None
    tv = exact_tv_or_none(by_name(r.name), p, law)
    if tv is None:
        return None
    return tv, ((r.acceptance - r.optimum) / tv if tv > 0.0 else float("nan"))


def _cost_fields(cost: tuple[float, float] | None, lossless: bool) -> dict:
    """The JSON fields of one verifier row: ``tv_to_target`` and ``efficiency`` (null for lossless rules)."""
    if lossless:
        return {"tv_to_target": 0.0, "efficiency": None}
    if cost is None:
        return {"tv_to_target": None, "efficiency": None}
    return {"tv_to_target": cost[0], "efficiency": cost[1] if cost[1] == cost[1] else None}


def _cost_cells(cost: tuple[float, float] | None, lossless: bool) -> tuple:
    """The ``TV to p`` and ``efficiency`` cells: 0 and n/a (0/0) for lossless rules."""
    if lossless:
        return ("0", "n/a")
    if cost is None:
        return (NOT_COMPUTED, NOT_COMPUTED)
    tv, eff = cost
    return (f"{tv:.2e}", f"{eff:.3f}" if eff == eff else NOT_COMPUTED)


def _unavailable_footnote(vr: list, method: str) -> str | None:
    """One footnote for the dashes of a table: why those verifiers were not computed, and what computes them."""
    from otspec.verifiers import by_name

    missing = [r for r in vr if r.how == "unavailable"]
    if not missing:
        return None
    names = ", ".join(r.name for r in missing)
    why = missing[0].reason.split(";")[0].replace(f"verifier {missing[0].name!r} needs ", "")
    note = f"{NOT_COMPUTED} not computed: {names} {'needs' if len(missing) == 1 else 'need'} {why}."
    optimal = [r.name for r in missing if by_name(r.name).optimal]
    if optimal:
        note += (
            f" {', '.join(optimal)} {'is' if len(optimal) == 1 else 'are'} optimal on every law, so the acceptance is the "
            f"optimum column (computed by method={method!r})."
        )
    others = [r.name for r in missing if not by_name(r.name).optimal]
    if others:
        note += f" For {', '.join(others)}: use a smaller --vocab or --drafts (the exact kernel enumerates the law)."
    return note


def _bracket_footnote(vr: list) -> str | None:
    """Why a row is an interval: the verifier's acceptance needs a weight fit or sampling, which --fit-wor runs."""
    from otspec.verifiers import by_name

    names = [r.name for r in vr if r.how == "bracket"]
    if not names:
        return None
    why = "; ".join(f"{n}: {getattr(by_name(n), 'bracket_reason', 'the acceptance is costly at this V')}" for n in names)
    return f"{', '.join(names)}: certified interval, not fitted ({why}; --fit-wor computes the value)."


def _certified_footnote(vr: list, p: np.ndarray, law) -> str | None:
    """Certified bounds for the Monte Carlo rows of verifiers that have one (``certified_lower_bound``)."""
    from otspec.verifiers import by_name

    notes = []
    for r in vr:
        bound = getattr(by_name(r.name), "certified_lower_bound", None)
        if bound is not None and r.how == "monte_carlo":
            b = bound(p, law)
            notes.append(f"{r.name}: acceptance >= {b:.8f} (certified), so its shortfall is <= {r.optimum - b:.2e}.")
    return " ".join(notes) or None
