"""The documentation builds with Sphinx, warnings treated as errors (docstrings included), and the
built site works offline: no page loads a script or stylesheet from the network (MathJax is served
from ``_static``), Markdown tables render as tables, and the tutorial notebook was executed.

The site is built once per run (about a minute: the notebook runs in a Jupyter kernel)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def html(tmp_path_factory):
    pytest.importorskip("sphinx", reason="install the [docs] extra to build the documentation")
    out = tmp_path_factory.mktemp("docs") / "html"
    r = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(ROOT / "docs"), str(out)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    return out


def test_docs_build_without_warnings(html):
    assert (html / "index.html").exists()


_REMOTE = re.compile(r"<(?:script|link|img)\b[^>]*\b(?:src|href)=\"(?:https?:)?//[^\"]*\"", re.I)


def test_no_page_loads_anything_from_the_network(html):
    pages = sorted(html.rglob("*.html"))
    assert len(pages) > 20
    remote = {str(p.relative_to(html)): _REMOTE.findall(p.read_text(encoding="utf-8")) for p in pages}
    assert not {k: v for k, v in remote.items() if v}, "pages load remote resources"
    assert not [p for p in pages if "cdn." in p.read_text(encoding="utf-8")]


def test_math_is_rendered_by_a_local_mathjax(html):
    page = (html / "math.html").read_text(encoding="utf-8")
    src = re.findall(r"<script[^>]*src=\"([^\"]*mathjax[^\"]*)\"", page, re.I)
    assert src and all(not s.startswith(("http", "//")) for s in src)
    assert all((html / s.split("?")[0]).is_file() for s in src)
    assert (html / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").is_dir()


def test_markdown_tables_render_as_tables(html):
    for name in ("benchmarks", "optimal_wor", "wor_integral"):
        page = (html / f"{name}.html").read_text(encoding="utf-8")
        assert "<table" in page
        assert not re.search(r"^\s*\|(\s*-+\s*\|)+\s*$", page, re.M), f"{name}: a raw Markdown table"
    # a bar inside a cell (|cut|) stays inside its cell
    assert '<th class="head"><p>|cut|</p></th>' in (html / "benchmarks.html").read_text(encoding="utf-8")


def test_tutorial_notebook_was_executed(html):
    page = (html / "notebook_tutorial.html").read_text(encoding="utf-8")
    assert page.count('class="otspec-table"') >= 4  # AcceptanceResult, compare, block report, ...
    assert page.count("<img") >= 2  # the plots
    assert "Traceback" not in page


def test_mdinclude_helpers():
    pytest.importorskip("sphinx", reason="install the [docs] extra to build the documentation")
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        import mdinclude
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))
    table = "| a | |cut| |\n|---|---|\n| 1 | 2 |"
    assert mdinclude._escape_inner_bars(table).splitlines()[0] == r"| a | \|cut\| |"
    plain = "| a | b |\n|---|---|\n| 1 | 2 |"
    assert mdinclude._escape_inner_bars(plain) == plain
    text = "# title\n\nline\n\n### sub\n\n```\n## code\n```"
    assert mdinclude._level_one_headings(text, drop_title=True) == "\nline\n\n# sub\n\n```\n## code\n```"
