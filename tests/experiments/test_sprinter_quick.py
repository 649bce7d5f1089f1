"""experiments/sprinter.py --quick (tiny models, seconds): it writes JSON + markdown + PNG + RST, and
its invariants hold: the oracle's certified bound is 0, exact SD's is 0, passing everything makes
the fewest target calls, and every certified bound is >= 0."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("matplotlib", reason="install the [plots] extra")
ROOT = Path(__file__).resolve().parents[2]


def test_sprinter_quick(tmp_path):
    if str(ROOT / "experiments") not in sys.path:
        sys.path.insert(0, str(ROOT / "experiments"))
    spec = importlib.util.spec_from_file_location("_exp_sprinter", ROOT / "experiments" / "sprinter.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(["--quick", "--seed", "0", "--out", str(tmp_path)])
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"sprinter.{ext}").stat().st_size > 0
    assert (tmp_path / "sprinter_results.rst").read_text().count("list-table") == 2
    data = json.loads((tmp_path / "sprinter.json").read_text())
    assert data["quick"] is True and data["seed"] == 0
    runs = {r["method"]: r for r in data["runs"]}
    assert runs["oracle 1{p>=q}"]["certified_tv_max"] == 0.0
    assert runs["exact SD (token, gamma 4)"]["certified_tv_max"] == 0.0
    assert all(r["certified_tv_mean"] >= 0 for r in data["runs"])
    fewest = min(r["target_calls_per_token"] for r in data["runs"])
    assert runs["pass all (c=1)"]["target_calls_per_token"] == fewest
    assert "Command: `" in (tmp_path / "sprinter.md").read_text()
