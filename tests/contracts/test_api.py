"""Package-level contracts: __all__ resolves everywhere, the core never imports torch."""

import importlib
import pkgutil
import subprocess
import sys

import otspec


def _modules():
    for info in pkgutil.walk_packages(otspec.__path__, prefix="otspec."):
        if info.name.endswith("__main__"):
            continue
        yield importlib.import_module(info.name)


def test_every_module_has_resolving_all():
    seen = 0
    for mod in _modules():
        assert hasattr(mod, "__all__"), f"{mod.__name__} lacks __all__"
        for name in mod.__all__:
            assert hasattr(mod, name), f"{mod.__name__}.__all__ names missing {name!r}"
        seen += 1
    assert seen >= 10


def test_import_otspec_does_not_import_torch():
    code = (
        "import sys, otspec, otspec.cli, otspec.bounds, otspec.laws\n"
        "import otspec.cli.bound\n"
        "bad = [m for m in sys.modules if m == 'torch' or m.startswith('torch.')]\n"
        "print(len(bad)); sys.exit(1 if bad else 0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_results_are_frozen():
    import dataclasses

    import numpy as np
    import pytest

    r = otspec.optimal_acceptance([0.5, 0.5], otspec.iid([0.9, 0.1], 2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.value = 0.0
    assert "AcceptanceResult(value=" in repr(r)
    assert isinstance(r.cut, np.ndarray)
