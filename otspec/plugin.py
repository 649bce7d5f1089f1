"""The library toolkit of packages that extend otspec (the torch side :mod:`otspec_gpu`, a
third-party verifier package): the core's own building blocks, public and stable.

An extension that checks its inputs, documents its functions and shows its results the way the
core does imports these instead of the core's private modules:

* :func:`as_int_in_range`: a whole-number argument in bounds, or the core's
  :class:`~otspec.errors.NotAnIntegerError` / :class:`~otspec.errors.InvalidDraftCountError` with
  name, value, rule and fix;
* :func:`filler`: a docstring decorator that replaces a line holding only ``{name}`` by a shared
  numpydoc block (one template for every package);
* :func:`html_table`: the escaped HTML table of the core's ``_repr_html_`` methods;
* :func:`require`: import an optional dependency, or fail with what needed it and the command
  that installs it (the one guard of every optional import).

Command-line plug-ins have their own toolkit, :mod:`otspec.cli.toolkit`.

Examples
--------
>>> as_int_in_range(4, "gamma")
4
>>> html_table(["k", "value"], [[2, 0.5]]).startswith("<table")
True
"""

from __future__ import annotations

from otspec._display import html_table
from otspec._docs import filler
from otspec._optional import require
from otspec._validation import as_int_in_range

__all__ = ["as_int_in_range", "filler", "html_table", "require"]
