"""The documentation builds with Sphinx, warnings treated as errors (docstrings included), and the
built site works offline: no page loads a script or stylesheet from the network (MathJax is served
from ``_static``), Markdown tables render as tables, and the tutorial and gallery notebooks were
executed (each gallery example asserts its published number, so a drifting number fails the build).

It is a manual, not a lab notebook: no rendered page shows a folder of the machine that built a
result (``/tmp/...``, ``/root/...``, a home directory) or words about how the work was organised
("this session", "the team", tracker numbers such as ``#12``), and the manual pages name no commit
(revisions belong in the results' JSON). The wide result tables fit a laptop screen. The package is
citable (``CITATION.cff``), versioned (``CHANGELOG.md``, the version policy) and fully described
for PyPI, with every extra documented.

The site is built once per run (a few minutes: the notebooks run in Jupyter kernels). Run only these
tests with ``python -m pytest -q tests/test_docs.py``."""

import html as html_lib
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
    for name in ("benchmarks", "results", "wor_iid"):
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
    # provenance: the Command / Revision lines give way to the JSON's name; machine folders relative
    report = "# r\n\nCommand: `x --out /tmp/runs/r`  \nRevision: `abc1234`, 2 CPUs\n\n## t\n\ntraces: /work/main/out/a"
    shown = mdinclude._relative_paths(mdinclude._source_note(report, "/nowhere/r.md"))
    assert "Command:" not in shown and "abc1234" not in shown and "/tmp/" not in shown
    assert "r.md" in shown and "traces: out/a" in shown
    # a wide table split into narrower ones, key column repeated
    wide = "| a | b | c |\n|---|---|---|\n| 1 | 2 | 3 |"
    split = mdinclude._split_first_table(wide, mdinclude._column_groups("1-2 | 1,3"))
    assert split == "| a | b |\n|---|---|\n| 1 | 2 |\n\n| a | c |\n|---|---|\n| 1 | 3 |"
    with pytest.raises(ValueError):
        mdinclude._split_first_table(wide, mdinclude._column_groups("1,4"))


# --- a manual, not a lab notebook -------------------------------------------------------------------

_ARTICLE = re.compile(r"<article\b[^>]*>(.*?)</article>", re.S)
_CODE_OR_STYLE = re.compile(r"<(script|style)\b.*?</\1>", re.S)
_TAG = re.compile(r"<[^>]+>")
#: An absolute folder of a build machine: /tmp/..., /work/..., /root/..., home directories.
MACHINE_PATH = re.compile(r"(?<![\w./:~-])(?:/(?:tmp|work|root|scratch|mnt|var/folders)/|/(?:home|Users)/[\w.-]+/)[\w.+-]")
#: Words about how the work was organised rather than what the product does.
PROCESS = re.compile(
    r"\b(?:this|the|that|previous|next|last) session\b|\bsession's\b|\bclosing note\b|\bthe team\b"
    r"|\b(?:a|an|the|another|other|each|every) helpers?\b|\bhelper (?:session|agent)s?\b"
    r"|(?<![\w&/#])#\d{1,4}\b|\btracker\b|\bissue \d+\b|\bthe issue\b|\bthis work\b|\bbefore this work\b"
    r"|\bworktree\b|\bno GPU was available\b|\bnot yet measured\b",
    re.I,
)
#: A git commit (7-40 hex digits with at least one letter and one digit).
COMMIT = re.compile(r"(?<![\w/.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w/-])")
#: Pages that show measurements (their generated reports may name a revision); every other page is
#: the manual and names none.
RESULT_PAGES = {"results.html", "benchmarks.html"}


_TABLES = re.compile(r"<table\b.*?</table>", re.S)


def _page_text(path: Path, tables: bool = True) -> str:
    """The visible text of a page's article (no navigation, scripts or styles), entities decoded;
    without the tables' cells if ``tables`` is false."""
    page = path.read_text(encoding="utf-8")
    m = _ARTICLE.search(page)
    body = _CODE_OR_STYLE.sub(" ", m.group(1) if m else page)
    if not tables:
        body = _TABLES.sub(" ", body)
    return html_lib.unescape(_TAG.sub(" ", body))


