"""``otspec audit MODULE:OBJECT``: the whole verifier battery of :func:`otspec.testing.audit`.

Prints a verdict table (or JSON), saves the smallest counterexample of every failed property as a
runnable Python snippet, and exits with status 1 when a property fails (a lossless claim above
all), 2 on bad input (an object that cannot be imported or is not a verifier).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
from pathlib import Path

from otspec.cli.toolkit import CliError, print_json
from otspec.laws import KINDS

__all__ = ["register", "run"]

_KINDS = KINDS


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``audit`` subcommand and its options to the ``otspec`` parser.

    Parameters
    ----------
    sub : argparse._SubParsersAction
        The subparsers of the ``otspec`` parser (:func:`otspec.cli.build_parser`); the new
        subparser sets ``func`` to :func:`run`.
    """
    from otspec.testing.audit import audit

    defaults = audit.__kwdefaults__
    ap = sub.add_parser(
        "audit",
        help="test a verifier: exact losslessness, sampler, acceptance vs the optimum, bad inputs",
        description=(
            "Run otspec's verifier checks on MODULE:OBJECT -- a conditional law pi(p, q, drafts), a sampler "
            "sample(p, law, drafts, rng), an otspec.verifiers.Verifier (class or instance) or a chain "
            "verifier conditional_law(p_model, q_model, drafts), or (with otspec_gpu) a batched torch verifier with "
            "sample(p, q, drafts, *, generator) and conditional(p, q, drafts) -- on random, adversarial and rare-token small problems. "
            "MODULE may be a dotted module name or a path to a .py file. Exit status: 0 all properties hold, "
            "1 a property failed, 2 bad input."
        ),
    )
    ap.add_argument("target", metavar="MODULE:OBJECT", help="the verifier to audit, e.g. mypkg.rules:my_rule or rules.py:my_rule")
    ap.add_argument(
        "--seed", type=int, default=defaults["seed"], help=f"seed of the problems and sampler draws (default {defaults['seed']})"
    )
    ap.add_argument(
        "--problems",
        type=int,
        default=defaults["problems"],
        help=f"problems from the catalogue; beyond its size, that many more seeded random ones (default {defaults['problems']})",
    )
    ap.add_argument("--draws", type=int, default=defaults["draws"], help=f"sampler draws per sampled problem (default {defaults['draws']})")
    ap.add_argument(
        "--false-alarm",
        type=float,
        default=defaults["false_alarm"],
        help=f"false-alarm probability of each sampler test (default {defaults['false_alarm']:g})",
    )
    ap.add_argument(
        "--kinds", action="append", choices=_KINDS, help="for a plain function: draft-law kinds it is defined for (repeatable; default all)"
    )
    ap.add_argument(
        "-k",
        "--k",
        dest="k",
        type=int,
        action="append",
        help="for a plain function: draft counts it is defined for (repeatable; default all)",
    )
    ap.add_argument("--lossy", action="store_true", help="for a plain function: it is not claimed lossless (skip the lossless verdict)")
    ap.add_argument(
        "--tv-budget",
        type=float,
        default=None,
        metavar="EPS",
        help=(
            "for a lossy rule: the TV distance to the target it declares per step; checks TV(output law, p) <= EPS "
            "(exact from the kernel, or a sampled test with stated power) and acceptance <= min(1, optimum + EPS), the lossy frontier"
        ),
    )
    ap.add_argument(
        "--out", default="otspec-audit", help="folder for counterexample snippets (default ./otspec-audit; written only on failure)"
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=defaults["timeout"],
        help=f"seconds one check (one property on one problem) may take before it fails; 0: no limit (default {defaults['timeout']:g})",
    )
    ap.add_argument(
        "--device",
        default=None,
        help="for a torch verifier: the device its tensors live on (cpu, cuda, cuda:1; default cpu)",
    )
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table (the verifier's own output goes to stderr)")
    ap.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``otspec audit``: the property audit of a user's verifier, printed with counterexamples.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed options of ``otspec audit`` (``target`` as ``module:name`` or ``file.py:name``,
        ``kinds``, ``k``, ``lossy``, ``tv_budget``, ``seed``, ``problems``, ``draws``, ``false_alarm``,
        ``timeout``, ``device``, ``out``, ``json``).

    Returns
    -------
    int
        The report's exit code: 0 when every property passed or was skipped, 1 on any failure.

    Raises
    ------
    CliError
        If ``--problems``, ``--draws``, ``--false-alarm``, ``--timeout`` or ``--tv-budget`` is out of range.
    OtspecInputError
        If the target cannot be loaded or is not a verifier :func:`otspec.testing.as_verifier`
        can adapt.
    """
    from otspec.testing import audit

    if args.problems < 1:
        raise CliError(f"--problems must be >= 1 (got {args.problems}); pass e.g. 120")
    if args.draws < 100:
        raise CliError(f"--draws must be >= 100 (got {args.draws}); pass e.g. 60000")
    if not 0.0 < args.false_alarm < 1.0:
        raise CliError(f"--false-alarm must be in (0, 1) (got {args.false_alarm}); pass e.g. 1e-6")
    if not args.timeout >= 0:
        raise CliError(f"--timeout must be >= 0 seconds (got {args.timeout}); pass e.g. 600, or 0 for no limit")
    if args.tv_budget is not None and not 0.0 <= args.tv_budget < 1.0:
        raise CliError(f"--tv-budget must be in [0, 1) (got {args.tv_budget}); pass the rule's declared TV per step, e.g. 0.05")
    # the verifier's own prints go to stderr, so that stdout holds only the report (valid JSON)
    with contextlib.redirect_stdout(sys.stderr):
        verifier = _load(args)
        report = audit(
            verifier,
            seed=args.seed,
            problems=args.problems,
            draws=args.draws,
            false_alarm=args.false_alarm,
            spec=args.target,
            timeout=args.timeout or None,
            tv_budget=args.tv_budget,
        )
    report = _save_counterexamples(report, Path(args.out))
    if args.json:
        print_json(report.to_dict())
        return report.exit_code
    _print_report(report, args.target)
    for r in report.properties:
        if r.counterexample is not None:
            print(f"\n[{r.name}] smallest counterexample:\n{r.counterexample.problem}\n{r.counterexample.message}")
            if r.counterexample.path:
                print(f"reproduce with: python {r.counterexample.path}")
    if not report.ok:
        print(
            f"\n{sum(r.verdict == 'fail' for r in report.properties)} propert{'y' if sum(r.verdict == 'fail' for r in report.properties) == 1 else 'ies'} failed"
        )
    return report.exit_code


def _load(args: argparse.Namespace):
    """The target as a testable verifier, with the options of the command line."""
    from otspec.testing import as_verifier, load_object

    obj = load_object(args.target)
    options = {}
    if args.kinds:
        options["kinds"] = tuple(args.kinds)
    if args.k:
        options["k"] = tuple(args.k)
    if args.lossy:
        options["lossless"] = False
    if args.device is not None:
        options["device"] = args.device
    return as_verifier(obj, **options)


def _print_report(report, target: str) -> None:
    """The verdict table: rich, the result column left-aligned and wrapped (100 columns off a terminal)."""
    from rich.console import Console
    from rich.table import Table

    claim = "claims lossless" if report.lossless_claim else "declared lossy"
    table = Table(title=f"otspec audit {target}\n({report.form}, {claim})", caption=None if report.ok else "FAIL: counterexamples below")
    table.add_column("property")
    table.add_column("verdict")
    table.add_column("checked", justify="right")
    table.add_column("result", overflow="fold")
    for r in report.properties:
        table.add_row(r.name, _verdict(r.verdict), str(r.checked or ""), r.summary)
    Console(width=None if sys.stdout.isatty() else 100).print(table)


def _verdict(v: str) -> str:
    return {"pass": "pass", "fail": "FAIL", "skip": "-", "info": "info"}[v]


def _save_counterexamples(report, out: Path):
    """Write each counterexample's snippet under ``out`` and record its path in the report."""
    import dataclasses

    props = []
    for r in report.properties:
        if r.counterexample is None:
            props.append(r)
            continue
        try:
            out.mkdir(parents=True, exist_ok=True)
            path = out / f"{re.sub(r'[^A-Za-z0-9_]+', '_', report.verifier)}_{r.name}.py"
            path.write_text(r.counterexample.snippet)
        except OSError as exc:
            print(f"otspec: warning: cannot save the counterexample of {r.name!r} under {out} ({exc})", file=sys.stderr)
            props.append(r)
            continue
        props.append(dataclasses.replace(r, counterexample=dataclasses.replace(r.counterexample, path=str(path))))
    return dataclasses.replace(report, properties=tuple(props))
