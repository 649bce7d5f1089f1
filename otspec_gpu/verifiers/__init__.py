r"""Batched torch verifiers, twins of :mod:`otspec.verifiers`.

:data:`SINGLE_STEP` maps each single-step verifier's name (the numpy registry's names) to a
:class:`TorchVerifier` with ``sample(p, q, drafts, *, generator, **extra) -> StepOutput`` and
``conditional(p, q, drafts, **extra) -> Tensor[B, V]``. Inputs: ``p``, ``q`` ``[B, V]`` processed
probabilities (float32 or float64, any device), ``drafts`` ``[B, k]`` long, drawn by
:func:`otspec_gpu.drafting.sample_drafts` under the verifier's ``draft_law``.

Chains and trees live in the submodules ``chain`` and ``tree`` (imported on first access).
"""

from __future__ import annotations

import importlib

from otspec_gpu.verifiers.base import StepOutput, TorchVerifier

__all__ = ["SINGLE_STEP", "StepOutput", "TorchVerifier", "by_name"]

_FAMILIES = ("token", "kseq", "rrs", "greedy", "khisti", "optimal_iid", "baselines", "approximate")


def _build() -> dict:
    reg: dict[str, TorchVerifier] = {}
    for fam in _FAMILIES:
        try:
            mod = importlib.import_module(f"otspec_gpu.verifiers.{fam}")
        except ModuleNotFoundError as exc:  # a family not written yet
            if exc.name != f"otspec_gpu.verifiers.{fam}":
                raise
            continue
        for v in mod.VERIFIERS if hasattr(mod, "VERIFIERS") else (getattr(mod, fam),):
            reg[v.name] = v
    return reg


#: Every single-step torch verifier, keyed by its otspec name.
SINGLE_STEP: dict[str, TorchVerifier] = _build()


def by_name(name: str) -> TorchVerifier:
    """The verifier of :data:`SINGLE_STEP` called ``name``.

    Parameters
    ----------
    name : str
        Registry name (``"token"``, ``"kseq"``, ``"rrs"``, ...).

    Returns
    -------
    TorchVerifier
        The registered verifier.

    Raises
    ------
    UnsupportedMethodError
        If no torch verifier has that name.

    Examples
    --------
    >>> by_name("token").draft_law
    'iid'
    """
    try:
        return SINGLE_STEP[name]
    except KeyError:
        from otspec.errors import UnsupportedMethodError

        raise UnsupportedMethodError(f"unknown torch verifier {name!r}; pick one of {sorted(SINGLE_STEP)}") from None


def __getattr__(name: str):
    if name in ("chain", "tree"):
        return importlib.import_module(f"otspec_gpu.verifiers.{name}")
    raise AttributeError(f"module 'otspec_gpu.verifiers' has no attribute {name!r}")
