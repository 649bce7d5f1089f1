"""The one verifier-name table of the torch side, derived from the core registry.

Every name is the numpy core's: the single-step verifiers of :data:`otspec.verifiers.ALL` (each
with its torch twin in :mod:`otspec_gpu.verifiers.step`), the chain rules ``"token"`` and
``"block"`` (:mod:`otspec.verifiers.token_chain`, :mod:`otspec.verifiers.block`; torch
:mod:`otspec_gpu.verifiers.chain`) and the tree rules :data:`otspec.verifiers.tree.VERIFIERS` (torch
:mod:`otspec_gpu.verifiers.tree`, which runs the single-step twin of the same name at every node).
:data:`VERIFIERS` says for each name which modes the torch side runs and with which objects.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

import otspec.verifiers as core
from otspec.errors import UnsupportedMethodError
from otspec.verifiers import tree as core_tree
from otspec_gpu.verifiers import step
from otspec_gpu.verifiers.base import TorchVerifier
from otspec_gpu.verifiers.chain import CHAIN_RULES, ChainRule

__all__ = ["CHAIN", "NO_TORCH_TWIN", "SINGLE_STEP", "TREE", "VERIFIERS", "TorchRule", "by_name", "lookup"]


def _twins() -> dict[str, TorchVerifier]:
    """Each public module of :mod:`otspec_gpu.verifiers.step` and the verifier named like it."""
    out = {}
    for module_name in step.__all__:
        ver = getattr(importlib.import_module(f"{step.__name__}.{module_name}"), module_name, None)
        if not isinstance(ver, TorchVerifier) or ver.name != module_name:
            raise TypeError(f"otspec_gpu.verifiers.step.{module_name} must define the TorchVerifier {module_name!r}")
        out[module_name] = ver
    return out


_TWINS: dict[str, TorchVerifier] = _twins()

#: Core single-step verifiers without a torch twin, and why.
NO_TORCH_TWIN = {
    "optimal_plan": "it solves a transport LP over the draft tuples of each problem (no batched tensor form)",
    "optimal_wor": "its Luce weights are fitted per (p, q) by an iterative solver on the CPU (seconds per pair; no batched tensor form)",
    "fuzzy": "a lossy single-position study rule (one JS/TV test per (p, q) pair); the numpy kernel is its reference, no decoder uses it",
    "lossy_optimal": "it runs an optimal lossless plan underneath (optimal_plan's LP on enumerable laws), a study rule for the lossy frontier",
    "global_resolution": "a refereed design (docs: Referee): its softmax weights are fitted per (p, q) by L-BFGS on the CPU; optimal_iid is the exact rule to decode with",
}


@dataclass(frozen=True)
class TorchRule:
    """What the torch side runs under one verifier name.

    Attributes
    ----------
    name : str
        The core's name.
    single_step : TorchVerifier or None
        The batched single-step twin (mode ``"single"``; also the node rule of a tree).
    chain : ChainRule or None
        The chain rule (mode ``"chain"``: one drafted block per row).
    tree : bool
        Whether the name is a tree rule (mode ``"tree"``: :func:`otspec_gpu.verifiers.tree.sample`
        with ``rule=name`` runs :attr:`single_step` at every node).
    modes : tuple of str
        The modes above that the name supports, in the order ``chain``, ``single``, ``tree``.
    """

    name: str
    single_step: TorchVerifier | None = field(default=None, repr=False)
    chain: ChainRule | None = field(default=None, repr=False)
    tree: bool = False

    @property
    def modes(self) -> tuple[str, ...]:
        """The modes this name supports (``"chain"``, ``"single"``, ``"tree"``)."""
        have = (("chain", self.chain is not None), ("single", self.single_step is not None), ("tree", self.tree))
        return tuple(m for m, ok in have if ok)


def _table() -> dict[str, TorchRule]:
    names = [v.name for v in core.ALL if v.name not in NO_TORCH_TWIN]
    names += [n for n in CHAIN_RULES if n not in names]
    return {
        n: TorchRule(n, single_step=_TWINS.get(n), chain=CHAIN_RULES.get(n), tree=n in core_tree.VERIFIERS and n in _TWINS) for n in names
    }


#: Every torch verifier name (the core's names, in the core's table order, then ``"block"``).
VERIFIERS: dict[str, TorchRule] = _table()
#: Every single-step torch verifier, keyed by its otspec name.
SINGLE_STEP: dict[str, TorchVerifier] = {n: r.single_step for n, r in VERIFIERS.items() if r.single_step is not None}
#: The chain rules (one drafted block per row).
CHAIN: tuple[str, ...] = tuple(n for n, r in VERIFIERS.items() if r.chain is not None)
#: The tree rules (k drafted sequences per row).
TREE: tuple[str, ...] = tuple(n for n, r in VERIFIERS.items() if r.tree)


def lookup(name: str) -> TorchRule:
    """The :data:`VERIFIERS` entry called ``name``.

    Parameters
    ----------
    name : str
        A verifier name (``"token"``, ``"block"``, ``"kseq"``, ...).

    Returns
    -------
    TorchRule
        What the torch side runs under that name.

    Raises
    ------
    UnsupportedMethodError
        If no torch verifier has that name.

    Examples
    --------
    >>> lookup("kseq").modes
    ('single', 'tree')
    """
    entry = VERIFIERS.get(name) if isinstance(name, str) else None
    if entry is None:
        raise UnsupportedMethodError(f"unknown torch verifier {name!r}; pick one of {sorted(VERIFIERS)}")
    return entry


def by_name(name: str) -> TorchVerifier:
    """The single-step verifier of :data:`SINGLE_STEP` called ``name``.

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
        If no single-step torch verifier has that name.

    Examples
    --------
    >>> by_name("token").draft_law
    'iid'
    """
    try:
        return SINGLE_STEP[name]
    except (KeyError, TypeError):
        raise UnsupportedMethodError(f"unknown torch verifier {name!r}; pick one of {sorted(SINGLE_STEP)}") from None
