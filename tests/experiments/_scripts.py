"""Run an experiment or benchmark script in this process, as ``main(argv)``, the way the quick tests do.

Importing the script and calling ``main`` (instead of a subprocess) saves a torch import per script;
the script's folder goes first on ``sys.path``, as when it runs as ``python experiments/...``.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"


def load_script(relpath: str) -> ModuleType:
    """A fresh module of ``experiments/<relpath>`` (e.g. ``"sprinter.py"``, ``"bench/bench_decode.py"``)."""
    path = EXPERIMENTS / relpath
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"_script_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_quick(relpath: str, out: Path) -> tuple[ModuleType, dict]:
    """``main(["--quick", "--seed", "0", "--out", out])`` of the script; asserts that it wrote a
    non-empty JSON, markdown and PNG named after it and that the JSON records the quick run and its
    seed. Returns the module and the JSON."""
    import matplotlib.pyplot as plt

    mod = load_script(relpath)
    mod.main(["--quick", "--seed", "0", "--out", str(out)])
    plt.close("all")
    name = Path(relpath).stem
    for ext in ("json", "md", "png"):
        assert (out / f"{name}.{ext}").stat().st_size > 0, ext
    data = json.loads((out / f"{name}.json").read_text())
    assert data["quick"] is True and data["seed"] == 0
    return mod, data
