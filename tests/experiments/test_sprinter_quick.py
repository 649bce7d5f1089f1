"""experiments/sprinter.py --quick (tiny models, seconds): it writes JSON + markdown + PNG + RST, and
its invariants hold: the oracle's certified bound is 0, exact SD's is 0, passing everything makes
the fewest target calls, and every certified bound is >= 0."""

import pytest

from tests.experiments._scripts import run_quick

pytest.importorskip("torch")
pytest.importorskip("matplotlib", reason="install the [plots] extra")


def test_sprinter_quick(tmp_path):
    _, data = run_quick("sprinter.py", tmp_path)
    assert (tmp_path / "sprinter_results.rst").read_text().count("list-table") == 2
    runs = {r["method"]: r for r in data["runs"]}
    assert runs["oracle 1{p>=q}"]["certified_tv_max"] == 0.0
    assert runs["exact SD (token, gamma 4)"]["certified_tv_max"] == 0.0
    assert all(r["certified_tv_mean"] >= 0 for r in data["runs"])
    fewest = min(r["target_calls_per_token"] for r in data["runs"])
    assert runs["pass all (c=1)"]["target_calls_per_token"] == fewest
    assert "Command: `" in (tmp_path / "sprinter.md").read_text()
