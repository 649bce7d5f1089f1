"""Running one check of the audit on one problem, shrinking a failure, and the snippet that replays it."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from otspec.testing._findings import VerifierAssertionError

__all__ = ["replay_snippet", "run_check", "shrink"]


def run_check(check: Callable[[], Any]) -> VerifierAssertionError | None:
    """Run a check: ``None`` if it holds, the error (any exception the verifier raised) otherwise."""
    try:
        out = check()
    except VerifierAssertionError as exc:
        return exc
    except Exception as exc:  # the verifier's own code failed on valid input: that is a finding too
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return VerifierAssertionError(
            f"raised {type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})", {"exception": type(exc).__name__}
        )
    return out if isinstance(out, VerifierAssertionError) else None


def shrink(
    problem: Any,
    fails: Callable[[Any], VerifierAssertionError | None],
    first: VerifierAssertionError,
    budget: int = 150,
    *,
    remember: bool = True,
):
    """Greedy shrinking: take the first simpler problem that still fails, until none does.

    ``problem`` is a single-step or chain problem (``shrinks``, ``valid``, ``size``); each call of
    ``fails`` costs one unit of ``budget``. With ``remember`` a candidate already tried is skipped
    (it costs no budget the second time); without it, it is tried again."""
    best, err = problem, first
    tried: set = set()
    progress = True
    while progress and budget > 0:
        progress = False
        for cand in best.shrinks():
            if (remember and cand in tried) or not cand.valid():
                continue
            if remember:
                tried.add(cand)
            try:
                if cand.size() >= best.size():
                    continue
            except Exception:  # not a valid law after all
                continue
            budget -= 1
            e = fails(cand)
            if e is not None:
                best, err, progress = cand, e, True
                break
            if budget <= 0:
                break
    return best, err


def replay_snippet(prop: str, name: str, spec: str | None, seed: int, setup: str, call: str, imports: str) -> str:
    load = (
        f'verifier = as_verifier(load_object("{spec}"))'
        if spec
        else 'verifier = as_verifier(load_object("MODULE:OBJECT"))  # the verifier could not be located: put its MODULE:OBJECT here'
    )
    return (
        f'"""Counterexample to property {prop!r} of verifier {name!r}, found by otspec audit (seed {seed})."""\n'
        "import numpy as np\n\n"
        "import otspec\n"
        f"from otspec.testing import {', '.join(['as_verifier', 'load_object'] + ([imports] if imports else []))}\n\n"
        f"{load}\n{setup}\n{call}\n"
    )
