"""Fused Triton kernels for the hot verify steps (optional: ``pip install "otspec[triton]"``; CUDA
builds of torch bring Triton).

The pure-torch steps of :mod:`otspec_gpu.verifiers` stay the reference and the CPU path; a kernel
here computes the same function of the same uniforms (same accept decisions; the inverse-CDF
sums are float64 block scans instead of torch's running sum, so a draw can differ only when a
uniform falls within rounding of a cumulative-sum boundary). :func:`use_kernels` decides the
dispatch: on CUDA with Triton importable, unless ``OTSPEC_TRITON=0``; a kernel that fails to
compile or launch (:func:`try_kernel`) warns once and turns the kernels off for the process, so the
verify step falls back to the torch step instead of failing. Under ``TRITON_INTERPRET=1``
the kernels also run on CPU tensors (the tests use that; it is slow, for checking only).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from typing import Any

import torch

from otspec_gpu._fallback import first_failure, give_up

__all__ = ["available", "failure", "try_kernel", "use_kernels"]

_FAILURE: list[str] = []  # the first kernel failure of this process (then the kernels are off)


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
    return x.device.type == "cuda" and not _FAILURE and os.environ.get("OTSPEC_TRITON", "1") != "0" and available()


def failure() -> str | None:
    """The first kernel failure of this process (``None`` if none): after one, :func:`use_kernels` is False.

    Returns
    -------
    str or None
        ``"<exception type>: <message>"`` of the failure.
    """
    return first_failure(_FAILURE)


def try_kernel(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, or ``None`` after a warning when it raises (a compile or launch failure): the
    kernels are then off for the process and the caller runs its torch step.

    Parameters
    ----------
    fn : callable
        A kernel wrapper of :mod:`otspec_gpu.kernels.chain`.
    *args : Any
        Its arguments.

    Returns
    -------
    Any
        ``fn(*args)``, or ``None`` if it raised.
    """
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - any compile/launch failure falls back to the torch step
        give_up(
            _FAILURE,
            e,
            f"otspec_gpu.kernels: {fn.__name__} failed ({{failure}}); the Triton kernels are off for this process "
            "and the torch steps run instead (set OTSPEC_TRITON=0 to skip them from the start)",
        )
        return None
