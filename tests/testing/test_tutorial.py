"""docs/testing.rst quotes real output: re-run the tutorial and compare (runtime ~10 s)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import otspec
from otspec.cli import main
from otspec.testing import acceptance_ratio, load_object
from otspec.verifiers import khisti, kseq

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "testing.rst").read_text()


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _console_blocks() -> list:
    """The ``$ otspec audit ...`` console blocks of the page: (command, quoted lines)."""
    blocks = []
    for body in re.findall(r"\.\. code-block:: console\n\n((?:   .*\n|\n)+)", DOC):
        lines = [ln[3:] for ln in body.splitlines() if ln.startswith("   ")]
        blocks.append((lines[0][2:], [ln.strip() for ln in lines[1:] if ln.strip() and ln.strip() != "..."]))
    return blocks


@pytest.mark.parametrize("index", [0, 1] + ([2] if _has_torch() else []))
def test_quoted_audit_output_is_what_the_command_prints(index, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    command, quoted = _console_blocks()[index]
    argv = command.split()[1:]
    rc = main(argv + ["--out", str(tmp_path)])
    printed = {ln.strip() for ln in capsys.readouterr().out.splitlines()}
    missing = [ln for ln in quoted if not ln.startswith("reproduce with") and ln not in printed]
    assert not missing, missing
    assert rc == (1 if index == 0 else 0)


def test_gap_to_the_optimum_numbers():
    rule = load_object(str(ROOT / "docs/tutorial/two_drafts_fixed.py") + ":two_drafts")
    p, law = [0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 2)
    r = acceptance_ratio(rule, p, law)
    assert (round(r.acceptance, 12), round(r.optimum, 12), round(r.gap, 12)) == (0.76, 0.86, 0.1)
    assert round(acceptance_ratio(kseq, p, law).acceptance, 4) == 0.7914
    assert round(acceptance_ratio(khisti, p, law).acceptance, 12) == 0.86
    assert "(0.76, 0.86, 0.1)" in DOC and "(0.7914, 0.86)" in DOC
