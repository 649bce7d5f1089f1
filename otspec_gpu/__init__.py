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

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in an environment without torch
    raise ImportError(
        "otspec_gpu needs torch, which is not installed; install the pinned CPU build and the extra with "
        '`pip install torch==2.13.0 && pip install "otspec[torch]"`'
    ) from exc

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
