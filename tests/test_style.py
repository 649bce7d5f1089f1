"""House style: ``ruff check`` and ``ruff format --check`` pass on the repository (configuration in
pyproject.toml). Runtime: about a second."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("ruff", reason="install ruff (the [test] extra) to check the house style")


@pytest.mark.parametrize("args", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff(args):
    r = subprocess.run([sys.executable, "-m", "ruff", *args, "."], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]


# -- the 80-line rule -----------------------------------------------------------------------------

#: Longest function body (def line to last line) without a stated exemption.
MAX_FUNCTION_LINES = 80
#: The exemption: a comment line right above the function (or its decorators) saying why.
EXEMPT = "# long-function:"
PACKAGES = ("otspec", "otspec_gpu", "experiments")


def _long_functions(source: str, path: str = "<string>") -> list[str]:
    """Functions over :data:`MAX_FUNCTION_LINES` lines without an ``EXEMPT`` comment (with a reason
    of at least a few words) directly above them."""
    import ast

    lines = source.splitlines()
    bad = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        length = node.end_lineno - node.lineno + 1
        if length <= MAX_FUNCTION_LINES:
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        above = lines[first - 2].strip() if first >= 2 else ""
        reason = above[len(EXEMPT) :].strip() if above.startswith(EXEMPT) else ""
        if len(reason.split()) < 4:
            bad.append(
                f"{path}:{node.lineno} {node.name} has {length} lines (> {MAX_FUNCTION_LINES}); shorten it or state why above it: {EXEMPT} <reason>"
            )
    return bad


def test_functions_are_at_most_80_lines_or_say_why():
    bad = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            bad += _long_functions(path.read_text(), str(path.relative_to(ROOT)))
    assert bad == [], "\n".join(bad)


def test_long_function_check_sees_violations():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    long_fn = f"def f():\n{body}\n"
    assert len(_long_functions(long_fn)) == 1
    assert _long_functions(f"{EXEMPT} a table of forty cases, one per line\n{long_fn}") == []
    assert len(_long_functions(f"{EXEMPT} long\n{long_fn}")) == 1  # a reason, not a bare tag
    assert _long_functions("def f():\n    return 1\n") == []
