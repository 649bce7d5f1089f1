r"""``.. mdinclude:: PATH`` renders a Markdown file (or the directive's own Markdown content) in an
reStructuredText page: pipe tables become real tables, ``code`` and **bold** render, and headings
become rubrics so that an included report never adds sections to the page that includes it.

The benchmark and experiment scripts write their tables as GitHub Markdown (``*.md`` next to their
JSON); this directive shows those files as they are, parsed by MyST (``myst-parser``, which the
``docs`` extra installs with ``myst-nb``). Parsing is local and deterministic: no network.

Usage::

    .. mdinclude:: _generated/bench_bounds.md

    .. mdinclude::

       | V | ms |
       |---|----|
       | 5000 | 0.4 |

A relative PATH is read relative to the page's own folder, as ``.. include::`` does. Options:

``:start-after: TEXT`` / ``:end-before: TEXT``
    keep only the part of the file after / before the first occurrence of TEXT.
``:drop-title:``
    leave out the file's first heading when it opens the file (its name is the section title of
    the including page already).

Bars inside a cell (``|cut|``, ``max |diff|``) would split it in Markdown. In a table whose rows
have more cells than its delimiter row, a bar that is not a cell separator (separators stand at the
ends of the row or between two spaces) is read as a literal bar, as ``\|`` would be.
"""

from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.utils import new_document
from sphinx.util.docutils import SphinxDirective

_DELIMITER = re.compile(r"^\s*\|?(\s*:?-+:?\s*\|)+\s*:?-*:?\s*$")
_SEPARATOR = re.compile(r"(?<!\\)\|")


def _cells(row: str) -> int:
    """Number of cells of a pipe-table row, as Markdown splits it."""
    return len(_SEPARATOR.split(row.strip().strip("|")))


def _escape_bar(row: str) -> str:
    """Escape every bar of ``row`` that is not a separator (row ends, or between two spaces)."""
    s = row.strip()
    out = []
    for i, ch in enumerate(s):
        inner = 0 < i < len(s) - 1
        if ch == "|" and inner and s[i - 1] != "\\" and not (s[i - 1] == " " and s[i + 1] == " "):
            out.append("\\|")
        else:
            out.append(ch)
    return "".join(out)


def _escape_inner_bars(text: str) -> str:
    """Escape the literal bars of every pipe table whose rows outnumber its delimiter's cells."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if i == 0 or not _DELIMITER.match(line) or "|" not in lines[i - 1]:
            continue
        start, end = i - 1, i + 1
        while end < len(lines) and lines[end].lstrip().startswith("|"):
            end += 1
        n = _cells(line)
        rows = [j for j in range(start, end) if j != i]
        if all(_cells(lines[j]) == n for j in rows):
            continue
        for j in rows:
            lines[j] = _escape_bar(lines[j])
    return "\n".join(lines)


def _level_one_headings(text: str, drop_title: bool) -> str:
    """Every ATX heading outside code fences made level 1 (they become rubrics, which have no
    level, and MyST warns on a first heading below level 1); with ``drop_title`` the file's opening
    level-1 heading is left out."""
    out, fenced, first = [], False, True
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        heading = not fenced and re.match(r"^#{1,6} ", line)
        if heading and first and drop_title and line.startswith("# "):
            first = False
            continue
        if line.strip():
            first = False
        out.append(re.sub(r"^#{1,6} ", "# ", line) if heading else line)
    return "\n".join(out)


def _flatten_sections(parent: nodes.Element) -> None:
    """Replace every section below ``parent`` by a rubric (its title) followed by its body."""
    for child in list(parent.children):
        if isinstance(child, nodes.section):
            _flatten_sections(child)
            title = child.next_node(nodes.title)
            rubric = nodes.rubric("", "", *(title.children if title is not None else []))
            body = [c for c in child.children if c is not title]
            parent.replace(child, [rubric, *body])
        elif isinstance(child, nodes.Element):
            _flatten_sections(child)


class MdInclude(SphinxDirective):
    """Parse a Markdown file (or the directive's content) with MyST and insert the result."""

    required_arguments = 0
    optional_arguments = 1
    final_argument_whitespace = True
    has_content = True
    option_spec = {
        "start-after": directives.unchanged_required,
        "end-before": directives.unchanged_required,
        "drop-title": directives.flag,
    }

    def _source(self) -> tuple[str, str]:
        if self.arguments and self.content:
            raise self.error("mdinclude takes a path or Markdown content, not both")
        if not self.arguments:
            if not self.content:
                raise self.error("mdinclude needs a path or Markdown content")
            return "\n".join(self.content), self.get_source_info()[0]
        rel, path = self.env.relfn2path(self.arguments[0])
        if not Path(path).is_file():
            raise self.error(f"mdinclude: no file {self.arguments[0]!r} (looked for {path})")
        self.env.note_dependency(rel)
        text = Path(path).read_text(encoding="utf-8")
        for option, keep_after in (("start-after", True), ("end-before", False)):
            marker = self.options.get(option)
            if marker is None:
                continue
            at = text.find(marker)
            if at < 0:
                raise self.error(f"mdinclude: {option} text {marker!r} not found in {self.arguments[0]!r}")
            text = text[at + len(marker) :] if keep_after else text[:at]
        return text, path

    def run(self) -> list[nodes.Node]:
        from myst_parser.parsers.sphinx_ import MystParser

        text, path = self._source()
        text = _level_one_headings(text, "drop-title" in self.options)
        document = new_document(path, self.state.document.settings)
        MystParser().parse(_escape_inner_bars(text), document)
        _flatten_sections(document)
        return list(document.children)


def setup(app):
    app.add_directive("mdinclude", MdInclude)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
