"""Running one check of the audit on one problem, shrinking a failure, and the snippet that replays it."""

from __future__ import annotations

import signal
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from otspec.testing._findings import VerifierAssertionError

__all__ = ["USER_EXITS", "CheckTimeout", "check_timeout", "exit_finding", "guarded", "replay_snippet", "run_check", "shrink"]


#: Seconds one check may take (:func:`check_timeout`); ``None``: no limit.
_TIMEOUT: ContextVar[float | None] = ContextVar("otspec_audit_timeout", default=None)


#: True inside a block whose time limit is running (nested blocks share it).
_ARMED: ContextVar[bool] = ContextVar("otspec_audit_timer_armed", default=False)


class CheckTimeout(BaseException):
    """One check ran past its time limit (a ``BaseException``, so a verifier's ``except Exception``
    cannot swallow it)."""


@contextmanager
def check_timeout(seconds: float | None) -> Iterator[None]:
    """Within the block, each :func:`run_check` (and :func:`guarded`) call may take ``seconds``."""
    token = _TIMEOUT.set(seconds if seconds and seconds > 0 else None)
    try:
        yield
    finally:
        _TIMEOUT.reset(token)


@contextmanager
def _time_limit() -> Iterator[None]:
    """Raise :class:`CheckTimeout` in the block after the current limit (SIGALRM: the main thread of
    a POSIX process; elsewhere no limit is enforced)."""
    seconds = _TIMEOUT.get()
    if seconds is None or _ARMED.get() or not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
        yield  # no limit, or an enclosing block's limit already runs
        return

    def _expired(signum, frame):
        raise CheckTimeout(seconds)

    previous = signal.signal(signal.SIGALRM, _expired)
    armed = _ARMED.set(True)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        _ARMED.reset(armed)


def exit_finding(exc: BaseException) -> VerifierAssertionError:
    """The finding for user code that exited, was interrupted or ran past the time limit."""
    if isinstance(exc, CheckTimeout):
        return VerifierAssertionError(
            f"did not finish within the time limit of one check ({exc.args[0]:g} s); make it faster or raise the limit (--timeout)",
            {"exception": "timeout"},
        )
    what = f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else f"raised {type(exc).__name__}"
    return VerifierAssertionError(
        f"{what} (SystemExit / KeyboardInterrupt from the verifier's code); a verifier must return a result or raise an exception",
        {"exception": type(exc).__name__},
    )


#: What user code may raise that is not an ``Exception`` but must still be reported as a finding.
USER_EXITS = (SystemExit, KeyboardInterrupt, CheckTimeout)


def guarded(fn: Callable[[], Any]) -> Any:
    """``fn()`` under the time limit, with an exit (SystemExit, KeyboardInterrupt, timeout) turned
    into a raised :class:`VerifierAssertionError` (an ``Exception``, so callers may catch it)."""
    try:
        with _time_limit():
            return fn()
    except USER_EXITS as exc:
        raise exit_finding(exc) from None


def run_check(check: Callable[[], Any]) -> VerifierAssertionError | None:
    """Run a check: ``None`` if it holds, the error (any exception the verifier raised, an exit or a
    timeout) otherwise."""
    try:
        with _time_limit():
            out = check()
    except VerifierAssertionError as exc:
        return exc
    except USER_EXITS as exc:
        return exit_finding(exc)
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
