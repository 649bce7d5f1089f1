r"""When the bounds' compiled (numba) paths run: one rule and one account for the whole process.

The compiled paths of :mod:`otspec.bounds` (:mod:`otspec.bounds.iid_compiled`, the per-node
passes of :mod:`otspec.bounds.tree_interval`) give their numpy references' answers (bit for bit,
or within rounding where their docstrings say so) in fewer passes. What they cost is numba's
start-up in a fresh process: its import, the initialisation of its compiler target and the
loading of the cached kernels, measured at 1.5-4.5 s on the project's 2-core machine, about what
a hundred compiled solves of V = 262 144 tokens save. So under ``ENGINE = "auto"`` (the default)
a compiled path runs only for problems of at least :data:`COMPILED_FROM_V` tokens and only once
the numpy references have spent :data:`SWITCH_AFTER_S` seconds of this process on such problems
(the ski-rental rule: never more than about twice the better of the two choices, and a one-shot
command such as ``otspec bound`` never pays the start-up). ``ENGINE = "compiled"`` or
``"numpy"`` forces one path.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["COMPILED_FROM_V", "ENGINE", "SWITCH_AFTER_S", "count_reference", "kernels", "ready"]

#: Below this many tokens the numpy references run (they take about a millisecond there).
COMPILED_FROM_V = 4096

#: ``"auto"`` (module docstring), ``"compiled"`` (whenever numba imports) or ``"numpy"``.
ENGINE = "auto"

#: ``"auto"`` switches once reference runs of at least :data:`COMPILED_FROM_V` tokens have taken
#: this many seconds in the process (numba's start-up on the project machine).
SWITCH_AFTER_S = 2.0

_STATE: dict = {"reference_s": 0.0, "modules": {}}


def kernels(name: str) -> ModuleType | None:
    """The compiled kernels module ``otspec.bounds.<name>``, or None where numba does not import.

    Parameters
    ----------
    name : str
        The module's name inside :mod:`otspec.bounds` (``"iid_kernels"``).

    Returns
    -------
    module or None
        The kernels.
    """
    mods = _STATE["modules"]
    if name not in mods:
        try:
            mods[name] = importlib.import_module(f"otspec.bounds.{name}")
        except ImportError:  # numba missing: the numpy references (same complexity) run
            mods[name] = None
    return mods[name]


def ready(V: int, name: str) -> bool:
    """Whether a compiled path with kernels ``name`` runs for a problem of V tokens (:data:`ENGINE`).

    Parameters
    ----------
    V : int
        Vocabulary size.
    name : str
        Its kernels module (:func:`kernels`).

    Returns
    -------
    bool
        True to run the compiled path.

    Examples
    --------
    >>> ready(10, "iid_kernels")  # small problems always run the reference
    False
    """
    if ENGINE == "numpy" or V < COMPILED_FROM_V:
        return False
    if ENGINE == "auto" and _STATE["reference_s"] < SWITCH_AFTER_S:
        return False
    return kernels(name) is not None


def count_reference(V: int, seconds: float) -> None:
    """Add a numpy reference run's time to the ``"auto"`` rule's account (problems of at least
    :data:`COMPILED_FROM_V` tokens only).

    Parameters
    ----------
    V : int
        Vocabulary size of the run.
    seconds : float
        Its time.
    """
    if V >= COMPILED_FROM_V:
        _STATE["reference_s"] += seconds