def _pages(html):
    skip = {"genindex.html", "search.html", "py-modindex.html"}
    return [p for p in sorted(html.rglob("*.html")) if "_modules" not in p.parts and p.name not in skip]


def _hits(html, pattern, pages=None, tables=True):
    found = {}
    for p in pages if pages is not None else _pages(html):
        text = _page_text(p, tables)
        hits = [" ".join(text[max(0, m.start() - 40) : m.end() + 20].split()) for m in pattern.finditer(text)]
        if hits:
            found[str(p.relative_to(html))] = hits[:5]
    return found


@pytest.mark.parametrize(
    "text,bad",
    [
        ("python run.py --out /tmp/runs/exp1", True),
        ("see /work/main/experiments", True),
        ("weights in /root/.cache/x", True),
        ("/home/alice/otspec", True),
        ("the cache, ~/.cache/otspec by default", False),
        ("the folder runs/exp1 and docs/_static/results", False),
        ("https://example.org/tmp/x and experiments/tmp/y", False),
    ],
)
def test_machine_path_pattern(text, bad):
    assert bool(MACHINE_PATH.search(text)) is bad


@pytest.mark.parametrize(
    "text,bad",
    [
        ("measured in this session", True),
        ("as the team found", True),
        ("fixed in #12", True),
        ("another helper added it", True),
        ("the helpers changed it", True),
        ("the shared HiGHS helper; index helpers over tuples", False),
        ("the closing note", True),
        ("before this work it was 3 000", True),
        ("the sum over x in #S and &#8212; dashes", False),
        ("the sessions of a server; a teammate-free sentence", False),
    ],
)
def test_process_pattern(text, bad):
    assert bool(PROCESS.search(text)) is bad


def test_commit_pattern():
    assert COMMIT.search("at revision ee30b29 the")
    assert not COMMIT.search("1e-12, 262144 tokens, deadbeef-free, float64")


def test_no_page_shows_a_machine_path(html):
    assert not _hits(html, MACHINE_PATH), "pages show folders of the machine that built a result"


def test_no_page_talks_about_the_development_process(html):
    assert not _hits(html, PROCESS), "pages describe how the work was organised, not the product"


def test_manual_pages_name_no_commit(html):
    """A table cell may name a baseline revision (generated data); the prose names none."""
    manual = [p for p in _pages(html) if p.name not in RESULT_PAGES]
    assert not _hits(html, COMMIT, manual, tables=False), "revisions belong in the results' JSON, not in the manual"


def test_results_live_in_one_folder():
    docs = ROOT / "docs"
    assert not (docs / "_generated").exists()
    refs = []
    for page in docs.rglob("*.rst"):
        if "_static" in page.parts:
            continue
        for m in re.finditer(r"^\s*\.\. (?:mdinclude|include|image|figure):: (\S+)", page.read_text(encoding="utf-8"), re.M):
            refs.append((page.name, m.group(1)))
    assert refs
    for page, ref in refs:
        assert ref.startswith("_static/"), (page, ref)
        assert (docs / ref).is_file(), (page, ref)


# --- wide tables --------------------------------------------------------------------------------------

_TABLE = re.compile(r"<table\b([^>]*)>(.*?)</table>", re.S)
_ROW = re.compile(r"<tr\b[^>]*>(.*?)</tr>", re.S)
_CELL = re.compile(r"<t[hd]\b[^>]*>(.*?)</t[hd]>", re.S)
#: Article width on a 1366-pixel laptop screen with the theme's sidebars, and the width of one
#: character and one cell's padding at the tables' 0.85rem font (otspec.css).
LAPTOP_PX, CHAR_PX, PAD_PX = 900, 7.5, 18


def _table_width(table_html: str, wrap: bool) -> float:
    """Estimated rendered width: per column, the longest cell (the longest word when cells wrap)."""
    widths = {}
    for row in _ROW.findall(table_html):
        for j, cell in enumerate(_CELL.findall(row)):
            text = " ".join(html_lib.unescape(_TAG.sub(" ", cell)).split())
            size = max((len(w) for w in text.split()), default=0) if wrap else len(text)
            widths[j] = max(widths.get(j, 0), size)
    return sum(CHAR_PX * w + PAD_PX for w in widths.values())


