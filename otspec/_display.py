"""HTML tables for Jupyter: what the ``_repr_html_`` of otspec's result objects return.

Jupyter (and myst-nb in the documentation) shows an object's ``_repr_html_()`` in place of its
``repr`` when the object has one. The result types use the two builders here:
:func:`html_table` (rows and columns: :func:`otspec.report.compare`, an audit) and
:func:`fields_table` (one result, one row per field: :class:`otspec.AcceptanceResult`).
Every cell is escaped; numbers are formatted by :func:`cell`; nothing here changes a value or the
plain-text ``repr``.
"""

from __future__ import annotations

import html
import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["cell", "html_table", "fields_table"]

#: Significant digits of a float cell (tables stay narrow; the plain ``repr`` and the result's
#: fields keep every digit).
DIGITS = 8

# Jupyter's and the documentation theme's own table styles apply (no inline styling).
_TABLE = '<table class="otspec-table">'


def cell(x: Any) -> str:
    """Plain-text form of one table cell.

    Parameters
    ----------
    x : object
        ``None`` (shown as ``-``), a bool (``yes`` / ``no``), an integer, a float (``DIGITS``
        significant digits, ``nan`` / ``inf`` as such) or anything with a ``str``.

    Returns
    -------
    str
        The text of the cell (not yet HTML-escaped).
    """
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, numbers.Integral):
        return str(int(x))
    if isinstance(x, numbers.Real):
        v = float(x)
        return str(v) if not math.isfinite(v) else f"{v:.{DIGITS}g}"
    return str(x)


def _row(tag: str, values: Iterable[Any]) -> str:
    cells = "".join(f"<{tag}>{html.escape(cell(v))}</{tag}>" for v in values)
    return f"<tr>{cells}</tr>"


def html_table(header: Sequence[str], rows: Iterable[Sequence[Any]], *, caption: str | None = None, notes: Iterable[str] = ()) -> str:
    """An HTML table of ``rows`` under ``header``, with an optional caption and notes below it.

    Parameters
    ----------
    header : sequence of str
        Column names.
    rows : iterable of sequence
        One sequence of cells per row (formatted by :func:`cell`), as long as ``header``.
    caption : str, optional
        Title shown above the table.
    notes : iterable of str
        Lines shown under the table (e.g. the computations a report skipped).

    Returns
    -------
    str
        An HTML fragment: ``<table class="otspec-table">`` followed by the notes, every text
        escaped.
    """
    parts = [_TABLE]
    if caption:
        parts.append(f"<caption>{html.escape(caption)}</caption>")
    parts.append(f"<thead>{_row('th', header)}</thead><tbody>")
    parts.extend(_row("td", r) for r in rows)
    parts.append("</tbody></table>")
    parts.extend(f"<p>{html.escape(n)}</p>" for n in notes)
    return "".join(parts)


def fields_table(title: str, fields: Iterable[tuple[str, Any]]) -> str:
    """An HTML table of one result: a row per ``(name, value)`` field under a title.

    Parameters
    ----------
    title : str
        The result's type (shown as the caption).
    fields : iterable of (str, object)
        Field names and values, in display order.

    Returns
    -------
    str
        An HTML fragment (see :func:`html_table`).
    """
    return html_table(("field", "value"), fields, caption=title)
