"""The documentation builds with Sphinx, warnings treated as errors (docstrings included)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_docs_build_without_warnings(tmp_path):
    pytest.importorskip("sphinx", reason="install the [docs] extra to build the documentation")
    r = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(ROOT / "docs"), str(tmp_path / "html")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert (tmp_path / "html" / "index.html").exists()