def _tables_with_header(page: str, *names: str):
    """The tables whose header row holds every one of ``names``."""
    found = []
    for attrs, body in _TABLE.findall(page):
        rows = _ROW.findall(body)
        header = {" ".join(html_lib.unescape(_TAG.sub(" ", c)).split()) for c in _CELL.findall(rows[0])} if rows else set()
        if set(names) <= header:
            found.append((attrs, body))
    return found


def test_wide_result_tables_fit_a_laptop_screen(html):
    page = (html / "results.html").read_text(encoding="utf-8")
    css = (html / "_static" / "otspec.css").read_text(encoding="utf-8")
    assert re.search(r"table\.table\.otspec-wrap td\s*{[^}]*white-space:\s*normal", css.replace(",\n", " "), re.S)
    # the claims ledger and experiment 2's main table, each split into two narrower tables
    ledger = _tables_with_header(page, "claim")
    exp2 = _tables_with_header(page, "pair", "gamma", "prompts") + _tables_with_header(page, "pair", "gain % (exact)")
    assert len(ledger) == 2 and len(exp2) == 2, (len(ledger), len(exp2))
    for attrs, body in ledger + exp2:
        assert "otspec-wrap" in attrs
        cols = max(len(_CELL.findall(r)) for r in _ROW.findall(body))
        assert cols <= 8, cols
        assert _table_width(body, wrap=True) <= LAPTOP_PX, _table_width(body, wrap=True)
    # the ledger's text columns must wrap: unwrapped, it would be wider than the screen
    assert _table_width(ledger[0][1], wrap=False) > LAPTOP_PX


# --- gallery, citation, version, metadata -------------------------------------------------------------

GALLERY = ("block_toy", "hu_greedy_optimum", "kseq_bound", "lossy_frontier")


def test_gallery_examples_ran_and_show_their_numbers(html):
    for name in GALLERY:
        page = (html / "gallery" / f"{name}.html").read_text(encoding="utf-8")
        assert "Traceback" not in page and "cell_output" in page, name
    text = _page_text(html / "gallery" / "block_toy.html")
    assert "= 10/9" in text and "= 11/9" in text and "= 12/9" in text
    assert "1 - 1/e = 0.632121" in _page_text(html / "gallery" / "kseq_bound.html")


def _pyproject():
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml")
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def test_citation_file_is_cff_1_2_and_matches_the_version():
    yaml = pytest.importorskip("yaml")
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0"
    for key in ("message", "title", "authors", "version", "date-released", "license", "type"):
        assert cff.get(key), key
    assert all(a.get("name") or a.get("family-names") for a in cff["authors"])
    assert str(cff["version"]) == _pyproject()["version"]
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(cff["date-released"]))


def test_changelog_and_version_policy():
    import otspec

    version = _pyproject()["version"]
    assert otspec.__version__ == version
    log = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## [{version}]" in log and "## [Unreleased]" in log and "Semantic Versioning" in log
    policy = (ROOT / "docs" / "versioning.rst").read_text(encoding="utf-8")
    assert "Semantic Versioning" in policy and "CHANGELOG.md" in policy


def test_package_metadata_is_complete_and_every_extra_documented():
    meta = _pyproject()
    for key in ("description", "readme", "license", "requires-python", "authors", "keywords", "classifiers", "urls"):
        assert meta.get(key), key
    assert any(c.startswith("License :: OSI Approved") for c in meta["classifiers"])
    assert any(c.startswith("Programming Language :: Python :: 3.") for c in meta["classifiers"])
    assert {"Documentation", "Repository", "Changelog"} <= set(meta["urls"])
    assert (ROOT / meta["readme"]).is_file() and "MIT License" in (ROOT / "LICENSE").read_text(encoding="utf-8")
    install = (ROOT / "docs" / "install.rst").read_text(encoding="utf-8")
    missing = [extra for extra in meta["optional-dependencies"] if f"``{extra}``" not in install]
    assert not missing, f"extras not documented in docs/install.rst: {missing}"
