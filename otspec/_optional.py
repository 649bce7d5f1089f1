"""Optional dependencies: one guard for every lazily imported package, with the install hint.

Every optional import of the project (OR-Tools for ``method="maxflow"``, matplotlib for
:mod:`otspec.plot`, torch for :mod:`otspec_gpu`, ...) goes through :func:`require`, so each missing
package fails the same way: an error naming what needed it, the missing package and the exact
command that installs it. Plug-ins reach it as :func:`otspec.plugin.require`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require"]


def require(
    module: str, extra: str | None, *, needed_by: str, install: str | None = None, error: type[Exception] = ImportError
) -> ModuleType:
    """Import ``module``, or raise ``error`` with the command that installs it.

    Parameters
    ----------
    module : str
        Dotted module name (``"ortools.graph.python.max_flow"``).
    extra : str or None
        The otspec extra that installs it (``"maxflow"``: ``pip install "otspec[maxflow]"``).
    needed_by : str
        What needs it, for the message (``"method='maxflow'"``).
    install : str, optional
        The install command, when it is not the extra alone (a pinned torch build, a package
        outside the extras).
    error : type of Exception
        The exception raised (an ``ImportError`` subclass, or the caller's input error type).

    Returns
    -------
    module
        The imported module.

    Raises
    ------
    ImportError or ``error``
        If the module (or a package it needs) is not installed.

    Examples
    --------
    >>> require("math", None, needed_by="the doctest").sqrt(4.0)
    2.0
    >>> require("no_such_package_xyz", "plots", needed_by="the plot")
    Traceback (most recent call last):
    ...
    ImportError: the plot needs no_such_package_xyz, which is not installed; install it with `pip install "otspec[plots]"`
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        command = install if install is not None else f'pip install "otspec[{extra}]"'
        missing = exc.name or module
        raise error(f"{needed_by} needs {missing}, which is not installed; install it with `{command}`") from None
