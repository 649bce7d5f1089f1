"""The landing figure is drawn from experiment 1's committed JSON alone (no model runs)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))
import figures_from_json  # noqa: E402


def test_landing_figure_from_the_committed_json(tmp_path):
    path = Path(figures_from_json.landing(str(ROOT / "docs" / "_static" / "results"), str(tmp_path)))
    assert path.name == figures_from_json.LANDING and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
