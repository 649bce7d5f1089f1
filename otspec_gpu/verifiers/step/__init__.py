"""Batched torch single-step verifiers, one module per rule, with the numpy core's names (twins of
:mod:`otspec.verifiers.step`). Each module defines the :class:`~otspec_gpu.verifiers.base.TorchVerifier`
named like the module, with its ``conditional``, ``uniforms`` and pure ``step`` (``sample`` is the
contract's default unless the rule takes extra arguments); modules whose names start with an
underscore hold helpers shared by several rules.

``__all__`` is read from the package's files, so a new rule is one module here (the registry,
:mod:`otspec_gpu.verifiers.registry`, derives its table from the same list); a module is imported
on first access.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

__all__ = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def __getattr__(name: str) -> ModuleType:
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
