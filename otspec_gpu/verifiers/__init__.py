r"""Batched torch verifiers, twins of :mod:`otspec.verifiers`.

:data:`VERIFIERS` is the one verifier-name table of the torch side (the core's names; for each,
the modes it runs: chain, single-step, tree). :data:`SINGLE_STEP` maps each single-step verifier's
name to a :class:`TorchVerifier` with ``sample(p, q, drafts, *, generator, **extra) -> StepOutput``
and ``conditional(p, q, drafts, **extra) -> Tensor[B, V]``. Inputs: ``p``, ``q`` ``[B, V]``
processed probabilities (float32 or float64, any device), ``drafts`` ``[B, k]`` long, drawn by
:func:`otspec_gpu.drafting.sample_drafts` under the verifier's ``draft_law``.

Every rule also has ``uniforms(p, q, drafts, generator)`` (every ``torch.rand`` call of one
``sample``, in its order) and a pure ``step(p, q, drafts, *uniforms)`` with no host
synchronisation (``TorchVerifier.uniforms`` / ``.step``; the chains' ``token_step`` /
``block_step``, the masked ``tree.step`` of every tree rule; ``optimal_iid``, ``khisti`` and
``wor_iid`` step with the tree-free draw, ``kseq`` with a multisection :math:`\rho^*`): what CUDA
graphs capture (:mod:`otspec_gpu.graphs`) and the Triton kernels replace (:mod:`otspec_gpu.kernels`).

Layout: :mod:`~otspec_gpu.verifiers.step` (one module per single-step rule),
:mod:`~otspec_gpu.verifiers.chain` (token and block verification of one drafted block),
:mod:`~otspec_gpu.verifiers.tree` (k drafted sequences), :mod:`~otspec_gpu.verifiers.schedule` (the
accept schedule the single-step rules are built from), :mod:`~otspec_gpu.verifiers.base` (the
contract and :class:`StepOutput`, the one output type of every step).
"""

from __future__ import annotations

from otspec_gpu.verifiers import chain, step, tree
from otspec_gpu.verifiers.base import StepOutput, TorchVerifier
from otspec_gpu.verifiers.registry import CHAIN, SINGLE_STEP, TREE, VERIFIERS, TorchRule, by_name, lookup

__all__ = [
    "CHAIN",
    "SINGLE_STEP",
    "TREE",
    "VERIFIERS",
    "StepOutput",
    "TorchRule",
    "TorchVerifier",
    "by_name",
    "chain",
    "lookup",
    "step",
    "tree",
]
