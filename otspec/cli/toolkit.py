"""The command-line toolkit: what every ``otspec`` subcommand, built in or plug-in, is made of.

A plug-in command (an entry point of the group ``"otspec.cli"``, as :mod:`otspec_gpu.cli` registers
``otspec decode`` and ``otspec corpus``) builds on these pieces so that it behaves like the core's
commands:

* :class:`CliError` for a usage error the command detects itself, and :func:`run_guarded`, which
  turns it and every :class:`~otspec.errors.OtspecInputError` into one ``otspec: error: ...`` line
  on stderr and exit status 2 (never a traceback);
* :func:`number_flag` to parse a numeric flag with bounds and a message that names the flag, the
  value, the rule and the fix;
* :func:`print_json` / :func:`strict_json` for strict RFC 8259 JSON (a NaN becomes ``null`` with a
  ``"<key>_reason"``), :func:`print_table` for a rich table, :func:`progress` for a progress bar on
  stderr;
* :func:`fill_doc` to fill a docstring's ``{register_args}`` line (the argument of every command's
  ``register``) and the core's other shared blocks.

Examples
--------
>>> number_flag("3", "--gamma", int, minimum=1)
3
>>> strict_json({"value": float("nan")})["value"] is None
True
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

from otspec._docs import fill_doc as _fill_core_blocks
from otspec.errors import OtspecInputError

__all__ = ["CliError", "fill_doc", "number_flag", "run_guarded", "print_json", "strict_json", "print_table", "progress"]


class CliError(Exception):
    """A usage error detected by the CLI itself (exit status 2)."""


def number_flag(
    value: Any,
    flag: str,
    kind: type = float,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    optional: bool = False,
) -> Any:
    """Parse one numeric command-line value, the same way for every subcommand.

    Parameters
    ----------
    value : Any
        What argparse (or a caller) passed; ``None`` is allowed only when ``optional``.
    flag : str
        The flag's name as the user typed it (``"--gamma"``), for the message.
    kind : type
        ``int`` (a whole number: ``3`` and ``"3"`` pass, ``3.0`` passes as 3, ``3.5`` and booleans
        do not) or ``float`` (any finite number).
    minimum, maximum : float, optional
        Inclusive bounds.
    optional : bool
        Return ``None`` for ``None`` instead of refusing it.

    Returns
    -------
    int or float or None
        The parsed value.

    Raises
    ------
    CliError
        Not a number, not whole (``kind=int``), not finite, or out of bounds; the message names
        the flag, the value, the rule and the fix.
    """
    if value is None and optional:
        return None
    what = "an integer" if kind is int else "a number"
    if isinstance(value, bool):
        raise CliError(f"{flag} must be {what} (got {value!r}); pass e.g. {flag} 3")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise CliError(f"{flag} must be {what} (got {value!r}); pass e.g. {flag} 3") from None
    if not math.isfinite(x):
        raise CliError(f"{flag} must be finite (got {value!r}); pass a finite number")
    if kind is int:
        if not x.is_integer():
            raise CliError(f"{flag} must be an integer (got {value!r}); pass a whole number")
        x = int(x)
    if minimum is not None and x < minimum:
        raise CliError(f"{flag} must be >= {minimum:g} (got {value!r}); pass a value of at least {minimum:g}")
    if maximum is not None and x > maximum:
        raise CliError(f"{flag} must be <= {maximum:g} (got {value!r}); pass a value of at most {maximum:g}")
    return x


def fill_doc(obj: Any) -> Any:
    """Replace every docstring line of ``obj`` that holds only ``{name}`` by the core's shared block
    of that name (``{register_args}``: the argument of a command's ``register``).

    Parameters
    ----------
    obj : function or class
        The object whose docstring is filled in place.

    Returns
    -------
    function or class
        ``obj`` itself (use it as a decorator).
    """
    return _fill_core_blocks(obj)


def run_guarded(func: Callable[[Any], int], args: Any) -> int:
    """Run a subcommand; library input errors and CLI errors print one line and return 2.

    Parameters
    ----------
    func : callable
        The subcommand, ``func(args) -> exit status`` (``None`` counts as 0).
    args : argparse.Namespace
        Its parsed arguments.

    Returns
    -------
    int
        The exit status: the subcommand's, 2 after an :class:`~otspec.errors.OtspecInputError` or a
        :class:`CliError` (one ``otspec: error: ...`` line on stderr), 1 when stdout was closed early.
    """
    try:
        return int(func(args) or 0)
    except (OtspecInputError, CliError) as exc:
        print(f"otspec: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `otspec bound ... --json | head`: stop quietly, as Unix tools do
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def print_json(obj: Any) -> None:
    """Print strict JSON (RFC 8259): a NaN or infinite number becomes ``null`` and its object gets a
    ``"<key>_reason"`` string saying why (never the bare ``NaN`` / ``Infinity`` of Python's json).

    Parameters
    ----------
    obj : object
        Dicts, lists, strings, numbers, numpy scalars and arrays (:func:`strict_json`).
    """
    json.dump(strict_json(obj), sys.stdout, indent=2, sort_keys=False, allow_nan=False)
    sys.stdout.write("\n")


def _non_finite_reason(key: str, x: float, owner: dict) -> str:
    what = "not a number" if x != x else ("+infinity" if x > 0 else "-infinity")
    if owner.get("how") == "unavailable":
        return f"{what}: the verifier needs an enumerable draft law and this one is too large"
    if owner.get("status") not in (None, "optimal", "optimal_constrained"):
        return f"{what}: the solver did not certify a value (status {owner['status']})"
    return f"{what}: {key} is undefined for this input"


def strict_json(obj: Any) -> Any:
    """``obj`` with numpy scalars/arrays made plain and every non-finite float replaced by ``None``
    (plus a ``"<key>_reason"`` entry in the enclosing object).

    Parameters
    ----------
    obj : object
        Dicts, lists, tuples, strings, numbers, numpy scalars and arrays.

    Returns
    -------
    object
        The same structure with plain Python values only, ready for ``json.dump(allow_nan=False)``.
    """
    import math

    if isinstance(obj, dict):
        out: dict = {}
        for key, val in obj.items():
            val = strict_json(val)
            if isinstance(val, float) and not math.isfinite(val):
                out[key] = None
                if not obj.get("reason"):  # an object that already says why needs no per-key reason
                    out[f"{key}_reason"] = _non_finite_reason(str(key), val, obj)
            else:
                out[key] = val
        return out
    if isinstance(obj, (list, tuple)):
        return [None if isinstance(v, float) and not math.isfinite(v) else v for v in (strict_json(x) for x in obj)]
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    if isinstance(obj, float):
        return obj
    return strict_json(_json_default(obj))


def _json_default(x: Any) -> Any:
    import numpy as np

    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float):
        return x
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], caption: str | None = None) -> None:
    """Print a rich table (plain text when stdout is not a terminal).

    Parameters
    ----------
    title : str
        The table's title.
    columns : sequence of str
        Column headers (the first column left-aligned, the others right-aligned).
    rows : sequence of sequence
        The cells, one sequence per row (printed with ``str``).
    caption : str, optional
        A line under the table.
    """
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, caption=caption)
    for i, c in enumerate(columns):
        table.add_column(c, justify="left" if i == 0 else "right")
    for r in rows:
        table.add_row(*[str(x) for x in r])
    # a terminal gets its own width; pipes and files get a wide fixed one instead of rich's 80
    Console(width=None if sys.stdout.isatty() else 160).print(table)


def progress(enabled: bool) -> Any:
    """A rich progress bar on stderr (a no-op context when disabled, e.g. with --json).

    Parameters
    ----------
    enabled : bool
        Show the bar (pass ``False`` for ``--json`` or a non-interactive run).

    Returns
    -------
    rich.progress.Progress
        A context manager; ``add_task`` / ``advance`` as in rich.
    """
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=not enabled,
        transient=True,
    )
