"""The package's layers point one way, and no module reaches into another's private names.

Every ``import`` in ``otspec`` (module level or inside a function) is read with ``ast``; a module
may import only from its own layer or the layers below it. Runtime: well under a second.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "otspec"

#: Lowest layer first. A module imports only from layers with an index <= its own.
LAYERS = [
    ("otspec._tolerances", "otspec.errors"),
    ("otspec._validation", "otspec.sampling"),
    ("otspec._race", "otspec.stats"),
    ("otspec.laws", "otspec.models", "otspec.synthetic", "otspec.io"),
    ("otspec.trees",),
    ("otspec.bounds",),
    ("otspec.verifiers",),
    ("otspec.report", "otspec.truncation"),
    ("otspec.cli", "otspec.plot", "otspec.testing", "otspec.__main__", "otspec"),
]

#: Deliberate upward references, each with its reason.
ALLOWED_UPWARD = {
    # PEP 562 re-export of compare / ComparisonRow, resolved on first attribute access.
    ("otspec.verifiers", "otspec.report"),
}


def _layer(name: str) -> int:
    best, best_len = None, -1
    for i, prefixes in enumerate(LAYERS):
        for pre in prefixes:
            if (name == pre or name.startswith(pre + ".")) and len(pre) > best_len:
                best, best_len = i, len(pre)
    assert best is not None, f"module {name} is in no layer; add it to LAYERS"
    return best


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), ast.parse(path.read_text())


def _in_core(name: str) -> bool:
    """``otspec`` and its submodules (``otspec_gpu`` is an optional adapter the CLI imports lazily)."""
    return name == "otspec" or name.startswith("otspec.")


def _imports(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and _in_core(node.module):
            for alias in node.names:
                yield node.module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _in_core(alias.name):
                    yield alias.name, None


@pytest.mark.parametrize("module, tree", list(_modules()), ids=lambda x: x if isinstance(x, str) else "")
def test_imports_point_down(module, tree):
    own = _layer(module)
    for target, name in _imports(tree):
        full = f"{target}.{name}" if name and target == "otspec" else target
        if (_root(module), _root(full)) in ALLOWED_UPWARD:
            continue
        assert _layer(full) <= own, f"{module} (layer {own}) imports {full} (layer {_layer(full)})"


def _root(name: str) -> str:
    for prefixes in LAYERS:
        for pre in prefixes:
            if name == pre or name.startswith(pre + "."):
                return pre
    return name


@pytest.mark.parametrize("module, tree", list(_modules()), ids=lambda x: x if isinstance(x, str) else "")
def test_no_private_names_across_modules(module, tree):
    for target, name in _imports(tree):
        if name and name.startswith("_") and not name.startswith("__") and target != "otspec":
            raise AssertionError(f"{module} imports the private name {name} from {target}")


def test_bounds_never_import_verifiers():
    for module, tree in _modules():
        if module.startswith("otspec.bounds"):
            assert not any(t.startswith("otspec.verifiers") for t, _ in _imports(tree)), module
