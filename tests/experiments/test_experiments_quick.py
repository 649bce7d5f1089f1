"""Every experiment script runs in --quick mode (seconds) and writes JSON + markdown + PNG.

The scripts are run as a user runs them (a subprocess, headless), so argument parsing, the output
helper and the plots cannot rot. The numbers of a --quick run are not results; the checks below
are the experiment's own invariants (which hold at any size).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("matplotlib", reason="install the [plots] extra")


def run(script: str, out: Path, *extra: str) -> dict:
    r = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / script), "--quick", "--seed", "0", "--out", str(out), *extra],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**__import__("os").environ, "MPLBACKEND": "Agg"},
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    name = script.removesuffix(".py")
    for ext in ("json", "md", "png"):
        assert (out / f"{name}.{ext}").stat().st_size > 0, ext
    md = (out / f"{name}.md").read_text()
    assert "Command: `python experiments/" in md and "Revision: `" in md
    data = json.loads((out / f"{name}.json").read_text())
    assert data["quick"] is True and data["seed"] == 0
    return data


def test_exp5_bound_landscape(tmp_path):
    d = run("exp5_bound_landscape.py", tmp_path)
    c = d["checks"]
    assert c["wor_minus_iid_min"] >= -1e-9 and c["sweep_wor_minus_iid_min"] >= -1e-9
    assert c["kseq_ratio_minus_guarantee_min"] >= -1e-9
    assert c["k1_equals_one_minus_tv"] < 1e-12
