"""otspec_gpu: batched torch twins of otspec's verifiers and a real-LLM decoding harness.

Everything here is a pure function over batched tensors (``p``, ``q``: ``[B, V]`` probabilities,
drafts ``[B, k]``) with an explicit :class:`torch.Generator`; each verifier's ``conditional`` is
tested against the exact numpy kernel of :mod:`otspec.verifiers` (see ``docs/gpu.rst``).

Submodules are imported lazily (``otspec_gpu.processing``, ``otspec_gpu.drafting``,
``otspec_gpu.verifiers``, ...), so ``import otspec_gpu`` is cheap. torch is required: without it
this import fails with one :class:`ImportError` naming the extra to install.
"""

from __future__ import annotations

import importlib

from otspec.plugin import require

# the pinned CPU build first, then the extra (a bare `torch` would pull the newest CUDA build)
require("torch", "torch", needed_by="otspec_gpu", install='pip install torch==2.13.0 && pip install "otspec[torch]"')

__all__ = ["SINGLE_STEP", "decode", "drafting", "probs_from_logits", "processing", "sample_drafts", "verifiers"]

_SUBMODULES = {
    "processing",
    "drafting",
    "sampling",
    "scoring",
    "verifying",
    "recording",
    "inputs",
    "verifiers",
    "models",
    "decoding",
    "trace",
    "sprinter",
    "report",
    "theory",
    "cli",
}
_NAMES = {"probs_from_logits": "processing", "sample_drafts": "drafting", "SINGLE_STEP": "verifiers", "decode": "decoding"}


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"otspec_gpu.{name}")
    if name in _NAMES:
        return getattr(importlib.import_module(f"otspec_gpu.{_NAMES[name]}"), name)
    raise AttributeError(f"module 'otspec_gpu' has no attribute {name!r}")
