"""Fused Triton kernels for the hot verify steps (optional: ``pip install "otspec[triton]"``; CUDA
builds of torch bring Triton).

The pure-torch steps of :mod:`otspec_gpu.verifiers` stay the reference and the CPU path; a kernel
here computes the same function of the same uniforms (same accept decisions; the inverse-CDF
sums are float64 block scans instead of torch's running sum, so a draw can differ only when a
uniform falls within rounding of a cumulative-sum boundary). :func:`use_kernels` decides the
dispatch: on CUDA with Triton importable, unless ``OTSPEC_TRITON=0``. Under ``TRITON_INTERPRET=1``
the kernels also run on CPU tensors (the tests use that; it is slow, for checking only).
"""

from __future__ import annotations

import importlib.util
import os

import torch

__all__ = ["available", "use_kernels"]


def available() -> bool:
    """Whether Triton can be imported.

    Returns
    -------
    bool
        True when the ``triton`` package is installed.
    """
    return importlib.util.find_spec("triton") is not None


def use_kernels(x: torch.Tensor) -> bool:
    """Whether the verify steps dispatch to the Triton kernels for tensors like ``x``: on a CUDA
    device with Triton installed, unless the environment sets ``OTSPEC_TRITON=0``.

    Parameters
    ----------
    x : torch.Tensor
        A tensor of the step (its device decides).

    Returns
    -------
    bool
        True to run the fused kernel, False to run the pure-torch step.
    """
    return x.device.type == "cuda" and os.environ.get("OTSPEC_TRITON", "1") != "0" and available()
